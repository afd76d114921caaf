"""What the agent sends the hub of one job: its progress (`Reporter`), its spans (`open_trace`,
`close_trace`) and its result (`result_upload`, the upload for a finished evaluation,
`with_spans`, what became of its spans added to it, and `paged`, its predictions cut into
pages posted before it where they would make one body too large)."""

from __future__ import annotations

import base64
import json
import logging
import math
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from predictors.agent.hub_client import HubClient, HubError, HubUnreachable
from predictors.evaluation import Evaluation
from predictors.host import introspection
from predictors.protocol import (
    ABSENT,
    MAX_PAGES,
    NOT_OURS,
    Attr,
    BatchLatency,
    Headline,
    Job,
    Predictions,
    PredictionsPage,
    Report,
    ResultUpload,
)
from predictors.protocol.records import present
from predictors.protocol.report import SpanCounts
from predictors.tracing import Tracer

__all__ = [
    "PAGE_BYTES",
    "SPAN_RETRY_SECONDS",
    "Reporter",
    "close_trace",
    "open_trace",
    "paged",
    "result_upload",
    "with_spans",
]

# A result's predictions larger than this (as JSON) are posted in pages of at most about this
# size before it (`paged`): a detector asked for every candidate of thousands of images, a text
# model's long lines. The agent keeps pages under half the hub's limit on one body
# (`RESULT_MAX_BYTES`, at least 1 MiB, which the hub's agent config names) whatever it is told.
PAGE_BYTES = 16 * 1024 * 1024

logger = logging.getLogger("mlmodelscope.agent")

# How long the agent keeps sending a job's spans while the hub does not answer (a restart, an
# outage), before it gives up (the spans then wait in the spool).
SPAN_RETRY_SECONDS = 300.0


class Reporter(threading.Thread):
    """Sends a job's progress every `interval` seconds, from when it is claimed until it ends.

    The evaluation loop calls `progress` and `cancelled.is_set`, which only read and write
    attributes, so that reporting costs the timed loop nothing.
    """

    def __init__(self, client: HubClient, evaluation_id: str, claim: str, interval: float):
        super().__init__(name=f"report-{evaluation_id[:8]}", daemon=True)
        self.client = client
        self.evaluation_id = evaluation_id
        self.claim = claim
        self.interval = interval
        self.done = 0
        self.total = 0
        self.cancelled = threading.Event()
        self.lost = False
        self._finished = threading.Event()
        self._wake = threading.Event()  # report now (`report_now`) or stop
        self._reported = threading.Event()

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def run(self) -> None:
        while True:
            self.report()
            self._reported.set()
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._finished.is_set():
                return

    def report_now(self) -> None:
        """Report where the job is now, from the reporter's own thread, and wait for it (the
        last report before the job's outcome is posted)."""
        if self._finished.is_set() or not self.is_alive():
            return
        self._reported.clear()
        self._wake.set()
        self._reported.wait(timeout=60)

    def report(self) -> None:
        try:
            if self.client.report_progress(self.evaluation_id, self.claim, self.done, self.total):
                self.cancelled.set()
        except HubError as exc:
            if exc.code in NOT_OURS:
                self.lost = True
                self.cancelled.set()
            else:
                logger.warning("progress of %s refused: %s", self.evaluation_id, exc)
        except HubUnreachable as exc:
            logger.warning("progress of %s not sent: %s", self.evaluation_id, exc)

    def stop(self, *, last_report: bool = True) -> None:
        """Stop reporting, after a last report of where the job ended (unless the job's
        outcome was posted already: the hub takes no progress after it)."""
        if self._finished.is_set():
            return
        self._finished.set()
        self._wake.set()
        self.join()
        if last_report and not self.lost:
            self.report()


