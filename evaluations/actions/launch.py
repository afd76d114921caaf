"""The user's side: launching evaluations (solved once, checked, dispatched) and cancelling
one."""

from __future__ import annotations

import io
import uuid
from collections.abc import Mapping
from typing import Any

import PIL.Image
import pyarrow.parquet as pq
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from evaluations import events, placement
from evaluations.actions.transitions import dispatch_evaluation, get_locked, record_status
from evaluations.error_codes import EvaluationErrorCode
from evaluations.models import Evaluation, StatusChange
from hub import actions as hub_actions
from hub import solver, storage
from hub.error_codes import HubErrorCode
from hub.errors import Conflict, Invalid, NotFound
from hub.models import Manifest
from predictors import manifests as spec
from predictors.processing.image import ImagePreprocessor
from predictors.processing.labels import REFUSAL_HINT as LABEL_HINT
from predictors.processing.labels import is_untrained
from predictors.processing.labels import mismatch as label_mismatch
from predictors.protocol import CANCELLED, DISPATCHED, QUEUED
from predictors.tasks import (
    data_inputs,
    dataset_problem,
    input_columns,
    loadgen_problem,
    scored_output,
    trace_level_problem,
    unsupported,
)
from traces.actions import owned_by_another_user
from traces.traceparent import TraceParent


def launch_evaluation(
    user: AbstractBaseUser, request: Mapping[str, Any], *, trace_parent: TraceParent | None = None
) -> list[Evaluation]:
    """Create and dispatch the evaluations of a validated request (one, or one per host).

    With `trace_parent` (the caller's W3C `traceparent`) every evaluation launched gets the
    caller's trace id as its `trace_id`, and its root span will be the child of the caller's
    span (the agent learns the span id from the job).

    NotFound when the model or dataset does not exist for the user; Invalid naming the
    constraint when no live host can run it. The request is solved once (`hub.solver.solve`);
    placement only picks the queue.
    """
    try:
        solution = solver.solve(user, solver.Request.of_launch(request))
    except solver.Unsatisfiable as unmet:
        not_found = unmet.path in ("model", "dataset") and not isinstance(
            unmet, solver.InvalidConstraint
        )
        # The solver's `version` is the request's `model_version`.
        path = "model_version" if unmet.path == "version" else unmet.path
        kind = NotFound if not_found else Invalid
        raise kind(unmet.message, path=path, code=HubErrorCode.UNSATISFIABLE) from None
    dataset = solution.dataset
    assert dataset is not None
    placements = placement.place(solution, request, user.pk)
    contents = _apply_overrides(
        request.get("overrides") or [], {where.manifest for where in placements}
    )
    timing = bool(request.get("latency_only"))
    _check_supported(contents, timing)
    _check_dataset(contents, dataset, str(request["split"]))
    _check_batch_sizes(contents, dataset, str(request["split"]), request)
    _check_scenario(contents, request, timing)
    _check_trace_level(contents, request, timing)
    if not request.get("allow_label_mismatch") and not timing:
        _check_labels(contents, dataset)

    group = uuid.uuid4()
    launched = []
    traced: dict[str, Any] = {}
    if trace_parent is not None:
        _check_trace_parent(user, trace_parent)
        traced["trace_id"] = trace_parent.trace_id
        traced["trace_parent_span_id"] = trace_parent.span_id
    with transaction.atomic():
        for where in placements:
            evaluation = Evaluation.objects.create(
                user=user,
                model=where.manifest,
                dataset=dataset,
                model_name=where.manifest.name,
                model_version=where.manifest.version,
                framework=where.manifest.framework,
                dataset_name=dataset.name,
                dataset_version=dataset.version,
                split=request["split"],
                device=request["device"],
                task=where.manifest.task,
                untrained=is_untrained(where.manifest.content or {}),
                trace_level=request["trace_level"],
                threads=request.get("threads"),
                seed=request["seed"],
                overrides="\n".join(request.get("overrides") or []),
                request=dict(request),
                group=group,
                **traced,
            )
            change = StatusChange.objects.create(
                evaluation=evaluation, status=QUEUED, reason=f"launched by {user.get_username()}"
            )
            events.status_changed(evaluation, change)
            dispatch_evaluation(evaluation, where, "")
            launched.append(evaluation)
    return launched


def _apply_overrides(
    overrides: list[str], manifests: set[Manifest]
) -> list[tuple[Manifest, dict[str, Any]]]:
    """Each manifest the launch runs with its content as it will run: the overrides applied
    (as `mlms evaluate --set` does locally), each result valid, else Invalid naming
    `overrides` and the manifest's field."""
    contents = []
    for manifest in sorted(manifests, key=lambda m: m.pk):
        content = manifest.content or {}
        if overrides:
            try:
                content = spec.apply_overrides(content, overrides).data
            except spec.ManifestError as error:
                raise Invalid(
                    [
                        {
                            "path": "overrides",
                            "message": f"on {manifest.name} {manifest.version} "
                            f"({manifest.framework}): {e['path'] or '<root>'}: {e['message']}",
                        }
                        for e in error.errors
                    ],
                    code=EvaluationErrorCode.INVALID_OVERRIDE,
                ) from None
        contents.append((manifest, content))
    return contents


