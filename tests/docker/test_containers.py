"""Evaluations in predictor containers, against a real Docker engine and the images `make
images` builds (`make test` builds them first): an agent with --docker runs digits-cnn in the
image its manifest names, the hub keeps the image's packages once per digest and diffs two
images, a comparison shows the images among what differs, a container over its memory limit
fails the evaluation saying so, a container killed mid-run is dispatched again, and an agent
runs inside a framework image itself.

These run in the PostgreSQL + Redis pass (the production stack, where containers are used);
without Docker or the images they are skipped locally and fail in CI (tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from predictors.agent.containers import Runner
from predictors.agent.images import docker_client
from predictors.evaluation import EvaluationError
from predictors.protocol import Job, JobOptions, ManifestRef
from tests.frontend.conftest import _tab, sign_in_to_hub
from tests.livehub import ROOT, LiveHub

pytestmark = [pytest.mark.docker, pytest.mark.postgres, pytest.mark.redis]

ONNXRUNTIME = "mlmodelscope/onnxruntime:1.31-cpu"
PYTORCH = "mlmodelscope/pytorch:2.13-cpu"
TENSORFLOW = "mlmodelscope/tensorflow:2.21-cpu"


def _image_id(tag: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    """A hub on this process's PostgreSQL and Redis with an agent that runs its jobs in
    containers (`docker-a`, in the pool, no limits)."""
    from tests.predictors.zoo_store import zoo_store

    folder = tmp_path_factory.mktemp("docker")
    settings = {
        "ARTIFACT_ROOT": str(
            zoo_store(
                (
                    "digits",
                    "digits-cnn",
                    "toggle-gru",
                    "shapes-detector",
                    "speaker-encoder",
                    "speaker-clips",
                    "text-detector",
                    "text-pages",
                    "review-sentiment",
                )
            )
        ),
        "HOST_LIVE_SECONDS": "5",
        "EVALUATION_SWEEP_SECONDS": "1",
        "EVALUATION_MAX_ATTEMPTS": "3",
    }
    with LiveHub(folder, services="environ", settings=settings) as live:
        live.migrate()
        live.load_manifests()
        live.add_users()  # alice (who signs in; `token`) and an operator (`agent_token`)
        live.purge_queues()
        live.start()
        live.start_agent(
            "docker-a", frameworks="onnxruntime,pytorch,tensorflow", options=["--docker"]
        )
        # The same frameworks on this host, in the agent's own process: the baseline of the
        # containers' predictions.
        live.start_agent("host-a", frameworks="onnxruntime,pytorch,tensorflow")
        live.wait(
            lambda: {"docker-a", "host-a"} <= set(live.live_hosts()), "the agents to register", 90
        )
        yield live


def _succeeded(hub: LiveHub, evaluation_id: str) -> dict[str, Any]:
    body = hub.finished(evaluation_id, timeout=180)
    assert body["status"] == "succeeded", f"{body['history']}\n{hub.logs()}"
    return body


def test_an_evaluation_runs_in_the_image_its_manifest_names(hub: LiveHub) -> None:
    evaluation_id = hub.launch(batch_sizes=[1, 32], host="docker-a")
    body = _succeeded(hub, evaluation_id)

    result = body["result"]
    assert result["accuracy"]["top1"] >= 0.95 and result["accuracy"]["count"] == 360
    container = result["stack"]["container"]
    assert container["image"] == ONNXRUNTIME
    assert container["digest"] == _image_id(ONNXRUNTIME)
    # The stack is the container's own: Debian bookworm's Python, not this host's.
    assert result["stack"]["python"]["version"] == "3.11.2"
    assert result["stack"]["frameworks"]["onnxruntime"] == "1.31.1"
    # Its spans came through the agent (the container has no network) and were all stored.
    spans = result["details"]["spans"]
    assert spans["sent"] == spans["stored"] > 0

    status, image = hub.get(f"images/{container['digest']}/")
    assert status == 200, image
    assert ONNXRUNTIME in image["tags"]
    assert image["environment"]["python_packages"]["onnxruntime"] == "1.31.1"
    assert image["environment"]["python_packages"]["numpy"] == "2.4.6"
    assert "python3.11" in image["environment"]["debian_packages"]
    assert "django" not in image["environment"]["python_packages"]  # the predictor side only


IMAGES = {
    "onnxruntime": ONNXRUNTIME,
    "pytorch": PYTORCH,
    "tensorflow": TENSORFLOW,
}


@pytest.mark.parametrize("framework", ["onnxruntime", "pytorch", "tensorflow"])
def test_each_framework_image_gives_exactly_the_host_runs_predictions(
    hub: LiveHub, framework: str
) -> None:
    """digits-cnn through the hub in the framework's container and on this host in the agent's
    own process: the same prediction for every input, and the container's image and digest in
    the result."""
    runs = {
        host: hub.launch(framework=framework, host=host, batch_sizes=[1, 32])
        for host in ("host-a", "docker-a")
    }
    bodies = {host: _succeeded(hub, evaluation_id) for host, evaluation_id in runs.items()}
    container = bodies["docker-a"]["result"]["stack"]["container"]
    assert container["image"] == IMAGES[framework]
    assert container["digest"] == _image_id(IMAGES[framework])

    status, compared = hub.get(f"compare/?evaluations={runs['host-a']},{runs['docker-a']}")
    assert status == 200, compared
    _, in_container = compared["accuracy"]["rows"]
    assert in_container["agreement"] == 1.0 and in_container["disagreeing_inputs"] == 0
    assert in_container["max_abs_difference"] <= 1e-6, in_container
    accuracy = {host: body["result"]["accuracy"]["top1"] for host, body in bodies.items()}
    assert accuracy["host-a"] == accuracy["docker-a"] >= 0.95


def test_a_stateful_streaming_model_runs_in_both_framework_images(hub: LiveHub) -> None:
    """toggle-gru's state is carried in the containers as in process: the ONNX Runtime and
    PyTorch images give the same accuracies (scored with the images' scikit-learn)."""
    bodies = {
        framework: _succeeded(
            hub,
            hub.launch(
                model="toggle-gru", framework=framework, dataset="toggle-clicks", host="docker-a"
            ),
        )
        for framework in ("onnxruntime", "pytorch")
    }
    for framework, body in bodies.items():
        result = body["result"]
        assert result["stack"]["container"]["image"] == (
            ONNXRUNTIME if framework == "onnxruntime" else PYTORCH
        )
        assert result["details"]["accuracy"]["top1"] >= 0.97
        assert result["details"]["accuracy_state_reset"]["top1"] <= 0.7
    carried = {fw: body["result"]["details"]["accuracy"] for fw, body in bodies.items()}
    assert carried["onnxruntime"]["top1"] == carried["pytorch"]["top1"]


def test_a_detector_is_scored_in_its_image_with_the_images_pycocotools(hub: LiveHub) -> None:
    body = _succeeded(
        hub,
        hub.launch(
            model="shapes-detector",
            framework="onnxruntime",
            dataset="shapes-boxes",
            host="docker-a",
        ),
    )
    accuracy = body["result"]["details"]["accuracy"]
    assert accuracy["library"] == "pycocotools COCOeval (bbox)"
    assert accuracy["map"] >= 0.5 and accuracy["count"] == 300
    assert body["result"]["stack"]["container"]["image"] == ONNXRUNTIME


@pytest.mark.browser
def test_the_evaluation_page_names_the_image_and_its_digest(hub: LiveHub, browser: Any) -> None:
    evaluation_id = hub.launch(host="docker-a", batch_sizes=[1])
    _succeeded(hub, evaluation_id)
    for page in _tab(browser, hub.url):
        sign_in_to_hub(page)
        page.goto(f"/evaluations/{evaluation_id}/")
        expect(page.locator("#stack")).to_contain_text(
            f"Container image{ONNXRUNTIME} ({_image_id(ONNXRUNTIME)[:19]})"
        )


def test_the_request_limits_the_container_and_the_result_says_so(hub: LiveHub) -> None:
    evaluation_id = hub.launch(host="docker-a", batch_sizes=[1], container_cpus=1.5)
    body = _succeeded(hub, evaluation_id)
    limits = body["result"]["stack"]["container"]["limits"]
    assert limits == {"cpus": 1.5, "memory_bytes": None}

    evaluation_id = hub.launch(host="docker-a", batch_sizes=[1], container_memory_mb=64)
    body = hub.finished(evaluation_id, timeout=120)
    assert body["status"] == "failed", body["history"]
    assert "out of memory (limit 64 MiB)" in body["history"][-1]["reason"]


def test_the_host_registers_its_images_and_the_hub_diffs_two(hub: LiveHub) -> None:
    status, hosts = hub.get("hosts/?live=1")
    assert status == 200
    (host,) = [h for h in hosts["results"] if h["name"] == "docker-a"]
    tags = {tag for image in host["images"] for tag in image["tags"]}
    assert {ONNXRUNTIME, PYTORCH, TENSORFLOW} <= tags
    assert {f["name"] for f in host["frameworks"]} == {"onnxruntime", "pytorch", "tensorflow"}

    onnx, torch = _image_id(ONNXRUNTIME), _image_id(PYTORCH)
    status, diff = hub.get(f"images/{onnx}/diff/{torch}/")
    assert status == 200, diff
    python = diff["python_packages"]
    assert python["added"]["torch"].startswith("2.13.0")
    assert python["removed"]["onnxruntime"] == "1.31.1"
    assert "numpy" not in python["changed"]  # the same pinned wheel in both
    assert diff["differing"] == sum(len(part) for part in python.values()) + sum(
        len(part) for part in diff["debian_packages"].values()
    )
    # A digest no host registered, and a malformed one.
    status, _ = hub.get(f"images/sha256:{'0' * 64}/")
    assert status == 404
    status, _ = hub.get("images/sha256:xyz/")
    assert status == 404


def test_a_comparison_shows_the_images_among_what_differs(hub: LiveHub) -> None:
    onnx = hub.launch(host="docker-a", batch_sizes=[1])
    torch = hub.launch(host="docker-a", framework="pytorch", batch_sizes=[1])
    for evaluation_id in (onnx, torch):
        _succeeded(hub, evaluation_id)

    status, compared = hub.get(f"compare/?evaluations={onnx},{torch}")
    assert status == 200, compared
    rows = {(row["section"], row["key"]): row for row in compared["differs"]["rows"]}
    assert rows[("stack", "container image")]["values"] == [ONNXRUNTIME, PYTORCH]
    assert rows[("stack", "image digest")]["values"] == [_image_id(ONNXRUNTIME), _image_id(PYTORCH)]
    torch_row = rows[("image packages", "python: torch")]
    assert torch_row["values"][0] is None and torch_row["values"][1].startswith("2.13.0")


def test_a_container_over_its_memory_limit_fails_the_evaluation_saying_so(hub: LiveHub) -> None:
    hub.start_agent("docker-small", options=["--docker", "--memory", "64m"])
    hub.wait(lambda: "docker-small" in hub.live_hosts(), "the small agent to register", 60)
    evaluation_id = hub.launch(host="docker-small", batch_sizes=[1])
    body = hub.finished(evaluation_id, timeout=120)
    assert body["status"] == "failed", body["history"]
    reason = body["history"][-1]["reason"]
    assert "out of memory (limit 64 MiB)" in reason, reason


def test_over_20_evaluations_a_container_killed_mid_run_loses_and_duplicates_none(
    hub: LiveHub,
) -> None:
    """20 evaluations queued on the container host; the container of the first is killed while
    it runs. That one is dispatched again and succeeds; every one of the 20 ends succeeded,
    once, with one result and every span it sent stored once."""
    killed = hub.launch(host="docker-a", batch_sizes=[1], repeat=30)
    others = [hub.launch(host="docker-a", batch_sizes=[1]) for _ in range(19)]

    def container() -> str | None:
        found = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label=org.mlmodelscope.evaluation={killed}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        running = hub.evaluation(killed)["status"] == "running"
        return found[0] if found and running else None

    first = hub.wait(container, "the evaluation's container to run", 120)
    subprocess.run(["docker", "kill", first], check=True, capture_output=True)

    bodies = {evaluation_id: _succeeded(hub, evaluation_id) for evaluation_id in [killed, *others]}
    for evaluation_id, body in bodies.items():
        statuses = [change["status"] for change in body["history"]]
        assert statuses.count("succeeded") == 1, body["history"]
        assert hub.result_rows(evaluation_id) == 1
        spans = body["result"]["details"]["spans"]
        assert spans["sent"] == spans["stored"] > 0, spans
        if evaluation_id != killed:
            assert statuses.count("running") == 1, body["history"]
    history = bodies[killed]["history"]
    statuses = [change["status"] for change in history]
    assert statuses.count("running") == 2, history
    again = next(
        change
        for change in history[statuses.index("running") + 1 :]
        if change["status"] == "dispatched"
    )
    assert "killed mid-run" in again["reason"], again


def test_an_agent_runs_inside_a_framework_image(hub: LiveHub) -> None:
    token = hub.agent_token
    name = "in-image"
    container = subprocess.run(
        ["docker", "run", "-d", "--rm", "--network", "host", "-e", f"MLMS_AGENT_TOKEN={token}"]
        + ["-e", f"MLMS_CONTAINER_DIGEST={_image_id(ONNXRUNTIME)}"]
        + ["--label", "org.mlmodelscope.test=in-image", ONNXRUNTIME]
        + ["agent", "--hub", hub.url, "--name", name, "--pool", "--frameworks", "onnxruntime"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        hub.wait(lambda: name in hub.live_hosts(), "the agent in the image to register", 60)
        evaluation_id = hub.launch(host=name, batch_sizes=[1])
        body = _succeeded(hub, evaluation_id)
        assert body["host"] == name
        stack = body["result"]["stack"]
        assert stack["container"]["image"] == ONNXRUNTIME
        assert stack["container"]["digest"] == _image_id(ONNXRUNTIME)
        assert stack["python"]["version"] == "3.11.2"
        # The agent registered the image it runs in: the result links to its packages.
        status, image = hub.get(f"images/{_image_id(ONNXRUNTIME)}/")
        assert status == 200 and image["environment"]["python_packages"]["onnxruntime"] == "1.31.1"
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)


def _digits_job(manifest: str) -> Job:
    """A job of digits-cnn on digits as the hub would send it, with `manifest` as the model."""
    dataset = (ROOT / "manifests" / "datasets" / "digits.yaml").read_text()
    return Job(
        id="0" * 32,
        claim="1" * 32,
        attempt=1,
        device="cpu",
        model=ManifestRef(1, "digits-cnn", "1.0.0", "onnxruntime", "0" * 64, manifest),
        dataset=ManifestRef(2, "digits", "1.0.0", "", "0" * 64, dataset),
        options=JobOptions(),
    )


def test_a_missing_image_fails_the_job_naming_it_and_how_to_build_it(tmp_path: Path) -> None:
    manifest = (ROOT / "manifests" / "models" / "digits-cnn" / "onnxruntime.yaml").read_text()
    missing = "mlmodelscope/onnxruntime:0.0-cpu"
    job = _digits_job(manifest.replace(ONNXRUNTIME, missing))
    runner = Runner(docker_client(), "test-host", tmp_path)
    with pytest.raises(EvaluationError) as raised:
        runner.run(job, lambda url, sha: tmp_path, lambda d, t: None, lambda: False, None)
    message = str(raised.value)
    assert missing in message and "make images IMAGES=onnxruntime" in message


def test_make_images_with_nothing_changed_builds_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "docker/build.py", "onnxruntime"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert f"{ONNXRUNTIME}: up to date" in done.stdout
    assert "0 built, 1 up to date" in done.stdout


# -- custom processing code, sandboxed in the container --------------------------------------

# digits-cnn with the normalization left to custom code: the built-in steps hand it the pixels
# as float32 0..255 (scale 1, mean 0, std 1), and the code does (x / 255 - 0.5) / 0.5.
NORMALIZE = "def preprocess(example):\n    return (example / 255.0 - 0.5) / 0.5\n"


def _upload_coded(hub: LiveHub, name: str, preprocess: str) -> None:
    """digits-cnn (ONNX) as `name`, owned by the hub's user, with `preprocess` as its code."""
    import requests
    import yaml

    data = yaml.safe_load((ROOT / "manifests/models/digits-cnn/onnxruntime.yaml").read_text())
    data.update(name=name, visibility="private", preprocess=preprocess)
    parameters = data["inputs"][0]["parameters"]
    parameters.update(scale=1.0, mean=[0.0], std=[1.0])
    data["model"]["graph_path"] = f"repo://models/{name}/1.0.0/digits-cnn.onnx"
    graph = Path(hub.env["ARTIFACT_ROOT"]) / "models/digits-cnn/1.0.0/digits-cnn.onnx"
    response = requests.post(
        hub.url + "/api/v1/manifests/",
        data={"manifest": yaml.safe_dump(data, sort_keys=False)},
        files={"files": ("digits-cnn.onnx", graph.read_bytes())},
        headers=hub.auth_headers(),
        timeout=30,
    )
    assert response.status_code == 201, response.text


@pytest.fixture(scope="module")
def code_host(hub: LiveHub) -> str:
    """An agent that opts in to custom code, with 3 s per call."""
    options = ["--docker", "--allow-custom-code", "--custom-code-seconds", "3"]
    hub.start_agent("docker-code", options=options)
    hub.wait(lambda: "docker-code" in hub.live_hosts(), "the custom-code agent to register", 60)
    return "docker-code"


def _predictions(hub: LiveHub, evaluation_id: str) -> list[list[str]]:
    status, body = hub.get(f"evaluations/{evaluation_id}/predictions/?page_size=500")
    assert status == 200, body
    return [row["classes"] for row in body["results"]]


def test_custom_code_runs_in_the_container_of_a_host_that_opts_in(
    hub: LiveHub, code_host: str
) -> None:
    _upload_coded(hub, "digits-coded", NORMALIZE)
    # The hub sends it only to a host that opts in: named elsewhere, it is refused.
    status, refused = hub.request(
        "POST",
        "/api/v1/evaluations/",
        {
            "model": "digits-coded",
            "framework": "onnxruntime",
            "dataset": "digits",
            "host": "docker-a",
        },
    )
    assert status == 400, refused
    assert refused["errors"][0]["path"] == "custom_code", refused
    assert "--allow-custom-code" in refused["detail"]

    coded = _succeeded(hub, hub.launch(model="digits-coded", batch_sizes=[8]))
    assert coded["host"] == code_host
    plain = _succeeded(hub, hub.launch(host="docker-a", batch_sizes=[8]))
    # The code did in the container what the built-in normalization does: the same
    # predictions, input by input.
    assert _predictions(hub, coded["id"]) == _predictions(hub, plain["id"])
    assert coded["result"]["accuracy"] == plain["result"]["accuracy"]
    assert coded["result"]["stack"]["container"]["image"] == ONNXRUNTIME


def test_a_state_dict_on_whole_clips_runs_in_the_pytorch_image_of_a_host_that_runs_code(
    hub: LiveHub,
) -> None:
    """The built-in speaker encoder: a training checkpoint loaded into its manifest's module
    source (custom code), reading whole clips as librosa's mel spectrograms cut into windows,
    scored by retrieval and verification in the image; the figures are those of the package's
    own pipeline on the same clips, computed here."""
    import io

    import numpy as np
    import pyarrow.parquet as pq
    import soundfile
    from resemblyzer import VoiceEncoder

    from predictors.evaluation.scenarios.embedding import embedding_metrics

    status, refused = hub.request(
        "POST",
        "/api/v1/evaluations/",
        {
            "model": "speaker-encoder",
            "framework": "pytorch",
            "dataset": "speaker-clips",
            "host": "docker-a",
        },
    )
    assert status == 400 and refused["errors"][0]["path"] == "custom_code", refused
    code_host = "docker-torch-code"
    options = ["--docker", "--allow-custom-code"]
    hub.start_agent(code_host, frameworks="pytorch", options=options)
    hub.wait(lambda: code_host in hub.live_hosts(), "the PyTorch custom-code agent", 60)
    run = _succeeded(
        hub,
        hub.launch(
            model="speaker-encoder",
            framework="pytorch",
            dataset="speaker-clips",
            batch_sizes=[1, 4],
        ),
    )
    assert run["host"] == code_host
    assert run["result"]["stack"]["container"]["image"] == PYTORCH
    split = Path(hub.env["ARTIFACT_ROOT"]) / "datasets/speaker-clips/1.0.0/validation.parquet"
    table = pq.read_table(split)
    encoder = VoiceEncoder("cpu", verbose=False)
    theirs = np.stack(
        [
            encoder.embed_utterance(soundfile.read(io.BytesIO(clip), dtype="float32")[0])
            for clip in table.column("audio").to_pylist()
        ]
    )
    expected = embedding_metrics(theirs, np.asarray(table.column("label").to_pylist()))
    assert run["result"]["accuracy"]["count"] == 60
    accuracy = run["result"]["details"]["accuracy"]
    assert accuracy["top1"] == run["result"]["accuracy"]["top1"] == accuracy["recall_at_1"]
    for key in ("recall_at_1", "recall_at_5", "eer"):
        assert abs(accuracy[key] - expected[key]) <= 0.005, (key, accuracy, expected)


def test_a_detector_decoded_by_its_custom_code_runs_in_the_container(
    hub: LiveHub, code_host: str
) -> None:
    """The built-in text detector: PaddleOCR's DB text detector, whose boxes its manifest's
    postprocess code decodes from its probability map (OpenCV and pyclipper, imported in the
    ONNX Runtime image); every page's boxes are those of the package's own pipeline on the
    same pages, computed here."""
    import pyarrow.parquet as pq

    from tests.predictors.test_pretrained_text_detector import _package_boxes

    pages = 6
    run = _succeeded(
        hub,
        hub.launch(
            model="text-detector",
            framework="onnxruntime",
            dataset="text-pages",
            batch_sizes=[2],
            limit=pages,
        ),
    )
    assert run["host"] == code_host
    assert run["result"]["stack"]["container"]["image"] == ONNXRUNTIME
    status, stored = hub.get(f"evaluations/{run['id']}/?predictions=1")
    assert status == 200, stored
    boxes = stored["result"]["predictions"]["boxes"]
    split = Path(hub.env["ARTIFACT_ROOT"]) / "datasets/text-pages/1.0.0/validation.parquet"
    images = pq.read_table(split).column("image").to_pylist()[:pages]
    theirs = _package_boxes(images)
    assert len(boxes) == pages
    for ours, package in zip(boxes, theirs, strict=True):
        xywh = [[x1, y1, x2 - x1, y2 - y1] for x1, y1, x2, y2 in package[:, :4].tolist()]
        assert sorted(map(list, ours)) == sorted(xywh)


def test_a_text_model_reads_its_tokenizer_file_in_the_container(hub: LiveHub) -> None:
    """The built-in review-sentiment in the PyTorch image: its tokenizer file is fetched
    through the agent and applied by the image's tokenizers; every review's class is the one
    its ONNX graph gives the library's own ids, computed here."""
    import onnxruntime as ort
    import pyarrow.parquet as pq

    from tests.predictors.test_text_inputs import _library_ids

    run = _succeeded(
        hub,
        hub.launch(
            model="review-sentiment",
            framework="pytorch",
            dataset="short-reviews",
            batch_sizes=[32],
            host="docker-a",
        ),
    )
    assert run["result"]["stack"]["container"]["image"] == PYTORCH
    root = Path(hub.env["ARTIFACT_ROOT"])
    folder = root / "models/review-sentiment/1.0.0"
    rows = pq.read_table(root / "datasets/short-reviews/1.0.0/validation.parquet").to_pylist()
    ids = _library_ids(folder / "tokenizer.json", [row["input"] for row in rows], 24)
    session = ort.InferenceSession(
        str(folder / "review-sentiment.onnx"), providers=["CPUExecutionProvider"]
    )
    (logits,) = session.run(None, {"input": ids})
    status, body = hub.get(f"evaluations/{run['id']}/predictions/?page_size=500")
    assert status == 200, body
    assert [row["classes"][0] for row in body["results"]] == logits.argmax(1).tolist()
    truth = [row["label"] for row in rows]
    expected = sum(int(a == b) for a, b in zip(logits.argmax(1).tolist(), truth, strict=True))
    assert run["result"]["accuracy"]["top1"] == pytest.approx(expected / len(rows))


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        (
            "digits-net",
            "import urllib.request\ndef preprocess(example):\n"
            "    urllib.request.urlopen('http://192.0.2.1/', timeout=2)\n",
            "custom preprocess code tried to use the network",
        ),
        (
            "digits-write",
            "def preprocess(example):\n    open('/mlms/files/evil', 'w').write('x')\n",
            "tried to write /mlms/files/evil outside its sandbox",
        ),
        (
            "digits-spin",
            "def preprocess(example):\n    while True:\n        pass\n",
            "custom preprocess code ran for more than 3 s in one call and was stopped",
        ),
        (
            # Holds the interpreter (catastrophic backtracking in C): its own watchdog cannot
            # run, so the agent stops the container once it has been silent for 3 + 15 s.
            "digits-regex",
            "import re\ndef preprocess(example):\n    re.match(r'(a+)+b', 'a' * 40)\n",
            "custom code ran for more than 3 s in one call without letting the run report",
        ),
        (
            "digits-raise",
            "def preprocess(example):\n    return example[99]\n",
            'File "<manifest preprocess>", line 2, in preprocess',
        ),
    ],
)
def test_custom_code_that_fails_or_reaches_outside_ends_the_run_saying_so(
    hub: LiveHub, code_host: str, name: str, code: str, words: str
) -> None:
    _upload_coded(hub, name, code)
    body = hub.finished(hub.launch(model=name, batch_sizes=[1], limit=4), timeout=120)
    assert body["status"] == "failed", body["history"]
    reason = body["history"][-1]["reason"]
    assert words in reason, reason
    # Nothing of it reached the host: no file it tried to write, no container left.
    assert not list(hub.folder.rglob("evil"))
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("mlms-*/evil"))
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=org.mlmodelscope.evaluation=" + body["id"]],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert left == []


def test_a_host_that_has_not_opted_in_refuses_a_job_with_custom_code(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load((ROOT / "manifests/models/digits-cnn/onnxruntime.yaml").read_text())
    data["preprocess"] = NORMALIZE
    job = _digits_job(yaml.safe_dump(data))
    before = {c.id for c in docker_client().containers.list(all=True)}
    runner = Runner(docker_client(), "plain-host", tmp_path)
    with pytest.raises(EvaluationError) as raised:
        runner.run(job, lambda url, sha: tmp_path, lambda d, t: None, lambda: False, None)
    message = str(raised.value)
    assert "host plain-host does not run custom code" in message
    assert "--allow-custom-code" in message
    assert {c.id for c in docker_client().containers.list(all=True)} == before
