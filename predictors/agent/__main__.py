"""``python -m predictors.agent``: the agent daemon's command line (`predictors.agent.main`)."""

from predictors.agent.main import main

raise SystemExit(main())
