"""Uploading manifests: valid ones are stored with their files; invalid ones leave nothing behind."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile

from hub.models import Artifact, Manifest
from tests.hub.factories import model_manifest, model_yaml, onnx_graph, to_yaml, upload

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
INVALID = sorted((CORPUS / "invalid").glob("*.yaml"))
VALID = sorted((CORPUS / "valid").glob("*.yaml"))
PWNED = Path("/tmp/mlmodelscope-pwned")


def _expectation(file: Path) -> tuple[str, int | None]:
    header = file.read_text(errors="replace")
    path = re.search(r"^# expect: (.+?)\s*$", header, re.M)
    status = re.search(r"^# status: (\d+)", header, re.M)
    assert path, f"{file.name} lacks its '# expect:' line"
    expected = "" if path.group(1) == "<root>" else path.group(1)
    return expected, int(status.group(1)) if status else None


def _store_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.fixture
def alice(make_user, make_client):  # type: ignore[no-untyped-def]
    return make_client(make_user("alice"))


@pytest.mark.django_db
@pytest.mark.parametrize("file", INVALID, ids=[f.stem for f in INVALID])
def test_an_invalid_manifest_is_refused_naming_the_field_and_nothing_is_written(
    alice, artifact_root, file
) -> None:  # type: ignore[no-untyped-def]
    expected_path, expected_status = _expectation(file)
    before = Manifest.objects.count()
    response = alice.post(
        "/api/v1/manifests/", data=file.read_bytes(), content_type="application/x-yaml"
    )
    assert 400 <= response.status_code < 500, response.content
    if expected_status:
        assert response.status_code == expected_status
    body = response.json()
    paths = [error["path"] for error in body["errors"]]
    assert expected_path in paths, body
    assert all(error["message"] for error in body["errors"])
    assert Manifest.objects.count() == before
    assert Artifact.objects.count() == 0
    assert _store_files(artifact_root) == []
    assert not PWNED.exists(), "a YAML tag executed code"


@pytest.mark.django_db
@pytest.mark.parametrize("file", VALID, ids=[f.stem for f in VALID])
def test_every_valid_corpus_manifest_parses(file) -> None:  # type: ignore[no-untyped-def]
    from predictors import manifests as spec

    doc = spec.load(file.read_bytes())
    assert doc.name and doc.version


@pytest.mark.django_db
def test_a_yaml_upload_is_stored_private_and_owned_by_the_uploader(alice) -> None:  # type: ignore[no-untyped-def]
    response = alice.post(
        "/api/v1/manifests/", data=model_yaml(name="tiny"), content_type="application/x-yaml"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["visibility"] == "private"
    assert body["owner"] == "alice"
    stored = Manifest.objects.get(pk=body["id"])
    assert stored.name == "tiny" and stored.framework == "onnxruntime"
    assert stored.content["inputs"][0]["parameters"]["layout"] == "NCHW"
    assert stored.content_hash == body["content_hash"]
    detail = alice.get(f"/api/v1/manifests/{stored.pk}/").json()
    assert detail["manifest"]["name"] == "tiny"


@pytest.mark.django_db
def test_a_multipart_upload_stores_the_model_file_and_records_its_sha256(
    alice, artifact_root
) -> None:  # type: ignore[no-untyped-def]
    payload = onnx_graph("graph bytes")
    text = model_yaml(name="withfile", graph_file="withfile.onnx")
    response = alice.post(
        "/api/v1/manifests/",
        data={
            "manifest": text,
            "files": [SimpleUploadedFile("withfile.onnx", payload)],
            "visibility": "public",
        },
        format="multipart",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["visibility"] == "public"
    [artifact] = body["artifacts"]
    assert artifact["path"] == "models/withfile/1.0.0/withfile.onnx"
    assert artifact["sha256"] == hashlib.sha256(payload).hexdigest()
    assert (artifact_root / artifact["path"]).read_bytes() == payload
    download = alice.get(artifact["url"])
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == payload


@pytest.mark.django_db
def test_a_file_whose_sha256_differs_from_the_manifest_is_refused(alice, artifact_root) -> None:  # type: ignore[no-untyped-def]
    document = model_manifest(name="badsum", graph_file="badsum.onnx")
    document["model"]["graph_sha256"] = "0" * 64
    text = yaml.safe_dump(document)
    response = alice.post(
        "/api/v1/manifests/",
        data={"manifest": text, "files": [SimpleUploadedFile("badsum.onnx", b"abc")]},
        format="multipart",
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "model.graph_path"
    assert "sha256" in response.json()["detail"]
    assert Manifest.objects.count() == 0 and Artifact.objects.count() == 0
    assert _store_files(artifact_root) == []


@pytest.mark.django_db
def test_a_referenced_file_that_is_not_uploaded_is_refused(alice) -> None:  # type: ignore[no-untyped-def]
    text = model_yaml(name="nofile", graph_file="nofile.onnx")
    response = alice.post("/api/v1/manifests/", data=text, content_type="application/x-yaml")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "model.graph_path"
    assert Manifest.objects.count() == 0


@pytest.mark.django_db
def test_an_uploaded_file_the_manifest_does_not_reference_is_refused(alice, artifact_root) -> None:  # type: ignore[no-untyped-def]
    response = alice.post(
        "/api/v1/manifests/",
        data={
            "manifest": model_yaml(name="stray"),
            "files": [SimpleUploadedFile("stray.bin", b"x")],
        },
        format="multipart",
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "files.stray.bin"
    assert _store_files(artifact_root) == []


@pytest.mark.django_db
def test_uploading_the_same_identity_twice_gets_409_and_keeps_the_first(
    alice, make_user, make_client
) -> None:  # type: ignore[no-untyped-def]
    first = alice.post(
        "/api/v1/manifests/", data=model_yaml(name="dup"), content_type="application/x-yaml"
    )
    assert first.status_code == 201
    changed = model_yaml(name="dup").replace("A test model.", "Something else.")
    again = alice.post("/api/v1/manifests/", data=changed, content_type="application/x-yaml")
    assert again.status_code == 409
    assert again.json()["errors"][0]["path"] == "version"
    bob = make_client(make_user("bob"))
    other = bob.post(
        "/api/v1/manifests/", data=model_yaml(name="dup"), content_type="application/x-yaml"
    )
    assert other.status_code == 409
    assert Manifest.objects.filter(name="dup").count() == 1
    assert Manifest.objects.get(name="dup").description == "A test model."


@pytest.mark.django_db
def test_the_same_model_in_another_framework_is_another_identity(alice) -> None:  # type: ignore[no-untyped-def]
    for framework, range_ in (("onnxruntime", ">=1.16.0 <2.0.0"), ("pytorch", ">=2.0.0 <3.0.0")):
        text = model_yaml(name="multi", framework=framework, framework_range=range_)
        assert (
            alice.post(
                "/api/v1/manifests/", data=text, content_type="application/x-yaml"
            ).status_code
            == 201
        )
    assert Manifest.objects.filter(name="multi").count() == 2


@pytest.mark.django_db
def test_an_oversized_body_gets_413_and_nothing_is_written(alice, settings) -> None:  # type: ignore[no-untyped-def]
    body = model_yaml(name="big") + "# " + "x" * (settings.MANIFEST_MAX_BYTES + 10) + "\n"
    response = alice.post("/api/v1/manifests/", data=body, content_type="application/x-yaml")
    assert response.status_code == 413
    assert response.json()["errors"][0]["path"] == ""
    multipart = alice.post("/api/v1/manifests/", data={"manifest": body}, format="multipart")
    assert multipart.status_code == 413
    assert Manifest.objects.count() == 0


@pytest.mark.django_db
def test_an_unsupported_content_type_gets_415(alice) -> None:  # type: ignore[no-untyped-def]
    response = alice.post("/api/v1/manifests/", data={"manifest": "x"}, format="json")
    assert response.status_code == 415
    assert Manifest.objects.count() == 0


@pytest.mark.django_db
def test_a_dataset_is_uploaded_through_datasets_and_a_model_there_is_refused(alice) -> None:  # type: ignore[no-untyped-def]
    from tests.hub.factories import dataset_yaml

    response = alice.post(
        "/api/v1/datasets/", data=dataset_yaml(name="tinyset"), content_type="application/x-yaml"
    )
    assert response.status_code == 201, response.content
    assert response.json()["kind"] == "dataset"
    wrong = alice.post(
        "/api/v1/datasets/", data=model_yaml(name="notaset"), content_type="application/x-yaml"
    )
    assert wrong.status_code == 400
    assert wrong.json()["errors"][0]["path"] == "kind"


@pytest.mark.django_db
def test_the_owner_deletes_a_manifest_and_its_unshared_files(  # type: ignore[no-untyped-def]
    alice, artifact_root, django_capture_on_commit_callbacks
) -> None:
    text = model_yaml(name="gone", graph_file="gone.onnx")
    created = alice.post(
        "/api/v1/manifests/",
        data={"manifest": text, "files": [SimpleUploadedFile("gone.onnx", onnx_graph("gone"))]},
        format="multipart",
    ).json()
    with django_capture_on_commit_callbacks(execute=True):
        assert alice.delete(f"/api/v1/manifests/{created['id']}/").status_code == 204
    assert not Manifest.objects.filter(pk=created["id"]).exists()
    assert Artifact.objects.count() == 0
    assert _store_files(artifact_root) == []


@pytest.mark.django_db
def test_list_filters_by_name_kind_framework_task_and_search(alice) -> None:  # type: ignore[no-untyped-def]
    from tests.hub.factories import dataset_yaml

    alice.post(
        "/api/v1/manifests/",
        data=model_yaml(name="alpha", description="Fast conv net."),
        content_type="application/x-yaml",
    )
    alice.post(
        "/api/v1/manifests/",
        data=model_yaml(name="beta", framework="pytorch", framework_range=">=2.0.0 <3.0.0"),
        content_type="application/x-yaml",
    )
    alice.post(
        "/api/v1/manifests/", data=dataset_yaml(name="gamma"), content_type="application/x-yaml"
    )

    def names(query: str) -> list[str]:
        response = alice.get(f"/api/v1/manifests/?{query}")
        assert response.status_code == 200
        return sorted(item["name"] for item in response.json()["results"])

    assert names("name=alpha") == ["alpha"]
    assert names("kind=dataset") == ["gamma"]
    assert names("framework=pytorch") == ["beta"]
    assert names("task=image_classification") == ["alpha", "beta", "gamma"]
    assert names("search=conv") == ["alpha"]
    nonsense = alice.get("/api/v1/manifests/?kind=nonsense")
    assert nonsense.status_code == 400  # the schema's enum, not an empty list
    assert nonsense.json()["errors"][0]["path"] == "kind"
    past = alice.get("/api/v1/manifests/?page=999")
    assert past.status_code == 404 and past.json()["errors"][0]["path"] == "page"


def test_the_manifest_schema_is_published_and_validates_a_corpus_manifest(client) -> None:  # type: ignore[no-untyped-def]
    import jsonschema

    response = client.get("/api/v1/schema/manifest.json")
    assert response.status_code == 200
    schema = response.json()
    jsonschema.Draft202012Validator.check_schema(schema)
    document = yaml.safe_load(model_yaml(name="schema-check"))
    jsonschema.Draft202012Validator(schema).validate(document)


@pytest.mark.django_db
def test_a_nul_character_in_a_manifest_string_is_refused_naming_the_field(alice) -> None:  # type: ignore[no-untyped-def]
    document = model_manifest(name="nul")
    document["description"] = "before\x00after"
    response = alice.post(
        "/api/v1/manifests/", data=yaml.safe_dump(document), content_type="application/x-yaml"
    )
    assert response.status_code == 400
    assert "description" in [error["path"] for error in response.json()["errors"]]
    assert Manifest.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["name=a%00b", "search=x%00", "kind=%00", "task=a%00"])
def test_a_nul_character_in_a_query_parameter_gets_400(client, query) -> None:  # type: ignore[no-untyped-def]
    response = client.get(f"/api/v1/manifests/?{query}")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == query.split("=")[0]


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["preprocess", "postprocess"])
@pytest.mark.parametrize(
    ("code", "words"),
    [
        (
            "def {field}(x)\n    return x\n",
            "is not valid Python: expected ':' (line 1 of the code)",
        ),
        ("def other(x):\n    return x\n", "must define a function `def {field}(…)`"),
        ("def {field}():\n    return 1\n", "must take one argument"),
        ("async def {field}(x):\n    return x\n", "must be a plain function"),
    ],
)
def test_processing_code_that_cannot_run_is_refused_naming_the_field_and_line(  # type: ignore[no-untyped-def]
    alice, field, code, words
) -> None:
    """The hub parses custom code (it never runs it) and refuses what could not run."""
    from hub.models import Manifest
    from tests.hub.factories import model_yaml, upload

    body = "".join(f"  {line}\n" for line in code.format(field=field).splitlines())
    text = model_yaml("coded", "1.0.0", "onnxruntime", ">=1.16.0") + f"{field}: |\n{body}"
    response = upload(alice, text)

    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    assert error["path"] == field and error["line"]
    assert words.format(field=field) in error["message"], error["message"]
    assert not Manifest.objects.filter(name="coded").exists()


@pytest.mark.django_db
def test_a_manifest_with_processing_code_is_stored_as_written(alice) -> None:  # type: ignore[no-untyped-def]
    from hub.models import Manifest
    from tests.hub.factories import model_yaml, upload

    code = "def preprocess(example):\n    open('/etc/passwd', 'w')\n    return example\n"
    body = "".join(f"  {line}\n" for line in code.splitlines())
    text = model_yaml("coded", "1.0.0", "onnxruntime", ">=1.16.0") + f"preprocess: |\n{body}"
    response = upload(alice, text)

    assert response.status_code == 201, response.content
    assert Manifest.objects.get(name="coded").content["preprocess"] == code


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "graph", "paths", "words"),
    [
        (
            {},
            {"input_name": "x"},
            ["inputs.0.name"],
            "'image' is not an input of the graph (its inputs: x (float32, rank 4))",
        ),
        (
            {},
            {"output_name": "scores"},
            ["outputs.0.name"],
            "'probabilities' is not an output of the graph (its outputs: scores (float32, rank 2))",
        ),
        (
            {"element_type": "float16"},
            {},
            ["inputs.0.parameters.element_type"],
            "is float16, but the graph's input 'image' takes float32",
        ),
        (
            {"type": "tensor", "shape": [3, 8]},
            {},
            ["inputs.0"],
            "has rank 4, but the batch axis + shape has rank 3",
        ),
    ],
)
def test_an_onnx_graph_that_does_not_fit_its_manifest_is_refused_naming_the_field(  # type: ignore[no-untyped-def]
    alice, artifact_root, change, graph, paths, words
) -> None:
    document = model_manifest(name="misfit", graph_file="misfit.onnx")
    entry = document["inputs"][0]
    if change.get("type") == "tensor":
        entry.update(
            type="tensor", parameters={"element_type": "float32", "shape": change["shape"]}
        )
    elif change:
        entry["parameters"].update(change)
    response = upload(alice, to_yaml(document), {"misfit.onnx": onnx_graph(**graph)})

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "graph_mismatch"
    assert [error["path"] for error in body["errors"]] == paths
    assert words in body["errors"][0]["message"], body
    # Nothing of it is kept: no manifest, no file, no artifact row.
    assert not Manifest.objects.filter(name="misfit").exists()
    assert not list((artifact_root / "models").rglob("misfit.onnx"))
    assert not Artifact.objects.filter(path__startswith="models/misfit/").exists()


@pytest.mark.django_db
def test_a_file_that_is_no_onnx_graph_is_refused_and_an_undeclared_input_named(  # type: ignore[no-untyped-def]
    alice,
) -> None:
    text = model_yaml(name="garbage", graph_file="garbage.onnx")
    response = upload(alice, text, {"garbage.onnx": b"\x08\x07not a graph"})
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["path"] == "model.graph_path"
    assert "not a readable ONNX model" in error["message"]

    import onnx
    from onnx import TensorProto, helper

    two = onnx.load_from_string(onnx_graph())
    two.graph.input.append(helper.make_tensor_value_info("mask", TensorProto.INT64, ["N"]))
    text = model_yaml(name="two-inputs", graph_file="two.onnx")
    response = upload(alice, text, {"two.onnx": two.SerializeToString()})
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["path"] == "inputs"
    assert "does not declare, which could not be fed: mask (int64, rank 1)" in error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("split", "change", "words"),
    [
        (b"PAR1 not really", {}, "is not a readable Parquet file"),
        ("labels", {}, "row 1 has label 5, but the dataset has 2 labels"),
        ("count", {"count": 3}, "the file holds 2 rows, but the manifest's count is 3"),
        ("encoding", {"encoding": "jpeg"}, "row 0's image is not JPEG (the manifest's encoding)"),
        ("columns", {}, "needs the columns 'image' (or 'audio', or 'input') and 'label'"),
    ],
)
def test_a_split_file_that_is_not_what_its_manifest_says_is_refused(  # type: ignore[no-untyped-def]
    alice, artifact_root, split, change, words
) -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.hub.factories import dataset_manifest, parquet_split

    if split == "labels":
        content = parquet_split(labels=(0, 5))
    elif split == "columns":
        sink = io.BytesIO()
        pq.write_table(pa.table({"picture": [b"x"], "label": [0]}), sink)
        content = sink.getvalue()
    elif isinstance(split, bytes):
        content = split
    else:
        content = parquet_split()
    document = dataset_manifest("checked", split_file="validation.parquet")
    encoding = change.pop("encoding", None)
    if encoding:
        document["encoding"] = encoding
    document["splits"]["validation"].update(change)
    response = upload(alice, to_yaml(document), {"validation.parquet": content})

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "dataset_invalid"
    assert body["errors"][0]["path"] == "splits.validation.path"
    assert words in body["errors"][0]["message"], body
    assert not Manifest.objects.filter(name="checked").exists()
    assert not list(artifact_root.rglob("*.parquet"))


@pytest.mark.django_db
def test_a_split_file_that_fits_its_manifest_is_stored(alice) -> None:  # type: ignore[no-untyped-def]
    from tests.hub.factories import dataset_yaml, parquet_split

    text = dataset_yaml("fits", split_file="validation.parquet")
    response = upload(alice, text, {"validation.parquet": parquet_split()})
    assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_a_split_file_whose_pages_do_not_decode_is_refused(alice) -> None:  # type: ignore[no-untyped-def]
    from tests.hub.factories import dataset_yaml, parquet_split

    content = bytearray(parquet_split("x" * 64))
    start = content.index(b"\x89PNG")  # inside the first data page
    content[start : start + 40] = b"\xff" * 40
    response = upload(
        alice,
        dataset_yaml("torn", split_file="validation.parquet"),
        {"validation.parquet": bytes(content)},
    )
    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    assert error["path"] == "splits.validation.path"
    assert "validation.parquet: the file cannot be read through" in error["message"], error
