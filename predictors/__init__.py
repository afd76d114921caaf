"""Everything that runs on a host: predictors, processing, the data manager and the agent.

This package never imports Django. It runs in slim containers on machines that hold no database
credentials, and is usable as a plain library and CLI.
"""
