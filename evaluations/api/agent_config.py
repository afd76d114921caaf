"""`GET /api/v1/agent/config/` (agent): what an agent needs besides the hub's URL and its token.

The broker it consumes (AGENT_BROKER_URL, by default the hub's own CELERY_BROKER_URL, with its
transport options: on the embedded default, the folder of the filesystem broker), the task
name, and how often to heartbeat and report so that the hub keeps its host and jobs live.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from predictors.hub_client import TASK_NAME


class AgentConfig(APIView):
    required_scopes = {"GET": "agent"}

    @extend_schema(summary="The broker and timings an agent uses", responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        live = settings.HOST_LIVE_SECONDS
        return Response(
            {
                "broker_url": settings.AGENT_BROKER_URL,
                "broker_transport_options": settings.AGENT_BROKER_TRANSPORT_OPTIONS,
                "task_name": TASK_NAME,
                "host_live_seconds": live,
                # Several beats and reports fit in the time the hub waits before it gives up.
                "heartbeat_seconds": max(1.0, live / 5),
                "report_seconds": max(0.5, min(2.0, live / 10)),
            }
        )
