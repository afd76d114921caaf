"""``python -m predictors.zoo build [--store DIR] [--only NAME ...] [--force] [--jobs N]``.

Progress goes to stderr; the summary (every file's path, sha256 and size, and for the trained
models the validation top-1 measured in each framework) is printed to stdout as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from predictors.zoo.build import ENTRIES, UnknownEntry, build, default_store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m predictors.zoo", description="The offline model zoo."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser(
        "build",
        help="build the built-in datasets and models into the artifact store",
        description="Build the built-in datasets and models into the artifact store. Entries: "
        + ", ".join(entry.key for entry in ENTRIES),
    )
    command.add_argument(
        "--store",
        type=Path,
        default=None,
        help=f"artifact store folder (default: $ARTIFACT_ROOT or {default_store()})",
    )
    command.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="build only these entries (a name, or datasets/<name> or models/<name>)",
    )
    command.add_argument(
        "--force", action="store_true", help="rebuild the selected entries even if present"
    )
    command.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="models built at a time, each in its own process (default: min(2, CPUs))",
    )
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    try:
        summary = build(args.store, only=args.only, force=args.force, jobs=args.jobs)
    except UnknownEntry as error:
        parser.error(str(error))
    except RuntimeError as error:  # a check failed: an export disagrees, or misses its target
        print(f"zoo build failed: {error}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
