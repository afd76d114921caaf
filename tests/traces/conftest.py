"""Fixtures of the traces tests: those of the evaluations tests they build on (a small catalog
and live hosts, an empty artifact store); the users' clients and the pool's agent are suite-wide."""

from tests.evaluations.conftest import (  # noqa: F401
    _evaluation_settings,
    catalog,
    hosts,
    staff,
)
