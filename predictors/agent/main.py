"""The agent's command line: `mlms agent` and `python -m predictors.agent`.

    mlms agent --hub URL [--token T | --token-file F] [--name NAME] [--frameworks F,...]
               [--queues Q,...] [--pool | --group G] [--concurrency 1] [--broker URL]
               [--cache DIR] [--docker [--cpus N] [--memory SIZE]
                                        [--allow-custom-code [--custom-code-seconds S]]]

The token may come from $MLMS_AGENT_TOKEN, and must hold the `agent` scope. `main` checks the
flags, registers the host, asks the hub for the broker and runs the daemon
(`predictors.agent.daemon`) until it is stopped.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from predictors.agent.containers import Limits, Runner, parse_memory
from predictors.agent.daemon import Agent
from predictors.agent.hub_client import HubClient, HubError, HubUnreachable
from predictors.agent.images import DockerUnavailable, docker_client
from predictors.agent.registration import AgentError
from predictors.agent.results import PAGE_BYTES
from predictors.data import default_cache_dir
from predictors.frameworks.predictor import FRAMEWORKS
from predictors.host import introspection
from predictors.processing.custom_code import DEFAULT_CALL_SECONDS

__all__ = ["choose_broker", "main"]

logger = logging.getLogger("mlmodelscope.agent")

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _restart(argv: Sequence[str]) -> None:
    """Start the agent afresh in this process (same arguments, a new worker)."""
    logging.shutdown()
    os.execv(sys.executable, [sys.executable, "-m", "predictors.agent", *argv])  # noqa: S606


def _default_name() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:128].lstrip("._-")
    return name or "agent"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlms agent", description="Run a hub's evaluations on this host."
    )
    parser.add_argument(
        "--hub", required=True, metavar="URL", help="the hub, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--token", metavar="T", help="an agent token (default: $MLMS_AGENT_TOKEN)")
    parser.add_argument(
        "--token-file", type=Path, metavar="PATH", help="read the token from a file"
    )
    parser.add_argument(
        "--name", default=_default_name(), help="the host's name at the hub (default: host name)"
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        metavar="F[,F...]",
        help="frameworks to offer, if installed (default: all)",
    )
    parser.add_argument(
        "--queues",
        metavar="C[,C...]",
        help="the capabilities to serve (e.g. onnxruntime.cpu), instead of every framework "
        "and device found; the host's own queue is always consumed",
    )
    placement = parser.add_mutually_exclusive_group()
    placement.add_argument(
        "--pool",
        action="store_true",
        help="put the host in the operators' shared pool, running every user's jobs "
        "(the token's user must be staff)",
    )
    placement.add_argument(
        "--group",
        metavar="NAME",
        help="lend the host to a group you belong to, running the jobs of its members who "
        "trust the group's hosts or name this one",
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="jobs at once (default: 1)"
    )
    parser.add_argument(
        "--broker",
        metavar="URL",
        help="the Celery broker (default: $CELERY_BROKER_URL, else what the hub says)",
    )
    parser.add_argument("--cache", type=Path, metavar="DIR", help="the download cache folder")
    parser.add_argument(
        "--docker",
        action="store_true",
        help="run each evaluation in the predictor image its manifest names (Docker); the "
        "host offers the frameworks of the images it has",
    )
    parser.add_argument(
        "--cpus",
        type=float,
        metavar="N",
        help="with --docker: CPUs each container may use (fractions allowed; default: all)",
    )
    parser.add_argument(
        "--memory",
        metavar="SIZE",
        help="with --docker: memory each container may use, e.g. 4g (default: no limit)",
    )
    parser.add_argument(
        "--allow-custom-code",
        action="store_true",
        help="with --docker: run the custom preprocess/postprocess code of model manifests, "
        "inside their containers (no network, read-only files, memory and time limits); "
        "without it this host refuses such jobs",
    )
    parser.add_argument(
        "--custom-code-seconds",
        type=float,
        metavar="S",
        help="with --allow-custom-code: the longest one call of custom code may take "
        f"(default: {DEFAULT_CALL_SECONDS:g})",
    )
    parser.add_argument(
        "--predictions-page-kib",
        type=int,
        default=PAGE_BYTES // 1024,
        metavar="K",
        help="a result's per-input predictions larger than this (KiB of JSON) are posted in "
        f"pages of about this size before it (default: {PAGE_BYTES // 1024})",
    )
    parser.add_argument(
        "--wait", type=float, default=60, metavar="S", help="seconds to wait for the hub (60)"
    )
    return parser


def _token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token)
    if args.token_file:
        return str(args.token_file.read_text(encoding="utf-8").strip())
    token = os.environ.get("MLMS_AGENT_TOKEN", "").strip()
    if not token:
        raise AgentError("no token: pass --token or --token-file, or set MLMS_AGENT_TOKEN")
    return token


def choose_broker(given: str | None, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The broker URL and transport options: the hub's, or `given` with the options that keep
    to the host's scope (its key prefix; the filesystem folders belong to the hub's URL only).
    A Redis `given` without credentials of its own gets the hub's, those of the host scope's
    broker user: it names another address of the same broker."""
    from urllib.parse import urlsplit, urlunsplit

    options = dict(config.get("broker_transport_options") or {})
    hubs = str(config["broker_url"])
    if not given or given == hubs:
        return hubs, options
    scoped = {key: options[key] for key in ("global_keyprefix",) if key in options}
    ours, theirs = urlsplit(given), urlsplit(hubs)
    redis = ("redis", "rediss")
    if ours.scheme in redis and theirs.scheme in redis and "@" not in ours.netloc:
        if "@" in theirs.netloc:
            credentials = theirs.netloc.rsplit("@", 1)[0]
            given = urlunsplit(ours._replace(netloc=f"{credentials}@{ours.netloc}"))
    return given, scoped


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # TensorFlow takes a GPU's memory as it needs it, not all of it at its first job: a job
    # that runs in a fresh process (`predictors.agent.process`) finds the GPU's memory free.
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    if not NAME.match(args.name):
        print(
            f"mlms agent: error: --name {args.name!r} may only use A-Z a-z 0-9 . _ -",
            file=sys.stderr,
        )
        return 2
    if args.concurrency < 1:
        print("mlms agent: error: --concurrency must be at least 1", file=sys.stderr)
        return 2
    if not 1 <= args.predictions_page_kib <= 1024 * 1024:
        print(
            "mlms agent: error: --predictions-page-kib must be from 1 to 1048576 (1 GiB); got "
            f"{args.predictions_page_kib}",
            file=sys.stderr,
        )
        return 2
    if not args.docker and (args.cpus is not None or args.memory is not None):
        flag = "--cpus" if args.cpus is not None else "--memory"
        print(f"mlms agent: error: {flag} limits containers: it needs --docker", file=sys.stderr)
        return 2
    if args.allow_custom_code and not args.docker:
        print(
            "mlms agent: error: --allow-custom-code: custom code runs only inside predictor "
            "containers; it needs --docker",
            file=sys.stderr,
        )
        return 2
    if args.custom_code_seconds is not None and not args.allow_custom_code:
        print(
            "mlms agent: error: --custom-code-seconds limits custom code: it needs "
            "--allow-custom-code",
            file=sys.stderr,
        )
        return 2
    if args.custom_code_seconds is not None and not 0 < args.custom_code_seconds <= 86400:
        print(
            "mlms agent: error: --custom-code-seconds must be more than 0 and at most 86400; "
            f"got {args.custom_code_seconds:g}",
            file=sys.stderr,
        )
        return 2
    if args.cpus is not None and not 0 < args.cpus <= (os.cpu_count() or 1):
        print(
            f"mlms agent: error: --cpus must be more than 0 and at most this host's "
            f"{os.cpu_count()} CPUs; got {args.cpus:g}",
            file=sys.stderr,
        )
        return 2
    try:
        memory = parse_memory(args.memory) if args.memory is not None else None
    except ValueError as exc:
        print(f"mlms agent: error: --memory {exc}", file=sys.stderr)
        return 2
    try:
        digest = introspection.container_digest()
    except ValueError as exc:
        print(f"mlms agent: error: {exc}", file=sys.stderr)
        return 2
    image = os.environ.get("MLMS_CONTAINER_IMAGE")
    if image and digest is None and not args.docker:
        logger.warning(
            "running in the image %s without its digest: results will name the image, not its "
            "digest; start the container with -e %s=$(docker image inspect --format "
            "'{{.Id}}' %s)",
            image,
            introspection.DIGEST_VARIABLE,
            image,
        )
    runner = None
    if args.docker:
        try:
            runner = Runner(
                docker_client(),
                args.name,
                args.cache or default_cache_dir(),
                limits=Limits(cpus=args.cpus, memory=memory),
                architecture=introspection.architecture(),
                label=f"{args.hub.rstrip('/')}/{args.name}",
                custom_code=args.allow_custom_code,
                custom_code_seconds=args.custom_code_seconds or DEFAULT_CALL_SECONDS,
            )
        except DockerUnavailable as exc:
            print(f"mlms agent: error: --docker: {exc}", file=sys.stderr)
            return 1
    try:
        client = HubClient(args.hub, _token(args))
        agent = Agent(
            client,
            args.name,
            frameworks=[f.strip() for f in args.frameworks.split(",") if f.strip()],
            queues=[q.strip() for q in args.queues.split(",") if q.strip()]
            if args.queues
            else None,
            cache_dir=args.cache,
            concurrency=args.concurrency,
            pool=args.pool,
            group=args.group,
            runner=runner,
            page_bytes=args.predictions_page_kib * 1024,
        )
        agent.register(wait_seconds=args.wait)
        assert agent.host_id is not None
        config = client.agent_config(agent.host_id)
        agent.configure(config)
        broker, options = choose_broker(args.broker or os.environ.get("CELERY_BROKER_URL"), config)
    except (AgentError, HubError, HubUnreachable, OSError) as exc:
        print(f"mlms agent: error: {exc}", file=sys.stderr)
        return 1
    if runner is not None:  # the name is this user's at the hub: its leftovers are ours
        runner.remove_leftovers()
    agent.start_heartbeat()
    agent.start_spool()
    arguments = list(sys.argv[1:] if argv is None else argv)
    agent.watch_broker(broker, options, lambda: _restart(arguments))
    agent.work(broker, options)
    return 0
