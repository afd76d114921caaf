"""What differs between compared evaluations: the request, the processing parameters (the
model manifests' `inputs`, `outputs` and `postprocess_outputs` with each evaluation's
overrides applied, flattened)
and the stack, each row saying whether it follows the framework or the host."""

from __future__ import annotations

from typing import Any

from evaluations.models import Evaluation
from hub.models import Manifest
from predictors import manifests as spec


def label(evaluation: Evaluation) -> str:
    """How a comparison names an evaluation: its model, framework and host (and overrides);
    where several compared share that, the one set apart by `name_apart`."""
    named = getattr(evaluation, "compare_label", None)
    if isinstance(named, str):
        return named
    host = evaluation.host.name if evaluation.host else "?"
    overrides = " + " + ", ".join(_override_lines(evaluation)) if evaluation.overrides else ""
    return f"{evaluation.model_name} · {evaluation.framework} · {host}{overrides}"


def name_apart(evaluations: list[Evaluation]) -> None:
    """Give each compared evaluation a label of its own: where several share model,
    framework and host, each gets the first characters of its id (what its page's address
    holds) beside them, so that headers, legends and rows tell them apart."""
    for evaluation in evaluations:
        evaluation.compare_label = None  # type: ignore[attr-defined]
    plain = [label(evaluation) for evaluation in evaluations]
    for evaluation, text in zip(evaluations, plain, strict=True):
        if plain.count(text) > 1:
            evaluation.compare_label = f"{text} · {str(evaluation.pk)[:8]}"  # type: ignore[attr-defined]


def _override_lines(evaluation: Evaluation) -> list[str]:
    return [line for line in evaluation.overrides.splitlines() if line]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        flat = {}
        for index, inner in enumerate(value):
            flat.update(_flatten(inner, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    return {prefix: value}


def _processing(evaluation: Evaluation) -> dict[str, Any]:
    """The processing parameters the evaluation ran with: its model manifest's `inputs`,
    `outputs` and `postprocess_outputs`, with its overrides applied."""
    manifest = (
        evaluation.model
        or Manifest.objects.filter(
            kind=Manifest.MODEL,
            name=evaluation.model_name,
            version=evaluation.model_version,
            framework=evaluation.framework,
        ).first()
    )
    if manifest is None:
        return {}
    content = manifest.content
    if evaluation.overrides:
        try:
            content = spec.apply_overrides(manifest.content, _override_lines(evaluation)).data
        except spec.ManifestError:
            pass  # checked at launch; a manifest edited since is shown as it is
    fields = ("inputs", "outputs", "postprocess_outputs")
    return _flatten({key: content.get(key) for key in fields if key in content})


def _stack(evaluation: Evaluation) -> dict[str, Any]:
    result = getattr(evaluation, "result", None)
    stack = result.stack if result is not None and isinstance(result.stack, dict) else {}

    def part(name: str) -> dict[str, Any]:
        value = stack.get(name)
        return value if isinstance(value, dict) else {}

    container = stack.get("container")
    image = container.get("image") if isinstance(container, dict) else container
    return {
        "framework version": evaluation.framework_version,
        "CPU": result.cpu_model if result else "",
        "GPU": result.gpu_model if result else "",
        "OS": part("os").get("platform"),
        "Python": part("python").get("version"),
        "NumPy": stack.get("numpy"),
        "threads": evaluation.threads,
        "container image": image,
        "image digest": container.get("digest") if isinstance(container, dict) else None,
        "host": evaluation.host.name if evaluation.host else None,
    }


def _image_packages(evaluations: list[Evaluation]) -> list[dict[str, Any]]:
    """The packages of the images the evaluations ran in ("python: numpy", "debian: libc6"),
    when they ran in different registered images; nothing otherwise."""
    images = [getattr(getattr(e, "result", None), "image", None) for e in evaluations]
    if not any(images) or len({image.pk if image else None for image in images}) < 2:
        return [{} for _ in evaluations]
    return [
        {
            f"{kind}: {name}": version
            for kind, key in (("python", "python_packages"), ("debian", "debian_packages"))
            for name, version in ((image.environment or {}).get(key) or {}).items()
        }
        if image is not None
        else {}
        for image in images
    ]


def _request(evaluation: Evaluation) -> dict[str, Any]:
    request = dict(evaluation.request) if isinstance(evaluation.request, dict) else {}
    request.setdefault("model_version", evaluation.model_version)
    request["overrides"] = _override_lines(evaluation)
    return {key: request[key] for key in sorted(request)}


def compare(evaluations: list[Evaluation], *, show_all: bool = False) -> dict[str, Any]:
    """The rows in which the evaluations differ (every row with `show_all`)."""
    sections = {
        "request": [_request(e) for e in evaluations],
        "processing": [_processing(e) for e in evaluations],
        "stack": [_stack(e) for e in evaluations],
        "image packages": _image_packages(evaluations),
    }
    rows: list[dict[str, Any]] = []
    for section, values in sections.items():
        keys: list[str] = []
        for flat in values:
            keys += [key for key in flat if key not in keys]
        for key in keys:
            cells = [flat.get(key) for flat in values]
            differs = any(_canonical(cell) != _canonical(cells[0]) for cell in cells[1:])
            # An image's thousands of packages: only those that differ, even when all are asked.
            if differs or (show_all and section != "image packages"):
                rows.append(
                    {
                        "section": section,
                        "key": key,
                        "values": cells,
                        "differs": differs,
                        "follows": _follows(evaluations, cells) if differs else None,
                    }
                )
    return {
        "rows": rows,
        "all": show_all,
        "differing": sum(1 for row in rows if row["differs"]),
    }


def _follows(evaluations: list[Evaluation], cells: list[Any]) -> str | None:
    """What a difference comes with: "framework" when evaluations of one framework agree on
    the value (it is the framework's, like the layout TensorFlow needs), else "host" likewise;
    None when neither explains it (an override, a seed). With every framework different this
    cannot tell the framework from the rest of the stack; the host is then the same or not."""
    values = [_canonical(cell) for cell in cells]
    for name, keys in (
        ("framework", [e.framework for e in evaluations]),
        ("host", [e.host_id for e in evaluations]),
    ):
        if len(set(keys)) > 1 and all(
            values[i] == values[j]
            for i in range(len(values))
            for j in range(i + 1, len(values))
            if keys[i] == keys[j]
        ):
            return name
    return None


def _canonical(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
