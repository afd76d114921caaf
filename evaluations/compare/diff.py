"""A diff of many traces: up to 32 evaluations in two sides, A (the baseline) and B (a repeat
study's runs are a side), compared item by item at every level of their traces, for the API
(`GET /api/v1/compare/traces/`) and the page (`/compare/traces/`).

- **Levels** (`LEVELS`): stages, batches, layers, ops, kernels and counters, the span levels of
  `predictors.protocol.SPAN_LEVELS` in that order. An item is what the traces' aggregates
  (`traces.aggregates`) hold one row of: a name under a parent path. Within one framework items
  are matched by structure: an op inside layer X is `X › op`, kept apart from the same op in
  layer Y. Across frameworks, layers are paired by op type and order
  (`layers.pair_by_op_type`), and B's ops and kernels move under A's name of their layer.
- **Per item and side**: the median time per call with its distribution-free interval, the
  calls per inference and the time per inference (median time × calls per inference, where an
  inference is one batch span); against A, the ratio of the medians with its interval, the test
  and a verdict (`predictors.statistics.difference`). Counters compare their values (higher,
  lower) and contribute no time.
- **The unit of the test**: with two or more runs on each side, one value per run (the run's
  median of that item, from the aggregates only: `per_run`), so that five runs against five
  compare five values with five; one run against one compares the two runs' spans, as the
  side-by-side comparison does.
- **Contribution**: B's time per inference less A's; items added (on B only) and removed (on A
  only) contribute all of theirs. A level's total is the sum over its innermost items (an op
  that encloses other ops counts through them). Items are listed by the size of their
  contribution, the waterfall (`waterfall`) shows the largest summing to the total.
- **Drill-down**: `level=op&parent=<layer>` lists the ops of one layer, `level=kernel&parent=
  <op>` the kernels of one op (`children` says how many an item has).
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from evaluations.compare import differences, layers, load, parse_id_list, parse_noise, summary
from evaluations.models import Evaluation
from hub.errors import Invalid
from predictors import statistics
from predictors.protocol import SPAN_LEVELS
from traces import aggregates
from traces.aggregates import PATH_SEPARATOR

# The diff's levels, each the span level whose spans are its items, outermost first.
LEVELS = dict(zip(("stage", "batch", "layer", "op", "kernel", "counter"), SPAN_LEVELS, strict=True))
COUNTERS = "counter"
# Where a row of a level leads when clicked: a layer to its ops, an op to its kernels.
DRILLS = {"layer": "op", "op": "kernel"}
# The level shown when none is asked for: the first of these the traces hold.
DEFAULT_LEVELS = ("layer", "batch", "stage", "op", "kernel", COUNTERS)
MAX_SIDE = 31
MAX_EVALUATIONS = 32
# Per item, a bootstrap of this many resamples (the runs' values are few).
ITEM_RESAMPLES = 1000
# The most items one answer lists (by contribution; the totals count all of them).
MAX_ITEMS = 200
WATERFALL_ITEMS = 10
RUN, SPAN = "run", "span"
UNITS = {
    RUN: "one value per run: the run's median of the item (from its trace's aggregates)",
    SPAN: "the spans of the one run on each side",
}
MATCHED, ADDED, REMOVED = "matched", "added", "removed"
_COUNTER_VERDICTS = {"faster": "lower", "slower": "higher"}


# -- the request -----------------------------------------------------------------------------


def parse_sides(raw_a: str | None, raw_b: str | None) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """`a` and `b` (ids separated by commas) → the two sides' evaluation ids: 1 to 31 on each,
    at most 32 in all, none listed twice; Invalid naming `a` or `b`."""
    a = parse_id_list(raw_a, "a", 1, MAX_SIDE)
    b = parse_id_list(raw_b, "b", 1, MAX_SIDE)
    if len(a) + len(b) > MAX_EVALUATIONS:
        raise Invalid(
            f"a and b list {len(a) + len(b)} evaluations together; at most {MAX_EVALUATIONS}",
            path="b",
        )
    twice = [pk for pk in b if pk in a]
    if twice:
        raise Invalid(f"b: {twice[0]} is on side a too", path="b")
    return a, b


def parse_level(raw: str | None) -> str | None:
    """`level` → one of `LEVELS` (None: the default); Invalid naming `level`."""
    if raw is None or raw == "":
        return None
    if raw not in LEVELS:
        raise Invalid(f"level must be one of {', '.join(LEVELS)}; got {raw[:40]!r}", path="level")
    return raw


def parse_batch_size(raw: str | None) -> int | None:
    """`batch_size` → a positive whole number (None: the smallest every run traced)."""
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise Invalid(
            f"batch_size must be a whole number from 1; got {raw[:40]!r}", path="batch_size"
        )
    return value


def load_sides(
    user: AbstractBaseUser | AnonymousUser, a: list[uuid.UUID], b: list[uuid.UUID]
) -> tuple[list[Evaluation], list[Evaluation]]:
    """The two sides' evaluations; NotFound naming `a` or `b` for one the user may not read."""
    return load(user, a, path="a", details=False), load(user, b, path="b", details=False)


