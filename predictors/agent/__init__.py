"""The agent: the daemon that runs a hub's evaluations on this host, in this process or in
predictor containers, and delivers their spans and results."""
