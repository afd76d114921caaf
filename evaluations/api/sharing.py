"""`/api/v1/evaluations/<id>/publish/` (POST publishes, DELETE unpublishes) and
`/api/v1/evaluations/<id>/shares/` (share with a group), for the evaluation's owner
(`evaluations.sharing`)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import sharing
from evaluations.api.evaluations import visible_evaluations
from evaluations.api.serializers import EvaluationDetailSerializer
from hub.api.errors import valid_body
from hub.api.openapi import error_response

WRITE_SCOPES = ("write", "evaluate")
SHARES = inline_serializer(
    "EvaluationShares", {"groups": serializers.ListField(child=serializers.CharField())}
)


class EvaluationShareSerializer(serializers.Serializer[dict[str, Any]]):
    group = serializers.CharField(max_length=150, help_text="one of your groups")


def _detail(request: Request, pk: UUID) -> dict[str, Any]:
    evaluation = visible_evaluations(request).get(pk=pk)
    return dict(EvaluationDetailSerializer(evaluation, context={"request": request}).data)


@extend_schema_view(
    post=extend_schema(
        summary="Publish an evaluation of yours: anyone may read it, and it joins the leaderboards",
        request=None,
        responses={
            200: EvaluationDetailSerializer,
            400: error_response(400, "It cannot be published (the message says why)."),
        },
    ),
    delete=extend_schema(
        summary="Unpublish an evaluation of yours",
        request=None,
        responses={200: EvaluationDetailSerializer},
    ),
)
class EvaluationPublish(generics.GenericAPIView[Any]):
    required_scopes = {"POST": WRITE_SCOPES, "DELETE": WRITE_SCOPES}

    def post(self, request: Request, pk: UUID) -> Response:
        sharing.publish(request.user, pk)  # type: ignore[arg-type]
        return Response(_detail(request, pk))

    def delete(self, request: Request, pk: UUID) -> Response:
        sharing.unpublish(request.user, pk)  # type: ignore[arg-type]
        return Response(_detail(request, pk))


@extend_schema_view(
    get=extend_schema(summary="The groups an evaluation is shared with", responses=SHARES),
    post=extend_schema(
        summary="Share an evaluation of yours with one of your groups",
        request=EvaluationShareSerializer,
        responses={200: SHARES, 400: error_response(400, "It cannot be shared with that group.")},
    ),
)
class EvaluationShares(generics.GenericAPIView[Any]):
    required_scopes = {"GET": ("read", "evaluate"), "POST": WRITE_SCOPES}

    def get(self, request: Request, pk: UUID) -> Response:
        evaluation = generics.get_object_or_404(visible_evaluations(request), pk=pk)
        return Response({"groups": sharing.shared_with(request.user, evaluation)})  # type: ignore[arg-type]

    def post(self, request: Request, pk: UUID) -> Response:
        data = valid_body(EvaluationShareSerializer, request)
        sharing.share(request.user, pk, data["group"])  # type: ignore[arg-type]
        evaluation = visible_evaluations(request).get(pk=pk)
        return Response({"groups": sharing.shared_with(request.user, evaluation)})  # type: ignore[arg-type]


@extend_schema(summary="Stop sharing an evaluation with a group", responses={204: None})
class EvaluationShare(generics.GenericAPIView[Any]):
    required_scopes = {"DELETE": WRITE_SCOPES}

    def delete(self, request: Request, pk: UUID, group: str) -> Response:
        sharing.unshare(request.user, pk, group)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)
