"""A text classifier through the hub: its tokenizer file is read at upload (a broken one, or
one that cannot pad as the input says, is refused naming the parameter, and nothing is kept),
and a text dataset's rows must be UTF-8 text."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from hub.models import Artifact, Manifest
from tests.hub.factories import dataset_manifest, to_yaml, upload
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.django_db, pytest.mark.frameworks]

MANIFEST = (
    Path(__file__).resolve().parents[2] / "manifests/models/review-sentiment/onnxruntime.yaml"
)


@pytest.fixture(scope="module")
def zoo() -> Path:
    return zoo_store(("review-sentiment",))


def _model(zoo: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The built-in review-sentiment, renamed, with its files to upload."""
    document = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    text = yaml.safe_dump(document).replace("review-sentiment/1.0.0", "my-reviews/1.0.0")
    document = yaml.safe_load(text)
    document["name"] = "my-reviews"
    folder = zoo / "models/review-sentiment/1.0.0"
    files = {
        "review-sentiment.onnx": (folder / "review-sentiment.onnx").read_bytes(),
        "labels.txt": (folder / "labels.txt").read_bytes(),
        "tokenizer.json": (folder / "tokenizer.json").read_bytes(),
    }
    return document, files


def test_a_tokenizer_file_is_read_at_upload(
    alice_full_client: Any, zoo: Path, artifact_root: Path
) -> None:
    document, files = _model(zoo)
    broken = {**files, "tokenizer.json": b'{"model": {"type": "Nonsense"}}'}
    response = upload(alice_full_client, to_yaml(document), broken)
    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]
    assert error["path"] == "inputs.0.parameters.tokenizer_path"
    assert "not a tokenizers JSON file" in error["message"]
    assert not Manifest.objects.filter(name="my-reviews").exists()
    assert not Artifact.objects.exists()
    assert not [path for path in artifact_root.rglob("*") if path.is_file()]

    # A pad_id beyond the tokenizer's ids is named too.
    document["inputs"][0]["parameters"]["pad_id"] = 5000
    response = upload(alice_full_client, to_yaml(document), files)
    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]
    assert error["path"] == "inputs.0.parameters.pad_id"
    assert "beyond the tokenizer's ids (0 to 72)" in error["message"]

    del document["inputs"][0]["parameters"]["pad_id"]
    response = upload(alice_full_client, to_yaml(document), files)
    assert response.status_code == 201, response.content
    stored = sorted(path.name for path in artifact_root.rglob("*") if path.is_file())
    assert stored == ["labels.txt", "review-sentiment.onnx", "tokenizer.json"]


def test_a_text_datasets_rows_must_be_utf8(alice_full_client: Any) -> None:
    def split(values: pa.Array) -> bytes:
        sink = io.BytesIO()
        pq.write_table(pa.table({"input": values, "label": [0, 1]}), sink)
        return sink.getvalue()

    document = dataset_manifest(name="my-texts", split_file="validation.parquet")
    document.update(encoding="text", labels=["negative", "positive"])
    bad = split(pa.array([b"fine", b"\xc3("], pa.binary()))
    response = upload(alice_full_client, to_yaml(document), {"validation.parquet": bad})
    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]
    assert error["path"] == "splits.validation.path"
    assert "row 1's input is not UTF-8 text (byte 0" in error["message"]
    assert not Manifest.objects.filter(name="my-texts").exists()

    good = split(pa.array(["fine", "très bien"]))
    response = upload(alice_full_client, to_yaml(document), {"validation.parquet": good})
    assert response.status_code == 201, response.content


def test_a_text_input_is_served_as_text_for_comparisons(
    alice_full_client: Any, agent: Any, zoo: Path
) -> None:
    from tests.evaluations.factories import launch, launched_id, register_hosts
    from tests.hub.factories import model_yaml

    register_hosts(agent)
    sink = io.BytesIO()
    pq.write_table(pa.table({"input": ["fine", "très bien"], "label": [0, 1]}), sink)
    document = dataset_manifest(name="texts", split_file="validation.parquet")
    document.update(encoding="text", labels=["negative", "positive"])
    files = {"validation.parquet": sink.getvalue()}
    assert upload(alice_full_client, to_yaml(document), files).status_code == 201
    model, model_files = _model(zoo)
    assert upload(alice_full_client, to_yaml(model), model_files).status_code == 201
    evaluation = launched_id(launch(alice_full_client, model="my-reviews", dataset="texts"))

    response = alice_full_client.get(f"/api/v1/evaluations/{evaluation}/inputs/1/")
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode("utf-8") == "très bien"

    # An image model on the texts, or the text model on images, is refused at launch.
    assert upload(alice_full_client, model_yaml("m", "1.0.0")).status_code == 201
    refused = launch(alice_full_client, model="m", dataset="texts")
    assert refused.status_code == 400, refused.content
    [error] = refused.json()["errors"]
    assert error["path"] == "dataset"
    assert "texts holds text (encoding text), which only a text input reads" in error["message"]


