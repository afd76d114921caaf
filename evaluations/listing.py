"""An evaluation as a list shows it (`EvaluationSerializer`): the REST API's lists
(`GET /api/v1/evaluations/`), the answer to an agent's status report and every WebSocket event
(`evaluations.events`) carry this one shape."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from evaluations.models import Evaluation


def _manifest(evaluation: Evaluation, kind: str, extra: str) -> dict[str, Any]:
    """The evaluation's model or dataset (`kind`): its id, name and version as the evaluation
    keeps them, and the field `extra`."""
    return {
        "id": getattr(evaluation, f"{kind}_id"),
        "name": getattr(evaluation, f"{kind}_name"),
        "version": getattr(evaluation, f"{kind}_version"),
        extra: getattr(evaluation, extra),
    }


class EvaluationSerializer(serializers.ModelSerializer[Evaluation]):
    """An evaluation as lists and WebSocket events show it."""

    url = serializers.SerializerMethodField()
    user = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField()
    dataset = serializers.SerializerMethodField()
    host = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    progress = serializers.SerializerMethodField()
    reason = serializers.SerializerMethodField()
    overrides = serializers.SerializerMethodField()
    accuracy = serializers.SerializerMethodField()

    class Meta:
        model = Evaluation
        fields = [
            "id",
            "url",
            "user",
            "model",
            "dataset",
            "framework",
            "framework_version",
            "device",
            "status",
            "reason",
            "progress",
            "cancel_requested",
            "host",
            "queue",
            "attempts",
            "trace_id",
            "group",
            "overrides",
            "task",
            "untrained",
            "published",
            "published_at",
            "accuracy",
            "created_at",
            "started_at",
            "finished_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_overrides(self, evaluation: Evaluation) -> list[str]:
        """The manifest parameters it overrides, PATH=VALUE, in the order applied."""
        return evaluation.overrides.split("\n") if evaluation.overrides else []

    def get_url(self, evaluation: Evaluation) -> str:
        return reverse("api-evaluation-detail", kwargs={"pk": evaluation.pk})

    def get_user(self, evaluation: Evaluation) -> str:
        return evaluation.user.get_username()

    def get_model(self, evaluation: Evaluation) -> dict[str, Any]:
        return _manifest(evaluation, "model", "framework")

    def get_dataset(self, evaluation: Evaluation) -> dict[str, Any]:
        return _manifest(evaluation, "dataset", "split")

    def get_progress(self, evaluation: Evaluation) -> dict[str, int]:
        return {"done": evaluation.progress_done, "total": evaluation.progress_total}

    def get_reason(self, evaluation: Evaluation) -> str:
        """Why it is in its current status (the latest change's reason)."""
        history = list(evaluation.history.all())  # prefetched by the views
        return history[-1].reason if history else ""

    def get_accuracy(self, evaluation: Evaluation) -> dict[str, Any] | None:
        result = getattr(evaluation, "result", None)
        if result is None:
            return None
        return {"top1": result.top1, "top5": result.top5, "count": result.count}
