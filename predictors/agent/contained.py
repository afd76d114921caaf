"""One evaluation inside a predictor container (`mlms agent --docker` starts it; never by hand).

    python -m predictors.agent.contained /mlms/run

The container has no network at all and holds no token. It talks only to the agent that
started it, over a Unix socket in the run folder (`/mlms/run/agent.sock`), one JSON object a
line, each request answered before the next is sent:

    {"op": "job"}                                  → the job (`protocol.Job.to_dict()`)
    {"op": "fetch", "url": …, "sha256": …}         → {"path": …} (the file, in the read-only
                                                      folder the agent mounted; only files of
                                                      the job's manifests) or {"error": …}
    {"op": "progress", "done": n, "total": m}      → {"cancelled": bool}
    {"op": "spans", "spans": [ {name, start_ns, …}, … ]}  → {}
    {"op": "result", "upload": {…}}                → {}   (a `ResultUpload`)
    {"op": "failed", "message": …, "user": bool}   → {}
    {"op": "cancelled"}                            → {}

The agent fetches the files (it holds the hub's token), sends the progress and the spans on to
the hub, and posts the result. The stack recorded in the result is the container's own: its
Python, NumPy and framework, and the image the agent ran.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from predictors import manifests
from predictors.agent.containers import CUSTOM_CODE_ENV, CUSTOM_CODE_SECONDS_ENV
from predictors.agent.relay import SOCKET
from predictors.agent.results import result_upload  # the agent's own summary of a result
from predictors.evaluation import (
    USER_ERRORS,
    EvaluationCancelled,
    EvaluationError,
    EvaluationOptions,
    evaluate,
)
from predictors.processing import custom_code
from predictors.processing.custom_code import CustomCodeError
from predictors.protocol import Job, local_device
from predictors.tracing import Span

# How often the container sends its progress (and learns of a cancel).
REPORT_SECONDS = 1.0


class Channel:
    """The container's end of the socket: one request at a time, from any thread."""

    def __init__(self, path: Path) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(str(path))
        self._reader = self._socket.makefile("r", encoding="utf-8")
        self._lock = threading.Lock()

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        line = json.dumps(message, default=str, separators=(",", ":")) + "\n"
        with self._lock:
            self._socket.sendall(line.encode())
            answer = self._reader.readline()
        if not answer:
            raise ConnectionError("the agent closed the channel")
        value = json.loads(answer)
        assert isinstance(value, dict)
        return value


class _Sink:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def write(self, spans: Sequence[Span]) -> None:
        if spans:
            self.channel.ask({"op": "spans", "spans": [asdict(span) for span in spans]})


class _Progress(threading.Thread):
    """Sends the progress every REPORT_SECONDS; the loop only writes two attributes."""

    def __init__(self, channel: Channel) -> None:
        super().__init__(name="progress", daemon=True)
        self.channel = channel
        self.done = 0
        self.total = 0
        self.cancelled = threading.Event()
        self.finished = threading.Event()

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def run(self) -> None:
        while not self.finished.wait(REPORT_SECONDS):
            answer = self.channel.ask({"op": "progress", "done": self.done, "total": self.total})
            if answer.get("cancelled"):
                self.cancelled.set()


def _fetch(channel: Channel) -> Any:
    def fetch(url: str, sha256: str | None) -> Path:
        answer = channel.ask({"op": "fetch", "url": url, "sha256": sha256})
        if "error" in answer:
            raise EvaluationError(str(answer["error"]))
        return Path(str(answer["path"]))

    return fetch


def run(channel: Channel) -> None:
    job = Job.from_dict(channel.ask({"op": "job"}))
    progress = _Progress(channel)
    progress.start()
    try:
        model = manifests.load(job.model.source, kind="model")
        dataset = manifests.load(job.dataset.source, kind="dataset")
        traced = bool(job.trace_id) and job.options.trace_level != "none"
        evaluation = evaluate(
            model,
            dataset,
            EvaluationOptions.from_job(
                job.options, device=local_device(job.device), **_custom_code_options(channel)
            ),
            _fetch(channel),
            progress=progress.progress,
            cancelled=progress.cancelled.is_set,
            sink=_Sink(channel) if traced else _Discard(),
        )
    except EvaluationCancelled:
        progress.finished.set()
        channel.ask({"op": "cancelled"})
        return
    except CustomCodeError as exc:  # its traceback keeps its lines
        progress.finished.set()
        channel.ask({"op": "failed", "message": str(exc), "user": True})
        return
    except USER_ERRORS as exc:
        progress.finished.set()
        channel.ask({"op": "failed", "message": " ".join(str(exc).split()), "user": True})
        return
    except Exception as exc:
        progress.finished.set()
        message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        channel.ask({"op": "failed", "message": message, "user": False})
        return
    progress.finished.set()
    progress.join()
    channel.ask({"op": "progress", "done": progress.done, "total": progress.total})
    channel.ask({"op": "result", "upload": result_upload(job, evaluation).to_dict()})


def _custom_code_options(channel: Channel) -> dict[str, Any]:
    """Whether this container runs the manifest's custom code, as the agent that started it
    says (`mlms agent --allow-custom-code`); a call that runs past its limit ends the run with
    the watchdog's message sent to the agent."""
    if os.environ.get(CUSTOM_CODE_ENV) != "1":
        return {}
    seconds = float(os.environ.get(CUSTOM_CODE_SECONDS_ENV) or custom_code.DEFAULT_CALL_SECONDS)

    def timed_out(message: str) -> None:
        channel.ask({"op": "failed", "message": message, "user": True})

    custom_code.on_timeout = timed_out
    return {"custom_code": True, "custom_code_seconds": seconds}


class _Discard:
    """An untraced run's sink: its spans go nowhere."""

    def write(self, spans: Sequence[Span]) -> None:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    folder = Path(args[0] if args else "/mlms/run")
    channel = Channel(folder / SOCKET)
    run(channel)
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not SystemExit: a thread the manifest's custom code started must not keep the container
    # alive once the outcome is sent.
    os._exit(status)
