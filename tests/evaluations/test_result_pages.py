"""A result whose predictions come in pages before it (`POST …/result/predictions/`): the hub
stages each page, assembles them in order into the result's predictions file when the result
names their number, and refuses (naming `predictions.pages`) pages that are missing, out of
order or short, storing nothing; pages are the claimant's alone, and staged pages go once the
evaluation finishes, whichever way."""

from __future__ import annotations

from typing import Any

import pytest

from evaluations import outputs
from evaluations.models import Evaluation, Result
from hub import storage
from tests.evaluations.factories import (
    claim,
    error_paths,
    launch,
    launched_id,
    post_result,
    result_body,
    url,
)
from tests.helpers import error_of

pytestmark = pytest.mark.django_db

ROWS = 7


def _rows(first: int, count: int) -> dict[str, Any]:
    """Rows `first` to `first + count` of a known result: input i's label i % 2, its classes
    [i % 2, 1 - i % 2], its probabilities [0.5 + i / 100, 0.5 - i / 100]."""
    indices = range(first, first + count)
    return {
        "top_k": 2,
        "labels": [i % 2 for i in indices],
        "classes": [[i % 2, 1 - i % 2] for i in indices],
        "probabilities": [[0.5 + i / 100, 0.5 - i / 100] for i in indices],
    }


def _page(claim_id: str, page: int, first: int, count: int) -> dict[str, Any]:
    return {"claim": claim_id, "page": page, "first": first, "predictions": _rows(first, count)}


def _post_page(agent: Any, evaluation_id: str, body: dict[str, Any]) -> Any:
    return agent.post(url(evaluation_id, "result/predictions"), body, format="json")


def _paged_result(claim_id: str, pages: int) -> dict[str, Any]:
    body = result_body(claim_id, count=ROWS)
    body["predictions"] = {
        "top_k": 2,
        "labels": [],
        "classes": [],
        "probabilities": [],
        "pages": pages,
    }
    return body


def _claimed(client: Any, agent: Any, host: Any) -> tuple[str, str]:
    evaluation_id = launched_id(launch(client))
    return evaluation_id, claim(agent, evaluation_id, host).json()["claim"]


def _staged(evaluation_id: str) -> list[str]:
    folder = storage.resolve(f"results/{evaluation_id}/pages")
    return sorted(p.name for p in folder.rglob("*.parquet")) if folder.exists() else []


def test_pages_make_the_same_result_as_one_body(
    alice_evaluator_client: Any, agent: Any, hosts: Any, django_capture_on_commit_callbacks: Any
) -> None:
    whole_id, whole_claim = _claimed(alice_evaluator_client, agent, hosts["cpu-1"])
    body = result_body(whole_claim, count=ROWS)
    body["predictions"] = _rows(0, ROWS)
    assert post_result(agent, whole_id, body).status_code == 201

    paged_id, paged_claim = _claimed(alice_evaluator_client, agent, hosts["cpu-2"])
    # Posted out of order, and one page twice (a retry): the order is the pages' numbers.
    for page, first, count in ((1, 3, 3), (0, 0, 3), (2, 6, 1), (1, 3, 3)):
        staged = _post_page(agent, paged_id, _page(paged_claim, page, first, count))
        assert staged.status_code == 201, staged.content
        assert staged.json() == {"page": page, "first": first, "rows": count}
    assert _staged(paged_id) == ["00000.parquet", "00001.parquet", "00002.parquet"]
    with django_capture_on_commit_callbacks(execute=True):
        stored = post_result(agent, paged_id, _paged_result(paged_claim, 3))
    assert stored.status_code == 201, stored.content

    def rows(evaluation_id: str) -> list[dict[str, Any]]:
        answer = alice_evaluator_client.get(url(evaluation_id, "predictions") + "?page_size=50")
        return answer.json()["results"]

    assert rows(paged_id) == rows(whole_id)
    assert [row["index"] for row in rows(paged_id)] == list(range(ROWS))
    assert rows(paged_id)[5]["probabilities"] == [0.55, 0.45]
    result = Result.objects.get(evaluation_id=paged_id)
    assert result.count == ROWS and result.top_k == 2
    # Assembled: the staged pages are gone; a page posted again after the result is a no-op.
    assert _staged(paged_id) == []
    again = _post_page(agent, paged_id, _page(paged_claim, 0, 0, 3))
    assert again.status_code == 201 and _staged(paged_id) == []


