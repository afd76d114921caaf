"""LoadGen's logs read apart: a run's summary (`parse_summary`) and detail log
(`parse_detail`) into its verdict, the reasons of an INVALID one, its own warnings and errors,
and what is only information; and which run of a QPS search the result reports
(`reported_run`), each run as a point of the search's curve (`point`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from predictors.evaluation.errors import EvaluationError

__all__ = ["MAX_PROBLEMS", "held", "parse_detail", "parse_summary", "point", "reported_run"]

# The most distinct warnings and errors kept of one run (each with how many times it came).
MAX_PROBLEMS = 20
_MLLOG = ":::MLLOG "
_LINE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")


def _bullets(lines: list[str]) -> list[str]:
    """A block's ` * ` items, a line without the star continuing the item before it."""
    items: list[str] = []
    for line in lines:
        text = line.strip()
        if text.startswith("*"):
            items.append(text.lstrip("* ").strip())
        elif items:
            items[-1] = f"{items[-1]} {text}"
        else:
            items.append(text)
    return items


def parse_summary(text: str) -> dict[str, Any]:
    """LoadGen's `mlperf_log_summary.txt` read apart: `values` (its `key : value` pairs, the
    first of each key), `valid` (the result line: true, false, or None where there is none),
    `early_stopping` and `recommendations` (the items of those blocks), `invalid_reasons` (why
    an INVALID run is: each "… satisfied : NO" line, with early stopping's explanation and
    LoadGen's recommendations) and `notes` (the rest of those blocks: information, not
    warnings)."""
    values: dict[str, str] = {}
    blocks: dict[str, list[str]] = {"early_stopping": [], "recommendations": []}
    block: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Early Stopping Result"):
            block = "early_stopping"
            continue
        if stripped.startswith("Recommendations:"):
            block = "recommendations"
            continue
        if block is not None:
            # A block's items start with " * " (or continue the item before); anything else
            # ends it.
            continued = blocks[block] and line.startswith(" ") and not _LINE.match(line)
            if stripped.startswith("*") or (stripped and continued):
                blocks[block].append(line)
                continue
            block = None
        match = _LINE.match(line)
        if match and match.group(1) not in values:
            values[match.group(1)] = match.group(2)
    verdict = values.get("Result is")
    # None where LoadGen judged nothing (an accuracy run writes no result line).
    valid = None if verdict is None else verdict == "VALID"
    early = _bullets(blocks["early_stopping"])
    recommendations = _bullets(blocks["recommendations"])
    failed = [
        key
        for key, value in values.items()
        if key.endswith(" satisfied") and value.strip().upper() == "NO"
    ]
    reasons: list[str] = []
    notes: list[str] = []
    if valid is False:
        for key in failed:
            reason = f"{key[: -len(' satisfied')]} not satisfied"
            if key.startswith("Early stopping") and early:
                reason += ": " + " ".join(early)
            reasons.append(reason)
        reasons += [f"LoadGen recommends: {item}" for item in recommendations]
        if not reasons:
            reasons.append("LoadGen judged the run INVALID without a reason in its summary")
    else:
        notes += [f"LoadGen recommends: {item}" for item in recommendations]
    if not (valid is False and any(key.startswith("Early stopping") for key in failed)):
        notes += [f"Early stopping: {item}" for item in early]
    return {
        "valid": valid,
        "values": values,
        "early_stopping": early,
        "recommendations": recommendations,
        "invalid_reasons": reasons,
        "notes": notes,
    }


def parse_detail(text: str) -> dict[str, Any]:
    """LoadGen's `mlperf_log_detail.txt` (`:::MLLOG {json}` lines): `problems`, its entries
    marked `is_warning` or `is_error` (level, key, message and how many times it came, at most
    `MAX_PROBLEMS` distinct ones), and `invalid_reason`, its `result_invalid_reason` where it
    gave one."""
    problems: dict[tuple[str, str, str], int] = {}
    invalid_reason: str | None = None
    for line in text.splitlines():
        if not line.startswith(_MLLOG):
            continue
        try:
            entry = json.loads(line[len(_MLLOG) :])
        except ValueError:
            continue  # a line cut short
        if not isinstance(entry, dict):
            continue
        metadata = entry.get("metadata") or {}
        key, value = str(entry.get("key")), entry.get("value")
        if key == "result_invalid_reason" and value:
            invalid_reason = str(value)
        level = (
            "error"
            if metadata.get("is_error")
            else "warning"
            if metadata.get("is_warning")
            else None
        )
        if level is None:
            continue
        found = (level, key, " ".join(str(value).split()))
        if found in problems or len(problems) < MAX_PROBLEMS:
            problems[found] = problems.get(found, 0) + 1
    return {
        "problems": [
            {"level": level, "key": key, "message": message, "count": count}
            for (level, key, message), count in problems.items()
        ],
        "invalid_reason": invalid_reason,
    }


def _number(values: dict[str, str], key: str) -> float | None:
    try:
        return float(values[key])
    except (KeyError, ValueError):
        return None


def _qps(value: float | None) -> str:
    """A target QPS as the curve shows it: at most three decimals, no trailing zeros."""
    return "—" if value is None else f"{value:.3f}".rstrip("0").rstrip(".")


def point(run: dict[str, Any]) -> dict[str, Any]:
    """A run of the QPS search as a point of its curve: what it measured, LoadGen's verdict and
    why, and its summary's `key : value` lines (its settings among them)."""
    values = run["values"]
    p99 = _number(values, "99.00 percentile latency (ns)")
    return {
        "run": run["run"],
        "target_qps": run["target_qps"],
        "completed_qps": _number(values, "Completed samples per second"),
        "p99_ms": None if p99 is None else round(p99 / 1e6, 3),
        "latency_held": held(run),
        "valid": run["valid"],
        "invalid_reasons": run["invalid_reasons"],
        "problems": run["problems"],
        "seconds": run["seconds"],
        "summary": values,
    }


def held(run: dict[str, Any]) -> bool:
    return run["values"].get("Performance constraints satisfied") == "Yes"


def reported_run(runs: list[dict[str, Any]], search: bool) -> dict[str, Any]:
    """Which of `runs` (in the order they ran, each with its `run` number, `target_qps` and
    `valid`) the result reports, and why: the one run; of a QPS search, the highest target
    LoadGen judged VALID, or, where none was, the lowest target (INVALID)."""
    if not runs:
        raise EvaluationError("LoadGen made no run")
    verdict = {True: "VALID", False: "INVALID", None: "no verdict"}
    if not search:
        chosen = runs[-1]
        why = f"{verdict[chosen['valid']]}, the only run"
    else:
        valid = [run for run in runs if run["valid"] is True]
        if valid:
            chosen = max(valid, key=lambda run: run["target_qps"])
            why = "the highest valid target"
        else:
            chosen = min(runs, key=lambda run: run["target_qps"])
            why = "INVALID: no run was VALID, so the lowest target is shown"
    statement = f"run {chosen['run']} of {len(runs)}: "
    if chosen["target_qps"] is not None:
        statement += f"{_qps(chosen['target_qps'])} QPS, "
    statement += why
    return {
        "run": chosen["run"],
        "runs": len(runs),
        "target_qps": chosen["target_qps"],
        "valid": chosen["valid"],
        "why": why,
        "statement": statement,
    }
