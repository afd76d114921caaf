"""Template filters and tags of the pages."""

from __future__ import annotations

from typing import Any

from django import template

from predictors import statistics
from predictors.protocol import FINISHED
from predictors.tasks import LOWER_IS_BETTER, PERCENT_ERRORS, metric_names

register = template.Library()


@register.filter
def percent(fraction: Any, digits: int = 2) -> str:
    """0.96875 → "96.88 %" (as the evaluation page's script writes accuracies)."""
    if not isinstance(fraction, int | float):
        return "—"
    return f"{fraction * 100:.{int(digits)}f} %"


@register.filter
def metric(value: Any, task: str = "") -> str:
    """A result's headline metric for its task: a percentage (accuracies, mAP, mIoU, error
    rates), or for a task whose metric is an error in the target's units (regression) the
    number itself."""
    if not isinstance(value, int | float):
        return "—"
    if task in LOWER_IS_BETTER and task not in PERCENT_ERRORS:
        return f"{value:.4g}"
    return percent(value)


@register.filter
def metric_name(task: str) -> str:
    """The name of a task's first metric (Top-1, mAP, mIoU, MAE, …)."""
    return metric_names(str(task))[0]


@register.filter
def metric_delta(delta: Any, task: str = "") -> str:
    """A difference of two headline metrics (`metric`): percentage points, or the error's."""
    if not isinstance(delta, int | float):
        return "—"
    if task in LOWER_IS_BETTER and task not in PERCENT_ERRORS:
        sign = "+" if delta > 0 else ("−" if delta < 0 else "±")
        return f"{sign}{abs(delta):.4g}"
    return percent_points(delta)


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


@register.filter(name="ms")
def ms_filter(value: Any) -> str:
    """A time in ms by the statistics layer's rounding rule (`predictors.statistics.ms`)."""
    return statistics.ms(value) if isinstance(value, int | float) else "—"


@register.filter
def first_latency(result: Any, batch_size: Any = None) -> dict[str, Any] | None:
    """A result's headline latency: the median at `batch_size` where it is given (the batch
    size a list is filtered and sorted at), else at its smallest batch size, with the interval
    of that median the statistics layer gave it; None where it has no such row."""
    # (An evaluation without a result resolves to the template's empty string.)
    if result is None or not hasattr(result, "batch_results"):
        return None
    rows = sorted(result.batch_results.all(), key=lambda row: row.batch_size)
    if batch_size not in (None, ""):
        rows = [row for row in rows if str(row.batch_size) == str(batch_size)]
    if not rows:
        return None
    row = rows[0]
    return {
        "batch_size": row.batch_size,
        "p50_ms": row.p50_ms,
        "low": row.p50_low_ms,
        "high": row.p50_high_ms,
    }


@register.filter(name="ratio")
def ratio_filter(value: Any) -> str:
    """A ratio by the statistics layer's rule ("0.670", "1.02")."""
    return statistics.ratio(value) if isinstance(value, int | float) else "—"


@register.filter(name="p_value")
def p_value_filter(value: Any) -> str:
    return statistics.p_value(value) if isinstance(value, int | float) else "—"


@register.simple_tag
def finished_statuses() -> str:
    """The statuses after which an evaluation changes no more (`predictors.protocol.FINISHED`),
    space-separated, for a script's data attribute."""
    return " ".join(FINISHED)
