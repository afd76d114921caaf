"""`POST /api/v1/evaluations/<id>/status/` (agent): finish as `failed` or `cancelled`, or give
the job back as `lost`.

`{"claim", "status": "failed", "reason": "…"}`: the reason is the message a user acts on (a
file missing from the store, the framework's error, a version outside the manifest's range).
`{"claim", "status": "cancelled"}` confirms a cancel the user asked for.
`{"claim", "status": "lost", "reason": "…"}`: the agent could not finish the job for a reason
that another attempt may not meet (its container was killed mid-run); the hub dispatches it
again, or fails it after EVALUATION_MAX_ATTEMPTS attempts, as it does for a lost agent.
"""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import actions
from evaluations.api.agents import CLAIM_SUPERSEDED, AgentEndpoint, agent_body
from evaluations.api.serializers import AgentStatusSerializer
from evaluations.listing import EvaluationSerializer


class EvaluationStatus(AgentEndpoint):
    @extend_schema(
        summary="Report that an evaluation failed, was cancelled or was lost (agents)",
        request=AgentStatusSerializer,
        responses={200: EvaluationSerializer, 409: CLAIM_SUPERSEDED},
    )
    def post(self, request: Request, pk: UUID) -> Response:
        token, data = agent_body(request, AgentStatusSerializer)
        evaluation = actions.report_status(
            pk, token, data["claim"], data["status"], data["reason"].strip()
        )
        return Response(EvaluationSerializer(evaluation).data)
