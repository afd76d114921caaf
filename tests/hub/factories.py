"""Builders for the hub's tests: valid manifests, uploads and host registrations.

A manifest is built as a dict (`model_manifest`, `dataset_manifest`) so that a test can change
one field, and dumped to YAML text by `model_yaml` / `dataset_yaml`. By default a manifest names
its file by an https:// URL with a checksum, so it uploads without any file; pass `graph_file`
(or `split_file`) to name a repo:// file instead, and upload that file with `upload(files=…)`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

MANIFESTS_URL = "/api/v1/manifests/"
DATASETS_URL = "/api/v1/datasets/"
HOSTS_URL = "/api/v1/hosts/"
TOKENS_URL = "/api/v1/tokens/"
RESOLVE_URL = "/api/v1/resolve/"
ARTIFACTS_URL = "/api/v1/artifacts/"

# The checksum stated for https:// files: the hub never downloads them, so any digest will do.
REMOTE_SHA256 = hashlib.sha256(b"remote file").hexdigest()

IMAGE_PARAMETERS: dict[str, Any] = {
    "decoder": "pillow",
    "jpeg_dct_method": "islow",
    "color_mode": "RGB",
    "layout": "NCHW",
    "resize_method": "bilinear",
    "resize_size": [8, 8],
    "keep_aspect_ratio": False,
    "crop_method": "none",
    "crop_size": None,
    "element_type": "float32",
    "normalization_order": "convert_then_normalize",
    "scale": 255.0,
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
}


def onnx_graph(
    note: str = "", *, input_name: str = "image", output_name: str = "probabilities"
) -> bytes:
    """A real, tiny ONNX model that fits `model_manifest`'s declared input and output: a batch
    of RGB images (float32, rank 4) averaged per channel, then two scores. `note` goes into
    the file's doc string, so that two notes give two files of different content."""
    import onnx
    from onnx import TensorProto, helper

    weights = helper.make_tensor("w", TensorProto.FLOAT, [3, 2], [1.0, -1.0] * 3)
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", [input_name], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("MatMul", ["flat", "w"], [output_name]),
        ],
        "test",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["N", 2])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.doc_string = note
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def parquet_split(note: str = "", labels: Sequence[int] = (0, 1)) -> bytes:
    """A real split file that fits `dataset_manifest` (two labels, PNG, `count` 2): one gray
    PNG image per label. `note` goes into the file's metadata, so that two notes give two files
    of different content."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    images = []
    for label in labels:
        buffer = io.BytesIO()
        Image.new("L", (4, 4), 60 * (label + 1)).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    table = pa.table(
        {"image": pa.array(images, pa.binary()), "label": pa.array(list(labels), pa.int64())}
    ).replace_schema_metadata({"note": note})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def model_manifest(
    name: str = "m",
    version: str = "1.0.0",
    framework: str = "onnxruntime",
    framework_range: str = ">=1.16.0 <2.0.0",
    *,
    visibility: str | None = None,
    graph_file: str | None = None,
    description: str = "A test model.",
) -> dict[str, Any]:
    """A valid model manifest. `graph_file` names a repo:// file in the model's namespace."""
    if graph_file is None:
        files = {
            "graph_path": f"https://models.example.org/{name}-{version}.onnx",
            "graph_sha256": REMOTE_SHA256,
        }
    else:
        files = {"graph_path": f"repo://models/{name}/{version}/{graph_file}"}
    data: dict[str, Any] = {
        "kind": "model",
        "name": name,
        "version": version,
        "description": description,
        "license": "MIT",
        "task": "image_classification",
        "framework": {"name": framework, "version": framework_range},
        "inputs": [{"name": "image", "type": "image", "parameters": dict(IMAGE_PARAMETERS)}],
        "outputs": [
            {
                "name": "probabilities",
                "type": "logits",
                "parameters": {"top_k": 1, "labels": ["cat", "dog"]},
            }
        ],
        "model": files,
    }
    if visibility is not None:
        data["visibility"] = visibility
    return data


def dataset_manifest(
    name: str = "d",
    version: str = "1.0.0",
    *,
    visibility: str | None = None,
    split_file: str | None = None,
    description: str = "A test dataset.",
) -> dict[str, Any]:
    """A valid dataset manifest with one `validation` split (repo:// when `split_file` is set)."""
    if split_file is None:
        split = {
            "path": f"https://data.example.org/{name}-{version}.parquet",
            "sha256": REMOTE_SHA256,
            "count": 2,
        }
    else:
        split = {"path": f"repo://datasets/{name}/{version}/{split_file}", "count": 2}
    data: dict[str, Any] = {
        "kind": "dataset",
        "name": name,
        "version": version,
        "description": description,
        "license": "MIT",
        "task": "image_classification",
        "format": "parquet",
        "encoding": "png",
        "labels": ["cat", "dog"],
        "splits": {"validation": split},
    }
    if visibility is not None:
        data["visibility"] = visibility
    return data


def to_yaml(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False)


def model_yaml(*args: Any, **kwargs: Any) -> str:
    """`model_manifest(...)` as YAML text."""
    return to_yaml(model_manifest(*args, **kwargs))


def dataset_yaml(*args: Any, **kwargs: Any) -> str:
    """`dataset_manifest(...)` as YAML text."""
    return to_yaml(dataset_manifest(*args, **kwargs))


def upload(
    client: APIClient,
    yaml_text: str,
    files: Mapping[str, bytes] | None = None,
    *,
    url: str = MANIFESTS_URL,
    visibility: str | None = None,
) -> Any:
    """POST a manifest; with `files` ({file name: content}) as multipart with `files` parts."""
    query = f"?visibility={visibility}" if visibility else ""
    if not files:
        return client.post(url + query, yaml_text, content_type="application/x-yaml")
    parts = [SimpleUploadedFile(name, content) for name, content in files.items()]
    return client.post(url + query, {"manifest": yaml_text, "files": parts}, format="multipart")


FrameworkSpec = Mapping[str, Any] | tuple[str, str] | tuple[str, str, Sequence[str]]


def framework_entries(frameworks: Iterable[FrameworkSpec]) -> list[dict[str, Any]]:
    """Host framework entries from dicts or (name, version[, devices]) tuples; devices: cpu."""
    entries = []
    for spec in frameworks:
        if isinstance(spec, Mapping):
            entries.append(dict(spec))
        else:
            devices = list(spec[2]) if len(spec) > 2 else ["cpu"]  # type: ignore[misc]
            entries.append({"name": spec[0], "version": spec[1], "devices": devices})
    return entries


def register_host(
    client: APIClient, name: str, frameworks: Iterable[FrameworkSpec], **fields: Any
) -> Any:
    """POST a host registration (the client needs an agent token); `fields` adds the rest."""
    payload = {"name": name, "frameworks": framework_entries(frameworks), **fields}
    return client.post(HOSTS_URL, payload, format="json")


def bearer_client(raw: str) -> APIClient:
    """A client that sends `Authorization: Bearer <raw>`."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def error_paths(response: Any) -> list[str]:
    """The `path` of every error in an API error response."""
    return [error["path"] for error in response.json()["errors"]]
