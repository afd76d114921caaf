"""Helpers of the test suite (tests/) and the benchmarks (benchmarks/); the hub never imports
them. `livehub` runs a hub, its agents and a Redis server in processes of their own."""
