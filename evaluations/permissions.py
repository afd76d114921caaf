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
from hub.models import ApiToken, Artifact, Manifest


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
        evaluation.host is not None and evaluation.why_not_on(evaluation.host) is None
        for evaluation in running
    )


def agent_token(request: Request) -> ApiToken:
    """The agent token of a request to an agent-facing endpoint (which needs scope `agent`)."""
    if not isinstance(request.auth, ApiToken):
        raise PermissionDenied("Agents call this endpoint with an agent token (scope 'agent').")
    return request.auth
