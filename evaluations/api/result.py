"""`POST /api/v1/evaluations/<id>/result/` (agent): the result; the evaluation succeeds.

Body: `claim`, `accuracy` {top1, top5, count}, `latency` {"<batch size>": {mean_ms, p50_ms,
p90_ms, p99_ms, min_ms, max_ms, std_ms, count}}, `throughput` {"<batch size>": inputs/s},
`predictions` {top_k, labels, classes, probabilities}, `content_hash` (of the model manifest
that ran), `stack` (the host's hardware and software) and `details` (the evaluation loop's
report): a `predictors.protocol.ResultUpload`, as the agent makes it; JSON of at most
`RESULT_MAX_BYTES` (default 256 MiB). Posting it again with the
same claim answers the stored result (an agent's retry).
"""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import actions
from evaluations.api.agents import CLAIM_SUPERSEDED, AgentEndpoint, agent_body
from evaluations.api.serializers import ResultSerializer, ResultUploadSerializer
from hub.api.parsers import LargeJSONParser
from predictors.protocol import ResultUpload


class EvaluationResult(AgentEndpoint):
    # A result carries every input's predictions and every timed batch: larger than the
    # manifests' limit on other bodies (`RESULT_MAX_BYTES`).
    parser_classes = [LargeJSONParser]

    @extend_schema(
        summary="Post an evaluation's result (agents)",
        request=ResultUploadSerializer,
        responses={201: ResultSerializer, 409: CLAIM_SUPERSEDED},
    )
    def post(self, request: Request, pk: UUID) -> Response:
        token, data = agent_body(request, ResultUploadSerializer)
        claim = data.pop("claim")
        result = actions.record_result(pk, token, claim, ResultUpload.from_dict(data))
        return Response(ResultSerializer(result).data, status=status.HTTP_201_CREATED)