def _check_supported(contents: list[tuple[Manifest, dict[str, Any]]], latency_only: bool) -> None:
    """A model the evaluation loop cannot run as its manifest says (another task, several
    inputs or outputs; for `latency_only`, what that mode cannot feed) is refused at launch,
    rather than dispatched to fail: Invalid naming `model`."""
    for _manifest, content in contents:
        problem = unsupported(content, latency_only=latency_only)
        if problem:
            raise Invalid(problem, path="model", code=EvaluationErrorCode.UNSUPPORTED)


def _check_dataset(
    contents: list[tuple[Manifest, dict[str, Any]]], dataset: Manifest, split: str
) -> None:
    """A model whose input cannot read the dataset's rows (text against images, and the other
    way round: `predictors.tasks.dataset_problem`), or whose inputs name columns the split the
    hub stores lacks, is refused at launch: Invalid naming `dataset`."""
    for _manifest, content in contents:
        problem = dataset_problem(content, dataset.content or {})
        if problem:
            raise Invalid(problem, path="dataset", code=EvaluationErrorCode.UNSUPPORTED)
        named = input_columns(content)
        if named:
            _check_columns(named, dataset, split)


# The images of a split read at launch to learn whether they come in one size, at most; and
# the largest first row group read for them (a larger one is left to the agent's run).
SIZE_SAMPLE = 1024
SIZE_SAMPLE_BYTES = 64 * 1024 * 1024


def image_sizes(
    content: Mapping[str, Any], dataset: Manifest, split: str, limit: int | None = None
) -> list[tuple[int, int]]:
    """The distinct sizes (height, width) the model's image input makes of the first images of
    a split the hub stores (SIZE_SAMPLE, or the run's `limit` where it is fewer), as it will
    process them (padded, resized, cropped), in the order met. [] where the input makes every
    image one size whatever it was (a resize_size, a crop or a pad size), where the model reads
    no image from the dataset's image column, and where the split is not stored here, is too
    large to sample at launch, or cannot be read (the agent then says what is wrong)."""
    fed = data_inputs(content)
    if (
        len(fed) != 1
        or fed[0].get("type") != "image"
        or fed[0].get("column") not in (None, "image")
    ):
        return []
    if str((dataset.content or {}).get("encoding") or "").lower() not in ("png", "jpeg", "jpg"):
        return []
    entry = ((dataset.content or {}).get("splits") or {}).get(split) or {}
    path = str(entry.get("path") or "")
    if not path.startswith("repo://"):
        return []
    wanted = min(SIZE_SAMPLE, limit) if limit else SIZE_SAMPLE
    try:
        preprocessor = ImagePreprocessor(fed[0].get("parameters") or {})
        if preprocessor.fixed_size():
            return []
        found: dict[tuple[int, int], None] = {}
        read = 0
        with pq.ParquetFile(storage.resolve(path.removeprefix("repo://"))) as parquet:
            metadata = parquet.metadata
            column = parquet.schema_arrow.get_field_index("image")
            if column < 0 or metadata.num_row_groups == 0:
                return []
            if metadata.row_group(0).column(column).total_uncompressed_size > SIZE_SAMPLE_BYTES:
                return []
            for batch in parquet.iter_batches(batch_size=256, columns=["image"]):
                for data in batch.column(0).to_pylist():
                    with PIL.Image.open(io.BytesIO(data)) as image:
                        width, height = image.size
                    found[preprocessor.output_size(height, width)] = None
                    read += 1
                    if read >= wanted:
                        return list(found)
    except Exception:  # noqa: BLE001 - a best-effort look: the agent's run says what is wrong
        return []
    return list(found)


def _check_batch_sizes(
    contents: list[tuple[Manifest, dict[str, Any]]],
    dataset: Manifest,
    split: str,
    request: Mapping[str, Any],
) -> None:
    """A batch of images is of one size: batch sizes above 1 for a model whose input makes
    images of other sizes into other sizes (no resize_size, crop_size or pad.size), on a split
    whose first images (as many as the run reads) come out in several sizes, are refused at
    launch, naming the sizes: Invalid naming `batch_sizes`."""
    sizes = [int(size) for size in request.get("batch_sizes") or [1]]
    if max(sizes) <= 1:
        return
    limit = request.get("limit")
    for manifest, content in contents:
        found = image_sizes(content, dataset, split, int(limit) if limit else None)
        if len(found) > 1:
            shown = ", ".join(f"{h}x{w}" for h, w in found[:5]) + (
                ", ..." if len(found) > 5 else ""
            )
            raise Invalid(
                f"{manifest.name} {manifest.version} makes each image a size of its own (no "
                f"resize_size, crop_size or pad size), and the first images of the {split} "
                f"split of {dataset.name} {dataset.version} come out in {len(found)} sizes "
                f"({shown}): a batch holds images of one size, so batch sizes "
                f"{', '.join(str(s) for s in sizes if s > 1)} cannot be filled; ask for batch "
                "size 1, or give the input a resize_size or a pad size",
                path="batch_sizes",
                code=EvaluationErrorCode.UNSUPPORTED,
            )


