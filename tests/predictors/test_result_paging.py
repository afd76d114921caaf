"""A result's predictions cut into pages by the agent (`predictors.agent.results.paged`): whole
rows in order, each page about the size asked for, every column cut alike, and the result then
naming their number; a result that fits is sent as it is."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from predictors.agent.results import paged
from predictors.protocol import ABSENT, Headline, Predictions, ResultUpload
from predictors.protocol.report import Report

pytestmark = pytest.mark.database_free

ROWS = 1000


def _upload(texts: bool = False) -> ResultUpload:
    predictions = Predictions(
        top_k=2,
        labels=[i % 3 for i in range(ROWS)],
        classes=[[i % 3, (i + 1) % 3] for i in range(ROWS)],
        probabilities=[[0.75, 0.25] for _ in range(ROWS)],
        boxes=[[[i, 0.0, 1.0, 1.0], [0.0, i, 1.0, 1.0]] for i in range(ROWS)],
        texts=[f"line {i}" for i in range(ROWS)] if texts else ABSENT,
    )
    return ResultUpload(
        accuracy=Headline(top1=0.5, top5=0.9, count=ROWS),
        latency={},
        throughput={},
        predictions=predictions,
        content_hash="a" * 64,
        stack={},
        details=Report(),
    )


def _size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def test_a_result_that_fits_is_sent_as_it_is() -> None:
    upload = _upload()
    assert paged(upload, 10 * _size(upload.predictions.to_dict())) == (upload, [])


@pytest.mark.parametrize("texts", [False, True])
def test_predictions_are_cut_into_pages_of_whole_rows_in_order(texts: bool) -> None:
    upload = _upload(texts)
    whole = _size(upload.predictions.to_dict())
    page_bytes = whole // 7
    named, pages = paged(upload, page_bytes)
    # The result names the pages in its rows' stead; the rest of it is unchanged.
    assert named.predictions == Predictions(
        top_k=2, labels=[], classes=[], probabilities=[], pages=len(pages)
    )
    assert replace(named, predictions=upload.predictions) == upload
    assert 7 <= len(pages) <= 8
    assert [page.page for page in pages] == list(range(len(pages)))
    firsts = [page.first for page in pages]
    assert firsts[0] == 0 and firsts == sorted(firsts)
    for page in pages:
        assert _size(page.predictions.to_dict()) <= page_bytes * 1.01
        assert page.predictions.top_k == 2 and page.predictions.pages is ABSENT
    # Every column cut alike: the pages joined are the predictions.
    for column in ("labels", "classes", "probabilities", "boxes") + (("texts",) if texts else ()):
        joined = [row for page in pages for row in getattr(page.predictions, column)]
        assert joined == getattr(upload.predictions, column), column
    assert all(
        page.first + page.predictions.count == after.first
        for page, after in zip(pages, pages[1:], strict=False)
    )
    if not texts:
        assert all(page.predictions.texts is ABSENT for page in pages)


def test_a_row_larger_than_a_page_is_a_page_of_its_own() -> None:
    upload = _upload()
    named, pages = paged(upload, 1)
    assert len(pages) == ROWS and named.predictions.pages == ROWS
    assert [page.first for page in pages] == list(range(ROWS))


def test_pages_are_cut_by_each_rows_size_where_rows_differ() -> None:
    """A few long lines, then many short ones: no page passes the size asked for (each row is
    smaller than a page), where cutting by the average row would put the long ones together."""
    texts = ["x" * 10_000] * 50 + ["y"] * 20_000
    upload = _upload()
    rows = len(texts)
    predictions = Predictions(
        top_k=1,
        labels=[0] * rows,
        classes=[[0]] * rows,
        probabilities=[[]] * rows,
        texts=texts,
    )
    upload = replace(upload, predictions=predictions)
    page_bytes = 64 * 1024
    named, pages = paged(upload, page_bytes)
    assert named.predictions.pages == len(pages) > 1
    assert max(_size(page.predictions.to_dict()) for page in pages) <= page_bytes * 1.01
    assert [t for page in pages for t in page.predictions.texts] == texts


def test_pages_hold_enough_rows_to_stay_within_the_hubs_page_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from predictors.agent import results

    monkeypatch.setattr(results, "MAX_PAGES", 10)
    named, pages = paged(_upload(), 1)
    assert len(pages) == 10 and named.predictions.pages == 10
    assert [page.predictions.count for page in pages] == [100] * 10


def test_the_agent_keeps_its_pages_under_half_the_hubs_limit() -> None:
    from predictors.agent.daemon import Agent
    from predictors.agent.hub_client import HubClient

    agent = Agent(HubClient("http://hub.invalid", "t"), "box", page_bytes=16 * 1024 * 1024)
    agent.configure({"heartbeat_seconds": 5, "report_seconds": 1, "result_max_bytes": 2**20})
    assert agent.page_bytes == 2**19
    agent.configure({"result_max_bytes": 2**30})  # a larger limit leaves the pages as asked
    assert agent.page_bytes == 2**19