def open_trace(job: Job, client: HubClient, host: str, spool: Path) -> Tracer | None:
    """A tracer that exports the job's spans as the loop writes them (OTLP/HTTP, batched)
    under the job's `trace_id` and claim, its root span the child of the job's
    `parent_span_id` when the launch carried a `traceparent`; None when the job is not
    traced (or the tracer cannot start: the evaluation runs all the same). `host` names the
    agent's host in the root span; what the hub does not take in time waits in `spool`."""
    if not job.trace_id or job.options.trace_level == "none":
        return None
    try:
        tracer = Tracer(
            hub=client.url,
            token=client.token,
            service="mlms-agent",
            claim=job.claim or None,
            spool=spool,
            retry_seconds=SPAN_RETRY_SECONDS,
        )
        tracer.start(
            attributes={
                Attr.EVALUATION: job.id,
                Attr.ATTEMPT: job.attempt,
                Attr.HOST: host,
                "model": job.model.name,
                "framework": job.model.framework,
                "dataset": job.dataset.name,
            },
            trace_id=job.trace_id,
            parent_span_id=job.parent_span_id or None,
        )
    except Exception:
        logger.exception("evaluation %s: the trace could not be opened", job.id)
        return None
    return tracer


def close_trace(job: Job, tracer: Tracer) -> dict[str, Any] | None:
    """End the job's trace and wait until the hub has taken its spans, or refused them, or
    `SPAN_RETRY_SECONDS` of its silence have passed. What became of them (`sent`,
    `stored`, `refused`, `spooled`, `retries`, and a `note` when not all were stored), for
    the result's details; a failure never fails the evaluation."""
    counts: dict[str, Any] = {}
    refusals: list[str] = []
    try:
        try:
            tracer.finish()
            tracer.flush()  # blocks while the delivery retries
        finally:
            tracer.shutdown()
            assert tracer.delivery is not None
            counts = dict(tracer.delivery.counts.as_dict())
            refusals = list(tracer.delivery.refusals)
    except Exception as exc:
        note = f"spans not exported: {type(exc).__name__}: {exc}"
    else:
        if counts["stored"] == counts["sent"]:
            return counts
        parts = []
        if counts["refused"]:
            parts.append(f"{counts['refused']} refused ({refusals[0]})")
        if counts["spooled"]:
            parts.append(
                f"{counts['spooled']} not delivered within {SPAN_RETRY_SECONDS:g} s, "
                "kept in the agent's spool to be sent again"
            )
        lost = counts["sent"] - counts["stored"] - counts["refused"] - counts["spooled"]
        if lost > 0:
            parts.append(f"{lost} not delivered")
        note = f"{counts['stored']} of {counts['sent']} spans stored: " + "; ".join(parts)
    logger.warning("evaluation %s: %s", job.id, note)
    return counts | {"note": note}


def result_upload(job: Job, evaluation: Evaluation) -> ResultUpload:
    """What the agent posts to `POST /api/v1/evaluations/<id>/result/` for a finished
    evaluation: the accuracy columns, each batch size's latency (with its samples) and
    throughput, every input's predictions, and the loop's report."""
    report = evaluation.report
    entries = present(report.batch_sizes, "batch_sizes")
    latency: dict[str, BatchLatency] = {}
    throughput: dict[str, float] = {}
    for index, entry in enumerate(entries):
        where = f"batch_sizes.{index}"
        size = str(present(entry.batch_size, f"{where}.batch_size"))
        measured = present(entry.latency, f"{where}.latency")
        latency[size] = BatchLatency.from_dict(measured.to_dict(), f"{where}.latency")
        throughput[size] = present(entry.throughput_ips, f"{where}.throughput_ips")
    top_k = max(max((len(row) for row in evaluation.predictions), default=1), 1)
    return ResultUpload(
        accuracy=_headline(report),
        latency=latency,
        throughput=throughput,
        predictions=Predictions(
            top_k=top_k,
            labels=[int(label) for label in evaluation.labels],
            classes=[[c for c, _, _ in row] for row in evaluation.predictions],
            # (A text decoded from emitted token ids has no probability: its row holds none.)
            probabilities=[
                [round(p, 5) for _, _, p in row if p is not None] for row in evaluation.predictions
            ],
            # A detector's boxes, one per class above ([x, y, w, h] in the image's pixels).
            boxes=(
                [
                    [[round(float(v), 2) for v in row[:4]] for row in found]
                    for found in evaluation.detections
                ]
                if evaluation.detections is not None
                else ABSENT
            ),
            # A text recognizer's decoded line per input.
            texts=(
                [row[0][1] if row else "" for row in evaluation.predictions]
                if report.model is not ABSENT and report.model.task == "text_recognition"
                else ABSENT
            ),
        ),
        content_hash=present(present(report.model, "model").content_hash, "model.content_hash"),
        stack=introspection.stack([present(present(report.framework, "framework").name, "name")]),
        # The samples travel once, in `latency`, where the hub summarises them itself.
        details=replace(
            report,
            batch_sizes=[
                replace(entry, latency=replace(entry.latency, samples_ms=ABSENT))
                if entry.latency is not ABSENT
                else entry
                for entry in entries
            ],
            trace_level_requested=job.options.trace_level,
        ),
        layer_outputs=(
            base64.b64encode(evaluation.capture.to_bytes()).decode("ascii")
            if evaluation.capture is not None
            else ABSENT
        ),
    )


