"""A batch holds images of one size: a model that keeps each image's own size, launched at
batch sizes above 1 on a split whose images come in several sizes, is refused at launch naming
the sizes (not failed after its first few hundred inputs)."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluations.models import Evaluation
from tests.evaluations.factories import launch
from tests.helpers import error_of
from tests.hub.factories import IMAGE_PARAMETERS, dataset_manifest, model_manifest, to_yaml, upload

pytestmark = pytest.mark.django_db


def _split(sizes: list[tuple[int, int]]) -> bytes:
    """A PNG of each (height, width), labels 0 and 1 in turn."""
    from PIL import Image

    images = []
    for height, width in sizes:
        buffer = io.BytesIO()
        Image.new("RGB", (width, height), (90, 90, 90)).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    table = pa.table(
        {"image": images, "label": pa.array([i % 2 for i in range(len(sizes))], pa.int64())}
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _model(name: str, **parameters: Any) -> dict[str, Any]:
    model = model_manifest(name, visibility="public")
    model["inputs"][0]["parameters"] = {**IMAGE_PARAMETERS, **parameters}
    return model


def test_images_of_several_sizes_are_refused_at_batch_sizes_above_one(
    bob_client: Any, agent: Any, hosts: Any
) -> None:
    sizes = [(4, 4), (6, 4), (4, 4), (5, 7), (8, 8), (5, 5), (4, 9)]
    dataset = dataset_manifest("sized", visibility="public", split_file="v.parquet")
    dataset["splits"]["validation"]["count"] = len(sizes)
    stored = upload(bob_client, to_yaml(dataset), {"v.parquet": _split(sizes)})
    assert stored.status_code == 201, stored.content
    # Each image's own size: 6 sizes; a pad to multiples of 4 makes 4 of them; a resize, one.
    own = _model("own-size", resize_size=None)
    padded = _model(
        "padded",
        resize_size=None,
        pad={"size": None, "multiple_of": 4, "position": "top_left", "value": 0.0},
    )
    for model in (own, padded, _model("resized")):
        assert upload(bob_client, to_yaml(model)).status_code == 201

    refused = launch(bob_client, model="own-size", dataset="sized", batch_sizes=[1, 2, 8])
    assert refused.status_code == 400, refused.content
    error = error_of(refused)
    assert error["path"] == "batch_sizes"
    assert error["message"] == (
        "own-size 1.0.0 keeps each image's size, and the first images of the validation split "
        "of sized 1.0.0 come out in 6 sizes (4x4, 6x4, 5x7, 8x8, 5x5, ...): a batch holds "
        "images of one size, so batch sizes 2, 8 cannot be filled; ask for batch size 1, or "
        "give the input a resize_size or a pad size"
    )
    padded_refusal = launch(bob_client, model="padded", dataset="sized", batch_sizes=[4])
    assert "come out in 4 sizes (4x4, 8x4, 8x8, 4x12)" in error_of(padded_refusal)["message"]
    assert not Evaluation.objects.exists()

    for model, batch_sizes in (("own-size", [1]), ("resized", [1, 8])):
        launched = launch(bob_client, model=model, dataset="sized", batch_sizes=batch_sizes)
        assert launched.status_code == 201, launched.content
