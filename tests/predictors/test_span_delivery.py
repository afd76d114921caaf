"""`predictors.tracing.delivery` against a real HTTP server that goes away and comes back: spans
are retried through an outage, spooled when the time runs out and sent again by `drain`, sent
under one export id however often, and a refusal is not retried."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from predictors.tracing import Span, Tracer
from predictors.tracing import delivery as span_delivery
from predictors.tracing.delivery import SpanDelivery, drain


class Collector:
    """An OTLP endpoint on a fixed port that can be stopped (connection refused) and started
    again, and told to answer a status. Records (export id, claim, body) of what it took."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.taken: list[tuple[str, str, bytes]] = []
        self.answer = 200
        self.requests = 0
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.requests += 1
                if collector.answer == 200:
                    collector.taken.append(
                        (
                            self.headers.get("X-MLMS-Export", ""),
                            self.headers.get("X-MLMS-Claim", ""),
                            body,
                        )
                    )
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                message = b'{"detail": "no longer current"}'
                self.send_response(collector.answer)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(message)))
                self.end_headers()
                self.wfile.write(message)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(span_delivery, "FIRST_DELAY", 0.05)
    monkeypatch.setattr(span_delivery, "MAX_DELAY", 0.2)


def _spans(count: int) -> list[Span]:
    return [Span(f"s{i}", 1_000 + i, 2_000 + i, span_id=i + 1) for i in range(count)]


def test_spans_are_retried_through_an_outage_and_arrive_once(
    collector: Collector, tmp_path: Path
) -> None:
    collector.stop()  # the hub is down when the export starts
    tracer = Tracer(hub=collector.url, token="t", claim="c" * 32, spool=tmp_path, retry_seconds=60)
    restart = threading.Timer(1.5, collector.start)
    restart.start()
    tracer.record(_spans(1500), attributes={"model": "m"})
    tracer.flush()
    tracer.shutdown()
    restart.join()

    assert tracer.delivery is not None
    counts = tracer.delivery.counts
    assert counts.sent == counts.stored == 1501 and counts.retries > 0
    assert counts.refused == counts.spooled == 0
    keys = [key for key, _, _ in collector.taken]
    assert len(keys) == len(set(keys)) == 3  # 512-span exports, each taken once
    assert {claim for _, claim, _ in collector.taken} == {"c" * 32}
    assert list(tmp_path.iterdir()) == []  # nothing left in the spool


def test_undelivered_spans_wait_in_the_spool_and_drain_sends_them(
    collector: Collector, tmp_path: Path
) -> None:
    collector.stop()
    delivery = SpanDelivery(collector.url, "t", claim="c" * 32, spool=tmp_path, retry_seconds=0.5)
    started = time.monotonic()
    assert delivery.deliver(b"first", 10) is False
    assert delivery.deliver(b"second", 20) is False
    assert time.monotonic() - started < 5  # the streak's time is shared, not per export
    assert delivery.counts.spooled == 30 and delivery.counts.stored == 0
    spooled = sorted(tmp_path.iterdir())
    assert len(spooled) == 2 and all(p.suffix == ".otlp" for p in spooled)

    assert drain(tmp_path, collector.url, "t").stored == 0  # still down: all stay
    assert len(list(tmp_path.iterdir())) == 2
    collector.start()
    counts = drain(tmp_path, collector.url, "t")

    assert counts.stored == 30 and list(tmp_path.iterdir()) == []
    assert sorted(body for _, _, body in collector.taken) == [b"first", b"second"]
    assert {key + ".otlp" for key, _, _ in collector.taken} == {p.name for p in spooled}
    assert {claim for _, claim, _ in collector.taken} == {"c" * 32}


def test_drain_leaves_exports_that_are_still_being_retried(
    collector: Collector, tmp_path: Path
) -> None:
    collector.stop()
    SpanDelivery(collector.url, "t", spool=tmp_path, retry_seconds=0).deliver(b"x", 1)
    collector.start()
    assert drain(tmp_path, collector.url, "t", older_than=3600).sent == 0
    assert len(list(tmp_path.iterdir())) == 1


def test_a_refused_export_is_not_retried_or_spooled(collector: Collector, tmp_path: Path) -> None:
    collector.answer = 409
    delivery = SpanDelivery(collector.url, "t", spool=tmp_path, retry_seconds=60)
    assert delivery.deliver(b"x", 7) is False
    assert collector.requests == 1
    assert delivery.counts.refused == 7 and delivery.refusals == ["409: no longer current"]
    assert list(tmp_path.iterdir()) == []


def test_a_busy_hub_is_tried_again(collector: Collector, tmp_path: Path) -> None:
    collector.answer = 503
    threading.Timer(0.5, lambda: setattr(collector, "answer", 200)).start()
    delivery = SpanDelivery(collector.url, "t", spool=tmp_path, retry_seconds=60)
    assert delivery.deliver(b"x", 7) is True
    assert collector.requests > 1 and delivery.counts.stored == 7
    assert list(tmp_path.iterdir()) == []
