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
"""

from __future__ import annotations

import json
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
