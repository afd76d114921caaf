"""An embedding model's result on its evaluation page: the built-in speaker encoder
(feature_extraction) evaluated on the speaker clips, its result (retrieval and verification)
posted through the agent's API as the loop reports it, and shown as the task's metrics, the
page fitting a phone's width and a desktop's."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from hub.models import Host
from tests.evaluations.factories import claim, launch, launched_id, post_result, result_body
from tests.hub.factories import register_host

pytestmark = pytest.mark.browser

WIDTHS = (390, 1280)
CLIPS = 60  # the validation split of speaker-clips
IMAGE = "mlmodelscope/pytorch:2.13-cpu"  # the manifest's image for amd64/cpu


@pytest.fixture
def finish_embedding(builtin_manifests, make_client, alice, agent, broker):  # type: ignore[no-untyped-def]
    """`finish_embedding(metrics)`: Alice's evaluation of the built-in `speaker-encoder`
    (pytorch) on `speaker-clips` at batch size 1, claimed by a pytorch host and finished with
    the embedding scenario's accuracy `metrics` (its headline `top1`, `top5` and `count`
    beside them, as the loop reports them); its id."""
    # The encoder's module is the manifest's own code: it runs in its container, on a host
    # whose agent opts in (`mlms agent --docker --allow-custom-code`).
    image = {
        "digest": "sha256:" + "a" * 64,
        "tags": [IMAGE],
        "framework": "pytorch",
        "framework_version": "2.4.0",
        "device": "cpu",
        "labels": {"org.mlmodelscope.framework": "pytorch"},
    }
    registered = register_host(
        agent,
        "cpu-1",
        [("pytorch", "2.4.0")],
        hardware={"architecture": "amd64", "memory_bytes": 16 * 2**30, "gpus": []},
        software={
            "docker": {
                "limits": {"cpus": None, "memory_bytes": None},
                "images": [image],
                "custom_code": True,
            }
        },
        images=[image],
        queues=["host.cpu-1", "pytorch.cpu"],
        pool=True,
    )
    assert registered.status_code == 201, registered.content
    host = Host.objects.get(name="cpu-1")

    def finish(metrics: dict[str, Any]) -> str:
        launched = launch(
            make_client(alice),
            model="speaker-encoder",
            framework="pytorch",
            dataset="speaker-clips",
            batch_sizes=[1],
        )
        evaluation_id = launched_id(launched)
        broker.drain("pytorch.cpu", "host.cpu-1")
        claimed = claim(agent, evaluation_id, host)
        assert claimed.status_code == 200, claimed.content
        accuracy = {
            "top1": metrics["recall_at_1"],
            "top5": metrics["recall_at_5"],
            "count": CLIPS,
            **metrics,
        }
        body = result_body(claimed.json()["claim"], (1,), count=CLIPS)
        body["accuracy"] = {key: accuracy[key] for key in ("top1", "top5", "count")}
        # Each clip's identity, and its nearest other clip's identity (the same for the share
        # that recall@1 counts) with their cosine similarity.
        labels = [clip * metrics["identities"] // CLIPS for clip in range(CLIPS)]
        hits = round(metrics["recall_at_1"] * CLIPS)
        body["predictions"] = {
            "top_k": 1,
            "labels": labels,
            "classes": [
                [label if clip < hits else (label + 1) % metrics["identities"]]
                for clip, label in enumerate(labels)
            ],
            "probabilities": [[0.9 - clip / 200] for clip in range(CLIPS)],
        }
        body["details"] = {
            "device": "cpu",
            "model": {"task": "feature_extraction"},
            "accuracy": accuracy,
        }
        stored = post_result(agent, evaluation_id, body)
        assert stored.status_code == 201, stored.content
        return evaluation_id

    return finish


def _metrics(page: Any) -> list[list[str]]:
    """Every metric box of the result: [label, value], in the page's order."""
    boxes = page.locator("#accuracy .metric-box")
    expect(boxes.first).to_be_visible()
    return boxes.evaluate_all(  # type: ignore[no-any-return]
        """boxes => boxes.map(b => [b.querySelector('.label').textContent,
                                     b.querySelector('.value').textContent])"""
    )


