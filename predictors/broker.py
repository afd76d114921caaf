"""Broker preparation shared by the hub and the agents.

kombu's filesystem transport (the embedded default's broker) creates an exchange's table file
and only then locks it, so a second process binding the same exchange at that moment reads an
empty file and dies with a JSON error (two agents starting together on `onnxruntime.cpu` do
exactly that). Creating each table atomically, as an empty list, before kombu binds anything
leaves kombu only its locked read-modify-write path.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def prepare_exchanges(
    broker_url: str, transport_options: Mapping[str, Any], queues: Iterable[str]
) -> None:
    """Create the exchange tables of `queues` (direct exchanges named as their queues)."""
    if not str(broker_url).startswith("filesystem"):
        return
    folder = transport_options.get("control_folder")
    if not folder:
        return
    control = Path(folder)
    control.mkdir(parents=True, exist_ok=True)
    for queue in queues:
        table = control / f"{queue}.exchange"
        if table.exists():
            continue
        fd, tmp = tempfile.mkstemp(dir=control, prefix=".exchange-")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write("[]")
            try:
                os.link(tmp, table)  # atomic create-if-absent: a complete file or none
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