def from_query(user: AbstractBaseUser | AnonymousUser, query: Mapping[str, Any]) -> dict[str, Any]:
    """The diff that query parameters `a`, `b`, `level`, `parent`, `batch_size` and `noise`
    ask for (the API's and the page's); Invalid or NotFound naming the parameter at fault."""
    a_ids, b_ids = parse_sides(query.get("a"), query.get("b"))
    level = parse_level(query.get("level"))
    batch_size = parse_batch_size(query.get("batch_size"))
    noise = parse_noise(query.get("noise"))
    a, b = load_sides(user, a_ids, b_ids)
    parent = query.get("parent") or None
    return diff(a, b, level=level, parent=parent, batch_size=batch_size, noise=noise)


# -- what the aggregates say of each run ---------------------------------------------------------


@dataclass
class _Cell:
    """One run's figures of one item: its median (ms, or a counter's value), how many spans
    (samples), and with one run a side the spans themselves (ms, or values)."""

    value: float
    count: int
    op_type: str
    layer_index: int | None
    samples: np.ndarray | None = None
    # Its own name, where it is listed under another's (a layer paired across frameworks).
    origin: str = ""


@dataclass
class _Run:
    evaluation: Evaluation
    # Batch spans at the batch size compared (None: none, the run's totals are per run).
    inferences: int | None
    items: dict[str, dict[tuple[str, str], _Cell]] = field(default_factory=dict)

    def per_inference(self, cell: _Cell | None) -> float:
        if cell is None:
            return 0.0
        return cell.value * cell.count / (self.inferences or 1)


def _run(evaluation: Evaluation, rows: list[dict[str, Any]], batch_size: int | None) -> _Run:
    levels = {span_level: name for name, span_level in LEVELS.items()}
    items: dict[str, dict[tuple[str, str], _Cell]] = {name: {} for name in LEVELS}
    inferences = 0
    for row in rows:
        name = levels.get(row["level"])
        if name is None:
            continue
        if name == COUNTERS:
            if row["value_p50"] is None:
                continue  # a sampler's own row: the time it sampled
            value = float(row["value_p50"])
        elif row["batch_size"] != batch_size:
            continue
        else:
            value = row["p50_ns"] / 1e6
        if name == "batch":
            inferences += row["count"]
        key = (row["parent"], row["name"])
        found = items[name].get(key)
        # One name under one parent with two op types: the commoner's median, both counted.
        if found is None or row["count"] > found.count:
            count = row["count"] + (found.count if found else 0)
            items[name][key] = _Cell(value, count, row["op_type"], row["layer_index"])
        else:
            found.count += row["count"]
    return _Run(evaluation, inferences or None, items)


def _with_spans(run: _Run, batch_size: int | None) -> None:
    """One run a side: each item's median and samples from the run's spans."""
    spans, counters = aggregates.item_samples(run.evaluation.trace_id, batch_size)
    for name, span_level in LEVELS.items():
        found = counters if name == COUNTERS else spans.get(span_level, {})
        for key, cell in run.items[name].items():
            samples = found.get(key)
            if samples is not None and len(samples):
                cell.samples = samples if name == COUNTERS else samples / 1e6
                cell.value = float(np.median(cell.samples))


class _Layer(NamedTuple):
    name: str
    op_type: str
    position: int | None


