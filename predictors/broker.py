"""Broker preparation shared by the hub and the agents.

kombu's filesystem transport (the embedded default's broker) creates an exchange's table file
and only then locks it, so a second process binding the same exchange at that moment reads an
empty file and dies with a JSON error (two agents starting together on `onnxruntime.cpu` do
exactly that). Creating each table atomically, as an empty list, before kombu binds anything
leaves kombu only its locked read-modify-write path.

Its messages have the same flaw: `Channel._put` creates the message file under its final name
and then writes it, while a consumer moves and reads any file of its queue's name without a
lock, so a worker polling at that moment reads an empty message and stops ("Unrecoverable
error: JSONDecodeError"). `prepare_exchanges`, which the hub calls before each send and an agent
before it consumes, replaces `_put` with one that writes the message under a name no queue
matches and renames it into place: a consumer sees a complete message or none. (kombu is
imported there, not here: its JSON module imports Django where it is installed, and the
predictor side never imports Django.)
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
    from kombu.transport import filesystem

    filesystem.Channel._put = _put_atomically  # type: ignore[method-assign]
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


def _put_atomically(self: Any, queue: str, payload: Any, **kwargs: Any) -> None:
    """kombu's filesystem `Channel._put`, writing the message before it bears its queue's name
    (see the module docstring)."""
    import time
    import uuid

    from kombu.transport.filesystem import ChannelError
    from kombu.utils.json import dumps

    name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
    final = os.path.join(self.data_folder_out, name)
    # A leading dot: `Channel._get` matches the text after a name's first dot to `<queue>.msg`.
    partial = os.path.join(self.data_folder_out, f".{name}.partial")
    try:
        with open(partial, "wb") as handle:
            handle.write(dumps(payload).encode())
        os.replace(partial, final)
    except OSError as exc:
        raise ChannelError(f"Cannot add file {final!r} to directory") from exc
