"""Finishing a trace: when its evaluation finishes, its chunks are compacted into one file (with
its overview, `traces.store`) and its aggregates computed and kept (`traces.aggregates`), so
that the first visit of the timeline, the per-layer table or a comparison reads them ready
made instead of computing them.

It runs in the background, in the hub process that recorded the evaluation's end (or stored a
late export into a finished evaluation's trace), on one worker thread per process, once the
transaction that did so has committed. The hub's periodic sweep (`evaluations.sweeper`) finishes
what a process did not get to (it stopped first): the traces of finished evaluations holding
chunks that no finish has seen (`Trace.finished_chunks`).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connections
from django.db.models import F

from traces import aggregates
from traces.models import Trace
from traces.store import get_store

logger = logging.getLogger(__name__)

# How many traces one sweep hands to the worker at most.
SWEEP_BATCH = 20

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-finish")
_lock = threading.Lock()
_pending: dict[str, Future[bool]] = {}


def finish(trace_id: str) -> bool:
    """Compact the trace's chunks and store its aggregates, now, in this thread; whether the
    trace exists. Safe to run again: it redoes only what chunks that arrived since need."""
    trace = Trace.objects.filter(trace_id=trace_id).first()
    if trace is None:
        return False
    chunks = trace.chunk_count
    get_store().compact(trace_id)
    aggregates.store(trace)
    Trace.objects.filter(pk=trace.pk, finished_chunks__lt=chunks).update(finished_chunks=chunks)
    return True


def _run(trace_id: str) -> bool:
    with _lock:
        _pending.pop(trace_id, None)
    try:
        return finish(trace_id)
    except Exception:
        logger.exception("finishing trace %s failed; the sweep tries again", trace_id)
        return False
    finally:
        # This thread's connections are its own: closed, so that none outlives the work.
        connections.close_all()


def schedule(trace_id: str) -> Future[bool]:
    """Finish the trace in the background (once, however often asked while it waits)."""
    with _lock:
        future = _pending.get(trace_id)
        if future is None:
            future = _pending[trace_id] = _executor.submit(_run, trace_id)
        return future


def wait(timeout: float = 60.0) -> None:
    """Wait until every finish asked for so far has run (tests, and shutting down)."""
    done = threading.Event()
    _executor.submit(done.set)
    done.wait(timeout)


def unfinished(limit: int = SWEEP_BATCH) -> list[str]:
    """Trace ids of finished evaluations holding chunks that no finish has seen."""
    from evaluations.models import Evaluation

    rows = (
        Trace.objects.filter(evaluation__status__in=Evaluation.FINISHED)
        .exclude(finished_chunks=F("chunk_count"))
        .order_by("updated_at")
        .values_list("trace_id", flat=True)
    )
    return list(rows[:limit])


def sweep() -> int:
    """Schedule the traces `unfinished` finds; how many."""
    found = unfinished()
    for trace_id in found:
        schedule(trace_id)
    return len(found)
