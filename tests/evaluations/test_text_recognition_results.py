"""A text recognizer's results through the hub: its model (a ctc output and its charset file)
and dataset (a text column, no labels) uploaded, a split of empty lines refused, and its result
(the character and word error rates, lower is better, in percent) stored, worded and shown on
its board."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rest_framework.test import APIClient

from tests.evaluations.factories import claim, launch, launched_id, post_result, result_body, url
from tests.helpers import error_of
from tests.hub.factories import dataset_manifest, model_manifest, to_yaml, upload

pytestmark = pytest.mark.django_db


def _png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((4, 8, 3), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _split(texts: list[str]) -> bytes:
    buffer = io.BytesIO()
    table = pa.table({"image": pa.array([_png() for _ in texts]), "text": pa.array(texts)})
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _upload(owner: APIClient) -> None:
    model = model_manifest("reader", visibility="public")
    model["task"] = "text_recognition"
    charset = "repo://models/reader/1.0.0/charset.txt"
    model["outputs"] = [{"name": "scores", "type": "ctc", "parameters": {"charset_path": charset}}]
    stored = upload(owner, to_yaml(model), {"charset.txt": b"a\nb\n \n"})
    assert stored.status_code == 201, stored.content
    dataset = dataset_manifest("lines", visibility="public", split_file="validation.parquet")
    dataset["task"] = "text_recognition"
    del dataset["labels"]
    refused = upload(owner, to_yaml(dataset), {"validation.parquet": _split(["ab", " "])})
    assert refused.status_code == 400
    error = error_of(refused)
    assert error["path"] == "splits.validation.path"
    assert "row 1's text ' ' is empty: a text line has at least one character" in error["message"]
    stored = upload(owner, to_yaml(dataset), {"validation.parquet": _split(["ab", "a b"])})
    assert stored.status_code == 201, stored.content


def reading(
    claim_id: str,
    texts: list[str],
    confidences: list[float],
    cer: float = 0.05,
    wer: Any = 0.25,
) -> dict[str, Any]:
    """A text recognizer's result body: each line's decoded text and its confidence."""
    body = result_body(claim_id)
    body["accuracy"] = {"top1": cer, "top5": wer, "count": len(texts)}
    body["predictions"] = {
        "top_k": 1,
        "labels": [-1] * len(texts),
        "classes": [[0] for _ in texts],
        "probabilities": [[confidence] for confidence in confidences],
        "texts": texts,
    }
    body["details"] = {"model": {"task": "text_recognition"}}
    return body


def _finish(client: APIClient, agent: APIClient, host: Any, cer: float, wer: Any) -> Any:
    evaluation_id = launched_id(launch(client, model="reader", dataset="lines", batch_sizes=[1]))
    claimed = claim(agent, evaluation_id, host).json()
    body = reading(claimed["claim"], ["Beautiful is", " better than ugly."], [0.97, 0.88], cer, wer)
    return evaluation_id, post_result(agent, evaluation_id, body)


def test_a_text_recognition_result_is_its_error_rates_in_percent(bob_client, agent, hosts) -> None:
    _upload(bob_client)
    evaluation_id, refused = _finish(bob_client, agent, hosts["cpu-1"], 0.0523, None)
    assert refused.status_code == 400  # a text recognition gives its WER beside its CER
    assert error_of(refused)["path"] == "accuracy.top5"

    worse, stored = _finish(bob_client, agent, hosts["cpu-2"], 1.25, 1.5)
    assert stored.status_code == 201, stored.content  # insertions take a rate past 100 %
    better, stored = _finish(bob_client, agent, hosts["cpu-1"], 0.0523, 0.25)
    assert stored.status_code == 201, stored.content
    detail = bob_client.get(url(better)).json()
    assert detail["accuracy"]["top1"] == 0.0523
    assert detail["reason"] == "CER 5.23%, WER 25.00% on 2 lines"
    # Each line's decoded text, as decoded (its spaces kept), with its confidence.
    rows = bob_client.get(url(better, "predictions")).json()["results"]
    assert [(row["text"], row["probabilities"]) for row in rows] == [
        ("Beautiful is", [0.97]),
        (" better than ugly.", [0.88]),
    ]
    for published in (worse, better):
        assert bob_client.post(url(published, "publish")).status_code == 200

    board = APIClient().get("/api/v1/leaderboards/text_recognition/lines/").json()["results"]
    assert [row["evaluation"] for row in board] == [better, worse]  # the lowest CER first
    page = APIClient().get("/leaderboards/text_recognition/lines/")
    html = page.content.decode()
    assert page.status_code == 200
    assert ">CER" in html and ">WER" in html and "5.23 %" in html
    plot = page.context["plot"]
    assert plot["metric"] == "CER" and plot["unit"] == "%" and plot["lower_is_better"]
    assert plot["front"]["y"] == [5.23]
    # The pages of the model (its charset file among its files) and of the dataset (no labels).
    model_page = APIClient().get("/models/reader/")
    assert model_page.status_code == 200
    text = model_page.content.decode()
    assert "Text recognition" in text and "outputs.0.parameters.charset_path" in text
    assert APIClient().get("/datasets/lines/").status_code == 200
    evaluation_page = APIClient().get(f"/evaluations/{better}/")
    assert evaluation_page.status_code == 200


def test_text_recognizers_are_compared_by_their_decoded_texts(bob_client, agent, hosts) -> None:
    """Two readings of the same lines agree where their texts are the same: the comparison
    counts the lines read otherwise and lists them with each reading's text."""
    _upload(bob_client)
    first, stored = _finish(bob_client, agent, hosts["cpu-1"], 0.05, 0.25)
    assert stored.status_code == 201, stored.content
    second = launched_id(launch(bob_client, model="reader", dataset="lines", batch_sizes=[1]))
    claimed = claim(agent, second, hosts["cpu-2"]).json()
    # The first line read as the baseline's but for its spaces, which the rates ignore.
    texts = [" Beautiful  is", " better then ugly."]
    body = reading(claimed["claim"], texts, [0.97, 0.5], 0.1, 0.5)
    assert post_result(agent, second, body).status_code == 201

    compared = bob_client.get(f"/api/v1/compare/?evaluations={first},{second}").json()
    accuracy = compared["accuracy"]
    assert accuracy["agreement"].startswith("lines whose decoded text equals the baseline's")
    rows = accuracy["rows"]
    assert [row["agreement"] for row in rows] == [1.0, 0.5]
    assert [row["disagreeing_inputs"] for row in rows] == [0, 1]
    assert rows[1]["max_abs_difference"] == pytest.approx(0.38, abs=1e-5)
    [line] = accuracy["disagreements"]
    assert line["index"] == 1 and line["label"] == -1
    assert [top[0]["name"] for top in line["top"]] == [" better than ugly.", " better then ugly."]
    assert [top[0]["probability"] for top in line["top"]] == [0.88, 0.5]
    for published in (first, second):  # the page, for anyone, once they are public
        assert bob_client.post(url(published, "publish")).status_code == 200
    page = APIClient().get(f"/compare/?evaluations={first},{second}")
    assert page.status_code == 200
    html = page.content.decode()
    assert "better then ugly." in html and "lines whose decoded text equals the baseline" in html


