"""Idle WebSockets on a hub in production mode: do they stay open, and do they still receive?
A check over minutes, not a test; see docs/reliability.md.

    .venv/bin/python benchmarks/idle_websocket.py [--sockets 4] [--minutes 10] [--json]

A hub of its own (`_production.production_hub`: daphne, a fresh PostgreSQL database, Redis as
broker and channel layer) and `--sockets` WebSockets on one evaluation
(`/ws/evaluations/<id>/?token=`), each read by a thread of its own that answers daphne's pings
as a browser does. Nothing is sent to them for `--minutes`; then spans are exported into the
evaluation's trace (`POST /v1/traces`), and every socket still open must receive the `spans`
event within 10 s. Prints, per socket, when it closed and with which code (or that it stayed
open), the pings it answered and whether it received the event; exits 1 unless every socket
stayed open and received it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _hub, _production  # noqa: E402
from benchmarks._hub import log  # noqa: E402
from tests.livehub import Closed, WebSocket  # noqa: E402


def watch(socket_: WebSocket, until: float, outcome: dict[str, Any]) -> None:
    """Read the idle socket until the monotonic time `until`, noting a close or any message."""
    opened = time.monotonic()
    try:
        while (left := until - time.monotonic()) > 0:
            message = socket_.receive(timeout=left)
            if message is not None:
                outcome.setdefault("unexpected", []).append(message)
    except Closed as closed:
        outcome["closed_after_s"] = round(time.monotonic() - opened, 1)
        outcome["close_code"] = closed.code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--json", action="store_true", help="print JSON instead of lines")
    args = parser.parse_args(argv)

    machine = _hub.machine()
    with tempfile.TemporaryDirectory(prefix="mlms-idle-websocket-") as folder:
        with _production.production_hub(Path(folder)) as hub:
            log(f"daphne at {hub.url}; {args.sockets} sockets idle for {args.minutes} min")
            sockets = [_production.follow(hub) for _ in range(args.sockets)]
            outcomes: list[dict[str, Any]] = [{} for _ in sockets]
            until = time.monotonic() + args.minutes * 60
            threads = [
                threading.Thread(target=watch, args=(s, until, o), daemon=True)
                for s, o in zip(sockets, outcomes, strict=True)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            _production.export_spans(hub)
            for socket_, outcome in zip(sockets, outcomes, strict=True):
                outcome["pings_answered"] = socket_.pings
                if "close_code" in outcome:
                    continue
                try:
                    event = socket_.receive(timeout=10)
                except Closed as closed:
                    outcome["close_code"] = closed.code
                    continue
                outcome["received_event"] = bool(event and event.get("type") == "spans")
                socket_.close()
            daphne_log = hub.logs()
    ok = all(o.get("received_event") and "close_code" not in o for o in outcomes)
    figures = {"sockets": outcomes, "minutes": args.minutes, "ok": ok, "machine": machine}
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for index, outcome in enumerate(outcomes):
            print(f"socket {index}: {outcome}")
        print(f"all stayed open and received the event after {args.minutes} min: {ok}")
    if not ok:
        log(f"daphne's log:\n{daphne_log}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
