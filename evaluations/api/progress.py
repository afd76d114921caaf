"""`POST /api/v1/evaluations/<id>/progress/` (agent): predictions done of total.

The claimant reports at least every few seconds while it works (downloads and model loading
included), which is how the hub tells a working agent from a lost one. The answer says whether
the user asked to cancel: `{"status", "cancel_requested"}`. A claim that is no longer current
answers 409, and the agent stops working on the job.
"""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import actions
from evaluations.api.agents import CLAIM_SUPERSEDED, AgentEndpoint, agent_body
from evaluations.api.serializers import ProgressSerializer


class EvaluationProgress(AgentEndpoint):
    @extend_schema(
        summary="Report progress (agents)",
        request=ProgressSerializer,
        responses={200: OpenApiTypes.OBJECT, 409: CLAIM_SUPERSEDED},
    )
    def post(self, request: Request, pk: UUID) -> Response:
        token, data = agent_body(request, ProgressSerializer)
        evaluation = actions.record_progress(pk, token, data["claim"], data["done"], data["total"])
        return Response(
            {"status": evaluation.status, "cancel_requested": evaluation.cancel_requested}
        )