def _layer_order(runs: list[_Run]) -> list[_Layer]:
    """A side's layers (outermost ones) in the order they run: the first index seen."""
    first: dict[str, _Layer] = {}
    for run in runs:
        for (parent, name), cell in run.items["layer"].items():
            known = first.get(name)
            if parent or (known is not None and (known.position or 0) <= (cell.layer_index or 0)):
                continue
            first[name] = _Layer(name, cell.op_type, cell.layer_index)
    return sorted(
        first.values(), key=lambda layer: (layer.position is None, layer.position, layer.name)
    )


def _rename(runs: list[_Run], names: dict[str, str]) -> None:
    """B's runs with their layers under A's names (paired across frameworks), and their ops'
    and kernels' parent paths with them."""

    def path(parent: str) -> str:
        head, separator, rest = parent.partition(PATH_SEPARATOR)
        return names.get(head, head) + separator + rest

    for run in runs:
        for (parent, name), cell in run.items["layer"].items():
            if not parent and names.get(name, name) != name:
                cell.origin = name
        run.items["layer"] = {
            (parent, names.get(name, name) if not parent else name): cell
            for (parent, name), cell in run.items["layer"].items()
        }
        for level in ("op", "kernel"):
            run.items[level] = {
                (path(parent), name): cell for (parent, name), cell in run.items[level].items()
            }


# -- items -------------------------------------------------------------------------------------


@dataclass
class _Item:
    level: str
    parent: str
    name: str
    op_type: str
    a: list[_Cell | None]
    b: list[_Cell | None]
    a_per_inference: float | None = None
    b_per_inference: float | None = None

    @property
    def path(self) -> str:
        return key_of(self.parent, self.name)

    @property
    def status(self) -> str:
        if not any(self.a):
            return ADDED
        return REMOVED if not any(self.b) else MATCHED

    @property
    def contribution(self) -> float | None:
        if self.a_per_inference is None or self.b_per_inference is None:
            return None
        return self.b_per_inference - self.a_per_inference


def key_of(parent: str, name: str) -> str:
    """An item's key: its parent path and its name, as one path."""
    return f"{parent}{PATH_SEPARATOR}{name}" if parent else name


def _under(parent: str, path: str) -> bool:
    return parent == path or parent.startswith(path + PATH_SEPARATOR)


def _prefixes(parent: str) -> list[str]:
    parts = parent.split(PATH_SEPARATOR) if parent else []
    return [PATH_SEPARATOR.join(parts[: end + 1]) for end in range(len(parts))]


def _items(level: str, a_runs: list[_Run], b_runs: list[_Run]) -> list[_Item]:
    keys = sorted({key for run in (*a_runs, *b_runs) for key in run.items[level]})
    cells = {
        side: [[run.items[level].get(key) for run in runs] for key in keys]
        for side, runs in (("a", a_runs), ("b", b_runs))
    }
    per_inference: dict[str, list[float | None]] = {
        "a": [None] * len(keys),
        "b": [None] * len(keys),
    }
    if level != COUNTERS and keys:
        for side, runs in (("a", a_runs), ("b", b_runs)):
            # Each run's time per inference (0 where it lacks the item); the side's median.
            times = np.asarray(
                [
                    [run.per_inference(cell) for run, cell in zip(runs, row, strict=True)]
                    for row in cells[side]
                ]
            )
            per_inference[side] = np.median(times, axis=1).tolist()
    made = []
    for position, key in enumerate(keys):
        a, b = cells["a"][position], cells["b"][position]
        known = next(cell for cell in (*a, *b) if cell is not None)
        item = _Item(level, key[0], key[1], known.op_type, a, b)
        item.a_per_inference = per_inference["a"][position]
        item.b_per_inference = per_inference["b"][position]
        made.append(item)
    return made


def _enclosing(items: list[_Item]) -> set[str]:
    """The paths of the items that enclose other items of their level."""
    parents = {prefix for item in items for prefix in _prefixes(item.parent)}
    return {item.path for item in items if item.path in parents}


