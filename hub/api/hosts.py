"""`/api/v1/hosts/`: registered agents and the hardware/software stack they run on.

Agents register (and re-register) with a token holding the `agent` scope, then send heartbeats;
a host whose last heartbeat is older than HOST_LIVE_SECONDS is not live and receives no work.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hub import actions
from hub.api.errors import ApiError
from hub.api.openapi import error_response
from hub.api.query import flag, flag_parameter
from hub.api.serializers import HostSerializer
from hub.models import ApiToken, Host


def _visible(queryset: QuerySet[Host], request: Request) -> QuerySet[Host]:
    """A user sees the hosts they may run jobs on (`hub.trust`: their own, the shared pool, and
    those lent to their groups, which they may name); staff see every host."""
    if request.user.is_staff:
        return queryset
    return queryset.filter(pk__in=Host.objects.usable_by(request.user).values("pk"))


def _agent_token(request: Request) -> ApiToken:
    if not isinstance(request.auth, ApiToken):
        raise PermissionDenied("Hosts register with an agent token (scope 'agent').")
    return request.auth


@extend_schema_view(
    get=extend_schema(
        summary="List the hosts you may run jobs on",
        parameters=[flag_parameter("live", "only the hosts whose agent sent a heartbeat lately")],
    ),
    post=extend_schema(
        summary="Register (or re-register) the calling agent's host",
        request=HostSerializer,
        responses={
            200: OpenApiResponse(HostSerializer, description="Updated: the host was registered."),
            201: OpenApiResponse(HostSerializer, description="Registered."),
            409: error_response(409, "Another user's host has this name."),
        },
    ),
)
class HostList(generics.ListAPIView[Host]):
    query_parameters = ("live",)
    serializer_class = HostSerializer
    queryset = Host.objects.select_related("owner", "group").prefetch_related("images").all()
    required_scopes = {"POST": "agent"}

    def get_queryset(self) -> QuerySet[Host]:
        queryset = _visible(super().get_queryset(), self.request)
        if flag(self.request, "live"):
            queryset = queryset.live()  # type: ignore[attr-defined]
        return queryset

    def post(self, request: Request) -> Response:
        token = _agent_token(request)
        serializer = HostSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # NUL characters anywhere in the body (PostgreSQL's JSON columns cannot hold one) are
        # refused by the parsers (`hub.api.parsers`).
        errors = actions.check_framework_versions(serializer.validated_data["frameworks"])
        if errors:
            raise ApiError(errors)
        host, created = actions.register_host(token, dict(serializer.validated_data))
        return Response(
            HostSerializer(host).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


@extend_schema_view(
    get=extend_schema(summary="Read one host"),
    delete=extend_schema(summary="Remove a host you own"),
)
class HostDetail(generics.RetrieveDestroyAPIView[Host]):
    serializer_class = HostSerializer
    queryset = Host.objects.select_related("owner", "group").prefetch_related("images").all()

    def get_queryset(self) -> QuerySet[Host]:
        return _visible(super().get_queryset(), self.request)

    def perform_destroy(self, instance: Host) -> None:
        if instance.owner_id != self.request.user.pk and not self.request.user.is_staff:
            raise PermissionDenied("Only the host's owner can remove it.")
        instance.delete()


class HostHeartbeat(APIView):
    required_scopes = {"POST": "agent"}

    @extend_schema(
        summary="Record that the host's agent is alive", request=None, responses=HostSerializer
    )
    def post(self, request: Request, pk: int) -> Response:
        token = _agent_token(request)
        host = get_object_or_404(Host, pk=pk)
        if host.owner_id != token.user_id:
            raise PermissionDenied("This host belongs to another user.")
        actions.record_heartbeat(host)
        return Response(HostSerializer(host).data)
