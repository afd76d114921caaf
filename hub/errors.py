"""Domain errors: what the hub's actions raise when a request cannot be done.

Actions (`hub.actions`, `evaluations.actions`, …) know nothing of HTTP: they raise one of these
kinds with a code (`hub.error_codes`, `evaluations.error_codes`) and the field path at fault;
the API layer maps each kind to its HTTP status (`hub.api.errors`), the pages show the message
beside the field, and an agent decides by the code (`predictors.protocol.Code`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Conflict", "DomainError", "Forbidden", "Invalid", "NotFound", "TooLarge"]


class DomainError(Exception):
    """A refused request: `errors` is a list of {path, line, message}, `code` what it means."""

    default_code = "invalid"

    def __init__(
        self,
        problem: str | Sequence[dict[str, Any]],
        *,
        path: str = "",
        code: str | None = None,
    ):
        if isinstance(problem, str):
            problems: Sequence[dict[str, Any]] = [{"path": path, "message": problem}]
        else:
            problems = problem
        self.errors = [
            {"path": str(p.get("path", "")), "line": p.get("line"), "message": str(p["message"])}
            for p in problems
        ]
        self.code = str(code or self.default_code)
        super().__init__(self.errors[0]["message"] if self.errors else "invalid request")

    @property
    def message(self) -> str:
        return str(self)


class Invalid(DomainError):
    """The request is malformed or cannot be met as asked."""

    default_code = "invalid"


class NotFound(DomainError):
    """What the request names does not exist, or is not visible to the caller."""

    default_code = "not_found"


class Forbidden(DomainError):
    """The caller may not do this."""

    default_code = "forbidden"


class Conflict(DomainError):
    """The request clashes with the current state (a name taken, a job claimed)."""

    default_code = "conflict"


class TooLarge(DomainError):
    """The request is larger than a limit allows."""

    default_code = "too_large"
