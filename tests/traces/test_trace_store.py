"""The trace store: compaction of a trace's chunks, and windows read from a few columns (and
from the overview) giving what a full read gives."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.traces.factories import BASE, export, new_id, post
from traces import store
from traces.models import SpanAggregate, Trace

pytestmark = pytest.mark.django_db


def folder_of(settings: Any, trace_id: str) -> Path:
    return Path(settings.ARTIFACT_ROOT) / "traces" / trace_id


def send(client: Any, trace_id: str, exports: int, per_export: int, seed: int = 0) -> None:
    """`exports` chunks of `per_export` spans at random times, with random durations."""
    rng = random.Random(seed)
    for chunk in range(exports):
        spans = [
            (
                f"c{chunk}s{i}",
                rng.randrange(0, 1_000_000),
                rng.randrange(1, 50_000),
                {"mlms.level": rng.choice(["model", "framework", "ml_library"])},
            )
            for i in range(per_export)
        ]
        assert post(client, export(trace_id, *spans)).status_code == 200


def brute_force(table: pa.Table, start: int | None, end: int | None, k: int) -> list[str]:
    rows = table.to_pylist()
    inside = [
        r
        for r in rows
        if (start is None or r["end_ns"] >= start) and (end is None or r["start_ns"] <= end)
    ]
    inside.sort(key=lambda r: (-(r["end_ns"] - r["start_ns"]), r["start_ns"]))
    return [r["span_id"] for r in inside[:k]]


def test_many_chunks_are_compacted_once_and_nothing_is_lost_or_doubled(
    bob_client: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_id = new_id()
    send(bob_client, trace_id, exports=20, per_export=30)
    folder = folder_of(settings, trace_id)
    assert len(list(folder.glob("*.parquet"))) == 20
    monkeypatch.setattr(store, "COMPACT_AT", 1_000)
    before = store.read_table(trace_id)
    monkeypatch.setattr(store, "COMPACT_AT", 4)

    after = store.read_table(trace_id)

    files = sorted(p.name for p in folder.glob("*.parquet"))
    assert len(files) == 2 and files[0].startswith("_overview-") and files[1].startswith("compact-")
    assert after.num_rows == before.num_rows == 600
    assert sorted(after["span_id"].to_pylist()) == sorted(before["span_id"].to_pylist())
    assert after["start_ns"].to_pylist() == sorted(after["start_ns"].to_pylist())
    # More chunks arrive while the trace grows: they are merged beside the compacted file,
    # which is not rewritten; finishing the trace merges everything into one file.
    first = next(folder.glob("compact-*.parquet")).name
    send(bob_client, trace_id, exports=5, per_export=10, seed=1)
    assert store.read_table(trace_id).num_rows == 650
    compacted = sorted(p.name for p in folder.glob("compact-*.parquet"))
    assert len(compacted) == 2 and first in compacted
    store.get_store().compact(trace_id)
    assert len(list(folder.glob("compact-*.parquet"))) == 1
    final = store.read_table(trace_id)["span_id"].to_pylist()
    assert len(final) == len(set(final)) == 650 and set(before["span_id"].to_pylist()) <= set(final)
    assert Trace.objects.get(trace_id=trace_id).span_count == 650


def test_a_chunk_a_compacted_file_replaced_is_never_read_again(
    bob_client: Any, settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace_id = new_id()
    send(bob_client, trace_id, exports=6, per_export=10)
    folder = folder_of(settings, trace_id)
    saved = tmp_path / "saved"
    shutil.copytree(folder, saved)
    monkeypatch.setattr(store, "COMPACT_AT", 2)
    assert store.read_table(trace_id).num_rows == 60
    # As if a reader listed the folder before compaction removed the chunks it merged.
    for chunk in saved.glob("*.parquet"):
        shutil.copy(chunk, folder / chunk.name)
    assert len(store.data_files(folder)) == 1
    assert store.read_table(trace_id).num_rows == 60


@pytest.mark.parametrize("compacted", [False, True])
def test_windows_give_the_longest_overlapping_spans_as_a_full_read_does(
    bob_client: Any, monkeypatch: pytest.MonkeyPatch, compacted: bool
) -> None:
    trace_id = new_id()
    send(bob_client, trace_id, exports=12, per_export=40)
    monkeypatch.setattr(store, "COMPACT_AT", 3 if compacted else 1_000)
    monkeypatch.setattr(store, "ROW_GROUP", 64)  # many row groups, few read
    monkeypatch.setattr(store, "OVERVIEW_SPANS", 50)
    table = store.read_table(trace_id)
    rng = random.Random(7)
    windows: list[tuple[int | None, int | None, int]] = [(None, None, 10), (None, None, 480)]
    for _ in range(30):
        a, b = sorted(rng.randrange(0, 1_050_000) for _ in range(2))
        windows.append((BASE + a, BASE + b, rng.choice([1, 5, 40, 200])))
    for start, end, k in windows:
        spans = store.window(trace_id, start, end, k)
        expected = brute_force(table, start, end, k)
        overlapping = len(brute_force(table, start, end, 10**6))
        assert spans.total == overlapping
        durations = [r["end_ns"] - r["start_ns"] for r in spans.longest.to_pylist()]
        assert durations == sorted(durations, reverse=True)
        # Equal durations may be broken differently; the durations kept are the same.
        by_id = {r["span_id"]: r for r in table.to_pylist()}
        assert durations == [by_id[i]["end_ns"] - by_id[i]["start_ns"] for i in expected]
        assert spans.longest.schema.names == store.SCHEMA.names
        assert all(r["attributes"] for r in spans.longest.to_pylist())


def test_chunks_written_before_the_device_and_counter_columns_still_read(
    bob_client: Any, settings: Any
) -> None:
    trace_id = new_id()
    send(bob_client, trace_id, exports=1, per_export=5)
    folder = folder_of(settings, trace_id)
    (chunk,) = folder.glob("*.parquet")
    old = pq.read_table(chunk).drop_columns(["device", "counters"])
    pq.write_table(old, chunk)
    spans = store.window(trace_id, None, None, 3)
    assert spans.total == 5 and spans.longest.num_rows == 3
    assert spans.longest["device"].null_count == 3


def test_aggregates_are_computed_in_arrow_with_nearest_rank_percentiles(bob_client: Any) -> None:
    trace_id = new_id()
    spans = [("conv", i * 10, d, {"mlms.level": "framework"}) for i, d in enumerate(range(1, 101))]
    spans += [("relu", 5000, 7, {"mlms.level": "framework"})]
    assert post(bob_client, export(trace_id, *spans)).status_code == 200
    assert bob_client.get(f"/api/v1/traces/{trace_id}/layers").status_code == 200
    conv = SpanAggregate.objects.get(trace__trace_id=trace_id, name="conv")
    assert (conv.count, conv.total_ns, conv.min_ns, conv.max_ns) == (100, 5050, 1, 100)
    assert (conv.p50_ns, conv.p99_ns, conv.mean_ns) == (50, 99, 50.5)
    relu = SpanAggregate.objects.get(trace__trace_id=trace_id, name="relu")
    assert (relu.count, relu.p50_ns, relu.p99_ns) == (1, 7, 7)


def test_an_empty_or_unknown_trace_reads_as_empty() -> None:
    assert store.read_table(new_id()).num_rows == 0
    assert store.window(new_id(), None, None, 10).total == 0
    assert store.read_table("../../etc").num_rows == 0
    assert pc.sum(store.read_table(new_id(), ["start_ns"])["start_ns"]).as_py() is None


def test_a_read_that_listed_chunks_a_compaction_then_removed_reads_again(
    bob_client: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace finishing in the background is compacted while a page reads it: a reader that
    listed the chunks before they were merged and removed lists the folder again."""
    trace_id = new_id()
    send(bob_client, trace_id, exports=6, per_export=10)
    folder = folder_of(settings, trace_id)
    stale = store.data_files(folder)
    store.get_store().compact(trace_id)
    assert not any(path.exists() for path in stale)
    listed = store.data_files
    calls = []

    def first_stale(where: Path) -> list[Path]:
        calls.append(where)
        return stale if len(calls) == 1 else listed(where)

    monkeypatch.setattr(store, "data_files", first_stale)

    spans = store.window(trace_id, None, None, 100)

    assert spans.total == 60 and spans.longest.num_rows == 60 and len(calls) == 2
    calls.clear()
    assert store.read_table(trace_id).num_rows == 60 and len(calls) == 2
