"""A model whose inputs read columns of their own, launched on a split the hub stores: the
columns it names must be in the split, or the launch is refused naming them (before a host
fetches anything)."""

from __future__ import annotations

from typing import Any

import pytest

from evaluations.models import Evaluation
from tests.evaluations.factories import launch, launched_id
from tests.helpers import error_of
from tests.hub.factories import (
    dataset_manifest,
    model_manifest,
    parquet_split,
    to_yaml,
    upload,
)

pytestmark = pytest.mark.django_db


def _two_columns(second: str) -> dict[str, Any]:
    model = model_manifest("two-columns", visibility="public")
    model["inputs"][0]["column"] = "image"
    model["inputs"].append(
        {
            "name": "extra",
            "type": "tensor",
            "column": second,
            "parameters": {"element_type": "float32", "shape": [2]},
        }
    )
    return model


def test_a_column_the_split_lacks_is_refused_at_launch_naming_it(
    bob_client: Any, agent: Any, hosts: Any
) -> None:
    dataset = dataset_manifest("gray", visibility="public", split_file="validation.parquet")
    stored = upload(bob_client, to_yaml(dataset), {"validation.parquet": parquet_split()})
    assert stored.status_code == 201, stored.content
    assert upload(bob_client, to_yaml(_two_columns("extra"))).status_code == 201

    refused = launch(bob_client, model="two-columns", dataset="gray")
    assert refused.status_code == 400, refused.content
    error = error_of(refused)
    assert error["path"] == "dataset"
    assert error["message"] == (
        "the model's inputs read the columns 'image', 'extra'; the validation split of gray "
        "1.0.0 has no 'extra' (its columns: image, label)"
    )
    assert not Evaluation.objects.exists()

    # A split with the column: launched.
    with_extra = dataset_manifest("gray-extra", visibility="public", split_file="v.parquet")
    stored = upload(bob_client, to_yaml(with_extra), {"v.parquet": _split_with_extra()})
    assert stored.status_code == 201, stored.content
    launched = launch(bob_client, model="two-columns", dataset="gray-extra")
    assert launched.status_code == 201, launched.content
    assert Evaluation.objects.filter(pk=launched_id(launched)).exists()


def _split_with_extra() -> bytes:
    """`parquet_split`'s rows with a column `extra` of .npy tensors beside them."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(parquet_split()))
    tensors = []
    for value in (0.5, 0.25):
        buffer = io.BytesIO()
        np.save(buffer, np.array([value, 1.0], np.float32))
        tensors.append(buffer.getvalue())
    table = table.append_column("extra", pa.array(tensors, pa.binary()))
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()
