"""A batch holds images of one size: a model that keeps each image's own size, launched at
batch sizes above 1 on a split whose images come in several sizes, is refused at launch naming
the sizes (not failed after its first few hundred inputs)."""

from __future__ import annotations

import io
import struct
import zlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluations.models import Evaluation
from tests.evaluations.factories import launch
from tests.helpers import error_of
from tests.hub.factories import IMAGE_PARAMETERS, dataset_manifest, model_manifest, to_yaml, upload

pytestmark = pytest.mark.django_db


def _split(sizes: list[tuple[int, int]], bomb: int | None = None) -> bytes:
    """A PNG of each (height, width), labels 0 and 1 in turn; image `bomb`'s header claims
    20000 x 20000 pixels (past Pillow's decompression-bomb limit)."""
    from PIL import Image

    images = []
    for index, (height, width) in enumerate(sizes):
        buffer = io.BytesIO()
        Image.new("RGB", (width, height), (90, 90, 90)).save(buffer, format="PNG")
        data = buffer.getvalue()
        if index == bomb:
            # The IHDR chunk follows the 8-byte signature: length, type, then width, height.
            header = data[12:16] + struct.pack(">II", 20_000, 20_000) + data[24:29]
            crc = struct.pack(">I", zlib.crc32(header) & 0xFFFFFFFF)
            data = data[:12] + header + crc + data[33:]
        images.append(data)
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
        "own-size 1.0.0 makes each image a size of its own (no resize_size, crop_size or pad "
        "size), and the first images of the validation split of sized 1.0.0 come out in 6 "
        "sizes (4x4, 6x4, 5x7, 8x8, 5x5, ...): a batch holds images of one size, so batch "
        "sizes 2, 8 cannot be filled; ask for batch size 1, or give the input a resize_size "
        "or a pad size"
    )
    padded_refusal = launch(bob_client, model="padded", dataset="sized", batch_sizes=[4])
    assert "come out in 4 sizes (4x4, 8x4, 8x8, 4x12)" in error_of(padded_refusal)["message"]
    assert not Evaluation.objects.exists()

    for model, batch_sizes in (("own-size", [1]), ("resized", [1, 8])):
        launched = launch(bob_client, model=model, dataset="sized", batch_sizes=batch_sizes)
        assert launched.status_code == 201, launched.content
    # A run of the first two images (one size) fills its batches of 2.
    two = launch(bob_client, model="own-size", dataset="sized", batch_sizes=[2], limit=1)
    assert two.status_code == 201, two.content
    three = launch(bob_client, model="own-size", dataset="sized", batch_sizes=[2], limit=2)
    assert (
        three.status_code == 400
        and "come out in 2 sizes (4x4, 6x4)" in (error_of(three)["message"])
    )
    # An image whose header claims a size past Pillow's bomb limit: the look is given up (the
    # agent's run says what is wrong), not a server error.
    huge = dataset_manifest("huge", visibility="public", split_file="h.parquet")
    stored = upload(bob_client, to_yaml(huge), {"h.parquet": _split([(4, 4), (4, 6)], bomb=1)})
    assert stored.status_code == 201, stored.content
    looked = launch(bob_client, model="own-size", dataset="huge", batch_sizes=[2])
    assert looked.status_code == 201, looked.content