def test_pages_that_do_not_make_the_rows_are_refused_naming_them(
    alice_evaluator_client: Any, agent: Any, hosts: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation_id, claim_id = _claimed(alice_evaluator_client, agent, hosts["cpu-1"])
    assert _post_page(agent, evaluation_id, _page(claim_id, 0, 0, 3)).status_code == 201

    def refused(pages: int, words: str) -> None:
        response = post_result(agent, evaluation_id, _paged_result(claim_id, pages))
        assert response.status_code == 400, response.content
        error = error_of(response)
        assert error["path"] == "predictions.pages" and words in error["message"]
        assert Evaluation.objects.get(pk=evaluation_id).status == "running"
        assert not Result.objects.filter(evaluation_id=evaluation_id).exists()
        assert not storage.resolve(f"results/{evaluation_id}/predictions.parquet").exists()

    refused(2, "page 1 of 2 was not posted")
    # A page that does not start where the one before it ends.
    assert _post_page(agent, evaluation_id, _page(claim_id, 1, 4, 3)).status_code == 201
    refused(2, "page 1 starts at input 4; the pages before it end at input 3")
    # Every row there, but fewer than the accuracy counts.
    assert _post_page(agent, evaluation_id, _page(claim_id, 1, 3, 3)).status_code == 201
    refused(2, "the 2 pages hold 6 rows; accuracy counts 7 inputs")
    # A page with other columns than the first's.
    other = _page(claim_id, 2, 6, 1)
    other["predictions"]["texts"] = ["a line"]
    assert _post_page(agent, evaluation_id, other).status_code == 201
    refused(3, "page 2 has the columns")

    # Rows beside pages, and pages out of range, are refused by the body's checks.
    both = _paged_result(claim_id, 3)
    both["predictions"]["labels"] = [0]
    response = post_result(agent, evaluation_id, both)
    assert response.status_code == 400 and error_paths(response) == ["predictions.labels"]
    for pages in (0, 10_001):
        response = post_result(agent, evaluation_id, _paged_result(claim_id, pages))
        assert response.status_code == 400 and error_paths(response) == ["predictions.pages"]

    # Then the right page: stored, and the staged pages go.
    assert _post_page(agent, evaluation_id, _page(claim_id, 2, 6, 1)).status_code == 201
    with django_capture_on_commit_callbacks(execute=True):
        stored = post_result(agent, evaluation_id, _paged_result(claim_id, 3))
    assert stored.status_code == 201, stored.content
    assert _staged(evaluation_id) == []


def test_a_page_is_the_claimants_alone_and_malformed_pages_are_refused(
    alice_evaluator_client: Any, agent: Any, hosts: Any, make_client: Any, django_user_model: Any
) -> None:
    evaluation_id, claim_id = _claimed(alice_evaluator_client, agent, hosts["cpu-1"])
    stranger = make_client(django_user_model.objects.create_user("mallory"), scopes=["agent"])
    response = _post_page(stranger, evaluation_id, _page(claim_id, 0, 0, 3))
    assert response.status_code == 403
    response = _post_page(agent, evaluation_id, _page("f" * 32, 0, 0, 3))
    assert response.status_code == 409
    # A user's own token is no agent's.
    response = _post_page(alice_evaluator_client, evaluation_id, _page(claim_id, 0, 0, 3))
    assert response.status_code == 403
    for change, path in (
        ({"page": -1}, "page"),
        ({"page": 10_000}, "page"),
        ({"first": "0"}, "first"),
        ({"predictions": {**_rows(0, 1), "pages": 2}}, "predictions.labels"),
        ({"predictions": {**_rows(0, 0), "pages": 2}}, "predictions"),
        ({"predictions": _rows(0, 0)}, "predictions"),
        ({"predictions": {**_rows(0, 2), "labels": [0]}}, "predictions.classes"),
        (
            {"predictions": {**_rows(0, 2), "probabilities": [[0.5], [0.5, 0.5]]}},
            "predictions.probabilities.0",
        ),
        ({"extra": 1}, "extra"),
    ):
        response = _post_page(agent, evaluation_id, {**_page(claim_id, 0, 0, 3), **change})
        assert response.status_code == 400, (change, response.content)
        assert error_paths(response) == [path], change
    assert _staged(evaluation_id) == []


def test_staged_pages_go_when_the_evaluation_fails(
    alice_evaluator_client: Any, agent: Any, hosts: Any, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation_id, claim_id = _claimed(alice_evaluator_client, agent, hosts["cpu-1"])
    assert _post_page(agent, evaluation_id, _page(claim_id, 0, 0, 3)).status_code == 201
    assert _staged(evaluation_id) == ["00000.parquet"]
    with django_capture_on_commit_callbacks(execute=True):
        failed = agent.post(
            url(evaluation_id, "status"),
            {"claim": claim_id, "status": "failed", "reason": "out of memory"},
            format="json",
        )
    assert failed.status_code == 200, failed.content
    assert _staged(evaluation_id) == []


def test_unreadable_pages_wide_rows_and_too_many_bytes_are_refused(
    alice_evaluator_client: Any, agent: Any, hosts: Any, settings: Any
) -> None:
    evaluation_id, claim_id = _claimed(alice_evaluator_client, agent, hosts["cpu-1"])
    for page, first, count in ((0, 0, 3), (1, 3, 4)):
        staged = _post_page(agent, evaluation_id, _page(claim_id, page, first, count))
        assert staged.status_code == 201, staged.content

    def refused(body: dict[str, Any], words: str) -> None:
        response = post_result(agent, evaluation_id, body)
        assert response.status_code == 400, response.content
        error = error_of(response)
        assert error["path"] == "predictions.pages" and words in error["message"], error
        assert not Result.objects.filter(evaluation_id=evaluation_id).exists()

    # Rows of two classes, and a result that says each holds one.
    narrow = _paged_result(claim_id, 2)
    narrow["predictions"]["top_k"] = 1
    refused(narrow, "page 0 has a row of 2 classes; the result's top_k is 1")
    # A page file the store cannot read (a disk fault): named, to be posted again.
    page = storage.resolve(f"results/{evaluation_id}/pages/{claim_id}/00001.parquet")
    page.write_bytes(b"PAR1 not parquet")
    refused(_paged_result(claim_id, 2), "page 1 cannot be read: post it again")
    # Past the bytes a result's pages may take: 413, naming the setting; nothing written.
    first = storage.resolve(f"results/{evaluation_id}/pages/{claim_id}/00000.parquet")
    limit = first.stat().st_size + 100
    settings.RESULT_PAGES_MAX_BYTES = limit
    response = _post_page(agent, evaluation_id, _page(claim_id, 1, 3, 4))
    assert response.status_code == 413, response.content
    assert f"more than RESULT_PAGES_MAX_BYTES ({limit})" in error_of(response)["message"]
    assert page.read_bytes() == b"PAR1 not parquet"
    settings.RESULT_PAGES_MAX_BYTES = 8 * 1024**3
    assert _post_page(agent, evaluation_id, _page(claim_id, 1, 3, 4)).status_code == 201
    stored = post_result(agent, evaluation_id, _paged_result(claim_id, 2))
    assert stored.status_code == 201, stored.content


def test_predictions_too_many_for_one_answer_are_read_a_page_at_a_time(
    alice_evaluator_client: Any, agent: Any, hosts: Any, monkeypatch: Any
) -> None:
    evaluation_id, claim_id = _claimed(alice_evaluator_client, agent, hosts["cpu-1"])
    body = result_body(claim_id, count=ROWS)
    body["predictions"] = _rows(0, ROWS)
    assert post_result(agent, evaluation_id, body).status_code == 201
    whole = alice_evaluator_client.get(url(evaluation_id) + "?predictions=1")
    assert whole.status_code == 200 and len(whole.json()["result"]["predictions"]["labels"]) == 7
    monkeypatch.setattr(outputs, "INLINE_ROWS", 5)
    refused = alice_evaluator_client.get(url(evaluation_id) + "?predictions=1")
    assert refused.status_code == 400
    error = error_of(refused)
    assert (
        error["path"] == "predictions"
        and "holds 7 inputs' predictions, more than" in (error["message"])
    )
    assert f"/api/v1/evaluations/{evaluation_id}/predictions/" in error["message"]
    assert alice_evaluator_client.get(url(evaluation_id)).status_code == 200
