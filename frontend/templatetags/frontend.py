"""Template filters of the pages."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def percent(fraction: Any, digits: int = 2) -> str:
    """0.96875 → "96.88 %" (as the evaluation page's script writes accuracies)."""
    if not isinstance(fraction, int | float):
        return "—"
    return f"{fraction * 100:.{int(digits)}f} %"
