"""Who may do what with evaluations, beyond the scopes every endpoint checks.

- A user sees, and cancels, their own evaluations; staff see and cancel every evaluation
  (`Evaluation.objects.visible_to`).
- An agent token acts only on the evaluations its own hosts (those it registered) claimed, and
  may download the files of their model and dataset manifests through /api/v1/artifacts/,
  even when another user's manifest is private, while its host holds the live claim on the
  evaluation and may still run it (`hub.trust`).
"""

from __future__ import annotations

from django.db.models import Q
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request

from evaluations.models import Evaluation
from hub import trust
from hub.models import ApiToken, Artifact, Host, Manifest


def why_host_may_not_run(evaluation: Evaluation, host: Host) -> str | None:
    """Why `host` may not run `evaluation` (`hub.trust`), or None. A manifest deleted since the
    launch is left out (the claim or the run says what that means)."""
    manifests = [m for m in (evaluation.model, evaluation.dataset) if m is not None]
    named = str(evaluation.request.get("host") or "")
    if not trust.trusts(evaluation.user, host, named=named):
        return f"its launcher does not trust host {host.name}"
    if not trust.reads(host, manifests):
        return f"the owner of host {host.name} may not read its model or dataset"
    return None


def agent_may_fetch(token: ApiToken, artifact: Artifact) -> bool:
    """Whether an agent token's host holds the live claim on an evaluation that needs
    `artifact`, and may still run it (`hub.trust`)."""
    if "agent" not in token.scopes:
        return False
    manifests = Manifest.objects.filter(artifacts=artifact)
    running = (
        Evaluation.objects.filter(status=Evaluation.RUNNING, host__token=token)
        .filter(Q(model__in=manifests) | Q(dataset__in=manifests))
        .select_related("host", "model", "dataset", "user")
    )
    return any(
        evaluation.host is not None and why_host_may_not_run(evaluation, evaluation.host) is None
        for evaluation in running
    )


def agent_token(request: Request) -> ApiToken:
    """The agent token of a request to an agent-facing endpoint (which needs scope `agent`)."""
    if not isinstance(request.auth, ApiToken):
        raise PermissionDenied("Agents call this endpoint with an agent token (scope 'agent').")
    return request.auth