def _fits(page: Any) -> None:
    """At a phone's width and a desktop's, nothing runs past the page's right edge."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        scroll_width, inner_width = page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert inner_width == width
        assert scroll_width <= inner_width, (width, scroll_width)


def test_an_embedding_result_shows_retrieval_and_verification(  # type: ignore[no-untyped-def]
    page, sign_in, alice, finish_embedding, shoot
) -> None:
    evaluation_id = finish_embedding(
        {
            "recall_at_1": 0.7,
            "recall_at_5": 0.9333,
            "eer": 0.1234,
            "eer_threshold": 0.7021,
            "queries": 60,
            "identities": 10,
            "pairs": 1770,
            "similarity": "cosine",
            "library": "scikit-learn 1.5.2 (roc_curve)",
        }
    )

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    expect(page.locator("#status")).to_have_text("succeeded")
    assert _metrics(page) == [
        ["Recall@1", "70.00 %"],
        ["Recall@5", "93.33 %"],
        ["EER", "12.34 %"],
        ["Identities", "10"],
        ["Pairs", "1770"],
        ["Inputs", "60"],
    ]
    expect(page.locator("#accuracy")).not_to_contain_text("Top-1")
    expect(page.locator("#status-reason")).to_have_text(
        "recall@1 70.00%, recall@5 93.33%, EER 12.34% on 60 inputs"
    )
    _fits(page)
    shoot(page, "evaluation-embedding-1280px")
    page.set_viewport_size({"width": 390, "height": 844})
    shoot(page, "evaluation-embedding-390px")


def test_an_embedding_result_without_both_kinds_of_pair_has_no_eer(  # type: ignore[no-untyped-def]
    page, sign_in, alice, finish_embedding
) -> None:
    """Clips of one speaker only: every pair is of one identity, so no equal error rate."""
    evaluation_id = finish_embedding(
        {
            "recall_at_1": 1.0,
            "recall_at_5": 1.0,
            "eer": None,
            "eer_threshold": None,
            "queries": 60,
            "identities": 1,
            "pairs": 1770,
            "similarity": "cosine",
            "library": "scikit-learn 1.5.2 (roc_curve)",
        }
    )

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    assert _metrics(page) == [
        ["Recall@1", "100.00 %"],
        ["Recall@5", "100.00 %"],
        ["EER", "— (no pair of each kind)"],
        ["Identities", "1"],
        ["Pairs", "1770"],
        ["Inputs", "60"],
    ]
    expect(page.locator("#status-reason")).to_have_text(
        "recall@1 100.00%, recall@5 100.00% on 60 inputs"
    )
    _fits(page)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/models/speaker-encoder/", "librosa"),
        ("/models/basic-pitch/", "start_in_clip"),
        ("/datasets/speaker-clips/", "en-gb-scotland+f5"),
        ("/datasets/piano-chords/", "C8"),
        ("/models/text-detector/", "What the postprocess code returns"),
        ("/datasets/text-pages/", "validation"),
        ("/models/review-sentiment/", "tokenizers JSON file that turns the text into ids"),
        ("/datasets/short-reviews/", "validation"),
    ],
)
def test_the_pages_of_the_clip_models_and_datasets_fit(  # type: ignore[no-untyped-def]
    page, builtin_manifests, path: str, words: str
) -> None:
    """Their audio inputs' nested parameters (a spectrogram, windows) and long label lists are
    shown, and a detector's decoded outputs beside its own and its code, within a phone's width
    and a desktop's (a dataset's splits table, its long paths and checksums, scrolls in its
    frame)."""
    page.goto(path)
    expect(page.locator("main")).to_contain_text(words)
    _fits(page)
