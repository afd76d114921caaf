"""State changes of the registry. Views, serializers and management commands all call these.

Each action validates first and writes last, inside one transaction; files written to the
artifact store before a failure are removed again, so a refused request leaves nothing behind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.utils import timezone

from hub import signals, storage
from hub.error_codes import HubErrorCode
from hub.errors import Conflict, Forbidden, Invalid
from hub.models import ApiToken, Artifact, ContainerImage, Host, Manifest, manifest_identity
from predictors import manifests as spec
from predictors.data import split_problems, target_of
from predictors.frameworks import probe
from predictors.manifests import graph_check
from predictors.manifests.versioning import is_valid_version
from predictors.processing import custom_code
from predictors.processing.labels import labels_from_text
from predictors.protocol import capability, capability_queue, host_queue, host_scope

_SHA_FIELD = {"graph_path": "graph_sha256", "weights_path": "weights_sha256"}


@dataclass
class _PlannedFile:
    field: str
    path: str
    upload: UploadedFile | None


def _declared_sha(data: dict[str, Any], field: str) -> str | None:
    """The sha256 a manifest states for the repo path at `field`, if any."""
    parts = field.split(".")
    parent: Any = data
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    key = parts[-1]
    sha_key = _SHA_FIELD.get(
        key, "sha256" if key == "path" else f"{key.removesuffix('_path')}_sha256"
    )
    value = parent.get(sha_key) if isinstance(parent, dict) else None
    return value or None


def _identity_taken(doc: spec.Manifest) -> bool:
    return Manifest.objects.filter(**manifest_identity(doc)).exists()


def register_manifest(
    doc: spec.Manifest,
    *,
    owner: AbstractBaseUser | None,
    visibility: str | None = None,
    uploads: Mapping[str, UploadedFile] | None = None,
    builtin: bool = False,
) -> Manifest:
    """Store a validated manifest with its files. 409 when its identity exists already.

    `uploads` maps file names to uploaded files; a file named F is stored at the manifest's
    namespace + '/' + F and must be referenced by the manifest. A repo:// reference that is
    neither uploaded nor in the store is refused, except for built-in manifests, whose files the
    zoo builder may produce later.
    """
    uploads = dict(uploads or {})
    visibility = visibility or doc.visibility or Manifest.PRIVATE
    if visibility not in (Manifest.PUBLIC, Manifest.PRIVATE):
        raise Invalid(f"'{visibility}' is not one of public, private", path="visibility")
    _check_name_owner(doc, owner)
    if _identity_taken(doc):
        raise _identity_conflict(doc)

    namespace = doc.namespace()
    planned: list[_PlannedFile] = []
    errors: list[dict[str, Any]] = []
    referenced: set[str] = set()
    for field, path in doc.repo_paths():
        relative = path.removeprefix(namespace + "/")
        upload = uploads.get(relative)
        referenced.add(relative)
        try:
            storage.check_file(path)  # not a folder of the store, nor below one of its files
        except storage.StorePathError as error:
            errors.append({"path": field, "message": str(error)})
            continue
        existing = Artifact.objects.filter(path=path).first()
        if (
            upload is None
            and existing is None
            and not storage.resolve(path).exists()
            and not builtin
        ):
            errors.append(
                {
                    "path": field,
                    "message": f"repo://{path} is neither uploaded with the manifest nor in the store",
                }
            )
            continue
        if (
            existing is not None
            and existing.owner_id is not None
            and existing.owner_id != getattr(owner, "pk", None)
        ):
            errors.append(
                {"path": field, "message": f"repo://{path} belongs to another user's manifest"}
            )
            continue
        planned.append(_PlannedFile(field, path, upload))
    for name in uploads:
        if name not in referenced:
            errors.append(
                {
                    "path": f"files.{name}",
                    "message": f"uploaded file '{name}' is not referenced by the manifest",
                }
            )
    if errors:
        raise Invalid(errors, code=HubErrorCode.FILE_MISSING)

    written: list[str] = []
    try:
        artifacts: list[Artifact] = []
        for item in planned:
            artifact = _store_file(doc, item, owner, written)
            if artifact is not None:
                artifacts.append(artifact)
        _check_code_files(doc)  # sizes first: no model is loaded for an upload refused anyway
        if not builtin:  # the zoo made the built-in tokenizers and tokenised with them
            _check_tokenizers(doc)
        _check_graph(doc, load=not builtin)
        _check_splits(doc)
        with transaction.atomic():
            manifest = Manifest.objects.create(
                **manifest_identity(doc),
                framework_range=doc.framework_range,
                task=doc.task,
                description=str(doc.data.get("description", "")),
                content=doc.data,
                source=doc.source,
                content_hash=doc.content_hash(),
                owner=owner,
                visibility=visibility,
                builtin=builtin,
            )
            for artifact in artifacts:
                if artifact.pk is None:
                    artifact.save()
                artifact.manifests.add(manifest)
    except IntegrityError:
        _discard(written)
        raise _identity_conflict(doc) from None
    except BaseException:
        _discard(written)
        raise
    return manifest


def _check_graph(doc: spec.Manifest, *, load: bool = True) -> None:
    """A model's files must load as its `model.format` says, and what they declare of their
    inputs and outputs must be the manifest's (`predictors.frameworks.probe`: loaded in a
    process of its own, with limits): Invalid naming each field that does not fit. Files the
    hub does not hold (https://, a built-in model the zoo has not built yet) are checked by the
    agent that loads them; so is a format whose framework this hub has not installed. Without
    `load` (the built-in manifests, whose files the zoo builder made and checked), an ONNX
    graph is read, not loaded."""
    if doc.kind != "model":
        return
    if not load:
        graph_path = str((doc.data.get("model") or {}).get("graph_path") or "")
        if doc.framework != "onnxruntime" or not graph_path.startswith("repo://"):
            return
        file = storage.resolve(graph_path.removeprefix("repo://"))
        if file.is_file():
            found = graph_check.onnx_problems(doc.data, file)
            if found:
                raise Invalid(
                    [{"path": path, "message": message} for path, message in found],
                    code=HubErrorCode.GRAPH_MISMATCH,
                )
        return
    files = doc.data.get("model") or {}
    stored: dict[str, Path | None] = {}
    for field in ("graph_path", "weights_path"):
        path = str(files.get(field) or "")
        if not path:
            stored[field] = None
            continue
        if not path.startswith("repo://"):
            return
        file = storage.resolve(path.removeprefix("repo://"))
        if not file.is_file():
            return
        stored[field] = file
    graph = stored["graph_path"]
    if graph is None:
        return
    try:
        found = probe.check_model_files(
            doc.data, graph, stored["weights_path"], seconds=settings.MODEL_CHECK_SECONDS
        )
    except probe.ProbeUnavailable:
        return
    if found:
        raise Invalid(
            [{"path": path, "message": message} for path, message in found],
            code=HubErrorCode.GRAPH_MISMATCH,
        )


def _check_code_files(doc: spec.Manifest) -> None:
    """The custom code's files (`code_files`) within their limits
    (`predictors.processing.custom_code.code_files_problems`): Invalid naming each file's path
    over one. Files the hub does not hold (https://) are checked by the agent that fetches
    them."""
    if doc.kind != "model":
        return
    sizes = []
    for index, entry in enumerate(doc.data.get("code_files") or []):
        path = str(entry.get("path") or "")
        if path.startswith("repo://"):
            file = storage.resolve(path.removeprefix("repo://"))
            if file.is_file():
                sizes.append((index, file.stat().st_size))
    found = custom_code.code_files_problems(sizes)
    if found:
        raise Invalid(
            [
                {
                    "path": f"code_files.{index}.path",
                    "message": f"{doc.data['code_files'][index]['path']}: {problem}",
                }
                for index, problem in found
            ]
        )


def _check_tokenizers(doc: spec.Manifest) -> None:
    """A tokenizer file must be one `tokenizers` reads, within its size limit, that does what
    its entry says: a text input's makes the input's rows (`predictors.processing.text`), a
    token_ids output's decodes ids (`predictors.processing.token_ids`); read in a process of
    its own with limits (`predictors.frameworks.probe.check_tokenizer_files`): Invalid naming
    the parameter at fault. Files the hub does not hold (https://) are checked by the job that
    reads them."""
    if doc.kind != "model":
        return
    files = {}
    for kind, type_ in (("inputs", "text"), ("outputs", "token_ids")):
        for index, entry in enumerate(doc.data.get(kind) or []):
            parameters = entry.get("parameters") if isinstance(entry, dict) else None
            if entry.get("type") != type_ or not isinstance(parameters, dict):
                continue
            path = str(parameters.get("tokenizer_path") or "")
            if not path.startswith("repo://"):
                continue
            file = storage.resolve(path.removeprefix("repo://"))
            if file.is_file():
                files[f"{kind}.{index}"] = file
    try:
        found = probe.check_tokenizer_files(doc.data, files, seconds=settings.MODEL_CHECK_SECONDS)
    except probe.ProbeUnavailable:
        return
    if found:
        raise Invalid([{"path": path, "message": message} for path, message in found])


def _check_splits(doc: spec.Manifest) -> None:
    """A dataset's split files must be what its manifest says (`predictors.data.
    split_problems`: columns, labels within the label set, the encoding, the count): Invalid
    naming each split's path. Files the hub does not hold are checked by the agent reading
    them."""
    if doc.kind != "dataset" or doc.data.get("format") != "parquet":
        return
    stored = stored_labels(doc.data)
    labels = len(stored) if stored is not None else None
    errors = []
    # Clips of audio (a sequence_labelling dataset of WAV or FLAC rows), not rows of chunks.
    clips = doc.task == "sequence_labelling" and doc.data.get("encoding") in ("wav", "flac")
    for name, entry in (doc.data.get("splits") or {}).items():
        path = str(entry.get("path") or "")
        if not path.startswith("repo://"):
            continue
        file = storage.resolve(path.removeprefix("repo://"))
        if not file.is_file():
            continue
        for problem in split_problems(
            file,
            labels=labels,
            encoding=doc.data.get("encoding"),
            count=entry.get("count"),
            streams=doc.task == "sequence_labelling" and not clips,
            clips=clips,
            detection=doc.task == "object_detection",
            masks=doc.task == "semantic_segmentation",
            ignore_label=doc.data.get("ignore_label"),
            target=target_of(doc.task),
        ):
            errors.append({"path": f"splits.{name}.path", "message": f"{path}: {problem}"})
    if errors:
        raise Invalid(errors, code=HubErrorCode.DATASET_INVALID)


# A labels file larger than this is not read here (the agent reads it anyway).
_LABELS_FILE_LIMIT = 16 * 1024 * 1024


def stored_labels(where: Mapping[str, Any]) -> list[str] | None:
    """The labels of a dataset manifest or of a model output's parameters: inline, or their
    repo:// labels file in the store; None when there are none or they cannot be read here
    (an https:// file, one not stored yet, one over _LABELS_FILE_LIMIT)."""
    inline = where.get("labels")
    if isinstance(inline, list):
        return [str(label) for label in inline]
    path = where.get("labels_path")
    if not isinstance(path, str) or not path.startswith("repo://"):
        return None
    try:
        file = storage.resolve(path.removeprefix("repo://"))
        if not file.is_file() or file.stat().st_size > _LABELS_FILE_LIMIT:
            return None
        return labels_from_text(file.read_text(encoding="utf-8"))
    except (storage.StorePathError, OSError, UnicodeDecodeError):
        return None


def _check_name_owner(doc: spec.Manifest, owner: AbstractBaseUser | None) -> None:
    """A name belongs to whoever published it first, so nobody can slip a version under it.

    Names are global, like package names: a name taken by another publisher is refused even
    when all its manifests are private, and the refusal says no more than that.
    """
    first = (
        Manifest.objects.filter(kind=doc.kind, name=doc.name).order_by("created_at", "pk").first()
    )
    if first is not None and first.owner_id != getattr(owner, "pk", None):
        raise Conflict(
            f"the {doc.kind} name '{doc.name}' belongs to another publisher; choose another name",
            path="name",
            code=HubErrorCode.NAME_TAKEN,
        )


def _identity_conflict(doc: spec.Manifest) -> Conflict:
    framework = f" for framework {doc.framework}" if doc.framework else ""
    return Conflict(
        f"{doc.kind} {doc.name} {doc.version}{framework} exists already; publish a new version instead",
        path="version",
        code=HubErrorCode.VERSION_EXISTS,
    )


def _store_file(
    doc: spec.Manifest, item: _PlannedFile, owner: AbstractBaseUser | None, written: list[str]
) -> Artifact | None:
    """Put one referenced file in place and return its (possibly unsaved) Artifact row."""
    declared = _declared_sha(doc.data, item.field)
    existing = Artifact.objects.filter(path=item.path).first()
    if item.upload is not None:
        if existing is not None or storage.resolve(item.path).exists():
            current = existing.sha256 if existing else storage.sha256_of(storage.resolve(item.path))
            sha, size = _hash_upload(item.upload)
            if sha != current:
                raise Conflict(
                    f"repo://{item.path} exists already with other content; publish a new version instead",
                    path=item.field,
                    code=HubErrorCode.FILE_CONFLICT,
                )
        else:
            sha, size = storage.write(item.path, item.upload.chunks())
            written.append(item.path)
    elif existing is not None:
        sha, size = existing.sha256, existing.size
    else:
        file = storage.resolve(item.path)
        if not file.exists():  # a built-in manifest whose artifact is not built yet
            return None
        sha, size = storage.sha256_of(file), file.stat().st_size
    if declared and declared != sha:
        raise Invalid(
            f"repo://{item.path} has sha256 {sha}, but the manifest states {declared}",
            path=item.field,
            code=HubErrorCode.CHECKSUM_MISMATCH,
        )
    if existing is not None:
        return existing
    return Artifact(path=item.path, sha256=sha, size=size, owner=owner)


def _hash_upload(upload: UploadedFile) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    for block in upload.chunks():
        digest.update(block)
        size += len(block)
    return digest.hexdigest(), size


def _discard(paths: list[str]) -> None:
    for path in paths:
        storage.remove(path)


def delete_manifest(manifest: Manifest) -> None:
    """Delete a manifest and every artifact no other manifest references."""
    with transaction.atomic():
        orphans = [
            a for a in manifest.artifacts.all() if a.manifests.exclude(pk=manifest.pk).count() == 0
        ]
        paths = [a.path for a in orphans]
        for artifact in orphans:
            artifact.delete()
        manifest.delete()
        transaction.on_commit(lambda: _discard(paths))


def register_host(token: ApiToken, payload: dict[str, Any]) -> tuple[Host, bool]:
    """Create or update the host named in `payload` for the agent token's user.

    `pool: true` puts the host in the operators' shared pool (staff only); `group` (a group's
    name) lends it to that group's members (members only). The hub, not the agent, names the
    queues the host's agent consumes: its own `<scope>.host.<name>` and one `<scope>.<capability>`
    per capability it offers (`queues` in the payload, by default every framework × device it
    registers; each must be one of those).

    `instance` is the registering agent process's id: a registration from another process than
    the last one means that one ended, and the jobs it held are dispatched again at once
    (`hub.signals.agent_restarted`).
    """
    name = payload["name"]
    user = token.user
    pool = bool(payload.get("pool", False))
    group_name = payload.get("group") or None
    group = None
    if pool and not user.is_staff:
        raise Forbidden(
            "only operators (staff) add hosts to the shared pool",
            path="pool",
            code=HubErrorCode.NOT_STAFF,
        )
    if pool and group_name:
        raise Invalid("a host is in the shared pool or lent to a group, not both", path="group")
    if group_name:
        group = Group.objects.filter(name=group_name).first()
        if group is None or not (user.is_staff or user.groups.filter(pk=group.pk).exists()):
            raise Forbidden(
                f"you are not a member of a group named '{group_name}'",
                path="group",
                code=HubErrorCode.NOT_A_MEMBER,
            )
    scope = host_scope(pool=pool, group_id=group.pk if group else None, owner_id=user.pk)
    queues = [host_queue(scope, name)] + [
        capability_queue(scope, *offer.split(".", 1))
        for offer in _offered_capabilities(name, payload)
    ]
    host = Host.objects.filter(name=name).first()
    if host is not None and host.owner_id != token.user_id:
        raise Conflict(
            f"host '{name}' is registered by another user",
            path="name",
            code=HubErrorCode.NAME_TAKEN,
        )
    created = host is None
    if host is None:
        host = Host(name=name, owner=user)
    instance = str(payload.get("instance") or "")
    restarted = bool(instance and host.agent_instance and host.agent_instance != instance)
    if instance:
        host.agent_instance = instance
    for field in ("hardware", "software", "frameworks"):
        setattr(host, field, payload.get(field, getattr(host, field)))
    host.queues = queues
    host.pool = pool
    host.group = group
    host.token = token
    host.last_heartbeat = timezone.now()
    host.save()
    host.images.set([_container_image(entry, user) for entry in payload.get("images") or []])
    if restarted:
        # The agent process that held the host's jobs ended: they are lost now, not only once
        # its silence has lasted HOST_LIVE_SECONDS.
        signals.agent_restarted.send(sender=Host, host=host)
    return host, created


def _container_image(entry: dict[str, Any], user: Any) -> ContainerImage:
    """The registering user's record of the image of `entry` (one per digest and user), as
    their agent describes it now."""
    image, _ = ContainerImage.objects.update_or_create(
        digest=entry["digest"],
        registered_by=user,
        defaults={
            "tags": entry["tags"],
            "framework": entry["framework"],
            "framework_version": entry["framework_version"],
            "device": entry["device"],
            "labels": entry.get("labels") or {},
            "environment": entry.get("environment") or {},
        },
    )
    return image


def _offered_capabilities(name: str, payload: dict[str, Any]) -> list[str]:
    """The capabilities (`onnxruntime.cpu`) the host serves: those its `queues` name, each one
    of its frameworks × devices, or all of those; Invalid naming a queue it cannot serve."""
    available = [
        capability(str(entry.get("name")), device)
        for entry in payload.get("frameworks", [])
        for device in (entry.get("devices") or ["cpu"])
    ]
    asked = payload.get("queues")
    if asked is None:
        return list(dict.fromkeys(available))
    offered: list[str] = []
    errors = []
    for index, queue in enumerate(asked):
        if queue == f"host.{name}":
            continue  # its own queue, which it always consumes
        if queue not in available:
            errors.append(
                {
                    "path": f"queues.{index}",
                    "message": f"'{queue}' is not a capability of this host (it offers "
                    f"{', '.join(dict.fromkeys(available)) or 'none'}); the hub names the "
                    "queues, an agent only chooses among its capabilities",
                }
            )
        elif queue not in offered:
            offered.append(queue)
    if errors:
        raise Invalid(errors)
    return offered


def record_heartbeat(host: Host) -> Host:
    host.last_heartbeat = timezone.now()
    host.save(update_fields=["last_heartbeat"])
    return host


def revoke_token(token: ApiToken) -> None:
    """Revoke `token`: every request with it is refused from now on, and the WebSockets it
    opened are closed (`hub.signals.access_withdrawn`)."""
    if token.revoked_at is None:
        with transaction.atomic():
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            signals.access_withdrawn.send(sender=ApiToken, tokens=[token.pk])


def check_framework_versions(frameworks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Errors for host framework entries whose version is not SemVer."""
    return [
        {
            "path": f"frameworks.{i}.version",
            "message": f"'{entry.get('version')}' is not a semantic version",
        }
        for i, entry in enumerate(frameworks)
        if not is_valid_version(str(entry.get("version", "")))
    ]
