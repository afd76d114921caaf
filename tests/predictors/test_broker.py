"""Exchange tables of the filesystem broker are created whole, so concurrent binds never fail."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from predictors.broker import prepare_exchanges


def _options(folder: Path) -> dict[str, str]:
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
    }


def _bind(folder: str, queue: str) -> None:
    from kombu import Connection, Exchange, Queue

    options = _options(Path(folder))
    Path(options["data_folder_in"]).mkdir(parents=True, exist_ok=True)
    prepare_exchanges("filesystem://", options, [queue])
    with Connection("filesystem://", transport_options=options) as connection:
        Queue(queue, Exchange(queue, type="direct"), routing_key=queue)(
            connection.channel()
        ).declare()


def test_tables_are_created_empty_once_and_left_alone(tmp_path: Path) -> None:
    options = _options(tmp_path)
    prepare_exchanges("filesystem://", options, ["onnxruntime.cpu"])
    table = tmp_path / "control" / "onnxruntime.cpu.exchange"
    assert json.loads(table.read_text()) == []
    table.write_text('[["onnxruntime.cpu", "", "onnxruntime.cpu"]]')
    prepare_exchanges("filesystem://", options, ["onnxruntime.cpu"])
    assert len(json.loads(table.read_text())) == 1
    assert sorted(p.name for p in (tmp_path / "control").iterdir()) == ["onnxruntime.cpu.exchange"]


def test_other_brokers_are_left_alone(tmp_path: Path) -> None:
    prepare_exchanges("redis://127.0.0.1:6379/0", _options(tmp_path), ["q"])
    assert not (tmp_path / "control").exists()


def test_many_processes_binding_one_exchange_at_once_all_succeed(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_bind, args=(str(tmp_path), "shared.cpu")) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0] * 8
    table = json.loads((tmp_path / "control" / "shared.cpu.exchange").read_text())
    assert table == [["shared.cpu", "", "shared.cpu"]]


def test_a_message_bears_its_queues_name_only_once_written(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The filesystem broker's consumers take any file named for their queue, unlocked: a
    message is written under another name and renamed into place, so that no consumer ever
    reads it half-written; it then travels whole."""
    import os

    from kombu import Connection

    folder = tmp_path / "broker"
    folder.mkdir()
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(tmp_path / "control"),
    }
    seen: list[list[str]] = []
    replace = os.replace

    def watched(source: str, target: str) -> None:
        # What a consumer polling now would find for the queue: nothing yet.
        seen.append([n for n in os.listdir(folder) if n.partition(".")[2] == "jobs.msg"])
        with open(source, "rb") as handle:
            assert json.loads(handle.read())  # complete before it is renamed
        replace(source, target)

    prepare_exchanges("filesystem://", options, ["jobs"])  # as the hub does before a send
    monkeypatch.setattr(os, "replace", watched)
    with Connection("filesystem://", transport_options=options) as connection:
        queue = connection.SimpleQueue("jobs")
        queue.put({"evaluation": "e1", "payload": "x" * 100_000})
        assert seen == [[]]
        message = queue.get(timeout=5)
        assert message.payload == {"evaluation": "e1", "payload": "x" * 100_000}
        message.ack()
        queue.close()
