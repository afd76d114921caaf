"""`mlms watch`: a launch request pinned on a hub, re-run by hand or on a schedule, and its series
of runs, each labelled regression, improvement or noise against the noise the series shows.

    mlms watch create --model M --framework F --dataset D[:SPLIT] [--name NAME] [--host H]
                      [--every MINUTES] [--series-batch-size N] [job options ...]
    mlms watch list [--model M]
    mlms watch run WATCH [job options changed for this run: --threads 1 ...]
    mlms watch show WATCH
    mlms watch delete WATCH

WATCH is a watch's id or name. The hub and token come from `--hub`/`--token` or
`$MLMS_HUB`/`$MLMS_TOKEN`: `read` to list and show, `evaluate` to create and run. The hub
checks every request as `POST /api/v1/watches/` does and refuses a bad one naming the field.
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote, urlencode

from predictors import statistics
from predictors.agent.hub_client import HubClient, HubError
from predictors.cli.args import (
    CommandError,
    UsageError,
    add_hub_arguments,
    count,
    dataset,
    table,
)
from predictors.cli.options import add_job_options, integer_list, job_options
from predictors.protocol import CPU, DEVICES, JobOptions

__all__ = ["add_commands", "run"]


def add_commands(commands: Any) -> None:
    """The `watch` command and its `create`, `list`, `run`, `show` and `delete` subcommands."""
    watch = commands.add_parser(
        "watch",
        help="re-run a pinned request on a hub and label each run regression, improvement or "
        "noise (mlms watch create|list|run|show|delete)",
    )
    actions = watch.add_subparsers(dest="action", required=True, parser_class=type(watch))
    create = actions.add_parser("create", help="pin a launch request as a watch")
    create.add_argument("--model", required=True, help="model name")
    create.add_argument("--version", default="*", metavar="RANGE", help="model version range")
    create.add_argument("--framework", required=True, help="the framework")
    create.add_argument(
        "--dataset", required=True, metavar="NAME[:SPLIT]", help="dataset name and split"
    )
    create.add_argument("--dataset-version", default="*", metavar="RANGE")
    create.add_argument("--device", choices=DEVICES, default=CPU)
    create.add_argument("--host", default="", help="pin the watch to this host")
    create.add_argument(
        "--every", type=count(1), metavar="MINUTES", help="run on a schedule, every MINUTES"
    )
    create.add_argument(
        "--name", help="the watch's name (default: MODEL-FRAMEWORK, with the host's name)"
    )
    create.add_argument(
        "--series-batch-size",
        type=count(1),
        metavar="N",
        help="the batch size whose latency the series follows (default: the first)",
    )
    add_job_options(create)
    listing = actions.add_parser("list", help="your watches")
    listing.add_argument("--model", help="only the watches of this model")
    runner = actions.add_parser(
        "run", help="launch a run now, with job options changed for this run only"
    )
    runner.add_argument("watch", help="the watch's id or name")
    add_job_options(runner)
    # Only the options given are sent: the others stay the watch's.
    for action in runner._actions:
        if action.dest in JobOptions.names():
            action.default = argparse.SUPPRESS
    show = actions.add_parser("show", help="the series: each run's median, verdict, what changed")
    show.add_argument("watch", help="the watch's id or name")
    delete = actions.add_parser("delete", help="delete a watch (its runs stay)")
    delete.add_argument("watch", help="the watch's id or name")
    for parser in (create, listing, runner, show, delete):
        add_hub_arguments(parser, "'read' to list and show, 'evaluate' to create and run")


def run(args: argparse.Namespace) -> str:
    """What `mlms watch …` prints."""
    if not args.hub:
        raise UsageError("--hub (or $MLMS_HUB) is required: the hub the watch lives on")
    if not args.token:
        raise UsageError("--token (or $MLMS_TOKEN) is required")
    client = HubClient(args.hub, args.token)
    if args.action == "create":
        body = client.request("POST", "watches/", _create_body(args), retries=0)
        return _out(args, body, lambda: f"watch {body['name']} ({body['id']}) created")
    if args.action == "list":
        query = {"model": args.model} if args.model else {}
        page = client.request("GET", "watches/" + (f"?{urlencode(query)}" if query else ""))
        return _out(args, page, lambda: _listing(page.get("results") or []))
    watch = _find(client, args.watch)
    if args.action == "run":
        body = client.request("POST", f"watches/{watch['id']}/runs/", _run_body(args), retries=0)
        evaluation = body["evaluation"]
        return _out(
            args,
            body,
            lambda: (
                f"run of watch {watch['name']} launched: evaluation {evaluation['id']} "
                f"({evaluation['status']})"
            ),
        )
    if args.action == "delete":
        client.request("DELETE", f"watches/{watch['id']}/", retries=0)
        return _out(args, {"deleted": watch["id"]}, lambda: f"watch {watch['name']} deleted")
    detail = client.request("GET", f"watches/{watch['id']}/")
    return _out(args, detail, lambda: _series(detail))


def _out(args: argparse.Namespace, body: Any, table: Any) -> str:
    return json.dumps(body, indent=2) if args.format == "json" else str(table())


def _create_body(args: argparse.Namespace) -> dict[str, Any]:
    name, split = dataset(args.dataset)
    request = {
        "model": args.model,
        "model_version": args.version,
        "framework": args.framework,
        "dataset": name,
        "dataset_version": args.dataset_version,
        "device": args.device,
        "host": args.host,
        **job_options(args, split).to_dict(),
    }
    default_name = "-".join(part for part in (args.model, args.framework, args.host) if part)
    return {
        "name": args.name or default_name,
        "request": request,
        "batch_size": args.series_batch_size,
        "every": args.every,
    }


def _run_body(args: argparse.Namespace) -> dict[str, Any]:
    """The job options given on the command line, as the launch request spells them."""
    body: dict[str, Any] = {}
    for name in JobOptions.names():
        if not hasattr(args, name):
            continue
        value = getattr(args, name)
        spec = JobOptions.__dataclass_fields__[name]
        if isinstance(spec.default, tuple) and spec.metadata.get("item") != "str":
            value = list(integer_list(name, value))
        body[name] = value
    return body


def _find(client: HubClient, watch: str) -> dict[str, Any]:
    """The watch of this id, or of this name."""
    results = client.request("GET", f"watches/?name={quote(watch, safe='')}").get("results") or []
    if results:
        return dict(results[0])
    try:
        return dict(client.request("GET", f"watches/{quote(watch, safe='')}/"))
    except HubError as error:
        if error.status != 404:
            raise
        raise CommandError(f"no watch of yours named {watch!r} or with that id") from None


def _listing(watches: list[dict[str, Any]]) -> str:
    if not watches:
        return "no watches"
    rows = [["name", "model", "framework", "dataset", "host", "every", "runs", "id"]]
    for watch in watches:
        rows.append(
            [
                str(watch["name"]),
                str(watch["model"]),
                str(watch["framework"]),
                str(watch["dataset"]),
                str(watch.get("host") or "any"),
                f"{watch['every']} min" if watch.get("every") else "by hand",
                str(watch.get("runs", 0)),
                str(watch["id"]),
            ]
        )
    return table(rows, left=len(rows[0]))


def _series(detail: dict[str, Any]) -> str:
    head = (
        f"watch {detail['name']}: {detail['model']} on {detail['framework']}, "
        f"{detail['dataset']}, batch size {detail['batch_size']}, host "
        f"{detail.get('host') or 'any'}, "
        + (f"every {detail['every']} min" if detail.get("every") else "run by hand")
    )
    lines = [head]
    if detail.get("last_error"):
        lines.append(f"the last scheduled run was refused: {detail['last_error']}")
    runs = detail.get("series") or []
    if not runs:
        return "\n".join([*lines, "no runs yet"])
    rows = [["run", "median ms [95 % CI]", "verdict", "what changed"]]
    for run in runs:
        latency = run.get("latency")
        text = (latency.get("text") or statistics.latency_text(latency)) if latency else None
        median = f"{text['p50']} [{text['p50_interval']}]" if text else "—"
        verdict = str(run["words"]) + (f"; {run['note']}" if run.get("note") else "")
        changed = run.get("changed_text") or ("nothing" if run.get("reference") else "—")
        rows.append([str(run["number"]), median, verdict, changed])
    summary = detail.get("summary") or {}
    lines.append(table(rows, left=len(rows[0])))
    lines.append(
        f"{summary.get('runs', len(runs))} runs: {summary.get('regressions', 0)} regression(s), "
        f"{summary.get('improvements', 0)} improvement(s)"
    )
    return "\n".join(lines)
