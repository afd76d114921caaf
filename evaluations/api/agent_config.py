"""`GET /api/v1/agent/config/?host=<id>` (agent): what an agent needs besides the hub's URL and
its token, for the host it registered.

The broker it consumes, with credentials and transport options that reach only the jobs of the
host's scope (`evaluations.broker_access`; on the embedded default: the folder of the
filesystem broker), the queues the hub named at registration, the task name, and how often to
heartbeat and report so that the hub keeps its host and jobs live.
"""

from __future__ import annotations

import re

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluations import broker_access
from evaluations.permissions import agent_token
from hub.api.errors import ApiError
from hub.models import Host
from predictors.protocol import TASK_NAME

# A host id: plain ASCII digits (str.isdigit() also takes "²", which int() refuses), 18 at most.
_HOST_ID = re.compile(r"[0-9]{1,18}")


class AgentConfig(APIView):
    query_parameters = ("host",)
    required_scopes = {"GET": "agent"}

    @extend_schema(
        summary="The broker, queues and timings of a registered host's agent",
        parameters=[
            OpenApiParameter(
                "host",
                {"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
                required=True,
                description="the id of the host this agent registered",
            )
        ],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request) -> Response:
        token = agent_token(request)
        raw = request.query_params.get("host", "")
        if not _HOST_ID.fullmatch(raw):
            raise ApiError(
                [
                    {
                        "path": "host",
                        "message": "the id of the host this agent registered is required",
                    }
                ]
            )
        host = Host.objects.select_related("group").filter(pk=int(raw)).first()
        if host is None or host.token_id != token.pk:
            raise PermissionDenied("This host is not registered with this agent token.")
        try:
            broker_url, options = broker_access.agent_broker(host)
        except broker_access.BrokerAccessError as exc:
            raise ApiError([{"path": "host", "message": str(exc)}], status_code=403) from None
        live = settings.HOST_LIVE_SECONDS
        return Response(
            {
                "broker_url": broker_url,
                "broker_transport_options": options,
                "queues": host.queues,
                "scope": host.scope,
                "task_name": TASK_NAME,
                "host_live_seconds": live,
                # Several beats and reports fit in the time the hub waits before it gives up.
                "heartbeat_seconds": max(1.0, live / 5),
                "report_seconds": max(0.5, min(2.0, live / 10)),
                # The largest body the hub takes (a result, a page of its predictions).
                "result_max_bytes": settings.RESULT_MAX_BYTES,
            }
        )