def _totals(items: list[_Item]) -> dict[str, Any]:
    """A level's time per inference on each side and their difference, over its innermost
    items."""
    enclosing = _enclosing(items)
    inner = [item for item in items if item.path not in enclosing]
    if not inner or inner[0].level == COUNTERS:
        return {"a_ms": None, "b_ms": None, "difference_ms": None, "text": None}
    a = sum(item.a_per_inference or 0.0 for item in inner)
    b = sum(item.b_per_inference or 0.0 for item in inner)
    return {
        "a_ms": a,
        "b_ms": b,
        "difference_ms": b - a,
        "text": {"a": statistics.ms(a), "b": statistics.ms(b), "difference": signed(b - a)},
    }


def _order(item: _Item) -> tuple[float, str]:
    """Largest contribution first; counters by how far their medians part (log ratio)."""
    if item.level == COUNTERS:
        a, b = _median(item.a), _median(item.b)
        size = abs(np.log(b / a)) if a and b and a > 0 and b > 0 else float("inf")
        return -size, item.path
    return -abs(item.contribution or 0.0), item.path


def _median(cells: list[_Cell | None]) -> float | None:
    values = [cell.value for cell in cells if cell is not None]
    return float(np.median(values)) if values else None


# -- the diff ----------------------------------------------------------------------------------


def diff(
    a: list[Evaluation],
    b: list[Evaluation],
    *,
    level: str | None = None,
    parent: str | None = None,
    batch_size: int | None = None,
    noise: float = statistics.NOISE,
) -> dict[str, Any]:
    """Side B against side A at `level` (None: the first of `DEFAULT_LEVELS` the traces
    hold), under `parent` (a layer's or an op's key) where given, at `batch_size` (None: the
    smallest every run traced)."""
    if parent and level not in DRILLS.values():
        raise Invalid(f"parent applies to levels {', '.join(DRILLS.values())}", path="parent")
    differences.name_apart([*a, *b])  # runs of one model, framework and host told apart
    rows = aggregates.rows_of_traces([evaluation.trace_id for evaluation in (*a, *b)])
    traced = {evaluation.pk for evaluation in (*a, *b) if rows.get(evaluation.trace_id)}
    answer: dict[str, Any] = {
        "sides": {
            side: [{**summary(e), "traced": e.pk in traced} for e in evaluations]
            for side, evaluations in (("a", a), ("b", b))
        },
        "noise": noise,
        "levels": [],
        "level": level,
        "parent": parent or None,
        "items": [],
        "items_total": 0,
        "waterfall": None,
        "largest": None,
    }
    a, b = [e for e in a if e.pk in traced], [e for e in b if e.pk in traced]
    answer["runs"] = {"a": len(a), "b": len(b)}
    if not a or not b:
        answer["note"] = "a side has no traced run: launch at trace level application or deeper"
        return answer
    sizes = [{r["batch_size"] for r in rows[e.trace_id]} - {None} for e in (*a, *b)]
    shared = sorted(set.intersection(*sizes))
    answer["batch_sizes"] = shared
    if batch_size is not None and batch_size not in shared:
        raise Invalid(
            f"batch_size {batch_size} is not one every run traced; they share "
            f"{', '.join(map(str, shared)) or 'none'}",
            path="batch_size",
        )
    if batch_size is None:
        if not shared and any(sizes):
            answer["note"] = "the runs share no batch size"
            return answer
        batch_size = shared[0] if shared else None
    answer["batch_size"] = batch_size
    a_runs = [_run(e, rows[e.trace_id], batch_size) for e in a]
    b_runs = [_run(e, rows[e.trace_id], batch_size) for e in b]
    unit = SPAN if len(a) == 1 and len(b) == 1 else RUN
    if unit == SPAN:
        for run in (*a_runs, *b_runs):
            _with_spans(run, batch_size)
    same = len({e.framework for e in (*a, *b)}) == 1
    if not same:
        base = _layer_order(a_runs)
        paired = layers.pair_by_op_type(base, _layer_order(b_runs))
        _rename(b_runs, {o.name: n.name for n, o in zip(base, paired, strict=True) if o})
    every = {name: _items(name, a_runs, b_runs) for name in LEVELS}
    for name, items in every.items():
        if items:
            answer["levels"].append(
                {
                    "level": name,
                    "span_level": LEVELS[name],
                    "items": len(items),
                    "added": sum(item.status == ADDED for item in items),
                    "removed": sum(item.status == REMOVED for item in items),
                    **_totals(items),
                }
            )
    if level is None:
        level = next((name for name in DEFAULT_LEVELS if every[name]), "layer")
    view = every[level]
    if parent:
        # A layer's or an op's key: the kernels of a layer are those of its ops.
        known = {item.path for name in DRILLS for item in every[name]}
        if parent not in known:
            raise Invalid(
                f"parent: no layer or op {parent[:80]!r} in these traces at batch size "
                f"{batch_size}",
                path="parent",
            )
        view = [item for item in view if _under(item.parent, parent)]
    view.sort(key=_order)
    enclosing = _enclosing(view)
    below = Counter(
        prefix for item in every.get(DRILLS.get(level, ""), []) for prefix in _prefixes(item.parent)
    )
    shown = [
        _item(item, a_runs, b_runs, unit, noise, item.path in enclosing, below[item.path])
        for item in view[:MAX_ITEMS]
    ]
    answer.update(
        level=level,
        unit=unit,
        unit_text=UNITS[unit],
        test=statistics.RUNS_TEST if unit == RUN else statistics.LATENCY_TEST,
        interval=statistics.MEDIAN_INTERVAL,
        matched_by="structure" if same else "op type and order",
        items=shown,
        items_total=len(view),
        added=[item.path for item in view if item.status == ADDED][:MAX_ITEMS],
        removed=[item.path for item in view if item.status == REMOVED][:MAX_ITEMS],
        total=_totals(view),
        waterfall=waterfall(view, enclosing) if level != COUNTERS else None,
        largest=shown[0]["key"] if shown else None,
        note=_note(unit, same, len(a), len(b), batch_size),
    )
    return answer


