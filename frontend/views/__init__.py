"""Browser pages, one module per area. They read through the same querysets and write through
the same actions as the API (`hub.actions`, `evaluations.actions`), so a page can never do what
the API would refuse."""
