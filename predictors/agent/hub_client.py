"""The hub's HTTP API as the agent and the `mlms` CLI call it (the names and objects both sides
agree on are in `predictors.protocol`). Plain `requests`; no Django.

The agent's side: `agent_config`, `register_host`, `heartbeat`, `claim`, `report_progress`,
`report_status`, `post_predictions_page`, `post_result`. A user's side: `launch`, `evaluation`, `cancel`, and
`evaluate_remote`, which launches an evaluation on the hub and waits for its results.

Every error the hub answers is `{"detail", "errors": [{"path", "line", "message"}]}`; it is
raised as `HubError`, whose message names the field (`hub refused: batch_sizes: …`). A hub that
cannot be reached at all raises `HubUnreachable`, after a few retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import requests

from predictors.protocol import FINISHED, fit_reason

__all__ = [
    "HubClient",
    "HubError",
    "HubUnreachable",
    "evaluate_remote",
    "retries_within",
    "retry_delay",
]

_RETRY_STATUSES = {502, 503, 504}


def retry_delay(attempt: int) -> float:
    """How long `HubClient.request` waits after its `attempt`-th try (from 0): 0.5 s, 1 s, 2 s,
    … then every 15 s."""
    return min(0.5 * 2**attempt, 15.0)


def retries_within(seconds: float) -> int:
    """How many retries of `HubClient.request` span about `seconds`."""
    retries, waited = 0, 0.0
    while waited < seconds:
        waited += retry_delay(retries)
        retries += 1
    return retries


class HubError(Exception):
    """The hub answered with an error status."""

    def __init__(
        self,
        status: int,
        detail: str,
        errors: list[dict[str, Any]] | None = None,
        code: str = "",
    ):
        self.status = status
        # What the refusal means (`predictors.protocol.Code`; "" when the hub named none).
        self.code = code
        self.detail = detail
        self.errors = errors or []
        shown = "; ".join(
            f"{e['path']}: {e['message']}" if e.get("path") else str(e.get("message"))
            for e in self.errors
        )
        super().__init__(f"hub answered {status}: {shown or detail}")


class HubUnreachable(Exception):
    """The hub did not answer (connection refused, timed out, DNS failure)."""


class HubClient:
    """Calls to one hub with one bearer token."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 30, retries: int = 3):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    # -- plumbing ------------------------------------------------------------------------------

    def request(
        self, method: str, path: str, payload: Any = None, *, retries: int | None = None
    ) -> Any:
        """The JSON the hub answers to `method path`; HubError or HubUnreachable otherwise.

        Connection failures and 502/503/504 are retried `retries` times (0.5 s, 1 s, 2 s, …,
        at most 15 s apart).
        """
        url = f"{self.url}/api/v1/{path.lstrip('/')}"
        attempts = 1 + (self.retries if retries is None else retries)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self.session.request(method, url, json=payload, timeout=self.timeout)
            except requests.RequestException as exc:
                if last:
                    raise HubUnreachable(f"the hub at {self.url} did not answer: {exc}") from exc
            else:
                if response.status_code not in _RETRY_STATUSES or last:
                    return _answer(response)
            time.sleep(retry_delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the agent's calls ---------------------------------------------------------------------

    def agent_config(self, host_id: int) -> dict[str, Any]:
        """The broker, queues and heartbeat period of a registered host
        (`GET /agent/config/?host=<id>`)."""
        return dict(self.request("GET", f"agent/config/?host={host_id}"))

    def register_host(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Register (or update) the host; no retries: the agent waits for the hub itself."""
        return dict(self.request("POST", "hosts/", dict(payload), retries=0))

    def heartbeat(self, host_id: int) -> dict[str, Any]:
        return dict(self.request("POST", f"hosts/{host_id}/heartbeat/", retries=0))

    def claim(self, evaluation: str, host_id: int, dispatch: int) -> dict[str, Any]:
        """The job, if this host may run it; HubError 409 when another claim came first."""
        body = {"host": host_id, "dispatch": dispatch}
        return dict(self.request("POST", f"evaluations/{evaluation}/claim/", body))

    def report_progress(self, evaluation: str, claim: str, done: int, total: int) -> bool:
        """Record progress; True when the user asked to cancel the evaluation."""
        body = {"claim": claim, "done": done, "total": total}
        answer = self.request("POST", f"evaluations/{evaluation}/progress/", body, retries=1)
        return bool(answer.get("cancel_requested"))

    def report_status(
        self,
        evaluation: str,
        claim: str,
        status: str,
        reason: str,
        *,
        retries: int | None = None,
    ) -> None:
        """Finish an evaluation as `failed` or `cancelled`, saying why."""
        body = {"claim": claim, "status": status, "reason": fit_reason(reason)}
        self.request("POST", f"evaluations/{evaluation}/status/", body, retries=retries)

    def post_result(
        self,
        evaluation: str,
        claim: str,
        result: Mapping[str, Any],
        *,
        retries: int | None = None,
    ) -> None:
        """Store the result (posting the same claim's result again is harmless)."""
        body = {"claim": claim, **result}
        self.request("POST", f"evaluations/{evaluation}/result/", body, retries=retries)

    def post_predictions_page(
        self,
        evaluation: str,
        claim: str,
        page: Mapping[str, Any],
        *,
        retries: int | None = None,
    ) -> None:
        """Stage a page of the result's predictions (posting the same page again is
        harmless)."""
        body = {"claim": claim, **page}
        self.request("POST", f"evaluations/{evaluation}/result/predictions/", body, retries=retries)

    # -- a user's calls ------------------------------------------------------------------------

    def launch(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """`POST /evaluations/`: {"group", "evaluations": [...]}."""
        return dict(self.request("POST", "evaluations/", dict(request), retries=0))

    def evaluation(self, evaluation: str) -> dict[str, Any]:
        return dict(self.request("GET", f"evaluations/{evaluation}/"))

    def evaluations(self, query: Mapping[str, str]) -> dict[str, Any]:
        """A page of `GET /evaluations/` with the history's filters and ordering (`query`:
        the API's query parameters; the hub refuses one it does not know, naming it)."""
        return dict(self.request("GET", f"evaluations/?{urlencode(dict(query))}"))

    def cancel(self, evaluation: str) -> dict[str, Any]:
        return dict(self.request("POST", f"evaluations/{evaluation}/cancel/"))

    def publish(self, evaluation: str, *, published: bool = True) -> dict[str, Any]:
        """Publish (or unpublish) an evaluation of the caller's; the hub refuses one of a
        private model or dataset, saying why."""
        method = "POST" if published else "DELETE"
        return dict(self.request(method, f"evaluations/{evaluation}/publish/", retries=0))

    def share(self, evaluation: str, group: str, *, shared: bool = True) -> dict[str, Any]:
        """Share an evaluation of the caller's with one of their groups (or stop sharing)."""
        if shared:
            body = {"group": group}
            return dict(self.request("POST", f"evaluations/{evaluation}/shares/", body, retries=0))
        self.request("DELETE", f"evaluations/{evaluation}/shares/{quote(group, safe='')}/")
        return {}


def evaluate_remote(
    hub: str,
    token: str,
    request: Mapping[str, Any],
    *,
    poll_seconds: float = 1.0,
    timeout: float | None = None,
    on_update: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Launch an evaluation on `hub` and wait until every evaluation it launched has finished.

    `request` holds the fields of `POST /api/v1/evaluations/` (model, framework, dataset,
    batch_sizes, …; see docs/api.md). Returns the finished evaluations (as
    `GET /api/v1/evaluations/<id>/` answers). `on_update` is called with an evaluation each
    time its status or progress changes. On `timeout` (seconds) the evaluations still running
    are cancelled and TimeoutError is raised. Raises HubError when the hub refuses the request
    (its message names the field or the unmet constraint).
    """
    client = HubClient(hub, token)
    launched = client.launch(request)
    pending = {e["id"]: e for e in launched["evaluations"]}
    finished: dict[str, dict[str, Any]] = {}
    seen: dict[str, tuple[Any, ...]] = {}
    deadline = None if timeout is None else time.monotonic() + timeout
    while pending:
        for key in list(pending):
            current = client.evaluation(key)
            state = (current["status"], current["progress"]["done"], current["progress"]["total"])
            if on_update is not None and seen.get(key) != state:
                on_update(current)
            seen[key] = state
            if current["status"] in FINISHED:
                finished[key] = current
                del pending[key]
        if not pending:
            break
        if deadline is not None and time.monotonic() > deadline:
            for key in pending:
                client.cancel(key)
            raise TimeoutError(
                f"{len(pending)} evaluation(s) did not finish within {timeout:g} s; cancelled"
            )
        time.sleep(poll_seconds)
    return [finished[e["id"]] for e in launched["evaluations"]]


def _answer(response: requests.Response) -> Any:
    try:
        body = response.json() if response.content else {}
    except ValueError:
        body = None
    if response.status_code >= 400:
        if isinstance(body, dict):
            errors = body.get("errors") if isinstance(body.get("errors"), list) else []
            code = body.get("code")
            raise HubError(
                response.status_code,
                str(body.get("detail", "")),
                errors,
                code if isinstance(code, str) else "",
            )
        raise HubError(response.status_code, response.reason or "error")
    if body is None:
        raise HubError(response.status_code, "the hub answered something other than JSON")
    return body
