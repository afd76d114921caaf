"""Ingest processes: OTLP exports authorized, decoded and stored in processes of their own, so
that a hub uses more than one core for spans.

One hub process runs its Python code on one core at a time, and storing a 512-span export costs
it several milliseconds of it (columns, Parquet, rows), more than the HTTP around it. daphne's
process keeps the HTTP (its event loop reads the bodies and answers) and hands each body to one
of `TRACE_INGEST_PROCESSES` processes (started with multiprocessing's `spawn`), each a Django of
its own that runs exactly the code the in-thread path runs: the handler the receiver names
(`traces.api.receiver.authorized_receive`), called with the export's headers, body and whether
it was cut short, and answering what the receiver sends back.
Each is connected by a socket pair that the event loop reads and writes itself (a frame: 8
bytes of length, then a pickle), so a hand-off costs no thread of daphne's process; an export
waits for an idle process. What an export sends to open pages (its `spans` event) is collected
in the process that stored it and sent by daphne's, whose channel layer the pages listen on
(the embedded default's layer lives in that process alone).

The processes start with the first export, and until one of them is ready, exports are stored
in daphne's own thread, as with `TRACE_INGEST_PROCESSES=0`. A process that dies (killed, out of
memory) is replaced; the export it held is answered 503 with `Retry-After` (OTLP exporters send
it again; an export id, `X-MLMS-Export`, keeps one that was stored after all from being stored
twice); so is an export that found no process idle for `IDLE_WAIT_SECONDS`. The processes end
when daphne's does (they read the end of their socket).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hub.group_sends import collected, send_collected

logger = logging.getLogger(__name__)

__all__ = ["IDLE_WAIT_SECONDS", "Handler", "IngestPool", "Unavailable", "pool"]

# What an ingest process runs for each export: (headers, body, oversized) → the answer, which
# is pickled back to daphne's process.
Handler = Callable[[dict[str, str], bytes, bool], Any]

_LENGTH = struct.Struct("!Q")


# --- In an ingest process ------------------------------------------------------------------------


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes from `sock`, or None at its end."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    done = 0
    while done < size:
        count = sock.recv_into(view[done:])
        if not count:
            return None
        done += count
    return bytes(buffer)


def _serve(sock: socket.socket, handler: str) -> None:
    """An ingest process: Django, set up as daphne's process has it (from the environment),
    then one export after the other through `handler` (its dotted path: it is imported once
    Django is set up), until daphne's process closes its end."""
    # Ctrl-C in a terminal reaches the whole process group: daphne's process ends, and this
    # one with it when it reads the end of its socket.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlmodelscope.settings")
    import django
    from django.conf import settings

    # One thread stores every export of this process: one connection, kept between exports
    # (checked before each on PostgreSQL, `CONN_HEALTH_CHECKS`), not a pool of them. A hub
    # holds at most DATABASE_POOL_SIZE + TRACE_INGEST_PROCESSES connections to PostgreSQL.
    database = settings.DATABASES["default"]
    database.get("OPTIONS", {}).pop("pool", None)
    database["CONN_MAX_AGE"] = None
    django.setup(set_prefix=False)
    from django.utils.module_loading import import_string

    try:
        _answer_exports(sock, import_string(handler))
    except ConnectionError:  # daphne's process ended meanwhile
        pass


def _answer_exports(sock: socket.socket, handler: Handler) -> None:
    from django.db import close_old_connections

    sock.sendall(_LENGTH.pack(0))  # ready
    while True:
        head = _read_exactly(sock, _LENGTH.size)
        payload = _read_exactly(sock, _LENGTH.unpack(head)[0]) if head else None
        if payload is None:
            return
        headers, raw, oversized = pickle.loads(payload)  # noqa: S301 (daphne's process wrote it)
        events: list[Any] = []
        close_old_connections()
        try:
            with collected() as events:
                answer = handler(headers, raw, oversized)
        except Exception:
            logger.exception("storing an export failed")
            answer, events = None, []
        finally:
            close_old_connections()
        reply = pickle.dumps((answer, events), protocol=pickle.HIGHEST_PROTOCOL)
        sock.sendall(_LENGTH.pack(len(reply)) + reply)


# --- In daphne's process ---------------------------------------------------------------------------


