"""An answer, rather than a dropped connection, for a request line or header line too long.

daphne serves HTTP with Twisted's `HTTPChannel`, a `LineReceiver` that reads the request line
and each header line up to `MAX_LENGTH` bytes (16 KiB). A longer line goes to
`lineLengthExceeded`, which `LineReceiver` implements by closing the connection: the client
gets no status at all, and neither Django nor any middleware ever sees the request, so nothing
in the hub's own code can answer it. daphne builds its channels itself (`daphne.server.Server`
takes no protocol class), so `answer_overlong_lines` replaces that one method on Twisted's class:
the channel answers **414 URI Too Long** for the request line and **431 Request Header Fields
Too Large** for a header line, in the API's JSON error format, and then closes the connection,
as Twisted does after its other refusals (`_respondToBadRequestAndDisconnect`).

Requests whose lines fit but whose request line and headers together pass Twisted's
`totalHeadersSize` (16 KiB) are still answered by Twisted itself: a bare 400.

`bodies_in_memory` keeps a request body of up to `IN_MEMORY_BODY_BYTES` in memory while it
arrives, where Twisted (`Request.gotLength`) writes every body of 100,000 bytes or more to a
temporary file that daphne then reads back: a file made, written, read and closed per request
was half of the event loop's time for OTLP exports of 512 spans (166 KiB). It saves no memory
under daphne, which hands the whole body to the application at once anyway; the larger bodies
(model uploads) still go through a temporary file.
"""

from __future__ import annotations

import io
import json
import tempfile
from typing import Any

from twisted.web import http


def _response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps(
        {
            "detail": message,
            "code": "too_large",
            "errors": [{"path": "", "line": None, "message": message}],
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _line_length_exceeded(channel: Any, line: bytes) -> None:
    """`HTTPChannel.lineLengthExceeded` (`channel` is the `http.HTTPChannel`)."""
    limit = channel.MAX_LENGTH
    # Twisted counts the header bytes of the request being read, and resets the count for the
    # next request on the connection: none counted yet means the overlong line is the first.
    if not getattr(channel, "_receivedHeaderSize", 0):
        answer = _response(
            414,
            "URI Too Long",
            f"The request line (method, URL and version) is longer than {limit} bytes; "
            "send a shorter URL.",
        )
    else:
        answer = _response(
            431,
            "Request Header Fields Too Large",
            f"A request header line is longer than {limit} bytes.",
        )
    channel.transport.write(answer)
    channel.loseConnection()


def answer_overlong_lines() -> None:
    """Make every Twisted HTTP channel of this process answer an overlong line (idempotent)."""
    http.HTTPChannel.lineLengthExceeded = _line_length_exceeded  # type: ignore[method-assign,assignment]


# The body bytes of one ASGI `http.request` message: daphne's default (8 KiB; its command line
# has no option for it) cut a 166 KiB OTLP export into 21 messages, each a turn of the event
# loop for the application that reads them.
BODY_MESSAGE_BYTES = 1024 * 1024
# The longest request body kept in memory while it arrives (longer ones, or of unknown length,
# go to a temporary file as Twisted does).
IN_MEMORY_BODY_BYTES = 4 * 1024 * 1024


def _got_length(request: Any, length: int | None) -> None:
    """`http.Request.gotLength`: where the body of `length` bytes is kept as it arrives."""
    server = getattr(request, "server", None)  # daphne's `Server` (WebRequest sets it)
    if server is not None and server.request_buffer_size < BODY_MESSAGE_BYTES:
        server.request_buffer_size = BODY_MESSAGE_BYTES
    if length is not None and length <= IN_MEMORY_BODY_BYTES:
        request.content = io.BytesIO()
    else:
        request.content = tempfile.TemporaryFile()


def bodies_in_memory() -> None:
    """Keep every Twisted HTTP request body of this process of up to IN_MEMORY_BODY_BYTES in
    memory (idempotent)."""
    http.Request.gotLength = _got_length  # type: ignore[method-assign,assignment]
