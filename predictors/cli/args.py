"""What every `mlms` command shares: its errors, its argument types (counts, shares, lists of
integers, NAME[:SPLIT], frameworks), the check that the artifact store holds what a run reads,
and the plain-text table its reports print."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from predictors.frameworks.predictor import registered
from predictors.manifests import Manifest, ManifestError, apply_overrides, load_file
from predictors.manifests.catalog import Catalog
from predictors.protocol import JOB_DEFAULTS, parse_share

PROG = "mlms"


class UsageError(Exception):
    """Arguments that cannot be run as given (exit status 2)."""


class CommandError(Exception):
    """Something the user can fix, other than the arguments' syntax (exit status 1)."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, not the usage text plus a line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def count(minimum: int) -> Callable[[str], int]:
    """An argument type: an integer of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


def share(text: str) -> float:
    """An argument type: a share, 2%, 2 % or 0.02; more than 0 and less than 1 (100 %)."""
    try:
        value = parse_share(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"{text} is not a share more than 0 and less than 100% (write e.g. 2% or 0.02)"
        )
    return value


def positive_number(text: str) -> float:
    """An argument type: a finite number more than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number > 0")
    return value


def integers(
    text: str, flag: str, *, minimum: int = 1, example: str = "", twice: str = ""
) -> list[int]:
    """The comma-separated integers of `flag`, each at least `minimum`; with `twice`, what
    an item is, none named twice. UsageError naming the flag."""
    values = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or int(part) < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            hint = f" (write e.g. {example})" if example else ""
            raise UsageError(f"{flag}: {part!r} is not {kind}{hint}")
        values.append(int(part))
    if twice and len(set(values)) != len(values):
        raise UsageError(f"{flag}: {text!r} names {twice} twice")
    return values


def dataset(text: str) -> tuple[str, str]:
    """`--dataset NAME[:SPLIT]`: the name and the split (the job's default split if none)."""
    name, _, split = text.partition(":")
    if not name:
        raise UsageError(f"--dataset: {text!r} has no dataset name (write NAME[:SPLIT])")
    return name, split or JOB_DEFAULTS["split"]


def dataset_manifest(catalog: Catalog, name: str, version_range: str) -> Manifest:
    """The catalog's dataset `name`, or the dataset manifest file `name` names (.yaml)."""
    if name.endswith((".yaml", ".yml")):
        path = Path(name)
        if not path.is_file():
            raise CommandError(f"--dataset: no manifest file {name}")
        return load_file(path, kind="dataset")
    return catalog.find_dataset(name, version_range)


def override(model: Manifest, overrides: list[str]) -> Manifest:
    """`model` with the --set overrides applied, checked as an upload is."""
    if not overrides:
        return model
    try:
        return apply_overrides(model.data, overrides)
    except ManifestError as exc:
        where = f"{model.name} {model.version} ({model.framework})"
        raise CommandError(f"--set on {where}: {exc}") from None


def frameworks(text: str, catalog: Catalog, model: str, version: str) -> list[str]:
    """`--framework F[,F...]`, or `all`: every framework `model` has a manifest for."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return catalog.model_frameworks(model, version)
    if not names:
        raise UsageError("--framework: name at least one framework")
    for name in names:
        if name not in registered():
            raise UsageError(
                f"--framework: unknown framework {name!r} (known: {', '.join(registered())})"
            )
    if len(set(names)) != len(names):
        raise UsageError(f"--framework: {text!r} names a framework twice")
    return names


def check_store(store: Path, manifests: list[Manifest], split: str) -> None:
    """Every repo:// file the evaluation reads must be in the store (fail before running)."""
    if not store.is_dir():
        raise CommandError(
            f"the artifact store {store} does not exist: build the zoo with "
            f"`python -m predictors.zoo build --store {store}` or pass --store"
        )
    for manifest in manifests:
        for field, relative in manifest.repo_paths():
            if (
                manifest.kind == "dataset"
                and field.startswith("splits.")
                and field.split(".")[1] != split
            ):
                continue
            if not (store / relative).is_file():
                raise CommandError(
                    f"{manifest.kind} file repo://{relative} ({manifest.name} {manifest.version}"
                    f" {field}) is not in the artifact store {store}: build it with "
                    f"`python -m predictors.zoo build --store {store}`"
                )


def table(rows: list[list[str]], left: int = 2) -> str:
    """`rows` as aligned columns, the first `left` to the left and the rest to the right, a
    rule under the first row."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def add_hub_arguments(parser: argparse.ArgumentParser, token_help: str) -> None:
    """`--hub URL` and `--token T` (from $MLMS_HUB and $MLMS_TOKEN by default) and
    `--format table|json`: what every command that talks to a hub takes."""
    parser.add_argument(
        "--hub", default=os.environ.get("MLMS_HUB"), metavar="URL", help="(default: $MLMS_HUB)"
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("MLMS_TOKEN"),
        metavar="T",
        help=f"API token: {token_help} (default: $MLMS_TOKEN)",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
