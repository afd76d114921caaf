"""The docker tests take the frontend tests' Chromium (one per module) and its check that
Chromium is installed."""

from tests.frontend.conftest import browser, pytest_runtest_setup  # noqa: F401
