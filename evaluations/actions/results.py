"""The claimant's result: checked against its request and task, its per-input outputs written
to the artifact store, stored as a `Result` with a row per batch size, and the evaluation
finished as succeeded."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np
from django.db import transaction

from evaluations import leaderboards, outputs
from evaluations.actions.claims import check_claim, check_claim_holder, check_still_allowed
from evaluations.actions.transitions import get_locked, record_status
from evaluations.error_codes import EvaluationErrorCode
from evaluations.models import BatchResult, Evaluation, LatencySamples, Result
from hub.errors import Invalid, TooLarge
from hub.models import ApiToken
from predictors import statistics
from predictors.protocol import ABSENT, SUCCEEDED, Headline, PredictionsPage, ResultUpload
from predictors.tasks import BOTH_METRICS, metric_names, metric_problem


def record_result(evaluation_id: Any, token: ApiToken, claim: str, upload: ResultUpload) -> Result:
    """Store the claimant's result and finish the evaluation as succeeded. Posting the same
    result again (a retry) answers the stored one."""
    check_still_allowed(evaluation_id, token, claim)
    with transaction.atomic():
        evaluation = get_locked(evaluation_id)
        if evaluation.status == SUCCEEDED and evaluation.claim == claim:
            return evaluation.result
        check_claim(evaluation, token, claim)
        _check_accuracy(evaluation, upload.accuracy)
        batch_sizes = {str(size) for size in evaluation.request["batch_sizes"]}
        if set(upload.latency) != batch_sizes:
            raise Invalid(
                f"has batch sizes {sorted(upload.latency)}, the request asked for "
                f"{sorted(batch_sizes)}",
                path="latency",
                code=EvaluationErrorCode.RESULT_MISMATCH,
            )
        # The per-input outputs go to the artifact store, and are removed again if the result
        # is not stored after all.
        layers = _layer_outputs(evaluation, upload)
        predictions_path = _predictions(evaluation, claim, upload)
        try:
            if layers is not None:
                outputs.write_layers(evaluation.pk, layers)
            result = _store_result(evaluation, upload, predictions_path)
            evaluation.progress_done = evaluation.progress_total
            reason = _accuracy_words(result, evaluation.task)
            if evaluation.cancel_requested:
                # The cancel raced the end of the run and lost: say so rather than drop it.
                reason += "; a cancel was requested, but the run finished before the agent saw it"
            record_status(evaluation, SUCCEEDED, reason, host=evaluation.host)
        except BaseException:
            outputs.remove(evaluation.pk)
            raise
    return result


def record_predictions_page(
    evaluation_id: Any, token: ApiToken, claim: str, page: PredictionsPage
) -> dict[str, int]:
    """Stage a page of the claimant's predictions, before its result (`outputs.write_page`);
    posting it again replaces it, and once the result is stored a page posted again (a retry)
    changes nothing. What was staged: {"page", "first", "rows"}."""
    check_still_allowed(evaluation_id, token, claim)
    staged = {"page": page.page, "first": page.first, "rows": page.predictions.count}
    with transaction.atomic():
        evaluation = get_locked(evaluation_id)
        if evaluation.status == SUCCEEDED and evaluation.claim == claim:
            check_claim_holder(evaluation, token)
            return staged
        check_claim(evaluation, token, claim)
        try:
            outputs.write_page(
                evaluation.pk, claim, page.page, page.first, page.predictions.to_dict()
            )
        except outputs.PagesError as error:
            raise TooLarge(str(error)) from None
    return staged


def _predictions(evaluation: Evaluation, claim: str, upload: ResultUpload) -> str:
    """The result's predictions written to the store: from the upload's rows, or assembled
    from the pages the claimant posted before it (Invalid naming `predictions.pages` where
    they do not make the accuracy's count of rows, in order)."""
    predictions = upload.predictions
    if predictions.pages is ABSENT:
        return outputs.write(evaluation.pk, predictions.to_dict())
    try:
        path, rows = outputs.assemble(evaluation.pk, claim, predictions.pages, predictions.top_k)
    except outputs.PagesError as error:
        raise Invalid(
            str(error), path="predictions.pages", code=EvaluationErrorCode.RESULT_MISMATCH
        ) from None
    if rows != upload.accuracy.count:
        outputs.remove(evaluation.pk)
        raise Invalid(
            f"the {predictions.pages} pages hold {rows} rows; accuracy counts "
            f"{upload.accuracy.count} inputs",
            path="predictions.pages",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        )
    return path


def _layer_outputs(evaluation: Evaluation, upload: ResultUpload) -> bytes | None:
    """The capture file of a job that named `capture_inputs`, read and checked (Invalid naming
    `layer_outputs`); None for any other job, which must send none."""
    asked = list(evaluation.request.get("capture_inputs") or [])
    sent = upload.layer_outputs
    if not asked:
        if sent is not ABSENT:
            raise Invalid(
                "must be left out: the job captured no layer outputs (capture_inputs is empty)",
                path="layer_outputs",
                code=EvaluationErrorCode.RESULT_MISMATCH,
            )
        return None
    if sent is ABSENT:
        raise Invalid(
            f"is required: the job captured the layer outputs of inputs {asked}",
            path="layer_outputs",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        )
    try:
        data = base64.b64decode(sent, validate=True)
        outputs.read_capture(data, asked)
    except (binascii.Error, ValueError) as error:
        raise Invalid(
            f"is not a capture file: {error}",
            path="layer_outputs",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        ) from None
    return data


def _check_accuracy(evaluation: Evaluation, accuracy: Headline) -> None:
    """A result's accuracy must be what its request and task can give: none for a latency-only
    evaluation, a top-1 for any other, each in its task's range (`metric_problem`); Invalid
    naming the field."""
    timing = bool(evaluation.request.get("latency_only"))
    if timing and (accuracy.top1 is not None or accuracy.top5 is not None):
        raise Invalid(
            "must be null: the evaluation is latency-only (nothing is scored)",
            path="accuracy.top1",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        )
    if not timing and accuracy.top1 is None:
        raise Invalid(
            "is required: the evaluation is scored (only a latency-only one has no accuracy)",
            path="accuracy.top1",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        )
    if not timing and evaluation.task in BOTH_METRICS and accuracy.top5 is None:
        first, second = metric_names(evaluation.task)
        raise Invalid(
            f"is required: a {evaluation.task} result gives its {second} beside its {first}",
            path="accuracy.top5",
            code=EvaluationErrorCode.RESULT_MISMATCH,
        )
    for name, value in (("top1", accuracy.top1), ("top5", accuracy.top5)):
        problem = metric_problem(evaluation.task, name, value)
        if problem:
            raise Invalid(
                problem, path=f"accuracy.{name}", code=EvaluationErrorCode.RESULT_MISMATCH
            )


def _accuracy_words(result: Result, task: str) -> str:
    """The result's accuracy in a sentence, by its evaluation's task (its last status
    reason)."""
    details = result.details if isinstance(result.details, dict) else {}
    if result.top1 is None:
        at_1 = f", p50 {result.p50_ms_at_1:.3f} ms at batch size 1" if result.p50_ms_at_1 else ""
        return f"latency only (not scored): {result.count} inputs timed{at_1}"
    if task == "object_detection":
        return (
            f"mAP {result.top1:.4f} (COCO, IoU .50:.95), {result.top5:.4f} at IoU .50 on "
            f"{result.count} images"
        )
    if task == "semantic_segmentation":
        return f"mIoU {result.top1:.4f}, pixel accuracy {result.top5:.2%} on {result.count} images"
    if task == "multi_label_classification":
        return f"mAP {result.top1:.4f}, F1 {result.top5:.4f} (micro) on {result.count} inputs"
    if task == "regression":
        return f"MAE {result.top1:.4g}, RMSE {result.top5:.4g} on {result.count} inputs"
    if task == "text_recognition":
        return f"CER {result.top1:.2%}, WER {result.top5:.2%} on {result.count} lines"
    if task == "feature_extraction":
        accuracy = details.get("accuracy")
        eer = accuracy.get("eer") if isinstance(accuracy, dict) else None
        words = f"recall@1 {result.top1:.2%}, recall@5 {result.top5:.2%}"
        if isinstance(eer, int | float):
            words += f", EER {eer:.2%}"
        return f"{words} on {result.count} inputs"
    if task == "sequence_labelling":
        words = f"accuracy {result.top1:.2%}"
        reset = details.get("accuracy_state_reset")
        if isinstance(reset, dict) and isinstance(reset.get("top1"), int | float):
            words += f" with the state carried, {reset['top1']:.2%} with it reset at every call"
        return f"{words} on {result.count} inputs"
    top5 = f", top-5 {result.top5:.2%}" if result.top5 is not None else ""
    return f"top-1 {result.top1:.2%}{top5} on {result.count} inputs"


def _latency_fields(entry: dict[str, Any]) -> dict[str, Any]:
    """A batch size's latency columns: computed here by the statistics layer from the samples
    when the agent sent them (the figures it sent beside them are not trusted), else as sent
    (an agent that keeps no samples: no interval)."""
    samples = entry.get("samples_ms")
    if samples is not None:
        entry = statistics.latency(np.asarray(samples, dtype=np.float64) * 1e6)
    names = BatchResult.LATENCY_FIELDS + BatchResult.INTERVAL_FIELDS
    return {name: entry.get(name) for name in names} | {"count": entry["count"]}


def _store_result(evaluation: Evaluation, upload: ResultUpload, predictions_path: str) -> Result:
    """The Result and its rows, one per batch size."""
    accuracy = upload.accuracy
    given = upload.stack.get("cpu")
    cpu: dict[str, Any] = given if isinstance(given, dict) else {}
    gpus = [g for g in upload.stack.get("gpus") or [] if isinstance(g, dict)]
    # The image it ran in, when its host registered an image of that digest (an agent names
    # only images it registered; anything else is kept in the stack as said, unlinked).
    container = upload.stack.get("container")
    digest = container.get("digest") if isinstance(container, dict) else None
    image = None
    if isinstance(digest, str) and evaluation.host is not None:
        image = evaluation.host.images.filter(digest=digest).first()
    result = Result.objects.create(
        evaluation=evaluation,
        top1=accuracy.top1,
        top5=accuracy.top5,
        count=accuracy.count,
        predictions_path=predictions_path,
        top_k=upload.predictions.top_k,
        content_hash=upload.content_hash,
        cpu_model=str(cpu.get("model") or "")[:256],
        gpu_model=str(gpus[0].get("name") or "")[:256] if gpus else "",
        stack=upload.stack,
        details=upload.details.to_dict(),
        host=evaluation.host,
        image=image,
    )
    rows = BatchResult.objects.bulk_create(
        BatchResult(
            result=result,
            evaluation=evaluation,
            batch_size=int(size),
            throughput_ips=upload.throughput[size],
            **_latency_fields(entry.to_dict()),
        )
        for size, entry in upload.latency.items()
    )
    samples = {size: entry.samples_ms for size, entry in upload.latency.items()}
    LatencySamples.objects.bulk_create(
        LatencySamples(batch_result=row, samples_ms=found)
        for row in rows
        if (found := samples[str(row.batch_size)]) is not ABSENT
    )
    result.summarize(rows)
    result.configuration = leaderboards.configuration_of(evaluation, result)
    evaluation.top1, evaluation.top5 = result.top1, result.top5
    result.save(
        update_fields=[
            "p50_ms_at_1",
            "p50_low_ms_at_1",
            "p50_high_ms_at_1",
            "p99_ms_at_1",
            "best_throughput_ips",
            "best_batch_size",
            "configuration",
        ]
    )
    return result
