"""`mlms evaluations list|show`: a hub's evaluation history from the command line.

    mlms evaluations list [--hub URL] [--token T] [--where NAME=VALUE]... [--ordering KEY]
                          [--page N] [--page-size N] [--format table|json]
    mlms evaluations show ID [--hub URL] [--token T] [--format table|json]

`--where` takes the history's filters by the API's names (`GET /api/v1/evaluations/`:
`model`, `framework`, `batch_size`, `trace_level`, `created_after`, `gpu_model`, …; see
docs/api.md), so the CLI and the API filter the same way; the hub refuses a filter or value it
does not know, naming it. `--ordering` sorts by a field or metric (`-p50_ms` with
`--where batch_size=1`). The hub and token come from `--hub`/`--token` or `$MLMS_HUB`/
`$MLMS_TOKEN`; the token needs the `read` (or `evaluate`) scope.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from predictors import statistics
from predictors.agent.hub_client import HubClient
from predictors.cli.args import add_hub_arguments
from predictors.tasks import metric_names, metric_text, metrics_text

__all__ = ["add_commands", "run"]


class HistoryUsageError(Exception):
    """A command line that cannot be run (exit status 2)."""


def add_commands(commands: Any) -> None:
    """The `evaluations` command and its `list` and `show` subcommands."""
    history = commands.add_parser(
        "evaluations", help="list and show a hub's evaluations (mlms evaluations list|show)"
    )
    actions = history.add_subparsers(dest="action", required=True, parser_class=type(history))
    listing = actions.add_parser("list", help="list evaluations, filtered and sorted")
    listing.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a history filter by its API name, e.g. batch_size=1, framework=pytorch, "
        "created_after=2026-11-01 (repeatable)",
    )
    listing.add_argument("--ordering", metavar="KEY", help="e.g. -created_at, top1, p50_ms")
    listing.add_argument("--page", type=int, default=1, metavar="N")
    listing.add_argument("--page-size", type=int, default=50, metavar="N")
    show = actions.add_parser("show", help="one evaluation, with its result")
    show.add_argument("id", help="the evaluation's id")
    publish = actions.add_parser(
        "publish",
        help="publish an evaluation of yours: anyone may read it, and it joins the "
        "leaderboards (refused for a private model or dataset)",
    )
    publish.add_argument("id", help="the evaluation's id")
    unpublish = actions.add_parser("unpublish", help="make a published evaluation private again")
    unpublish.add_argument("id", help="the evaluation's id")
    share = actions.add_parser("share", help="share an evaluation of yours with one of your groups")
    share.add_argument("id", help="the evaluation's id")
    share.add_argument("--group", required=True, help="the group's name")
    share.add_argument("--stop", action="store_true", help="stop sharing it with the group")
    for parser in (listing, show, publish, unpublish, share):
        add_hub_arguments(
            parser, "'read' to list and show, 'evaluate' or 'write' to publish and share"
        )


def run(args: argparse.Namespace) -> str:
    """What `mlms evaluations …` prints."""
    if not args.hub:
        raise HistoryUsageError("--hub (or $MLMS_HUB) is required: the hub to read from")
    if not args.token:
        raise HistoryUsageError("--token (or $MLMS_TOKEN) is required, with the 'read' scope")
    client = HubClient(args.hub, args.token)
    if args.action in ("publish", "unpublish"):
        evaluation = client.publish(args.id, published=args.action == "publish")
        if args.format == "json":
            return json.dumps(evaluation, indent=2)
        state = "published" if evaluation.get("published") else "private"
        return f"evaluation {evaluation['id']} is {state}"
    if args.action == "share":
        shares = client.share(args.id, args.group, shared=not args.stop)
        if args.format == "json":
            return json.dumps(shares, indent=2)
        if args.stop:
            return f"evaluation {args.id} is no longer shared with {args.group}"
        return f"evaluation {args.id} is shared with: {', '.join(shares.get('groups') or [])}"
    if args.action == "show":
        evaluation = client.evaluation(args.id)
        return json.dumps(evaluation, indent=2) if args.format == "json" else _detail(evaluation)
    query: dict[str, str] = {}
    for item in args.where:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise HistoryUsageError(f"--where: {item!r} is not NAME=VALUE")
        query[name.strip()] = value.strip()
    if args.ordering:
        query["ordering"] = args.ordering
    query["page"] = str(args.page)
    query["page_size"] = str(args.page_size)
    page = client.evaluations(query)
    if args.format == "json":
        return json.dumps(page, indent=2)
    return _listing(page, query.get("batch_size"))


def _listing(page: dict[str, Any], batch_size: str | None) -> str:
    results = page.get("results") or []
    if not results:
        return "no evaluations match"
    header = ["id", "model", "framework", "dataset", "device", "host", "status", "result"]
    rows = [header]
    for item in results:
        accuracy = item.get("accuracy") or {}
        rows.append(
            [
                str(item["id"])[:8],
                f"{item['model']['name']} {item['model']['version']}",
                f"{item['framework']} {item.get('framework_version') or ''}".strip(),
                f"{item['dataset']['name']}:{item['dataset']['split']}",
                str(item.get("device") or ""),
                str(item.get("host") or "-"),
                str(item["status"]),
                _first_metric(item, accuracy) + (" (not trained)" if item.get("untrained") else ""),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"{len(results)} of {page.get('count', len(results))} evaluations")
    if batch_size:
        lines.append(f"(filtered to evaluations with a result at batch size {batch_size})")
    return "\n".join(lines)


def _first_metric(item: dict[str, Any], accuracy: dict[str, Any]) -> str:
    """The list's result column: the task's first metric, named unless it is a top-1."""
    task = str(item.get("task") or "")
    if item.get("status") == "succeeded" and accuracy and accuracy.get("top1") is None:
        return "latency only"
    value = metric_text(task, accuracy.get("top1"))
    name = metric_names(task)[0]
    return value if name == "Top-1" or value == "-" else f"{value} {name}"


def _detail(evaluation: dict[str, Any]) -> str:
    model, dataset = evaluation["model"], evaluation["dataset"]
    lines = [
        f"evaluation {evaluation['id']}: {evaluation['status']}"
        + (f" ({evaluation['reason']})" if evaluation.get("reason") else ""),
        f"  model      {model['name']} {model['version']} ({evaluation['framework']} "
        f"{evaluation.get('framework_version') or ''})".rstrip(),
        f"  dataset    {dataset['name']} {dataset['version']}, split {dataset['split']}",
        f"  device     {evaluation['device']} on {evaluation.get('host') or '-'}",
        f"  launched   {evaluation['created_at']} by {evaluation['user']}",
    ]
    result = evaluation.get("result")
    if result:
        accuracy = result["accuracy"]
        task = str(evaluation.get("task") or "")
        lines.append(
            f"  accuracy   {metrics_text(task, accuracy.get('top1'), accuracy.get('top5'))} on "
            f"{accuracy['count']} inputs"
            + (
                " (the model is marked not trained: its accuracy means nothing)"
                if evaluation.get("untrained")
                else ""
            )
        )
        lines.append(
            f"  {'batch size':>10} {'median ms':>10} {'95 % CI':>17} {'p90 ms':>9} {'p99 ms':>9} "
            f"{'mean ms':>9} {'inputs/s':>10}"
        )
        for size in sorted(result["latency"], key=int):
            # The hub's own text of each figure: one rounding rule on every surface.
            text = result["latency"][size].get("text") or statistics.latency_text(
                result["latency"][size]
            )
            lines.append(
                f"  {size:>10} {text['p50']:>10} {text['p50_interval']:>17} {text['p90']:>9} "
                f"{text['p99']:>9} {text['mean']:>9} "
                f"{statistics.per_second(result['throughput'][size]):>10}"
            )
    return "\n".join(lines)
