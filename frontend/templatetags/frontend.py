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


@register.filter
def percent_points(delta: Any, digits: int = 2) -> str:
    """-0.1234 → "−12.34 pt" (a difference of two accuracies, signed)."""
    if not isinstance(delta, int | float):
        return "—"
    sign = "+" if delta > 0 else ("−" if delta < 0 else "±")
    return f"{sign}{abs(delta) * 100:.{int(digits)}f} pt"


@register.filter
def index(items: Any, position: int) -> Any:
    """items[position], or None past the end (for columns that run beside a loop)."""
    try:
        return items[int(position)]
    except (IndexError, KeyError, TypeError, ValueError):
        return None
