"""Helpers shared by the test suite's packages (the fixtures are in tests/conftest.py): reading an
API error and asking whether a CUDA device is there."""

from __future__ import annotations

from typing import Any

JSON = "application/json"


def error_of(response: Any) -> dict[str, Any]:
    """The first error of an API error response (a test client's response, or its body already
    read as JSON), checked to be in the API's shape: a JSON object of `detail`, `code` and
    `errors`, the first error's message being the detail."""
    if isinstance(response, dict):
        body = response
    else:
        assert response["Content-Type"] == JSON, response.content
        body = response.json()
    assert set(body) == {"detail", "code", "errors"}, body
    assert body["errors"][0]["message"] == body["detail"]
    return body["errors"][0]  # type: ignore[no-any-return]


def has_cuda() -> bool:
    """Whether PyTorch is installed and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
