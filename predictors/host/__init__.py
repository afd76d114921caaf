"""This host as a result records it: its hardware and software stack (`introspection`) and its
Python environment (`environment`)."""