def test_a_model_fed_features_of_its_text_is_checked_at_upload(
    alice_full_client: Any, zoo: Path, artifact_root: Path
) -> None:
    """A BERT-style model (ids, attention mask, token type ids from one text): each of its
    inputs is checked against the graph at upload, and its page says what each is fed."""
    from django.test import Client

    from tests.predictors.test_text_features import FOLDER, document, model_files

    built = model_files(zoo)
    files = {name: built[name] for name in ("tokenizer.json", "fixed.onnx")}
    model = document()
    model["model"]["graph_path"] = f"repo://{FOLDER}/fixed.onnx"
    # The graph takes rows of 24: a max_length of 16 is named, and nothing is kept.
    model["inputs"][0]["parameters"]["max_length"] = 16
    model["inputs"][1]["parameters"]["element_type"] = "int32"
    response = upload(alice_full_client, to_yaml(model), files)
    assert response.status_code == 400, response.content
    errors = {error["path"]: error["message"] for error in response.json()["errors"]}
    assert errors["inputs.0.parameters.max_length"] == (
        "the text input's max_length is 16, but the graph's input 'input_ids' takes rows of 24"
    )
    assert errors["inputs.1.parameters.element_type"] == (
        "is int32, but the graph's input 'attention_mask' takes int64"
    )
    assert not Manifest.objects.filter(name=model["name"]).exists()
    assert not [path for path in artifact_root.rglob("*") if path.is_file()]

    model["inputs"][0]["parameters"]["max_length"] = 24
    del model["inputs"][1]["parameters"]["element_type"]
    response = upload(alice_full_client, to_yaml(model), files, visibility="public")
    assert response.status_code == 201, response.content
    page = Client().get(f"/models/{model['name']}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Feature of the text" in html
    assert "attention mask (1 for a token, 0 for padding)" in html
    assert "type ids (each token&#x27;s segment)" in html


def test_a_trace_level_the_predictor_cannot_record_is_refused_at_launch(
    alice_full_client: Any, agent: Any, zoo: Path
) -> None:
    """PyTorch traces the layers of one-input calls: a model fed its text's features is traced
    down to model level there (ONNX Runtime traces its layers), and the launch says so."""
    from tests.evaluations.factories import launch, launched_id, register_hosts
    from tests.hub.factories import register_host
    from tests.predictors.test_text_features import NAME, document, model_files

    register_hosts(agent)
    frameworks = [("pytorch", "2.13.0"), ("onnxruntime", "1.20.0")]
    assert register_host(agent, "cpu-torch", frameworks, pool=True).status_code == 201
    sink = io.BytesIO()
    pq.write_table(pa.table({"input": ["fine", "très bien"], "label": [0, 1]}), sink)
    texts = dataset_manifest(name="texts", split_file="validation.parquet")
    texts.update(encoding="text", labels=["negative", "positive"])
    uploaded = upload(alice_full_client, to_yaml(texts), {"validation.parquet": sink.getvalue()})
    assert uploaded.status_code == 201, uploaded.content
    built = model_files(zoo)
    for framework, graph in (("pytorch", "model.pt"), ("onnxruntime", "model.onnx")):
        files = {name: built[name] for name in ("tokenizer.json", graph)}
        response = upload(alice_full_client, to_yaml(document(framework)), files)
        assert response.status_code == 201, response.content

    refused = launch(
        alice_full_client, model=NAME, framework="pytorch", dataset="texts", trace_level="framework"
    )
    assert refused.status_code == 400, refused.content
    [error] = refused.json()["errors"]
    assert error["path"] == "trace_level"
    assert (
        "takes several inputs from each text (input_ids, attention_mask, token_type_ids)"
        in (error["message"])
    )
    launched_id(
        launch(
            alice_full_client, model=NAME, framework="pytorch", dataset="texts", trace_level="model"
        )
    )
    launched_id(
        launch(
            alice_full_client,
            model=NAME,
            framework="onnxruntime",
            dataset="texts",
            trace_level="framework",
        )
    )
