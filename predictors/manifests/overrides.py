"""`PATH=VALUE` overrides of a manifest's fields, from a job's options or `mlms evaluate --set`."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from predictors.manifests.document import Manifest
from predictors.manifests.errors import ManifestError, describe, dotted, error_at, show
from predictors.manifests.loader import Dumper, parse_value
from predictors.manifests.rules import file_refs, validate

__all__ = ["apply_overrides"]


def apply_overrides(data: dict[str, Any], assignments: list[str]) -> Manifest:
    """A copy of `data` with `PATH=VALUE` assignments applied, validated again.

    PATH is dotted with list indices as numbers (`inputs.0.parameters.color_mode`); VALUE is
    parsed as YAML (`BGR`, `0.5`, `null`, `[256, 256]`). The last segment may name a key the
    mapping lacks (the schema then judges it); every other segment must exist. Errors carry
    the path and no line (the assignments are not YAML lines). `data` is not modified.
    """
    result = copy.deepcopy(data)
    errors: list[dict[str, Any]] = []
    for assignment in assignments:
        error = _assign(result, assignment)
        if error is not None:
            errors.append(error)
    # A job fetches the files its manifest names, which the hub checked at upload: an override
    # names none it does not (a tokenizer, labels or a charset of anyone's choosing).
    kind = str(data.get("kind"))
    named = {path: uri for path, uri, _, _ in file_refs(data, kind)}
    for path, uri, _, _ in file_refs(result, kind):
        if named.get(path) != uri:  # another file, or one of the manifest's in another field
            errors.append(
                error_at(
                    path,
                    None,
                    f"an override cannot name a file the manifest does not name there "
                    f"({show(uri)}): publish a version of the manifest with it instead",
                )
            )
    if errors:
        raise ManifestError(errors)
    source = yaml.dump(result, Dumper=Dumper, sort_keys=False, allow_unicode=True)
    errors = validate(result, None, {})
    if errors:
        raise ManifestError(errors)
    return Manifest.from_document(result, source)


# Fields an override may not change: what decides where and how a job runs, which the hub
# reads from the stored manifest (custom code goes only to hosts that opt in), and what the
# result is marked with.
_NOT_OVERRIDDEN = {
    field: f"{field} cannot be overridden: custom code runs only where its manifest is "
    "routed (hosts that opt in); publish a version of the manifest with the code instead"
    for field in ("preprocess", "postprocess")
} | {
    name: f"{name} cannot be overridden: publish a version of the manifest instead"
    for name in ("kind", "name", "version", "task", "framework", "container", "model", "attributes")
}


def _assign(data: dict[str, Any], assignment: str) -> dict[str, Any] | None:
    """Apply one PATH=VALUE to `data` in place; return an error, or None."""
    target, equals, text = assignment.partition("=")
    target = target.strip()
    if not equals or not target:
        return error_at((), None, f"expected PATH=VALUE, got {show(assignment)}")
    parts: list[str | int] = []
    for raw in target.split("."):
        parts.append(int(raw) if raw.isdigit() else raw)
    path = tuple(parts)
    if parts[0] in _NOT_OVERRIDDEN:
        return error_at(path, None, _NOT_OVERRIDDEN[str(parts[0])])
    try:
        value = parse_value(text)
    except ManifestError as exc:
        return error_at(
            path, None, f"the value {show(text)} is not valid YAML: " + exc.errors[0]["message"]
        )
    node: Any = data
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        here = path[: depth + 1]
        if isinstance(node, dict):
            key = str(part)
            if last:
                node[key] = value
            elif key in node:
                node = node[key]
            else:
                return error_at(here, None, f"there is no field '{dotted(here)}' to override")
        elif isinstance(node, list) and isinstance(part, int):
            if part >= len(node):
                return error_at(here, None, f"there is no item '{dotted(here)}' to override")
            if last:
                node[part] = value
            else:
                node = node[part]
        else:
            kind = "a list" if isinstance(node, list) else describe(node)
            return error_at(
                here, None, f"cannot override '{dotted(here)}': '{dotted(here[:-1])}' is {kind}"
            )
    return None