def _check_columns(named: list[str], dataset: Manifest, split: str) -> None:
    """The columns a model's inputs name must be in the split (read from its stored file's
    footer; a split the hub does not hold is checked by the agent that reads it)."""
    entry = ((dataset.content or {}).get("splits") or {}).get(split) or {}
    path = str(entry.get("path") or "")
    if not path.startswith("repo://"):
        return
    try:
        with pq.ParquetFile(storage.resolve(path.removeprefix("repo://"))) as parquet:
            columns = set(parquet.schema_arrow.names)
    except (OSError, ValueError):
        return  # not readable here: the agent says what is wrong with it
    missing = [column for column in named if column not in columns]
    if missing:
        raise Invalid(
            f"the model's inputs read the columns {', '.join(map(repr, named))}; the {split} "
            f"split of {dataset.name} {dataset.version} has no {', '.join(map(repr, missing))} "
            f"(its columns: {', '.join(sorted(columns))})",
            path="dataset",
            code=EvaluationErrorCode.UNSUPPORTED,
        )


def _check_scenario(
    contents: list[tuple[Manifest, dict[str, Any]]],
    request: Mapping[str, Any],
    latency_only: bool,
) -> None:
    """A LoadGen scenario the model cannot be driven in (`predictors.tasks.loadgen_problem`)
    is refused at launch: Invalid naming `scenario` (or `loadgen_mode`)."""
    scenario = request.get("scenario") or "fixed"
    mode = request.get("loadgen_mode") or "performance"
    for _manifest, content in contents:
        problem = loadgen_problem(content, scenario, mode, latency_only)
        if problem:
            path = "loadgen_mode" if problem.startswith("loadgen_mode") else "scenario"
            raise Invalid(problem, path=path, code=EvaluationErrorCode.UNSUPPORTED)


def _check_trace_level(
    contents: list[tuple[Manifest, dict[str, Any]]], request: Mapping[str, Any], latency_only: bool
) -> None:
    """A trace level the model's predictor cannot record (`predictors.tasks.
    trace_level_problem`) is refused at launch: Invalid naming `trace_level`."""
    level = str(request.get("trace_level") or "")
    for _manifest, content in contents:
        problem = trace_level_problem(content, level, latency_only)
        if problem:
            raise Invalid(problem, path="trace_level", code=EvaluationErrorCode.UNSUPPORTED)


def _check_labels(contents: list[tuple[Manifest, dict[str, Any]]], dataset: Manifest) -> None:
    """A trained model whose labels are not the dataset's would score unrelated class
    indices: Invalid naming both label sets (`predictors.processing.labels`), unless the request allows
    it. Labels the hub cannot read here (an https:// file) are left to the agent's check."""
    dataset_labels = hub_actions.stored_labels(dataset.content or {})
    if dataset_labels is None:
        return
    for manifest, content in contents:
        if is_untrained(content):
            continue
        # The scored output's labels (a detector's classes output).
        output = scored_output(content) if content.get("outputs") else {}
        model_labels = hub_actions.stored_labels(output.get("parameters") or {})
        if model_labels is None:
            continue
        problem = label_mismatch(
            f"{manifest.name} {manifest.version}",
            model_labels,
            f"{dataset.name} {dataset.version}",
            dataset_labels,
        )
        if problem:
            raise Invalid(
                f"{problem}. {LABEL_HINT}", path="dataset", code=EvaluationErrorCode.LABEL_MISMATCH
            )


def _check_trace_parent(user: AbstractBaseUser, parent: TraceParent) -> None:
    """Joining a trace that another user's evaluation or spans use would let this user write
    into it and read it through their own evaluation: 400 naming `traceparent`."""
    others = Evaluation.objects.filter(trace_id=parent.trace_id).exclude(user_id=user.pk)
    if others.exists() or owned_by_another_user(parent.trace_id, user):
        raise Invalid(
            "this trace id belongs to another user's trace",
            path="traceparent",
            code=EvaluationErrorCode.TRACE_TAKEN,
        )


def cancel_evaluation(evaluation_id: Any, user: AbstractBaseUser) -> Evaluation:
    """Cancel at once when no agent holds it yet; otherwise ask the agent, which stops at its
    next progress report and reports `cancelled`."""
    with transaction.atomic():
        evaluation = get_locked(evaluation_id)
        if evaluation.is_finished:
            raise Conflict(
                f"evaluation {evaluation.pk} is {evaluation.status} already",
                code=EvaluationErrorCode.FINISHED,
            )
        if evaluation.status in (QUEUED, DISPATCHED):
            record_status(
                evaluation, CANCELLED, f"cancelled by {user.get_username()} before it started"
            )
        elif not evaluation.cancel_requested:
            evaluation.cancel_requested = True
            evaluation.save(update_fields=["cancel_requested", "updated_at"])
            events.cancel_requested(evaluation)
    return evaluation
