"""``python -m predictors.agent``: the agent daemon (`predictors.agent.daemon.main`)."""

from predictors.agent.daemon import main

main()
