"""Load manifests from YAML files into the registry (the built-in ones by default).

Idempotent: a manifest whose identity is already registered with the same content is left as it
is; one registered with different content is reported and left unchanged (publish a new
version instead). Built-in manifests are public and owned by no user.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from hub import actions, storage
from hub.errors import DomainError
from hub.models import Artifact, Manifest, manifest_identity
from predictors import manifests as spec


class Command(BaseCommand):
    help = "Load manifests (YAML) into the registry; the built-in ones under manifests/ by default."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", nargs="?", default=str(Path(settings.BASE_DIR) / "manifests"))

    def handle(self, *args: Any, path: str, **options: Any) -> None:
        root = Path(path)
        if not root.exists():
            raise CommandError(f"{root} does not exist")
        files = (
            sorted(root.rglob("*.yaml")) + sorted(root.rglob("*.yml")) if root.is_dir() else [root]
        )
        if not files:
            raise CommandError(f"no .yaml files under {root}")
        counts = {"loaded": 0, "unchanged": 0, "conflicting": 0}
        failed: list[str] = []
        for file in files:
            try:
                doc = spec.load_file(file)
            except spec.ManifestError as error:
                failed += [
                    f"{file}:{e.get('line') or '?'}: {e['path'] or '<root>'}: {e['message']}"
                    for e in error.errors
                ]
                continue
            existing = Manifest.objects.filter(**manifest_identity(doc)).first()
            if existing is not None:
                if existing.content_hash == doc.content_hash():
                    counts["unchanged"] += 1
                    self._record_new_artifacts(existing, doc)
                else:
                    counts["conflicting"] += 1
                    self.stderr.write(
                        f"{file}: {existing} is registered with other content; left unchanged"
                    )
                continue
            try:
                actions.register_manifest(
                    doc, owner=None, visibility=doc.visibility or "public", builtin=True
                )
            except DomainError as error:
                failed += [f"{file}: {e['path'] or '<root>'}: {e['message']}" for e in error.errors]
                continue
            counts["loaded"] += 1
        for line in failed:
            self.stderr.write(line)
        self.stdout.write(
            f"{counts['loaded']} loaded, {counts['unchanged']} unchanged, "
            f"{counts['conflicting']} conflicting, {len(failed)} errors ({len(files)} files under {root})"
        )
        if failed:
            raise CommandError(f"{len(failed)} manifest errors")

    def _record_new_artifacts(self, manifest: Manifest, doc: spec.Manifest) -> None:
        """Record files built since the manifest was loaded (e.g. by the zoo builder)."""
        for _field, path in doc.repo_paths():
            if manifest.artifacts.filter(path=path).exists():
                continue
            file = storage.resolve(path)
            if not file.exists():
                continue
            artifact, _ = Artifact.objects.get_or_create(
                path=path, defaults={"sha256": storage.sha256_of(file), "size": file.stat().st_size}
            )
            artifact.manifests.add(manifest)