def _headline(report: Report) -> Headline:
    """The accuracy columns: the task's two headline metrics and the inputs scored; a
    latency-only run scored nothing, its accuracy is null and its count the inputs timed."""
    accuracy = report.accuracy
    if accuracy is None or accuracy is ABSENT:
        count = present(present(report.dataset, "dataset").count, "dataset.count")
        return Headline(top1=None, top5=None, count=count)
    return Headline(
        top1=present(accuracy.top1, "accuracy.top1"),
        top5=present(accuracy.top5, "accuracy.top5"),
        count=present(accuracy.count, "accuracy.count"),
    )


def with_spans(upload: ResultUpload, spans: dict[str, Any]) -> ResultUpload:
    """`upload` with what became of the job's spans (`close_trace`) in its details, and their
    note where not all were stored (`trace_export`)."""
    counts = SpanCounts.from_dict(spans, "details.spans")
    note = counts.note or ABSENT
    return replace(upload, details=replace(upload.details, spans=counts, trace_export=note))


def paged(
    upload: ResultUpload, page_bytes: int = PAGE_BYTES
) -> tuple[ResultUpload, list[PredictionsPage]]:
    """`upload` as it is and no page, where its predictions fit in `page_bytes` of JSON; else
    its predictions cut into pages of at most about `page_bytes` each (whole rows, in order,
    cut by each row's own size; a row larger than a page is a page of its own, and pages
    hold enough rows that there are at most MAX_PAGES), and the upload that names their
    number in their stead."""
    predictions = upload.predictions
    rows = predictions.count
    columns: list[list[Any]] = [predictions.labels, predictions.classes, predictions.probabilities]
    columns += [c for c in (predictions.boxes, predictions.texts) if c is not ABSENT]
    sizes = [
        len(json.dumps([column[row] for column in columns], separators=(",", ":")))
        for row in range(rows)
    ]
    if sum(sizes) <= page_bytes or rows <= 1:
        return upload, []
    fewest = math.ceil(rows / MAX_PAGES)  # rows a page holds at least
    cuts, size = [0], 0
    for row, row_size in enumerate(sizes):
        held = row - cuts[-1]
        if held and size + row_size > page_bytes and held >= fewest:
            cuts.append(row)
            size = 0
        size += row_size
    cuts.append(rows)
    pages = []
    for number, (first, end) in enumerate(zip(cuts, cuts[1:], strict=False)):
        cut = slice(first, end)
        pages.append(
            PredictionsPage(
                page=number,
                first=first,
                predictions=replace(
                    predictions,
                    labels=predictions.labels[cut],
                    classes=predictions.classes[cut],
                    probabilities=predictions.probabilities[cut],
                    boxes=(predictions.boxes[cut] if predictions.boxes is not ABSENT else ABSENT),
                    texts=(predictions.texts[cut] if predictions.texts is not ABSENT else ABSENT),
                ),
            )
        )
    named = Predictions(
        top_k=predictions.top_k, labels=[], classes=[], probabilities=[], pages=len(pages)
    )
    return replace(upload, predictions=named), pages