def _tokenizer_file() -> bytes:
    """A word-level tokenizers file: [PAD] 0, [UNK] 1, <s> 2, </s> 3, then five words."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = ["Beautiful", "is", "better", "than", "ugly."]
    vocabulary = {"[PAD]": 0, "[UNK]": 1, "<s>": 2, "</s>": 3} | {
        word: index + 4 for index, word in enumerate(words)
    }
    tokenizer = Tokenizer(WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.add_special_tokens(["[PAD]", "[UNK]", "<s>", "</s>"])
    return tokenizer.to_str().encode("utf-8")


@pytest.mark.frameworks
def test_a_reader_that_emits_token_ids_is_checked_at_upload_and_has_no_confidences(
    bob_client, agent, hosts
) -> None:
    """A model whose output is the token ids it emits: its tokenizer file is read at upload
    (a broken one, or an end id beyond it, refused naming the parameter); its lines carry no
    confidence, and a comparison with a ctc reader compares their texts and says so."""
    _upload(bob_client)
    model = model_manifest("ids-reader", visibility="public")
    model["task"] = "text_recognition"
    tokenizer = "repo://models/ids-reader/1.0.0/tokenizer.json"
    model["outputs"] = [
        {"name": "ids", "type": "token_ids", "parameters": {"tokenizer_path": tokenizer}}
    ]
    refused = upload(bob_client, to_yaml(model), {"tokenizer.json": b'{"model": {}}'})
    assert refused.status_code == 400, refused.content
    error = error_of(refused)
    assert error["path"] == "outputs.0.parameters.tokenizer_path"
    assert "not a tokenizers JSON file" in error["message"]
    model["outputs"][0]["parameters"]["end_id"] = 9
    refused = upload(bob_client, to_yaml(model), {"tokenizer.json": _tokenizer_file()})
    assert refused.status_code == 400, refused.content
    error = error_of(refused)
    assert error["path"] == "outputs.0.parameters.end_id"
    assert "end_id is 9, beyond the tokenizer's ids (0 to 8)" in error["message"]
    model["outputs"][0]["parameters"]["end_id"] = 3
    stored = upload(bob_client, to_yaml(model), {"tokenizer.json": _tokenizer_file()})
    assert stored.status_code == 201, stored.content

    first, posted = _finish(bob_client, agent, hosts["cpu-1"], 0.05, 0.25)
    assert posted.status_code == 201, posted.content
    second = launched_id(launch(bob_client, model="ids-reader", dataset="lines", batch_sizes=[1]))
    claimed = claim(agent, second, hosts["cpu-2"]).json()
    body = reading(claimed["claim"], ["Beautiful is", "better than"], [], 0.3, 0.5)
    body["predictions"]["probabilities"] = [[], []]
    assert post_result(agent, second, body).status_code == 201

    rows = bob_client.get(url(second, "predictions")).json()["results"]
    assert [(row["text"], row["probabilities"]) for row in rows] == [
        ("Beautiful is", []),
        ("better than", []),
    ]
    compared = bob_client.get(f"/api/v1/compare/?evaluations={first},{second}").json()
    accuracy = compared["accuracy"]
    assert [row["agreement"] for row in accuracy["rows"]] == [1.0, 0.5]
    # No confidence to compare: none, not 0.88 apart.
    assert accuracy["rows"][1]["max_abs_difference"] is None
    assert "none where a model emits token ids" in accuracy["distributions"]
    [line] = accuracy["disagreements"]
    assert [(top[0]["name"], top[0]["probability"]) for top in line["top"]] == [
        (" better than ugly.", 0.88),
        ("better than", None),
    ]
    for published in (first, second):
        assert bob_client.post(url(published, "publish")).status_code == 200
    page = APIClient().get(f"/compare/?evaluations={first},{second}")
    assert page.status_code == 200
    html = page.content.decode()
    assert "better than</div>" in html and "None" not in html
