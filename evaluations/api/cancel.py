"""`POST /api/v1/evaluations/<id>/cancel/`: stop an evaluation.

Queued and dispatched evaluations are cancelled at once. A running one is marked
`cancel_requested`; its agent learns it from the answer to its next progress report (at most a
second later), stops between two predictions and reports `cancelled`.
"""

from __future__ import annotations

from uuid import UUID

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluations import actions
from evaluations.api.evaluations import visible_evaluations
from evaluations.api.serializers import EvaluationDetailSerializer
from hub.api.openapi import error_response


class EvaluationCancel(APIView):
    required_scopes = {"POST": "evaluate"}

    @extend_schema(
        summary="Cancel an evaluation",
        request=None,
        responses={
            200: EvaluationDetailSerializer,
            409: error_response(409, "The evaluation has finished already."),
        },
    )
    def post(self, request: Request, pk: UUID) -> Response:
        get_object_or_404(visible_evaluations(request), pk=pk)
        actions.cancel_evaluation(pk, request.user)  # type: ignore[arg-type]
        evaluation = visible_evaluations(request).get(pk=pk)
        return Response(EvaluationDetailSerializer(evaluation).data)
