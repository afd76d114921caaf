"""`mlms diverge A B`: where two evaluations of one model part, layer by layer.

    mlms diverge A B [--inputs I[,I...]] [--tolerance X] [--no-wait] [--timeout S]
                     [--hub URL] [--token T] [--format table|json]
    mlms diverge A.npz B.npz [--tolerance X] [--format table|json]

With two evaluation ids, the hub re-runs each on its host capturing every layer's output of a
few inputs (`POST /api/v1/divergence/`), and the command waits for the report (unless
--no-wait). With two capture files (`mlms evaluate --capture-inputs … --capture-file F`), it
compares them here. Either way it prints each matched layer's errors and the first layer that
diverges, or the input when preprocessing differs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from predictors.agent.hub_client import HubClient
from predictors.cli.args import CommandError, UsageError, add_hub_arguments, integers, table

__all__ = ["add_commands", "format_report", "run"]

_POLL_SECONDS = 2.0


def add_commands(commands: Any) -> None:
    command = commands.add_parser(
        "diverge",
        help="find the first layer where two runs of one model part (mlms diverge A B)",
        description="Two evaluation ids on a hub (the hub re-runs both capturing every "
        "layer's output), or two capture files written by mlms evaluate --capture-file.",
    )
    command.add_argument("a", help="the reference: an evaluation id, or a capture file (.npz)")
    command.add_argument("b", help="the run compared with it: the same kind as A")
    command.add_argument(
        "--inputs",
        metavar="I[,I...]",
        help="dataset indices of the inputs to compare (hub only; default: the first inputs "
        "A and B disagree on, then the first inputs)",
    )
    command.add_argument(
        "--tolerance",
        type=float,
        metavar="X",
        help="the relative error a layer's output may reach (default: float32 rounding, see "
        "docs/divergence.md)",
    )
    command.add_argument(
        "--no-wait", action="store_true", help="launch on the hub and print its id, not wait"
    )
    command.add_argument(
        "--timeout", type=float, default=1800, metavar="S", help="how long to wait (default 1800)"
    )
    add_hub_arguments(command, "'evaluate' to launch on a hub")


def run(args: argparse.Namespace) -> str:
    tolerance = args.tolerance
    if tolerance is not None and not 0 < tolerance <= 1:
        raise UsageError(f"--tolerance: must be more than 0 and at most 1; got {tolerance:g}")
    files = [name.endswith(".npz") for name in (args.a, args.b)]
    if all(files):
        if args.inputs:
            raise UsageError("--inputs: capture files hold their own inputs; leave it out")
        report = _local(Path(args.a), Path(args.b), tolerance)
    elif any(files):
        raise UsageError("A and B must both be evaluation ids or both capture files (.npz)")
    else:
        report = _on_hub(args, tolerance)
    if args.format == "json":
        return json.dumps(report, indent=2)
    return format_report(report)


def _local(a: Path, b: Path, tolerance: float | None) -> dict[str, Any]:
    # Loaded where used: NumPy's arrays are all the command needs from here on.
    from predictors.analysis.divergence import DEFAULT_TOLERANCE, Capture, diverge

    captures = []
    for path in (a, b):
        if not path.is_file():
            raise CommandError(f"no capture file {path}")
        try:
            captures.append(Capture.load(path))
        except ValueError as error:
            raise CommandError(f"{path}: {error}") from None
    return diverge(
        captures[0], captures[1], tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance
    )


def _on_hub(args: argparse.Namespace, tolerance: float | None) -> dict[str, Any]:
    if not args.hub:
        raise UsageError("--hub (or $MLMS_HUB) is required for evaluation ids")
    if not args.token:
        raise UsageError("--token (or $MLMS_TOKEN) is required, with the 'evaluate' scope")
    body: dict[str, Any] = {"a": args.a, "b": args.b}
    if args.inputs:
        body["inputs"] = integers(args.inputs, "--inputs", minimum=0, twice="an input")
    if tolerance is not None:
        body["tolerance"] = tolerance
    client = HubClient(args.hub, args.token)
    divergence = client.request("POST", "divergence/", body)
    if args.no_wait:
        return dict(divergence)
    deadline = time.monotonic() + args.timeout
    while divergence["status"] == "pending":
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"divergence {divergence['id']} still pending after {args.timeout:g} s; "
                f"see {args.hub.rstrip('/')}{divergence['url']}"
            )
        time.sleep(_POLL_SECONDS)
        divergence = client.request("GET", f"divergence/{divergence['id']}/")
    if divergence["status"] == "failed":
        raise CommandError(f"divergence {divergence['id']} failed: {divergence['reason']}")
    return dict(divergence["report"])


def format_report(report: dict[str, Any]) -> str:
    """The layers' errors as a table, and the verdict under it."""
    if "report" in report and "status" in report:  # launched, not waited for
        return f"divergence {report['id']} is {report['status']}: {report['url']}"
    rows = [
        [
            str(index),
            row["name"]
            + (
                f" ↔ {row['b']['name']}"
                if row.get("b", {}).get("name", row["name"]) != row["name"]
                else ""
            ),
            row.get("op_type") or "",
            f"{row['max_abs_error']:.3g}",
            f"{row['relative_error']:.3g}",
            f"{row['cosine']:.6f}",
            "diverges" if row.get("diverges") else "",
        ]
        for index, row in enumerate(report.get("layers") or [], start=1)
    ]
    heading = ["#", "layer", "op", "max abs error", "relative error", "cosine", ""]
    lines = [table([heading, *rows], left=3), ""]
    first = report.get("first_divergence")
    if not first:
        lines.append(f"no divergence beyond the tolerance ({report.get('tolerance')}) at any layer")
    elif first.get("at") == "input":
        if first.get("relative_error") is None:  # of other shapes: no error to compute
            shapes = first.get("shapes") or {}
            how = " and ".join(
                "×".join(str(n) for n in shapes.get(side) or []) or "?" for side in ("a", "b")
            )
            how = f"shapes {how}"
        else:
            how = f"relative error {first['relative_error']:.3g}"
        lines.append(f"the inputs differ ({how}): the divergence starts in preprocessing")
        for row in first.get("parameters") or []:
            lines.append(f"  {row['key']}: " + " → ".join(str(v) for v in row["values"]))
    else:
        lines.append(
            f"first divergence: {first['name']} ({first.get('op_type')}), relative error "
            f"{first['relative_error']:.3g} where its input's was {first['input_error']:.3g}"
        )
    return "\n".join(lines)
