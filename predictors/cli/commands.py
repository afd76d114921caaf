"""The `mlms` command line: its commands (`evaluate`, `evaluations`, `datasets`, `study`,
`flops`, `diverge`, `watch`, and `agent`, which is the agent's own), and `main`, which runs one and turns a user's
mistake into one line on stderr with exit status 1 (2 for malformed arguments), never a
traceback."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from predictors.agent.hub_client import HubError, HubUnreachable
from predictors.cli import datasets, diverge, evaluate, flops, history, study, watch
from predictors.cli.args import PROG, CommandError, Parser, UsageError
from predictors.evaluation import USER_ERRORS, EvaluationCancelled
from predictors.manifests.catalog import CatalogError

__all__ = ["main", "parser"]

# Each command's module: it adds its parser (`add_commands`) and says what it prints (`run`).
COMMANDS = {
    "evaluate": evaluate,
    "evaluations": history,
    "datasets": datasets,
    "study": study,
    "flops": flops,
    "diverge": diverge,
    "watch": watch,
}


def parser() -> Parser:
    """The parser of every command (`agent` parses its own arguments)."""
    found = Parser(
        prog=PROG,
        description="Evaluate models here (from the manifests under manifests/) or on a hub "
        "(--hub), and serve a hub's evaluations on this host (mlms agent).",
    )
    commands = found.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS.values():
        module.add_commands(commands)
    commands.add_parser(
        "agent",
        help="serve evaluations for a hub on this host (see `mlms agent --help`)",
        add_help=False,
    )
    return found


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["agent"]:
        from predictors.agent.main import main as agent_main

        return agent_main(arguments[1:])
    try:
        args = parser().parse_args(arguments)
        print(COMMANDS[args.command].run(args))
    except (UsageError, history.HistoryUsageError) as exc:
        return _fail(str(exc), 2)
    except (CommandError, CatalogError, datasets.DatasetsCommandError) as exc:
        return _fail(str(exc), 1)
    except USER_ERRORS as exc:
        return _fail(str(exc), 1)
    except (HubError, HubUnreachable, TimeoutError) as exc:
        return _fail(str(exc), 1)
    except (KeyboardInterrupt, EvaluationCancelled):
        return _fail("interrupted", 130)
    return 0