def _note(unit: str, same: bool, a: int, b: int, batch_size: int | None) -> str:
    matched = (
        "items matched by structure (an op or kernel by the layer and op it is in)"
        if same
        else "layers matched across frameworks by op type and order (best effort), their ops "
        "and kernels with them"
    )
    test = (
        f"tested on one value per run ({a} against {b})"
        if unit == RUN
        else "tested on the spans of one run against one"
    )
    if unit == RUN and min(a, b) < 2:
        test += "; a test needs two runs or more on each side"
    elif unit == RUN and 2 / math.comb(a + b, a) >= statistics.ALPHA:
        # The least p-value the rank test can give with so few runs.
        test += (
            f"; {a} runs against {b} cannot show a difference (the test's least p-value is "
            f"{2 / math.comb(a + b, a):.2f}): four runs a side or more can"
        )
    size = f"at batch size {batch_size}" if batch_size is not None else "outside any batch"
    return f"{matched}; {test}; {size}"


def _item(
    item: _Item,
    a_runs: list[_Run],
    b_runs: list[_Run],
    unit: str,
    noise: float,
    encloses: bool,
    children: int,
) -> dict[str, Any]:
    """One item's figures: each side's median with its interval, and the test."""
    a_values = _values(item.a, unit)
    b_values = _values(item.b, unit)
    made: dict[str, Any] = {
        "key": item.path,
        "name": item.name,
        "parent": item.parent,
        "op_type": item.op_type,
        # Side B's own name of the item, where it is paired with A's of another name.
        "b_name": next((cell.origin for cell in item.b if cell and cell.origin), None),
        "status": item.status,
        "encloses": encloses,
        "children": children,
        "a": _side(item.a, a_runs, a_values, item.a_per_inference),
        "b": _side(item.b, b_runs, b_values, item.b_per_inference),
        "unit": "value" if item.level == COUNTERS else "ms",
        "contribution_ms": item.contribution,
    }
    made.update(_test(a_values, b_values, unit, noise, counter=item.level == COUNTERS))
    made["text"] = {
        "a": _side_text(made["a"]),
        "b": _side_text(made["b"]),
        "ratio": f"×{statistics.ratio(made['ratio'])}" if made["ratio"] is not None else "—",
        "contribution": signed(item.contribution),
        "p_value": statistics.p_value((made["difference"] or {}).get("p_value")),
        "calls": " / ".join(_calls_text(made[side]) for side in ("a", "b")),
    }
    return made


