"""`python -m predictors.cli`: the `mlms` command."""

from predictors.cli.commands import main

raise SystemExit(main())
