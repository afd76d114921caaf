"""The first divergence between two evaluations of one model (`Divergence`): where their numbers
part, layer by layer.

A divergence re-runs each evaluation's request on a few chosen inputs with the job option
`capture_inputs` (on the host it ran on, as any job: the agent captures every layer's output
with the model as that job loads it, `predictors.evaluation.capture`), and once both captures
are stored compares them (`predictors.analysis.divergence.diverge`): per matched layer the
largest and the relative error and the cosine similarity, and the first layer whose error
passes the tolerance relative to the layers before it. A divergence that starts at the input
(preprocessing) is named with the processing parameters that differ between the two
evaluations (`evaluations.compare.differences`).

The inputs, unless chosen: the first on which the two evaluations' top-1 classes disagree,
then the first inputs, `DEFAULT_INPUTS` in all.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from evaluations import outputs
from evaluations.actions import launch_evaluation
from evaluations.api.serializers import EvaluationRequestSerializer
from evaluations.compare import differences
from evaluations.models import Divergence, Evaluation
from hub.errors import Invalid, NotFound
from predictors.protocol import FINISHED, SUCCEEDED, JobOptions, ProtocolError
from predictors.protocol.options import MAX_CAPTURED_INPUTS, capture_run
from traces.actions import span_aggregates
from traces.aggregates import PATH_SEPARATOR

__all__ = ["DEFAULT_INPUTS", "as_dict", "choose_inputs", "launch", "refresh"]

DEFAULT_INPUTS = 4


def choose_inputs(
    a: Evaluation, b: Evaluation, count: int = DEFAULT_INPUTS
) -> tuple[list[int], list[str]]:
    """The inputs to compare and why each: the first on which A's and B's top-1 classes
    disagree, then the first inputs (where both kept their predictions)."""
    chosen: list[int] = []
    because: list[str] = []
    rows = [_top1(evaluation) for evaluation in (a, b)]
    if rows[0] is not None and rows[1] is not None:
        for index, (first, second) in enumerate(zip(rows[0], rows[1], strict=False)):
            if first != second:
                chosen.append(index)
                because.append("disagreeing")
                if len(chosen) == count:
                    break
    index = 0
    while len(chosen) < count:
        if index not in chosen:
            chosen.append(index)
            because.append("first")
        index += 1
    order = sorted(range(len(chosen)), key=lambda i: chosen[i])
    return [chosen[i] for i in order], [because[i] for i in order]


def _top1(evaluation: Evaluation) -> list[int] | None:
    result = getattr(evaluation, "result", None)
    if result is None or not result.predictions_path:
        return None
    classes = outputs.classes(result.predictions_path, outputs.INLINE_ROWS)
    return [row[0] if row else -1 for row in classes]


def _readable(user: AbstractBaseUser, pk: Any, path: str) -> Evaluation:
    try:
        key = uuid.UUID(str(pk))
    except ValueError:
        raise Invalid(f"{str(pk)[:40]!r} is not an evaluation id", path=path) from None
    found = (
        Evaluation.objects.visible_to(user)
        .select_related("result", "host", "model", "dataset")
        .filter(pk=key)
        .first()
    )
    if found is None:
        raise NotFound(f"no evaluation {key} that you may read", path=path)
    return found


def _capture_request(evaluation: Evaluation, inputs: list[int], side: str) -> dict[str, Any]:
    """The evaluation's request again, on its host, capturing the layer outputs of `inputs`:
    its model version, framework, device, processing overrides, threads, seed and other
    options as it ran; timed on one input only, and traced not at all."""
    asked = dict(evaluation.request) if isinstance(evaluation.request, dict) else {}
    request = {
        key: value
        for key, value in asked.items()
        if key not in JobOptions.names() and key not in ("hosts", "host")
    }
    try:
        options = capture_run(asked, tuple(inputs))
    except ProtocolError as error:
        raise Invalid(
            f"the request of evaluation {evaluation.pk} cannot be run again: {error}",
            path=side,
        ) from None
    request.update(options.to_dict())
    request.update(
        model=evaluation.model_name,
        model_version=evaluation.model_version,
        framework=evaluation.framework,
        dataset=evaluation.dataset_name,
        dataset_version=evaluation.dataset_version,
    )
    if evaluation.framework_version:
        # The version that ran, not the range asked: a host upgraded since runs it no more.
        request["framework_version"] = evaluation.framework_version
    if evaluation.host is not None:
        request["host"] = evaluation.host.name
    return request


def launch(
    user: AbstractBaseUser,
    a_id: Any,
    b_id: Any,
    *,
    inputs: list[int] | None = None,
    tolerance: float | None = None,
) -> Divergence:
    """Launch the two capture runs of a divergence between evaluations A and B (ones the user
    may read, on one dataset split: two runs of one model, or of a model and a copy of it);
    Invalid naming the field at fault, NotFound for an evaluation the user may not read."""
    a = _readable(user, a_id, "a")
    b = _readable(user, b_id, "b")
    if a.pk == b.pk:
        raise Invalid("a and b must be two evaluations; got the same one twice", path="b")
    if a.dataset_name != b.dataset_name or a.split != b.split:
        raise Invalid(
            f"a divergence feeds both runs the same inputs; a read {a.dataset_name}:{a.split}, "
            f"b read {b.dataset_name}:{b.split}",
            path="b",
        )
    rows = _split_rows(a)
    if inputs is None:
        chosen, because = choose_inputs(a, b, min(DEFAULT_INPUTS, rows or DEFAULT_INPUTS))
    else:
        chosen, because = _checked_inputs(inputs), ["chosen"] * len(inputs)
    if rows is not None and chosen and chosen[-1] >= rows:
        raise Invalid(
            f"input {chosen[-1]} is beyond the {a.split} split of {a.dataset_name}, whose "
            f"{rows} inputs are 0 to {rows - 1}",
            path="inputs",
        )
    if tolerance is None:
        from predictors.analysis.divergence import DEFAULT_TOLERANCE

        tolerance = DEFAULT_TOLERANCE
    requests = []
    for evaluation, path in ((a, "a"), (b, "b")):
        body = EvaluationRequestSerializer(data=_capture_request(evaluation, chosen, path))
        if not body.is_valid():
            field, problems = next(iter(body.errors.items()))
            raise Invalid(
                f"the request of evaluation {evaluation.pk} cannot be run again: {field}: "
                f"{problems[0] if isinstance(problems, list) else problems}",
                path=path,
            )
        requests.append(body.validated_data)
    with transaction.atomic():
        capture_a = launch_evaluation(user, requests[0])[0]
        capture_b = launch_evaluation(user, requests[1])[0]
        return Divergence.objects.create(
            user=user,
            a=a,
            b=b,
            inputs=chosen,
            chosen_because=because,
            tolerance=tolerance,
            capture_a=capture_a,
            capture_b=capture_b,
        )


def _split_rows(evaluation: Evaluation) -> int | None:
    """How many inputs the evaluation's dataset split holds, as its manifest says (None where
    it does not)."""
    dataset = getattr(evaluation, "dataset", None)
    content = dataset.content if dataset is not None and isinstance(dataset.content, dict) else {}
    entry = (content.get("splits") or {}).get(evaluation.split)
    count = entry.get("count") if isinstance(entry, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _checked_inputs(inputs: Any) -> list[int]:
    if not isinstance(inputs, list) or not 1 <= len(inputs) <= MAX_CAPTURED_INPUTS:
        raise Invalid(
            f"must be a list of 1 to {MAX_CAPTURED_INPUTS} dataset indices", path="inputs"
        )
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in inputs):
        raise Invalid("each input is a dataset index, an integer from 0", path="inputs")
    if len(set(inputs)) != len(inputs):
        raise Invalid(f"names an input twice: {inputs}", path="inputs")
    return sorted(inputs)


def refresh(divergence: Divergence) -> Divergence:
    """Compare the captures once both are stored (once: under the row's lock); fail the
    divergence, saying why, when a capture run ended without a result."""
    if divergence.status != Divergence.PENDING:
        return divergence
    runs = [divergence.capture_a, divergence.capture_b]
    for run in runs:
        if run is not None:
            run.refresh_from_db(fields=["status"])
    problem = next(
        (
            f"the capture run of {side} ({run.pk}) ended {run.status}: "
            f"{run.history.order_by('-at').values_list('reason', flat=True).first() or ''}"
            for side, run in zip("ab", runs, strict=True)
            if run is not None and run.status in FINISHED and run.status != SUCCEEDED
        ),
        None,
    )
    if any(run is None for run in runs):
        problem = "a capture run was deleted"
    readable = _readable_pair(divergence)
    for side, found in zip("ab", readable, strict=True):
        if found is None:
            problem = f"evaluation {side} is no longer one you may read"
    if problem is None and not all(run.status == SUCCEEDED for run in runs if run):
        return divergence  # still running
    # The comparison is made outside the row's lock (two captures, possibly large); two
    # readers at once may both make it, and the first to store it wins.
    report: dict[str, Any] | None = None
    if problem is None:
        try:
            report = _report(divergence)
        except (ValueError, OSError) as error:
            problem = f"the captures: {error}"
    with transaction.atomic():
        locked = Divergence.objects.select_for_update().get(pk=divergence.pk)
        if locked.status != Divergence.PENDING:
            return locked
        if problem is not None:
            locked.status, locked.reason = Divergence.FAILED, problem
        else:
            locked.report, locked.status = report, Divergence.DONE
        locked.finished_at = timezone.now()
        locked.save(update_fields=["status", "reason", "report", "finished_at"])
        return locked


def _readable_pair(divergence: Divergence) -> list[Evaluation | None]:
    """A and B where the divergence's owner may still read them (an evaluation unpublished
    or unshared since is not read again, nor shown)."""
    ids = [divergence.a_id, divergence.b_id]
    visible = set(
        Evaluation.objects.visible_to(divergence.user)
        .filter(pk__in=[pk for pk in ids if pk is not None])
        .values_list("pk", flat=True)
    )
    return [
        evaluation if evaluation is not None and evaluation.pk in visible else None
        for evaluation in (divergence.a, divergence.b)
    ]


def _report(divergence: Divergence) -> dict[str, Any]:
    captures = [
        outputs.layers(run.pk) for run in (divergence.capture_a, divergence.capture_b) if run
    ]
    if len(captures) != 2 or captures[0] is None or captures[1] is None:
        raise ValueError("a capture run kept no layer outputs")
    from predictors.analysis.divergence import diverge

    report = diverge(captures[0], captures[1], tolerance=divergence.tolerance)
    compared = [e for e in (divergence.a, divergence.b) if e is not None]
    differs = differences.compare(compared)["rows"] if len(compared) == 2 else []
    report["differs"] = differs
    first = report.get("first_divergence") or {}
    if first.get("at") == "layer":
        row = report["layers"][first["row"]]
        first["kernels"] = {
            side: _kernels(evaluation, row[side])
            for side, evaluation in (("a", divergence.a), ("b", divergence.b))
            if evaluation is not None and _kernels(evaluation, row[side])
        }
    if first.get("at") == "input":
        # A divergence at the input: the processing parameters that differ explain it.
        first["parameters"] = [
            {"key": row["key"], "values": row["values"]}
            for row in differs
            if row["section"] == "processing"
        ]
    return report


def _kernels(evaluation: Evaluation, layer: dict[str, Any]) -> list[dict[str, Any]]:
    """The kernels the evaluation's trace holds inside the layer (by its name, its node's or
    its name with its type, as the trace names layers), most time first; none where its trace
    holds no kernels."""
    names = {
        str(layer.get("name") or ""),
        str(layer.get("node") or ""),
        f"{layer.get('name')} ({layer.get('op_type')})",
    } - {""}
    kernels: dict[str, list[int]] = {}
    for row in span_aggregates(evaluation.trace_id):
        top = row.parent.split(PATH_SEPARATOR, 1)[0] if row.parent else ""
        if row.op_type == "kernel" and top in names:
            found = kernels.setdefault(row.name, [0, 0])
            found[0] += row.count
            found[1] += row.total_ns
    return [
        {"name": name, "count": count, "total_ns": total}
        for name, (count, total) in sorted(kernels.items(), key=lambda item: -item[1][1])[:20]
    ]


def as_dict(divergence: Divergence) -> dict[str, Any]:
    """The divergence as the API and the page show it."""

    def run(evaluation: Evaluation | None) -> dict[str, Any] | None:
        if evaluation is None:
            return None
        return {
            "id": str(evaluation.pk),
            "url": reverse("evaluation", kwargs={"pk": evaluation.pk}),
            "label": differences.label(evaluation),
            "framework": evaluation.framework,
            "status": evaluation.status,
        }

    a, b = _readable_pair(divergence)
    differences.name_apart([e for e in (a, b) if e is not None])
    report = divergence.report
    if report is not None and (a is None or b is None):
        # What it read of A and B when it was made is shown only while both are readable.
        report = {key: value for key, value in report.items() if key != "differs"}
        first = report.get("first_divergence")
        if isinstance(first, dict):
            report["first_divergence"] = {
                key: value for key, value in first.items() if key not in ("kernels", "parameters")
            }
    return {
        "id": str(divergence.pk),
        "url": reverse("divergence", kwargs={"pk": divergence.pk}),
        "status": divergence.status,
        "reason": divergence.reason,
        "a": run(a),
        "b": run(b),
        "inputs": divergence.inputs,
        "chosen_because": divergence.chosen_because,
        "tolerance": divergence.tolerance,
        "capture_a": run(divergence.capture_a),
        "capture_b": run(divergence.capture_b),
        "report": report,
        "created_at": divergence.created_at.isoformat(),
        "finished_at": divergence.finished_at.isoformat() if divergence.finished_at else None,
    }


def visible(user: AbstractBaseUser, pk: Any) -> Divergence:
    """The user's own divergence `pk`; NotFound for any other (another user's is not shown)."""
    try:
        key = uuid.UUID(str(pk))
    except ValueError:
        raise NotFound("no such divergence", path="id") from None
    found = (
        Divergence.objects.select_related("a__host", "b__host", "capture_a", "capture_b")
        .filter(pk=key, user_id=user.pk)
        .first()
    )
    if found is None:
        raise NotFound("no such divergence of yours", path="id")
    return found
