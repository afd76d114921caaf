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
from rest_framework.views import APIView

from evaluations import actions
from evaluations.api.serializers import ProgressSerializer
from evaluations.permissions import agent_token
from hub.api.openapi import error_response


class EvaluationProgress(APIView):
    required_scopes = {"POST": "agent"}

    @extend_schema(
        summary="Report progress (agents)",
        request=ProgressSerializer,
        responses={
            200: OpenApiTypes.OBJECT,
            409: error_response(
                409, "The claim is no longer current: the hub gave the job to another attempt."
            ),
        },
    )
    def post(self, request: Request, pk: UUID) -> Response:
        token = agent_token(request)
        serializer = ProgressSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        evaluation = actions.record_progress(pk, token, data["claim"], data["done"], data["total"])
        return Response(
            {"status": evaluation.status, "cancel_requested": evaluation.cancel_requested}
        )