@dataclass
class _Process:
    process: Any  # multiprocessing's SpawnProcess
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class Unavailable(Exception):
    """No ingest process answered the export (its message says why): the sender should send
    it again (503)."""


# How long an export waits for an idle ingest process (they are all busy, or all are starting
# again) before it is answered 503.
IDLE_WAIT_SECONDS = 60


class IngestPool:
    """`size` ingest processes that run `handler`, for the event loop they were started in."""

    def __init__(self, size: int, handler: Handler) -> None:
        self.size = size
        # A function of a module: the processes import it by name.
        self.handler = f"{handler.__module__}.{handler.__qualname__}"
        self.loop = asyncio.get_running_loop()
        self._idle: asyncio.Queue[_Process] = asyncio.Queue()
        self._ready = 0
        self._starting: set[asyncio.Task[None]] = set()
        for _ in range(size):
            self._start()

    @property
    def ready(self) -> bool:
        """Whether a process is ready (exports wait for an idle one from then on)."""
        return self._ready > 0

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        process = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(theirs, self.handler), name="mlmodelscope-ingest", daemon=True
        )
        try:
            process.start()
        except OSError:  # no process to be had (limits): exports stay in daphne's thread
            logger.exception("an ingest process could not be started")
            ours.close()
            return
        finally:
            theirs.close()
        task = self.loop.create_task(self._connect(process, ours))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _connect(self, process: Any, sock: socket.socket) -> None:
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=2**20)
        try:
            await reader.readexactly(_LENGTH.size)
        except (asyncio.IncompleteReadError, ConnectionError):
            logger.error(
                "an ingest process ended while it started (exit code %s)", process.exitcode
            )
            writer.close()
            return  # not replaced: what ended it would end the next one too
        self._ready += 1
        if self._ready == self.size:
            logger.info("%d ingest processes ready", self.size)
        self._idle.put_nowait(_Process(process, reader, writer))

    async def receive(self, headers: dict[str, str], raw: bytes, oversized: bool) -> Any:
        """An idle process's answer to an export (its events sent), None when the handler
        raised (the process logged it); Unavailable when none was idle within
        IDLE_WAIT_SECONDS, or when the process ended before it answered (it is replaced). The exchange goes on when the request is cancelled (its client left), so
        that the process is not left mid-answer."""
        try:
            worker = await asyncio.wait_for(self._idle.get(), IDLE_WAIT_SECONDS)
        except TimeoutError:
            raise Unavailable(
                f"No ingest process of the hub was free for {IDLE_WAIT_SECONDS} s; "
                "send the export again."
            ) from None
        payload = pickle.dumps((headers, raw, oversized), protocol=pickle.HIGHEST_PROTOCOL)
        return await asyncio.shield(self.loop.create_task(self._exchange(worker, payload)))

    async def _exchange(self, worker: _Process, payload: bytes) -> Any:
        try:
            worker.writer.write(_LENGTH.pack(len(payload)) + payload)
            await worker.writer.drain()
            size = _LENGTH.unpack(await worker.reader.readexactly(_LENGTH.size))[0]
            reply = await worker.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as error:
            self._ended(worker)
            raise Unavailable(
                "The hub's ingest process ended while it stored this export; send it again."
            ) from error
        self._idle.put_nowait(worker)
        answer, events = pickle.loads(reply)  # noqa: S301 (our own process wrote it)
        try:
            await send_collected(events)
        except Exception:  # the spans are stored: a page misses an update, as on_commit's would
            logger.exception("the events of a stored export were not sent")
        return answer

    def _ended(self, worker: _Process) -> None:
        self._ready -= 1
        worker.writer.close()
        worker.process.kill()
        logger.error(
            "an ingest process ended (exit code %s); starting another", worker.process.exitcode
        )
        self._start()


_POOLS: dict[tuple[asyncio.AbstractEventLoop, Handler], IngestPool] = {}


def pool(handler: Handler) -> IngestPool | None:
    """The ingest pool that runs `handler` for the running event loop, started on first use
    (None when `TRACE_INGEST_PROCESSES` is 0)."""
    from django.conf import settings

    if not settings.TRACE_INGEST_PROCESSES:
        return None
    key = (asyncio.get_running_loop(), handler)
    found = _POOLS.get(key)
    if found is None:
        found = _POOLS[key] = IngestPool(settings.TRACE_INGEST_PROCESSES, handler)
    return found
