"""`mlms study --plot`: the sweep's standalone HTML page, drawn by a real browser offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from predictors.cli import main
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.browser, pytest.mark.frameworks, pytest.mark.database_free]


def test_a_study_plots_each_group_with_its_runs_and_interval(
    browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = zoo_store(("digits-cnn",))
    plot = tmp_path / "study.html"
    argv = ["study", "digits-cnn", "--framework", "onnxruntime", "--dataset", "digits"]
    options = ["--runs", "2", "--threads", "1,2", "--limit", "32", "--no-progress"]
    assert main([*argv, *options, "--store", str(store), "--plot", str(plot)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"plot: {plot}")

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(plot.as_uri())
    tab.wait_for_selector(".js-plotly-plot .main-svg")
    # Three panels (top-1, p50, throughput), each with the groups' bars and the runs' points.
    titles = tab.locator(".gtitle, .annotation-text").all_text_contents()
    assert any("p50 latency (ms), batch size 1" in title for title in titles), titles
    assert tab.locator(".barlayer .trace").count() == 3
    assert tab.locator(".scatterlayer .trace").count() == 3
    assert tab.locator(".xtick text").first.text_content() == "threads 1, seed 0"
    context.close()
    assert not errors

    missing = tmp_path / "nowhere" / "study.html"
    assert main([*argv, *options, "--store", str(store), "--plot", str(missing)]) == 1
    assert "--plot: no folder" in capsys.readouterr().err
