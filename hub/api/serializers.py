"""Serializers of the registry's API."""

from __future__ import annotations

import json
from typing import Any

from django.urls import reverse
from rest_framework import serializers

from hub.api.fields import KnownFields
from hub.models import SCOPES, ApiToken, Artifact, Host, Manifest
from predictors.protocol import DEVICES

MAX_JSON_FIELD_BYTES = 64 * 1024


class ArtifactSerializer(serializers.ModelSerializer[Artifact]):
    url = serializers.SerializerMethodField()

    class Meta:
        model = Artifact
        fields = ["path", "sha256", "size", "url"]

    def get_url(self, artifact: Artifact) -> str:
        return reverse("api-artifact", kwargs={"path": artifact.path})


class ManifestSummarySerializer(serializers.ModelSerializer[Manifest]):
    owner = serializers.SerializerMethodField()
    url = serializers.HyperlinkedIdentityField(view_name="api-manifest-detail")

    class Meta:
        model = Manifest
        fields = [
            "id",
            "url",
            "kind",
            "name",
            "version",
            "framework",
            "framework_range",
            "task",
            "description",
            "visibility",
            "owner",
            "builtin",
            "content_hash",
            "created_at",
        ]

    def get_owner(self, manifest: Manifest) -> str | None:
        return manifest.owner.get_username() if manifest.owner else None


class ManifestSerializer(ManifestSummarySerializer):
    manifest = serializers.JSONField(source="content")
    artifacts = ArtifactSerializer(many=True, read_only=True)

    class Meta(ManifestSummarySerializer.Meta):
        fields = [*ManifestSummarySerializer.Meta.fields, "manifest", "artifacts"]


def _bounded_json(value: Any, name: str) -> Any:
    if len(json.dumps(value)) > MAX_JSON_FIELD_BYTES:
        raise serializers.ValidationError(f"{name} is larger than {MAX_JSON_FIELD_BYTES} bytes")
    return value


class HostFrameworkSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.ChoiceField(choices=["pytorch", "tensorflow", "onnxruntime"])
    version = serializers.CharField(max_length=64)
    devices = serializers.ListField(
        child=serializers.ChoiceField(choices=list(DEVICES)), min_length=1, max_length=2
    )


class ImageEnvironmentSerializer(serializers.Serializer[dict[str, Any]]):
    """An image's software environment (`python -m predictors.host.environment`)."""

    os = serializers.CharField(max_length=256, required=False, allow_null=True, allow_blank=True)
    architecture = serializers.CharField(max_length=32, required=False, allow_blank=True)
    python = serializers.CharField(max_length=32, required=False, allow_blank=True)
    python_packages = serializers.DictField(
        child=serializers.CharField(max_length=256, allow_blank=True), required=False
    )
    debian_packages = serializers.DictField(
        child=serializers.CharField(max_length=256, allow_blank=True), required=False
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        for field in ("python_packages", "debian_packages"):
            if len(attrs.get(field) or {}) > MAX_IMAGE_PACKAGES:
                raise serializers.ValidationError(
                    {field: [f"more than {MAX_IMAGE_PACKAGES} packages"]}
                )
            for name in attrs.get(field) or {}:
                if len(name) > 256:
                    raise serializers.ValidationError({field: ["a package name is too long"]})
        return attrs


# An image's packages that the hub keeps, at most (a full Debian desktop has about 3,000).
MAX_IMAGE_PACKAGES = 20_000


class HostImageSerializer(serializers.Serializer[dict[str, Any]]):
    """A predictor image that an agent with --docker registers."""

    digest = serializers.RegexField(r"^sha256:[0-9a-f]{64}$")
    tags = serializers.ListField(
        child=serializers.RegexField(r"^[^\s]{1,255}$"), min_length=1, max_length=32
    )
    framework = serializers.ChoiceField(choices=["pytorch", "tensorflow", "onnxruntime"])
    framework_version = serializers.CharField(max_length=64)
    device = serializers.ChoiceField(choices=list(DEVICES))
    labels = serializers.DictField(
        child=serializers.CharField(max_length=1024, allow_blank=True),
        required=False,
        default=dict,
    )
    environment = ImageEnvironmentSerializer(required=False, default=dict)

    def validate_labels(self, value: Any) -> Any:
        if len(value) > 128:
            raise serializers.ValidationError("more than 128 labels")
        return value


class HostSerializer(KnownFields, serializers.ModelSerializer[Host]):
    """A host as its agent registers it (a field it does not have is refused, naming it) and as
    the API lists it."""

    # Not trimmed: " cpu-1" is refused (the pattern), not taken for "cpu-1".
    name = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", max_length=128, trim_whitespace=False
    )
    frameworks = HostFrameworkSerializer(many=True)
    queues = serializers.ListField(
        child=serializers.CharField(max_length=128), max_length=64, required=False
    )
    hardware = serializers.DictField(required=False)
    software = serializers.DictField(required=False)
    images = HostImageSerializer(
        many=True,
        required=False,
        write_only=True,
        max_length=64,
        help_text="The predictor images of an agent with --docker, with each one's software "
        "environment (kept once per digest: GET /api/v1/images/<digest>/).",
    )
    live = serializers.BooleanField(source="is_live", read_only=True)
    owner = serializers.SerializerMethodField()
    pool = serializers.BooleanField(
        required=False,
        default=False,
        help_text="In the operators' shared pool, running every user's jobs (staff only).",
    )
    group = serializers.CharField(
        max_length=150,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="The group whose members' jobs the host runs (a member registers it); empty "
        "for a host that runs its owner's jobs only.",
    )
    scope = serializers.CharField(read_only=True)
    instance = serializers.RegexField(
        r"^[0-9a-f]{32}$",
        required=False,
        write_only=True,
        help_text="The registering agent process's id, 32 hex digits, new at each start: a "
        "registration from another process than the last one means that one ended, and the "
        "jobs it held are dispatched again at once.",
    )

    class Meta:
        model = Host
        fields = [
            "id",
            "name",
            "owner",
            "pool",
            "group",
            "scope",
            "live",
            "hardware",
            "software",
            "frameworks",
            "queues",
            "images",
            "instance",
            "registered_at",
            "last_heartbeat",
        ]
        read_only_fields = ["registered_at", "last_heartbeat"]
        # The registry decides what a repeated name means (update or 409), not a validator.
        extra_kwargs: dict[str, Any] = {}

    def get_owner(self, host: Host) -> str:
        return host.owner.get_username()

    def to_representation(self, instance: Host) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["group"] = instance.group.name if instance.group_id and instance.group else None
        data["images"] = [
            {
                "digest": image.digest,
                "tags": image.tags,
                "framework": image.framework,
                "framework_version": image.framework_version,
                "device": image.device,
            }
            for image in instance.images.all()
        ]
        return data

    def validate_hardware(self, value: Any) -> Any:
        return _bounded_json(value, "hardware")

    def validate_software(self, value: Any) -> Any:
        return _bounded_json(value, "software")


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "active",
        ]
        read_only_fields = fields


class TokenCreateSerializer(serializers.Serializer[dict[str, Any]]):
    # Kept as sent: trimmed first, a name of 101 characters would pass a limit of 100.
    name = serializers.CharField(max_length=100, trim_whitespace=False)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=list(SCOPES)), min_length=1, max_length=len(SCOPES)
    )
    expires_in_days = serializers.IntegerField(
        min_value=1, max_value=3650, required=False, allow_null=True
    )


class CreatedTokenSerializer(TokenSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The token itself. It is shown only this once."
    )

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields
