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
