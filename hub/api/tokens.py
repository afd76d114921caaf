"""`/api/v1/tokens/`: create, list and revoke your API tokens.

A token is shown once, in the response that creates it, and stored only as a hash. A token can
only create tokens whose scopes it holds itself.
"""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from hub import actions
from hub.api.serializers import CreatedTokenSerializer, TokenCreateSerializer, TokenSerializer
from hub.authentication import scopes_of
from hub.models import ApiToken


@extend_schema_view(
    get=extend_schema(summary="List your tokens (never their values)"),
    post=extend_schema(
        summary="Create a token; its value is in this response only",
        request=TokenCreateSerializer,
        responses={201: CreatedTokenSerializer},
    ),
)
class TokenList(generics.ListAPIView[ApiToken]):
    serializer_class = TokenSerializer

    def get_queryset(self) -> QuerySet[ApiToken]:
        return ApiToken.objects.filter(user=self.request.user)

    def post(self, request: Request) -> Response:
        serializer = TokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        scopes = serializer.validated_data["scopes"]
        if isinstance(request.auth, ApiToken):
            missing = sorted(set(scopes) - scopes_of(request))
            if missing:
                raise PermissionDenied(
                    f"A token cannot grant scopes it lacks: {', '.join(missing)}."
                )
        token, raw = ApiToken.issue(
            request.user,  # type: ignore[arg-type]
            name=serializer.validated_data["name"],
            scopes=scopes,
            expires_in_days=serializer.validated_data.get("expires_in_days"),
        )
        body = dict(CreatedTokenSerializer(token).data)
        body["token"] = raw
        return Response(body, status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(summary="Read one of your tokens"),
    delete=extend_schema(summary="Revoke one of your tokens"),
)
class TokenDetail(generics.RetrieveDestroyAPIView[ApiToken]):
    serializer_class = TokenSerializer

    def get_queryset(self) -> QuerySet[ApiToken]:
        return ApiToken.objects.filter(user=self.request.user)

    def perform_destroy(self, instance: ApiToken) -> None:
        actions.revoke_token(instance)
