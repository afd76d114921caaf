"""The registry: API tokens, manifests with their artifacts, and registered hosts."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from predictors.protocol import host_scope

SCOPES = ("read", "write", "evaluate", "agent")
TOKEN_PREFIX = "mlms_"  # noqa: S105 (a public prefix, not a secret)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token. Only its sha256 is stored; the token itself is shown once, at creation."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    # The first characters of the token, so a user can tell tokens apart in a list.
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(
        cls,
        user: AbstractBaseUser,
        *,
        name: str,
        scopes: list[str],
        expires_in_days: int | None = None,
    ) -> tuple[ApiToken, str]:
        """Create a token and return it with its raw value, which is never stored."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        token = cls.objects.create(
            user=user,
            name=name,
            prefix=raw[: len(TOKEN_PREFIX) + 6],
            key_hash=hash_token(raw),
            scopes=sorted(set(scopes), key=SCOPES.index),
            expires_at=expires_at,
        )
        return token, raw

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and not self.is_expired


# What identifies a manifest: one row per kind, name, version and framework.
MANIFEST_IDENTITY = ("kind", "name", "version", "framework")


def manifest_identity(manifest: Any) -> dict[str, str]:
    """A manifest's identity (of a row or a parsed document), to filter or create rows by."""
    return {field: getattr(manifest, field) for field in MANIFEST_IDENTITY}


class ManifestQuerySet(models.QuerySet["Manifest"]):
    def visible_to(self, user: AbstractBaseUser | AnonymousUser) -> ManifestQuerySet:
        """Public manifests, plus the user's own and those shared with one of their groups."""
        if not user.is_authenticated:
            return self.filter(visibility=Manifest.PUBLIC)
        return self.filter(
            Q(visibility=Manifest.PUBLIC) | Q(owner=user) | Q(shared_groups__in=user.groups.all())  # type: ignore[union-attr]
        ).distinct()


class Manifest(models.Model):
    """A versioned model or dataset manifest, identified by (kind, name, version, framework)."""

    MODEL = "model"
    DATASET = "dataset"
    KINDS = [(MODEL, "model"), (DATASET, "dataset")]
    PUBLIC = "public"
    PRIVATE = "private"
    VISIBILITIES = [(PUBLIC, "public"), (PRIVATE, "private")]

    kind = models.CharField(max_length=16, choices=KINDS)
    name = models.CharField(max_length=64)
    version = models.CharField(max_length=128)
    # Framework name for models, '' for datasets.
    framework = models.CharField(max_length=32, blank=True, default="")
    framework_range = models.CharField(max_length=256, blank=True, default="")
    task = models.CharField(max_length=64, blank=True, default="")
    description = models.TextField(blank=True, default="")
    content = models.JSONField()
    source = models.TextField()
    content_hash = models.CharField(max_length=64)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="manifests",
    )
    visibility = models.CharField(max_length=8, choices=VISIBILITIES, default=PRIVATE)
    shared_groups = models.ManyToManyField(Group, blank=True, related_name="shared_manifests")
    builtin = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ManifestQuerySet.as_manager()

    class Meta:
        ordering = ["kind", "name", "framework", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=list(MANIFEST_IDENTITY), name="manifest_identity"),
        ]
        indexes = [models.Index(fields=["kind", "name"]), models.Index(fields=["task"])]

    def __str__(self) -> str:
        suffix = f" [{self.framework}]" if self.framework else ""
        return f"{self.kind} {self.name}@{self.version}{suffix}"

    @property
    def namespace(self) -> str:
        return f"{self.kind}s/{self.name}/{self.version}"


class Artifact(models.Model):
    """A file in the artifact store, under the namespace of the manifests that reference it."""

    path = models.CharField(max_length=512, unique=True)
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    manifests = models.ManyToManyField(Manifest, related_name="artifacts", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["path"]

    def __str__(self) -> str:
        return self.path


class GroupProfile(models.Model):
    """What the hub keeps of a group beyond Django's: who owns it (and so may add and remove
    members, or delete it) and what it is for (`hub.groups`)."""

    group = models.OneToOneField(Group, on_delete=models.CASCADE, related_name="profile")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="owned_groups"
    )
    description = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"group {self.group.name}"


class GroupInvitation(models.Model):
    """An invitation to join a group, which only the invitee turns into a membership (by
    accepting it) or discards (by declining it); the group's owner may withdraw it. Nobody joins
    a group without saying yes (`hub.groups`)."""

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="invitations")
    invitee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="group_invitations"
    )
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["group", "invitee"], name="one_invitation_per_member")
        ]

    def __str__(self) -> str:
        return f"invitation of {self.invitee_id} to group {self.group_id}"


class GroupTrust(models.Model):
    """A member's choice to run their jobs on the hosts that members lend to a group (off until
    they turn it on; `hub.trust`). Without it, a group's host runs a member's job only when the
    launch names that host."""

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="trusts")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="group_trusts"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["group", "user"], name="one_trust_per_member")
        ]

    def __str__(self) -> str:
        return f"user {self.user_id} trusts the hosts of group {self.group_id}"


