"""Fixtures of the traces tests: those of the evaluations tests they build on (users' clients,
the agent of the shared pool, a small catalog and live hosts, an empty artifact store)."""

from tests.evaluations.conftest import (  # noqa: F401
    _evaluation_settings,
    agent,
    alice_client,
    bob_client,
    catalog,
    hosts,
    staff,
)
