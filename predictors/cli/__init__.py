"""`mlms`: evaluate a model locally, from the manifests in a folder and the files in an artifact
store, with no hub, or on a hub; list a hub's evaluations; make datasets; run repeat studies;
count a model's multiply-adds; serve a hub's evaluations (`mlms agent`).

    mlms evaluate MODEL --framework F[,F...] --dataset NAME[:SPLIT] [options]

Results go to stdout (a table, or JSON with `--format json`), the progress bar to stderr. A
mistake of the user (an unknown model, a version range nothing satisfies, a bad `--set`, a file
missing from the store, …) is one line on stderr and exit status 1 (2 for malformed arguments),
never a traceback.

The rooms: `commands` (the parser and `main`), `args` (what every command shares), `options`
(the job options' flags, from the protocol), `evaluate` and `report` (`mlms evaluate` and what
it prints), `history`, `datasets`, `study` and `flops` (a command each).
"""

from __future__ import annotations

from predictors.cli.commands import main

__all__ = ["main"]
