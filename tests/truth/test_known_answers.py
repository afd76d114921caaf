"""Truth: models whose right answers are known by construction, run by a live hub and its agent,
and read back through every surface that shows a figure.

- **Lookups**: an ONNX model that holds the digits validation split's images and, for each,
  the class it answers (a nearest-neighbour lookup whose softmax is one-hot): the label for
  exactly the inputs chosen, the next class for the others. Its top-1 is known to the input
  before it runs, so every surface must say exactly k/n, and comparing two lookups must find
  exactly the inputs known to differ (McNemar's counts and inputs).
- **Matrix products**: an ONNX model that is a chain of identical matrix products, in two
  lengths 4× apart. The verdict must call the longer one slower, the interval of the ratio of
  medians must hold the ratio a bare loop measures in the same run, and two evaluations of one
  model must get "no detectable difference" in at least 19 of 20 comparisons.
- **Compare agrees with the leaderboard**: digits-cnn in PyTorch and ONNX Runtime on a quiet
  machine and on a busy one (another process burning a core): the headline is the median with
  its interval, the page names the test, and a verdict of faster or slower orders the two as
  the leaderboard's p50 does.
- **One number, one value**: one finished evaluation read through the API, its page, compare,
  the history, the leaderboard and its CSV, and `mlms evaluations show` gives one value of
  top-1 and of the median latency, printed by one rounding rule.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import requests
import yaml
from playwright.sync_api import expect

from predictors import statistics
from predictors.analysis import hygiene
from tests.frontend.conftest import SCREENSHOTS, browser, sign_in_to_hub  # noqa: F401 (a fixture)
from tests.livehub import LiveHub, running_hub
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.browser, pytest.mark.frameworks]

ROOT = Path(__file__).resolve().parents[2]
CLASSES = 10
# The lookups: of the digits validation split's 360 images, how many each gets right.
RIGHT_A = 300
RIGHT_B = 280
# The matrix products: width of the square products, and how many of them each model chains;
# at BATCH inputs a call, the products take milliseconds, and the fixed cost of a call (the
# framework's, the loop's) is a small share of it.
WIDTH = 512
SHORT = 6
LONG = 4 * SHORT
BATCH = 8
# Inputs per matrix-product evaluation (BATCH a sample), and passes over them: a run long
# enough (about a second of timing) that a burst of another VM's work on the host shifts only
# some of its batches, not its median.
TIMED = 360
PASSES = 12
# The chains compared with a bare loop: wider, so that what a call costs besides the products
# (the framework's and the loop's own work, which a bare loop does not time alike) is a few
# tenths of a per cent of it.
CHAIN_WIDTH = 1024
CHAIN_PASSES = 1
CHAIN_PAIRS = 3
# How far a run of the chain's pair may drift from the bare loop's ratio on a shared machine.
DRIFT = 0.15
SAME_MODEL_COMPARISONS = 20
# Comparisons of two runs of one model, neither of which the result's hygiene questions, that
# may still call them different: runs slowed evenly by a neighbour on a shared machine (see the
# test). Seen on this project's shared 2-core VMs: 0 to 4 of 20 (ratios 1.11 to 1.16), where a
# verdict on the test alone found 9. No run of this one says why (each is steady within
# itself); a measure of the machine's own speed in each run would.
MAX_SAME_MODEL_ALARMS = 5
SAME_MODEL_TIMED = 240


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveHub]:
    """A hub on the zoo's digits dataset and digits-cnn, its services those of the pass (SQLite
    or PostgreSQL + Redis), with one agent of the shared pool running ONNX Runtime and
    PyTorch."""
    # A store of its own (the zoo's digits copied in): the models uploaded here stay here.
    folder = tmp_path_factory.mktemp("truth")
    store = folder / "artifacts"
    zoo = zoo_store(("digits", "digits-cnn"))
    shutil.copytree(zoo / "datasets/digits", store / "datasets/digits")
    shutil.copytree(zoo / "models/digits-cnn", store / "models/digits-cnn")
    settings = {"ARTIFACT_ROOT": str(store), "HOST_LIVE_SECONDS": "5"}
    with running_hub(
        folder,
        services="environ",
        manifests=True,
        users=True,
        settings=settings,
    ) as running:
        running.start_agent("truth-a", frameworks="onnxruntime,pytorch")
        running.wait(lambda: "truth-a" in running.live_hosts(), "the agent", 90)
        yield running


@pytest.fixture
def hub_page(browser: Any, hub: LiveHub) -> Iterator[Any]:  # noqa: F811
    context = browser.new_context(base_url=hub.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    tab.goto("about:blank")
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


# -- the models --------------------------------------------------------------------------------


def _digits(store: Path) -> tuple[np.ndarray, np.ndarray]:
    """The validation split's images as the manifest preprocesses them ((x / 255 − 0.5) / 0.5,
    flattened) and their labels."""
    from PIL import Image

    table = pq.read_table(store / "datasets/digits/1.0.0/validation.parquet")
    images = [
        np.asarray(Image.open(io.BytesIO(data)).convert("L"), dtype=np.float32)
        for data in table.column("image").to_pylist()
    ]
    pixels = (np.stack(images) / 255.0 - 0.5) / 0.5
    return pixels.reshape(len(images), -1), np.asarray(table.column("label").to_pylist())


def _lookup(store: Path, right: int, seed: int, path: Path) -> np.ndarray:
    """An ONNX lookup at `path` that answers the label for the inputs of `right` distinct
    images (chosen with `seed`) and the next class for the rest; which inputs it gets right."""
    import torch
    from torch import nn

    pixels, labels = _digits(store)
    # Identical images are one row: the lookup cannot tell them apart.
    stored, first, inverse = np.unique(pixels, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    chosen = np.random.default_rng(seed).permutation(len(stored))
    targets = (labels[first] + 1) % CLASSES
    # Right for the chosen rows, in order, until exactly `right` inputs are right.
    counts = np.bincount(inverse, minlength=len(stored))
    total = 0
    for row in chosen:
        agree = int(np.count_nonzero(labels[inverse == row] == labels[first[row]]))
        if total + agree > right:
            continue
        targets[row] = labels[first[row]]
        total += agree
        if total == right:
            break
    assert total == right, f"could not make exactly {right} right ({total}; {counts.max()})"
    gaps = 0.5 * ((stored[:, None, :] - stored[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(gaps, np.inf)
    sharpness = 80.0 / float(gaps.min())

    class Lookup(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("stored", torch.tensor(stored.T.copy()))
            self.register_buffer("halves", torch.tensor(0.5 * (stored**2).sum(axis=1)))
            self.register_buffer(
                "targets", torch.tensor(np.eye(CLASSES, dtype=np.float32)[targets])
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scores = x.reshape(x.shape[0], -1) @ self.stored - self.halves
            return torch.softmax(scores * sharpness, dim=1) @ self.targets

    _export(Lookup(), path, "probabilities")
    return np.asarray(targets[inverse] == labels)


def _products(repeats: int, path: Path, width: int = WIDTH) -> None:
    """An ONNX model that is `repeats` identical `width` × `width` matrix products."""
    import torch
    from torch import nn

    rng = np.random.default_rng(7)
    square, _ = np.linalg.qr(rng.standard_normal((width, width)))

    class Products(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer(
                "into", torch.tensor(rng.standard_normal((64, width)), dtype=torch.float32)
            )
            self.register_buffer("square", torch.tensor(square, dtype=torch.float32))
            self.register_buffer(
                "out", torch.tensor(rng.standard_normal((width, CLASSES)), dtype=torch.float32)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x.reshape(x.shape[0], -1) @ self.into
            for _ in range(repeats):
                h = h @ self.square
            return h @ self.out

    _export(Products(), path, "logits")


def _export(module: Any, path: Path, output: str) -> None:
    import torch

    module.eval()
    torch.onnx.export(
        module,
        (torch.zeros(1, 1, 8, 8),),
        str(path),
        input_names=["input"],
        output_names=[output],
        dynamic_axes={"input": {0: "batch"}, output: {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )


def _upload(hub: LiveHub, name: str, path: Path, output_type: str) -> None:
    """The model at `path` as `name` 1.0.0, digits-cnn's processing, public."""
    data = yaml.safe_load((ROOT / "manifests/models/digits-cnn/onnxruntime.yaml").read_text())
    data.update(name=name, visibility="public", description=f"{name}: a model of known answers")
    data["outputs"][0].update(name=output_type, type=output_type)
    data["model"]["graph_path"] = f"repo://models/{name}/1.0.0/{path.name}"
    response = requests.post(
        hub.url + "/api/v1/manifests/",
        data={"manifest": yaml.safe_dump(data, sort_keys=False)},
        files={"files": (path.name, path.read_bytes())},
        headers=hub.auth_headers(),
        timeout=60,
    )
    assert response.status_code == 201, response.text


