"""`POST /api/v1/evaluations/<id>/result/` (agent): the result; the evaluation succeeds.

Body: `claim` and a `predictors.protocol.ResultUpload`, as the agent makes it: `accuracy` {top1,
top5, count}, `latency` {"<batch size>": {mean_ms, p50_ms, p90_ms, p99_ms, min_ms, max_ms,
std_ms, count, …}}, `throughput` {"<batch size>": inputs/s}, `predictions` {top_k, labels,
classes, probabilities, boxes}, `content_hash` (of the model manifest that ran), `stack` (the
host's hardware and software) and `details` (the evaluation loop's `Report`); JSON of at most
`RESULT_MAX_BYTES` (default 256 MiB). The body is read by the protocol's strict
`ResultUpload.from_dict`: an unknown key at any level, or a value of another type, is 400 naming
its path; then `ResultUploadSerializer` checks the values (ranges, counts, rows). Posting it again
with the same claim answers the stored result (an agent's retry).

`POST /api/v1/evaluations/<id>/result/predictions/` (agent): a page of the result's
predictions, posted before the result where they are too many for one body: `claim`, `page`
(from 0), `first` (the index of its first input) and `predictions` (its rows, as a result's).
The result then names the number of pages (`predictions.pages`, its rows left empty), and the
hub assembles them in order into the result's predictions file, one page in memory at a time:
a page missing, out of order or of other columns, or pages that do not hold the accuracy's
count of rows, is 400 naming `predictions.pages`. Posting a page again replaces it; pages
staged for an evaluation are removed once it finishes, whichever way.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import actions
from evaluations.api.agents import CLAIM_SUPERSEDED, AgentEndpoint
from evaluations.api.serializers import (
    PredictionsPageSerializer,
    ResultSerializer,
    ResultUploadSerializer,
)
from evaluations.permissions import agent_token
from hub.api.parsers import LargeJSONParser
from hub.errors import Invalid
from predictors.protocol import PredictionsPage, ProtocolError, ResultUpload


def read_upload(data: Any) -> ResultUpload:
    """The body as the protocol reads it (`claim` aside), or Invalid naming the path at fault."""
    try:
        return ResultUpload.from_dict(data)
    except ProtocolError as error:
        raise Invalid(error.message, path=error.path) from error


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
        token = agent_token(request)
        upload = read_upload(request.data)
        body = ResultUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = actions.record_result(pk, token, body.validated_data["claim"], upload)
        return Response(ResultSerializer(result).data, status=status.HTTP_201_CREATED)


class EvaluationPredictionsPage(AgentEndpoint):
    # A page is sized by the agent to pass well under the limit of a result's body.
    parser_classes = [LargeJSONParser]

    @extend_schema(
        summary="Post a page of an evaluation's predictions before its result (agents)",
        request=PredictionsPageSerializer,
        responses={201: dict[str, int], 409: CLAIM_SUPERSEDED},
    )
    def post(self, request: Request, pk: UUID) -> Response:
        token = agent_token(request)
        try:
            page = PredictionsPage.from_dict(request.data)
        except ProtocolError as error:
            raise Invalid(error.message, path=error.path) from error
        body = PredictionsPageSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        staged = actions.record_predictions_page(pk, token, body.validated_data["claim"], page)
        return Response(staged, status=status.HTTP_201_CREATED)
