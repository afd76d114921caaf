"""Spans delivered to a hub exactly once, through hub restarts and agent restarts.

An export is OTLP/HTTP as OpenTelemetry's exporter sends it (`POST {hub}/v1/traces`, an
`ExportTraceServiceRequest` in protobuf, a bearer token) with two headers of ours:

- `X-MLMS-Export`: a random id per export (32 hex digits). The hub stores an export once
  however often it arrives, so an export whose answer was lost can be sent again safely.
- `X-MLMS-Claim`: the agent's claim on the evaluation. The hub accepts the spans only while
  that claim is current: the spans of an attempt that the hub gave to another host are refused.

An export that the hub does not take (no connection, a timeout, 408, 429, 500, 502, 503, 504)
is written to the spool folder and sent again with exponential backoff (0.5 s, doubling, at
most 15 s between tries) for `retry_seconds` (300 by default), counted from the first failure of
a streak of failures: a hub that restarts within that time loses nothing. An export that the hub
refuses (any other 4xx) is counted as refused, with the hub's message, and is not sent again.
What is still undelivered when the time is up stays in the spool: `drain()` sends it again
later (the agent does at its start and every minute), until the hub takes or refuses it.

The spool holds one file per export, `<export id>.otlp`: a line of JSON (claim, span count,
when it was first tried) and then the protobuf body. A file is written whole under a temporary
name and renamed, so a killed process leaves no half-written export.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests

__all__ = ["Delivery", "SpanDelivery", "drain"]

logger = logging.getLogger(__name__)

EXPORT_HEADER = "X-MLMS-Export"
CLAIM_HEADER = "X-MLMS-Claim"
RETRY_SECONDS = 300.0
FIRST_DELAY = 0.5
MAX_DELAY = 15.0
TIMEOUT = 15.0
# The answers that say "not now" rather than "never".
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})
_SPOOLED = re.compile(r"^[0-9a-f]{32}\.otlp$")


@dataclass
class Delivery:
    """What became of the spans handed to one `SpanDelivery`."""

    sent: int = 0  # spans handed over for export
    stored: int = 0  # spans the hub answered as stored
    refused: int = 0  # spans the hub refused for good (see `refusals`)
    spooled: int = 0  # spans left in the spool when the retry time ran out
    retries: int = 0  # exports sent again after a failure

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class SpanDelivery:
    """Sends encoded exports to `{hub}/v1/traces` and keeps trying (see the module docstring).

    `deliver` blocks while it retries; it is called from one exporting thread at a time (the
    batch span processor's), and `stopping` cuts the waiting short.
    """

    def __init__(
        self,
        hub: str,
        token: str | None,
        *,
        claim: str | None = None,
        spool: Path | None = None,
        retry_seconds: float = RETRY_SECONDS,
        timeout: float = TIMEOUT,
    ) -> None:
        self.endpoint = f"{hub.rstrip('/')}/v1/traces"
        self.claim = claim
        self.spool = Path(spool) if spool is not None else None
        self.retry_seconds = retry_seconds
        self.timeout = timeout
        self.counts = Delivery()
        self.refusals: list[str] = []
        self.stopping = threading.Event()
        self._session = requests.Session()
        if token:
            self._session.headers["Authorization"] = f"Bearer {token}"
        self._failing_since: float | None = None

    def deliver(self, body: bytes, spans: int) -> bool:
        """Send one export (`spans` spans, protobuf `body`) until the hub takes or refuses it
        or the retry time runs out; whether the hub took it."""
        key = secrets.token_hex(16)
        self.counts.sent += spans
        spooled: Path | None = None
        delay = FIRST_DELAY
        while True:
            status, detail = _post(
                self._session, self.endpoint, body, key, self.claim, self.timeout
            )
            if status is not None and status < 300:
                self._failing_since = None
                self.counts.stored += spans
                _remove(spooled)
                return True
            if status is not None and status not in RETRYABLE:
                self._failing_since = None
                self.counts.refused += spans
                self.refusals.append(f"{status}: {detail}")
                logger.warning("the hub refused %s spans (%s): %s", spans, status, detail)
                _remove(spooled)
                return False
            now = time.monotonic()
            if self._failing_since is None:
                self._failing_since = now
            if spooled is None and self.spool is not None:
                spooled = _write(self.spool, key, body, self.claim, spans)
            if now - self._failing_since >= self.retry_seconds or self.stopping.is_set():
                self.counts.spooled += spans if spooled is not None else 0
                logger.warning(
                    "%s spans not delivered after %.0f s (%s)%s",
                    spans,
                    now - self._failing_since,
                    detail,
                    f"; kept in {spooled}" if spooled is not None else "",
                )
                return False
            logger.info("spans not delivered (%s); trying again in %.1f s", detail, delay)
            self.stopping.wait(delay)
            delay = min(delay * 2, MAX_DELAY)
            self.counts.retries += 1


def drain(
    spool: Path,
    hub: str,
    token: str | None,
    *,
    older_than: float = 0.0,
    timeout: float = TIMEOUT,
) -> Delivery:
    """Send the exports left in `spool` again, oldest first: those the hub takes or refuses
    leave the spool; the others stay for the next time. Skips exports spooled less than
    `older_than` seconds ago (their `SpanDelivery` may still be retrying them). Stops at the
    first export the hub does not answer (it is down: the others would fail too)."""
    counts = Delivery()
    if not spool.is_dir():
        return counts
    session = requests.Session()
    if token:
        session.headers["Authorization"] = f"Bearer {token}"
    endpoint = f"{hub.rstrip('/')}/v1/traces"
    cutoff = time.time() - older_than
    files = []
    for path in spool.iterdir():
        try:
            if _SPOOLED.match(path.name) and path.stat().st_mtime <= cutoff:
                files.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue  # delivered meanwhile
    for _mtime, path in sorted(files):
        try:
            meta, body = _read(path)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            logger.warning("unreadable spooled export %s (%s); removed", path.name, exc)
            _remove(path)
            continue
        spans = int(meta.get("spans", 0))
        counts.sent += spans
        status, detail = _post(session, endpoint, body, path.stem, meta.get("claim"), timeout)
        if status is not None and status < 300:
            counts.stored += spans
            _remove(path)
        elif status is not None and status not in RETRYABLE:
            counts.refused += spans
            logger.warning("the hub refused %s spooled spans (%s): %s", spans, status, detail)
            _remove(path)
        else:
            counts.spooled += spans
            break
    if counts.sent:
        logger.info("spooled spans sent again: %s", counts.as_dict())
    return counts


def _post(
    session: requests.Session,
    endpoint: str,
    body: bytes,
    key: str,
    claim: str | None,
    timeout: float,
) -> tuple[int | None, str]:
    """(status, the hub's message) of one try; (None, why) when the hub did not answer."""
    headers = {"Content-Type": "application/x-protobuf", EXPORT_HEADER: key}
    if claim:
        headers[CLAIM_HEADER] = claim
    try:
        response = session.post(endpoint, data=body, headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        return None, f"{type(exc).__name__}: {exc}"
    detail = ""
    if response.status_code >= 300:
        try:
            detail = str(response.json().get("detail", ""))
        except ValueError:
            detail = response.text[:200]
        detail = detail or response.reason or ""
    return response.status_code, detail


def _write(spool: Path, key: str, body: bytes, claim: str | None, spans: int) -> Path | None:
    try:
        spool.mkdir(parents=True, exist_ok=True)
        path = spool / f"{key}.otlp"
        partial = spool / f".{key}.partial"
        meta = {"claim": claim, "spans": spans, "first_tried": time.time()}
        with open(partial, "wb") as handle:
            handle.write(json.dumps(meta).encode() + b"\n")
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(path)
        return path
    except OSError as exc:
        logger.warning("cannot spool spans to %s: %s", spool, exc)
        return None


def _read(path: Path) -> tuple[dict[str, Any], bytes]:
    data = path.read_bytes()
    line, _, body = data.partition(b"\n")
    meta = json.loads(line)
    if not isinstance(meta, dict):
        raise ValueError("no header line")
    return meta, body


def _remove(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
