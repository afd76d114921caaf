"""The job options' flags, made from `predictors.protocol.JobOptions`: each field is a flag
(`--name-with-dashes`, or the field's `flag`) with its type, bounds, default and help, and the
command line is read back into the job options it spells, checked as the hub checks them."""

from __future__ import annotations

import argparse
from dataclasses import Field, fields
from typing import Any

from predictors.cli.args import UsageError, count, integers, positive_number, share
from predictors.protocol import JobOptions, ProtocolError, describe

# The CLI's group of the options in the launch form's LoadGen group.
LOADGEN_GROUP = (
    "MLPerf LoadGen",
    "after the fixed batches, LoadGen drives the loaded model in a scenario; its summary "
    "(VALID/INVALID and why) is printed and kept with the result",
)


def flag(name: str) -> str:
    """The flag that gives job option `name` (or that it is written in)."""
    meta = JobOptions.__dataclass_fields__[name].metadata
    return str(meta.get("part_of") or meta.get("flag") or "--" + name.replace("_", "-"))


def _kind(spec: Field[Any]) -> dict[str, Any]:
    """How argparse reads the option: by its type, as the protocol's metadata says."""
    meta, default = spec.metadata, spec.default
    if isinstance(default, bool):
        return {"action": "store_true"}
    if "choices" in meta:
        return {"choices": meta["choices"], "default": default}
    metavar = meta.get("metavar", "N")
    if isinstance(default, tuple):
        if meta.get("item") == "str":  # repeatable: --set A=1 --set B=2
            return {"action": "append", "default": list(default), "metavar": metavar}
        # 1,8,32: read by `job_options`, which names the flag in a refusal.
        return {"default": ",".join(str(item) for item in default), "metavar": metavar}
    if meta.get("written") == "share":
        return {"type": share, "default": default, "metavar": metavar}
    if meta.get("number") == "float":
        return {"type": positive_number, "default": default, "metavar": metavar}
    # An option off `unless` another is set takes its default only without it.
    chosen = None if meta.get("unless") else default
    return {"type": count(meta.get("minimum", 0)), "default": chosen, "metavar": metavar}


def _help(spec: Field[Any]) -> str:
    meta, default = spec.metadata, spec.default
    text = describe(spec, flag)
    if default is None:
        shown = meta.get("unset")
    elif isinstance(default, bool) or default == ():
        shown = None
    elif isinstance(default, tuple):
        shown = ",".join(str(item) for item in default)
    else:
        shown = f"{default:g}" if isinstance(default, float) else str(default)
    if shown:
        text += f" (default: {shown})"
    if meta.get("item") == "str":
        text += " (repeatable)"
    return text.replace("%", "%%")


def add_job_options(parser: argparse.ArgumentParser, *, leave_out: tuple[str, ...] = ()) -> None:
    """A flag for every job option but those in `leave_out` and those written in another
    flag (the split, in --dataset NAME[:SPLIT]); the LoadGen options in a group of their own."""
    given: list[str] = []
    loadgen: Any = None
    for spec in fields(JobOptions):
        if spec.name in leave_out or "part_of" in spec.metadata:
            continue
        target: Any = parser
        if spec.metadata["group"] == "loadgen":
            loadgen = loadgen or parser.add_argument_group(*LOADGEN_GROUP)
            target = loadgen
        target.add_argument(flag(spec.name), dest=spec.name, help=_help(spec), **_kind(spec))
        given.append(spec.name)
    parser.set_defaults(job_option_flags=tuple(given))


def integer_list(name: str, text: str) -> tuple[int, ...]:
    """A list option's comma-separated integers (`--batch-sizes 1,8,32`; empty: none), each
    within its bounds' minimum, none twice. UsageError naming the flag."""
    if not text.strip():
        return ()
    meta = JobOptions.__dataclass_fields__[name].metadata
    return tuple(
        integers(
            text,
            flag(name),
            minimum=meta.get("minimum", 1),
            example="1,32",
            twice="a batch size" if name == "batch_sizes" else "an input",
        )
    )


def job_options(args: argparse.Namespace, split: str, *, overrides: bool = True) -> JobOptions:
    """The job options the command line spells, here and with --hub alike: each flag left out
    takes its one default (`predictors.protocol.JOB_DEFAULTS`; an option off `unless` another
    is set, 0 with it), checked as the hub checks them. UsageError naming the flag at fault.
    Without `overrides`, the --set items are left out (a local run checks them against the
    manifest as it applies them)."""
    given: dict[str, Any] = {"split": split}
    for name in args.job_option_flags:
        spec = JobOptions.__dataclass_fields__[name]
        value = getattr(args, name)
        if isinstance(spec.default, tuple):
            if spec.metadata.get("item") == "str":
                value = tuple(value) if overrides else ()
            else:
                value = integer_list(name, value)
        given[name] = value
    for name, value in list(given.items()):
        unless = JobOptions.__dataclass_fields__[name].metadata.get("unless")
        if unless and value is None:
            given[name] = 0 if given.get(unless) else JobOptions.__dataclass_fields__[name].default
    try:
        return JobOptions(**given)
    except ProtocolError as error:
        raise UsageError(f"{flag(error.path)}: {error.message}") from None
