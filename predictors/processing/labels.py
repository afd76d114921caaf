"""Whether a model's labels are a dataset's, said once for the hub's launch and the agent's run.

Accuracy compares class indices: the model's output i is right when the dataset's label is i.
A model whose labels are not the dataset's, in the same order, scores a number that means
nothing (a 10-class model on a 9-class dataset "succeeds" at 11 %). The hub refuses such a
launch with a 400 that names both label sets, and the loop refuses it too (a labels file the
hub cannot read, a local `mlms evaluate`), unless the request sets `allow_label_mismatch`: then
it runs and the result says so. A model marked untrained (`attributes.trained: false`) has no
meaningful accuracy to protect, and runs on any dataset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# How many labels of each set a message shows (the first and the last ones).
SHOWN = 6


def is_untrained(manifest: Mapping[str, Any]) -> bool:
    """Whether a model manifest's data marks it not trained (`attributes.trained: false`)."""
    attributes = manifest.get("attributes")
    return isinstance(attributes, Mapping) and attributes.get("trained") is False


def shown(labels: Sequence[str]) -> str:
    """A label set in a message: its size and its first and last labels."""
    if len(labels) <= SHOWN:
        items = ", ".join(labels)
    else:
        head = ", ".join(labels[: SHOWN - 2])
        items = f"{head}, …, {', '.join(labels[-2:])}"
    return f"{len(labels)} label{'s' if len(labels) != 1 else ''} [{items}]"


def mismatch(
    model: str, model_labels: Sequence[str], dataset: str, dataset_labels: Sequence[str]
) -> str | None:
    """None when the label sets are the same list; else what differs, naming both sets.

    `model` and `dataset` name them in the message ("digits-cnn 1.0.0")."""
    if list(model_labels) == list(dataset_labels):
        return None
    if sorted(model_labels) == sorted(dataset_labels):
        how = "the same labels in another order, so class indices mean different classes"
    else:
        extra = sorted(set(model_labels) - set(dataset_labels))
        missing = sorted(set(dataset_labels) - set(model_labels))
        parts = []
        if extra:
            parts.append(f"{len(extra)} only the model's (e.g. {', '.join(extra[:3])})")
        if missing:
            parts.append(f"{len(missing)} only the dataset's (e.g. {', '.join(missing[:3])})")
        how = "; ".join(parts) or "the same labels, repeated differently"
    return (
        f"model {model} has {shown(model_labels)}, but dataset {dataset} has "
        f"{shown(dataset_labels)}: {how}; accuracy would compare unrelated class indices"
    )


REFUSAL_HINT = (
    "Evaluate it on a dataset with the model's labels, or set allow_label_mismatch "
    "(mlms evaluate --allow-label-mismatch, the launch form's checkbox) to run it anyway; the "
    "result then shows the mismatch"
)


def labels_from_text(text: str) -> list[str]:
    """The labels of a labels file: one per line (UTF-8), trailing empty lines ignored."""
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return lines