class ContainerImage(models.Model):
    """A predictor image that an agent registered (`mlms agent --docker`), kept once per digest
    and registrant: its software environment (every Python and Debian package with its
    version), so that a result names the stack it ran on and two stacks can be diffed.

    A digest is the agent's claim, which the hub cannot check; so each user's agents describe
    their own record of it, and no user's word reaches another user's results (a result links
    to the record of its host's owner)."""

    # The image's id: the sha256 digest of its configuration, which names every layer.
    digest = models.CharField(max_length=71)
    registered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    tags = models.JSONField(default=list)
    framework = models.CharField(max_length=32, blank=True, default="")
    framework_version = models.CharField(max_length=64, blank=True, default="")
    device = models.CharField(max_length=8, blank=True, default="")
    labels = models.JSONField(default=dict)
    # {"os", "architecture", "python", "python_packages": {name: version},
    #  "debian_packages": {name: version}} (`predictors.host.environment`)
    environment = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["digest", "registered_by"], name="image_per_registrant")
        ]

    def __str__(self) -> str:
        return f"{self.tags[0] if self.tags else 'image'} ({self.digest[:19]})"


class HostQuerySet(models.QuerySet["Host"]):
    def live(self) -> HostQuerySet:
        cutoff = timezone.now() - timedelta(seconds=settings.HOST_LIVE_SECONDS)
        return self.filter(last_heartbeat__gte=cutoff)

    def usable_by(self, user: AbstractBaseUser | AnonymousUser) -> HostQuerySet:
        """The hosts `user`'s jobs may run on when the launch names one (`hub.trust`): the
        operators' shared pool, their own, and those lent to a group they belong to by a member
        of it. An anonymous caller uses the pool only."""
        if not user.is_authenticated:
            return self.filter(pool=True)
        return self.filter(Q(pool=True) | Q(owner=user) | Q(pk__in=_lent_to(user.groups.all())))  # type: ignore[union-attr]

    def trusted_by(self, user: AbstractBaseUser | AnonymousUser) -> HostQuerySet:
        """The hosts placement may choose for `user`'s jobs unasked (`hub.trust`): the pool,
        their own, and the hosts lent to those of their groups whose hosts they chose to trust
        (`GroupTrust`)."""
        if not user.is_authenticated:
            return self.filter(pool=True)
        trusted = user.groups.filter(trusts__user=user)  # type: ignore[union-attr]
        return self.filter(Q(pool=True) | Q(owner=user) | Q(pk__in=_lent_to(trusted)))


def _lent_to(groups: models.QuerySet[Group]) -> models.QuerySet[Host]:
    """The ids of the hosts lent to `groups` by one of their members (a host whose owner left
    the group, or never joined it, is lent to nobody)."""
    return Host.objects.filter(group__in=groups, group__user=F("owner")).values("pk")


class Host(models.Model):
    """A registered agent and the hardware/software stack it runs on.

    A host belongs to exactly one *scope*, which decides whose jobs it may run and which broker
    queues (and, with Redis, which broker credentials) its agent gets:

    - the operators' shared pool (`pool`, set only by staff): every user's jobs;
    - a group (`group`, set by a member): the jobs of that group's members who trust its hosts
      or name this one, while its owner stays a member, and only of jobs whose model and dataset
      its owner may read (`hub.trust`);
    - otherwise its owner alone: the owner's jobs (a self-hosted agent).
    """

    name = models.CharField(max_length=128, unique=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="hosts"
    )
    group = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="hosts"
    )
    pool = models.BooleanField(default=False)
    # The agent token that registered the host; only it may send the host's heartbeats.
    token = models.ForeignKey(ApiToken, null=True, on_delete=models.SET_NULL, related_name="hosts")
    hardware = models.JSONField(default=dict)
    software = models.JSONField(default=dict)
    # [{"name": "onnxruntime", "version": "1.31.1", "devices": ["cpu"]}, …]
    frameworks = models.JSONField(default=list)
    queues = models.JSONField(default=list)
    # The predictor images an agent with --docker has (it runs every job in one of them).
    images = models.ManyToManyField(ContainerImage, blank=True, related_name="hosts")
    # The agent process that registered the host last (a fresh id each time an agent starts):
    # a registration from another process means that the one before it ended, and the jobs it
    # held are lost (`evaluations.actions.on_agent_restarted`).
    agent_instance = models.CharField(max_length=64, blank=True, default="")
    registered_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)

    objects = HostQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def scope(self) -> str:
        """The prefix of the host's queues: `pool`, `group-<id>` or `user-<id>`."""
        return host_scope(pool=self.pool, group_id=self.group_id, owner_id=self.owner_id)

    @property
    def is_live(self) -> bool:
        if self.last_heartbeat is None:
            return False
        return self.last_heartbeat >= timezone.now() - timedelta(seconds=settings.HOST_LIVE_SECONDS)