def signed(value: float | None) -> str:
    """A difference of times as printed: "+1.234", "−0.5000" (the statistics layer's rule)."""
    if value is None:
        return "—"
    return ("+" if value > 0 else "−" if value < 0 else "") + statistics.ms(abs(value))


def _calls_text(side: dict[str, Any] | None) -> str:
    calls = side["calls_per_inference"] if side else None
    return "—" if calls is None else f"{calls:.3g}"


def _side_text(side: dict[str, Any] | None) -> str:
    """A side's median with its interval, as printed: "1.234 [1.201–1.302]"."""
    if side is None:
        return "—"
    low, high = side["low"], side["high"]
    bounds = (
        f"[{statistics.ms(low)}–{statistics.ms(high)}]"
        if low is not None and high is not None
        else f"[not bounded, n={side['count']}]"
    )
    return f"{statistics.ms(side['median'])} {bounds}"


def _values(cells: list[_Cell | None], unit: str) -> np.ndarray:
    """What a side's test compares: one value per run, or the one run's samples."""
    if unit == SPAN:
        cell = cells[0]
        if cell is None:
            return np.zeros(0)
        return cell.samples if cell.samples is not None else np.asarray([cell.value])
    return np.asarray([cell.value for cell in cells if cell is not None], dtype=np.float64)


def _side(
    cells: list[_Cell | None], runs: list[_Run], values: np.ndarray, per_inference: float | None
) -> dict[str, Any] | None:
    present = [(run, cell) for run, cell in zip(runs, cells, strict=True) if cell is not None]
    if not present:
        return None
    low, high = statistics.quantile_interval(values, 0.5) if len(values) else (None, None)
    calls = [cell.count / (run.inferences or 1) for run, cell in present]
    return {
        "median": float(np.median(values)),
        "low": low,
        "high": high,
        "count": int(len(values)),
        "runs": len(present),
        # Counters are samples of the whole run: no calls, no time per inference.
        "calls_per_inference": float(np.median(calls)) if per_inference is not None else None,
        "per_inference_ms": per_inference,
    }


def _test(
    a: np.ndarray, b: np.ndarray, unit: str, noise: float, *, counter: bool
) -> dict[str, Any]:
    """The ratio of the medians B/A with its interval, its test and its verdict."""
    empty = {"ratio": None, "difference": None, "verdict": None}
    if not len(a) or not len(b):
        return {**empty, "words": "added" if len(b) else "removed"}
    ratio = float(np.median(b) / np.median(a)) if np.median(a) > 0 else None
    if len(a) < 2 or len(b) < 2:
        units = "runs" if unit == RUN else "spans"
        return {**empty, "ratio": ratio, "words": f"not tested: fewer than two {units} a side"}
    try:
        found = statistics.difference(
            a, b, noise=noise, resamples=ITEM_RESAMPLES, per_run=unit == RUN
        )
    except ValueError as error:
        return {**empty, "ratio": ratio, "words": f"not tested: {error}"}
    verdict, words = found.verdict, found.words
    if counter and verdict in _COUNTER_VERDICTS:
        verdict = _COUNTER_VERDICTS[verdict]
        words = f"{verdict} (×{statistics.ratio(found.ratio)})"
    return {
        "ratio": found.ratio,
        "difference": found.to_dict(),
        "verdict": verdict,
        "words": words,
    }


def waterfall(items: list[_Item], enclosing: set[str]) -> dict[str, Any]:
    """The largest contributions among the innermost items (sorted already), the rest as one
    bar, and the total: bars that sum to the difference of the level's time per inference."""
    inner = [item for item in items if item.path not in enclosing]
    top, rest = inner[:WATERFALL_ITEMS], inner[WATERFALL_ITEMS:]
    labels = [item.path for item in top]
    values = [item.contribution or 0.0 for item in top]
    if rest:
        labels.append(f"{len(rest)} other items")
        values.append(sum(item.contribution or 0.0 for item in rest))
    total = sum(item.contribution or 0.0 for item in inner)
    return {
        "labels": [*labels, "total"],
        "values": [*values, total],
        "text": [signed(value) for value in (*values, total)],
        "measures": ["relative"] * len(values) + ["total"],
    }