def _run(hub: LiveHub, model: str, **fields: Any) -> dict[str, Any]:
    evaluation_id = hub.launch(
        model=model, **{"framework": "onnxruntime", "dataset": "digits", **fields}
    )
    finished = hub.finished(evaluation_id, timeout=300)
    assert finished["status"] == "succeeded", finished["history"]
    return finished


def _compare(hub: LiveHub, *ids: str) -> dict[str, Any]:
    status, body = hub.get(f"compare/?evaluations={','.join(ids)}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def lookups(hub: LiveHub, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The two lookups, evaluated, and the inputs each is known to get right."""
    store = Path(hub.env["ARTIFACT_ROOT"])
    folder = tmp_path_factory.mktemp("lookups")
    made: dict[str, Any] = {}
    for name, right, seed in (("lookup-a", RIGHT_A, 1), ("lookup-b", RIGHT_B, 2)):
        path = folder / f"{name}.onnx"
        correct = _lookup(store, right, seed, path)
        _upload(hub, name, path, "probabilities")
        made[name] = {"right": correct, "evaluation": _run(hub, name, batch_sizes=[1, 8])}
    return made


# -- accuracy ----------------------------------------------------------------------------------


@pytest.mark.both_stacks
def test_a_lookup_scores_exactly_k_of_n_and_compare_finds_exactly_the_inputs_that_differ(
    hub: LiveHub, lookups: dict[str, Any]
) -> None:
    a, b = lookups["lookup-a"], lookups["lookup-b"]
    n = len(a["right"])
    for made, right in ((a, RIGHT_A), (b, RIGHT_B)):
        result = made["evaluation"]["result"]
        assert result["accuracy"]["count"] == n
        assert result["accuracy"]["top1"] == right / n
        assert int(made["right"].sum()) == right

    report = _compare(hub, a["evaluation"]["id"], b["evaluation"]["id"])
    rows = report["accuracy"]["rows"]
    # The interval of each top-1: Wilson's, around exactly k/n.
    for row, right in zip(rows, (RIGHT_A, RIGHT_B), strict=True):
        interval = row["top1_interval"]
        assert interval["value"] == right / n and interval["count"] == n
        assert interval["low"] < right / n < interval["high"]
        assert interval == statistics.proportion(right, n)
    paired = rows[1]["paired"]
    only_a = np.flatnonzero(a["right"] & ~b["right"])
    only_b = np.flatnonzero(b["right"] & ~a["right"])
    assert (paired["only_baseline"], paired["only_other"]) == (len(only_a), len(only_b))
    assert paired["only_baseline_inputs"] == only_a[:50].tolist()
    assert paired["only_other_inputs"] == only_b[:50].tolist()
    expected = statistics.paired_accuracy(a["right"], b["right"])
    assert paired["p_value"] == pytest.approx(expected["p_value"])
    assert paired["verdict"] == expected["verdict"]
    assert report["accuracy"]["test"].startswith("exact McNemar")
    # The inputs on which their top-1 classes differ: those where exactly one is right.
    assert rows[1]["disagreeing_inputs"] == len(only_a) + len(only_b)


# -- latency -----------------------------------------------------------------------------------


def _bare_ratios(short: Path, long: Path, blocks: int = 12, calls: int = 25) -> list[float]:
    """The ratios of the two models' call times by a bare loop: one thread, BATCH inputs a call,
    each model's calls back to back as the evaluation loop runs them, in blocks, the blocks of
    the two alternating (each block's first call untimed); for each pair of blocks, the ratio of
    their medians."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    sessions = [
        onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for path in (short, long)
    ]
    feed = {"input": np.random.default_rng(0).standard_normal((BATCH, 1, 8, 8)).astype(np.float32)}
    ratios = []
    for _ in range(blocks):
        medians = []
        for session in sessions:
            session.run(None, feed)
            times = []
            for _ in range(calls):
                start = time.perf_counter_ns()
                session.run(None, feed)
                times.append(time.perf_counter_ns() - start)
            medians.append(np.median(times))
        ratios.append(float(medians[1] / medians[0]))
    return ratios


@pytest.mark.both_stacks
def test_a_chain_4x_as_long_is_slower_by_the_ratio_a_bare_loop_measures(
    hub: LiveHub, tmp_path: Path
) -> None:
    """Three pairs of evaluations, each compared: every verdict says slower (and the other way
    round, faster), and the ratios agree with the bare loop's within DRIFT.

    The interval of one comparison is of its two runs' calls; how often it holds a true ratio
    is tested on samples of known distributions (`test_statistics`). Here the two runs are
    another process than the bare loop, at another time, on a machine shared with the hub:
    a whole run now and then comes out several per cent off (seen on CI: 3.4 to 4.4 for a
    bare 3.8), which no interval of one run can see. So the ratio is checked against the bare
    loop's, measured before and after the pairs, within that drift: the median of the three
    ratios, and each of at least two of them."""
    paths = {}
    for name, repeats in (("products-short", SHORT), ("products-long", LONG)):
        paths[name] = tmp_path / f"{name}.onnx"
        _products(repeats, paths[name], CHAIN_WIDTH)
        _upload(hub, name, paths[name], "logits")
    # Untraced: no spans to store, so that nothing of the hub's runs beside the timed calls.
    options = {
        "batch_sizes": [BATCH],
        "limit": TIMED,
        "threads": 1,
        "repeat": CHAIN_PASSES,
        "trace_level": "none",
    }
    bare = _bare_ratios(paths["products-short"], paths["products-long"])
    differences = []
    for _ in range(CHAIN_PAIRS):
        short = _run(hub, "products-short", **options)
        long = _run(hub, "products-long", **options)
        cell = _compare(hub, short["id"], long["id"])["latency"]["batch_sizes"][0]["cells"][1]
        assert cell["verdict"].startswith("slower"), cell
        differences.append(cell["difference"])
        # And the other way round.
        back = _compare(hub, long["id"], short["id"])["latency"]["batch_sizes"][0]["cells"][1]
        assert back["difference"]["verdict"] == "faster", back
    assert all(difference["verdict"] == "slower" for difference in differences)
    bare += _bare_ratios(paths["products-short"], paths["products-long"])
    expected = float(np.median(bare))
    ratios = [difference["ratio"] for difference in differences]
    close = [abs(ratio / expected - 1) <= DRIFT for ratio in ratios]
    assert abs(float(np.median(ratios)) / expected - 1) <= DRIFT, (expected, differences)
    assert sum(close) >= CHAIN_PAIRS - 1, (expected, differences)


def test_two_evaluations_of_one_model_show_no_detectable_difference(
    hub: LiveHub, tmp_path: Path
) -> None:
    """Twenty pairs of evaluations of one model, each pair compared: a comparison that finds a
    difference has a run whose result says why its latencies are in question (a hygiene
    warning: other processes busy, batch latencies spread, a warm-up not over), and the
    comparison names that run beside its verdict (`questioned_by`). On this
    project's shared 2-core VMs one run of a pair has been seen taking half as long again as the
    other with nothing else running, its latencies spread as they never are on a quiet machine:
    the product reports the difference it measured, and flags the run. Among the comparisons of
    runs it does not flag, at most MAX_SAME_MODEL_ALARMS may still find a difference (a run
    slowed evenly throughout by a neighbour): far fewer than a verdict on the test alone would
    give, whose interval of one run is narrower than the drift between two. Its subject is the
    statistics, not the stack: it runs once, in the PostgreSQL pass of `make test`."""
    path = tmp_path / "products-same.onnx"
    _products(SHORT, path)
    _upload(hub, "products-same", path, "logits")
    options = {
        "batch_sizes": [BATCH],
        "limit": SAME_MODEL_TIMED,
        "threads": 1,
        "repeat": PASSES,
        "trace_level": "none",
    }
    cells = []
    for _ in range(SAME_MODEL_COMPARISONS):
        runs = [_run(hub, "products-same", **options) for _ in range(2)]
        cell = _compare(hub, *(run["id"] for run in runs))["latency"]["batch_sizes"][0]["cells"][1]
        codes = {w["code"] for run in runs for w in run["result"]["details"].get("hygiene", [])}
        # The comparison names the runs whose hygiene questions their latencies, and only them.
        named = {code for entry in cell["questioned_by"] for code in entry["codes"]}
        assert named == codes & set(hygiene.QUESTION_LATENCY), (cell, codes)
        cells.append(cell)
    unexplained = [
        cell["difference"]
        for cell in cells
        if cell["difference"]["verdict"] != "no detectable difference" and not cell["questioned_by"]
    ]
    assert len(unexplained) <= MAX_SAME_MODEL_ALARMS, unexplained


# -- compare and the leaderboard ---------------------------------------------------------------


@pytest.mark.both_stacks
@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "busy"])
def test_compare_of_two_frameworks_agrees_with_the_leaderboard(
    hub: LiveHub, hub_page: Any, busy: bool
) -> None:
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        ids = [
            _run(hub, "digits-cnn", framework=framework, batch_sizes=[1, 8])["id"]
            for framework in ("pytorch", "onnxruntime")
        ]
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    for evaluation_id in ids:
        status, body = hub.request("POST", f"/api/v1/evaluations/{evaluation_id}/publish/")
        assert status == 200, body
    report = _compare(hub, *ids)
    assert report["latency"]["headline"] == "median latency per batch"
    assert report["latency"]["test"].startswith("Mann–Whitney U")
    cells = report["latency"]["batch_sizes"][0]["cells"]
    for cell in cells:
        assert cell["p50_low_ms"] <= cell["p50_ms"] <= cell["p50_high_ms"]
    verdict = cells[1]["difference"]["verdict"]

    status, board = hub.get("leaderboards/image_classification/digits/?ordering=p50_ms")
    assert status == 200, board
    order = [row["evaluation"] for row in board["results"] if row["evaluation"] in ids]
    assert len(order) == 2
    if verdict == "faster":  # ONNX Runtime's median is the lower, beyond the noise
        assert order == [ids[1], ids[0]], (verdict, board["results"])
    elif verdict == "slower":
        assert order == [ids[0], ids[1]], (verdict, board["results"])
    # The ordering by the medians, whatever the verdict: the ratio is of the same medians.
    assert (cells[1]["ratio"] < 1) == (order[0] == ids[1])

    page = hub_page
    sign_in_to_hub(page)
    page.goto(f"/compare/?evaluations={','.join(ids)}")
    row = page.locator('#latency-table tr[data-batch-size="1"]')
    expect(row.locator(".median").first).to_have_text(f"{cells[0]['text']['p50']} ms")
    expect(row.locator(".interval").first).to_have_text(f"[{cells[0]['text']['p50_interval']}]")
    expect(row.locator(".verdict strong")).to_have_text(cells[1]["verdict"])
    expect(page.locator("#latency-method")).to_contain_text("Mann–Whitney U")
    expect(page.locator("#latency-plot")).to_have_attribute("data-drawn", "2")
    if busy:
        # docs/images/compare-busy.png is this one.
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#latency").screenshot(path=str(SCREENSHOTS / "compare-busy.png"))


# -- one number, one value ---------------------------------------------------------------------


def _cli(hub: LiveHub, *arguments: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "predictors.cli",
            *arguments,
            "--hub",
            hub.url,
            "--token",
            hub.token,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.both_stacks
def test_one_evaluation_reads_the_same_on_every_surface(
    hub: LiveHub, lookups: dict[str, Any], hub_page: Any
) -> None:
    evaluation = lookups["lookup-a"]["evaluation"]
    evaluation_id = evaluation["id"]
    status, published = hub.request("POST", f"/api/v1/evaluations/{evaluation_id}/publish/")
    assert status == 200, published

    # 1. The API: the values, and their text by the statistics layer's rule.
    status, body = hub.get(f"evaluations/{evaluation_id}/")
    assert status == 200, body
    top1 = body["result"]["accuracy"]["top1"]
    latency = body["result"]["latency"]["1"]
    assert top1 == RIGHT_A / len(lookups["lookup-a"]["right"])
    text = latency["text"]
    assert text == statistics.latency_text(latency)
    assert latency["p50_low_ms"] <= latency["p50_ms"] <= latency["p50_high_ms"]
    top1_text = statistics.percent(top1)

    # 2. The compare API and 3. the history API.
    cell = _compare(hub, evaluation_id, lookups["lookup-b"]["evaluation"]["id"])["latency"][
        "batch_sizes"
    ][0]["cells"][0]
    assert (cell["p50_ms"], cell["p50_low_ms"], cell["p50_high_ms"]) == (
        latency["p50_ms"],
        latency["p50_low_ms"],
        latency["p50_high_ms"],
    )
    assert cell["text"] == text
    status, listed = hub.get(f"evaluations/?model={evaluation['model']['name']}")
    assert status == 200, listed
    assert [row["accuracy"]["top1"] for row in listed["results"]] == [top1]

    # 4. The leaderboard's API and its CSV.
    status, board = hub.get("leaderboards/image_classification/digits/")
    assert status == 200, board
    row = next(r for r in board["results"] if r["evaluation"] == evaluation_id)
    assert (row["top1"], row["p50_ms"], row["p50_low_ms"], row["p50_high_ms"]) == (
        top1,
        latency["p50_ms"],
        latency["p50_low_ms"],
        latency["p50_high_ms"],
    )
    response = requests.get(
        hub.url + "/api/v1/leaderboards/image_classification/digits/?format=csv", timeout=30
    )
    assert response.status_code == 200, response.text
    line = next(
        r for r in csv.DictReader(io.StringIO(response.text)) if r["evaluation"] == evaluation_id
    )
    assert float(line["top1"]) == top1
    assert float(line["p50_ms"]) == latency["p50_ms"]
    assert float(line["p50_low_ms"]) == latency["p50_low_ms"]
    assert float(line["p50_high_ms"]) == latency["p50_high_ms"]

    # 5. `mlms evaluations show`.
    shown = _cli(hub, "evaluations", "show", evaluation_id)
    assert f"top-1 {top1:.2%}" in shown
    row_1 = next(line for line in shown.splitlines() if line.split()[:1] == ["1"])
    assert row_1.split()[1:3] == [text["p50"], text["p50_interval"]]

    # 6. The pages: the evaluation's, compare, the history and the leaderboard.
    page = hub_page
    sign_in_to_hub(page)
    page.goto(f"/evaluations/{evaluation_id}/")
    expect(page.locator("#accuracy")).to_contain_text(top1_text)
    latency_row = page.locator('#latency tr[data-batch-size="1"] td')
    expect(latency_row.nth(0)).to_have_text(text["p50"])
    expect(latency_row.nth(1)).to_have_text(text["p50_interval"])
    page.goto(f"/compare/?evaluations={evaluation_id},{lookups['lookup-b']['evaluation']['id']}")
    first = page.locator('#latency-table tr[data-batch-size="1"] td').nth(1)
    expect(first.locator(".median")).to_have_text(f"{text['p50']} ms")
    expect(first.locator(".interval")).to_have_text(f"[{text['p50_interval']}]")
    expect(page.locator("#accuracy-table tbody tr").first).to_contain_text(top1_text)
    page.goto(f"/evaluations/?model={evaluation['model']['name']}")
    expect(page.locator(f'tr[data-evaluation="{evaluation_id}"] [data-field="top1"]')).to_have_text(
        top1_text
    )
    page.goto("/leaderboards/image_classification/digits/")
    board_row = page.locator(f'tr[data-evaluation="{evaluation_id}"]')
    expect(board_row.locator("td.p50")).to_contain_text(text["p50"])
    expect(board_row.locator("td.p50 .interval")).to_have_text(
        f"[{statistics.ms(latency['p50_low_ms'])}–{statistics.ms(latency['p50_high_ms'])}]"
    )
    expect(board_row).to_contain_text(top1_text)
