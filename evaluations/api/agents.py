"""What the endpoints that agents call share: scope `agent`, the agent's token, the body read by
the endpoint's serializer, and the answer to a report whose claim is no longer current."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from evaluations.permissions import agent_token
from hub.api.openapi import error_response
from hub.models import ApiToken

# The answer (409) to a report of a claim that another attempt took over: the agent stops.
CLAIM_SUPERSEDED = error_response(
    409, "The claim is no longer current: the hub gave the job to another attempt."
)


# An endpoint agents POST to, with an agent token (scope `agent`). No docstring: the schema
# would show it as every such endpoint's description.
class AgentEndpoint(APIView):
    required_scopes = {"POST": "agent"}


def agent_body(
    request: Request, serializer: type[serializers.Serializer[Any]]
) -> tuple[ApiToken, dict[str, Any]]:
    """The request's agent token (403 without one), then its body as `serializer` validates it
    (400 naming each field at fault)."""
    token = agent_token(request)
    body = serializer(data=request.data)
    body.is_valid(raise_exception=True)
    return token, dict(body.validated_data)
