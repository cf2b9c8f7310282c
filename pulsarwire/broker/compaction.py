"""Topic compaction: the compacted view that ``read_compacted`` consumers and readers see.

As Pulsar's two-phase compactor, a compaction reads the topic from its first entry to the last one
stored when it starts (the *horizon*) and keeps, for each key (``partition_key``), only the latest
message; a message with an empty payload (or ``null_value``) is a tombstone that removes its key.
Messages without a key are dropped, as Pulsar since 3.2 (``topicCompactionRetainNullKey=false``),
or kept when the broker is told to retain them.

Memory. The walk reads entry bodies through the log (its index and the shared entry cache), one at
a time, yielding to the event loop every COMPACTION_SLICE entries, and keeps only key → (position,
batch index) for the keys alive. The result, :class:`CompactedView`, is the retained positions
(sorted) with, per retained entry, the bitmask of the messages kept in it: Pulsar writes a new,
re-batched ledger instead; here a batch that keeps part of its messages is sent whole with an
``ack_set`` hiding the others, which the clients drop as already acknowledged. Message ids stay
those of the topic, as in Pulsar's compacted ledger.

Reading. A ``read_compacted`` subscription whose cursor is before the horizon jumps from one
retained position to the next (bisection) and reads the topic normally after the horizon.

The view is written to ``compaction.json`` in the topic's directory (atomically), so it survives a
restart; the status (NOT_RUN, RUNNING, SUCCESS, ERROR and the last error, Pulsar's
``LongRunningProcessStatus``) is kept in memory, as Pulsar's.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarwire.codec.entry import open_entry
from pulsarwire.codec.frames import entry_layout
from pulsarwire.errors import PulsarWireError

from .storage import Position, TopicLog

log = logging.getLogger(__name__)

#: entries a compaction reads before it lets the event loop serve others
COMPACTION_SLICE = 200
VIEW_FILE = "compaction.json"


class CompactionStatus(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class CompactionError(PulsarWireError):
    """An entry a compaction could not read (the message names its position)."""


class CompactionInProgressError(PulsarWireError):
    """A compaction was asked for while one runs (Pulsar's REST answer: 409 Conflict)."""


@dataclass(slots=True)
class CompactedView:
    """What a compaction kept: entries up to ``horizon``; ``masks`` says which messages of each
    retained entry are kept (bit i = batch index i; 1 for a message that is not batched)."""

    horizon: Position
    masks: dict[Position, int]
    positions: list[Position] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.positions:
            self.positions = sorted(self.masks)

    def next_after(self, pos: Position) -> Position | None:
        """The first retained position after ``pos`` (None: nothing retained after it)."""
        i = bisect.bisect_right(self.positions, pos)
        return self.positions[i] if i < len(self.positions) else None

    def to_json(self) -> dict[str, Any]:
        entries = [[p[0], p[1], self.masks[p]] for p in self.positions]
        return {"horizon": list(self.horizon), "entries": entries}

    @classmethod
    def from_json(cls, state: dict[str, Any]) -> CompactedView:
        h = state["horizon"]
        masks = {(int(a), int(b)): int(m) for a, b, m in state["entries"]}
        return cls((int(h[0]), int(h[1])), masks)


def load_view(directory: Path | None) -> CompactedView | None:
    """The view stored in ``directory`` (None when there is none or it cannot be read)."""
    if directory is None:
        return None
    path = directory / VIEW_FILE
    try:
        return CompactedView.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("ignoring the compacted view %s (compact again): %s", path, exc)
        return None


def save_view(directory: Path | None, view: CompactedView) -> None:
    if directory is None:
        return
    path = directory / VIEW_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(view.to_json()))
    os.replace(tmp, path)


async def compact(topic_log: TopicLog, *, retain_null_key: bool, max_message_size: int) -> CompactedView:
    """Compact ``topic_log`` up to its last entry now (module docstring); raises CompactionError
    for an entry that cannot be read or decoded."""
    horizon = topic_log.last_position
    latest: dict[str, tuple[Position, int]] = {}
    keyless: dict[Position, int] = {}
    pos: Position = (-1, -1)
    read = 0
    while True:
        idx = topic_log.index_after(pos)
        if idx >= len(topic_log):
            break
        entry = topic_log.entry(idx)
        pos = entry.position
        if pos > horizon:
            break
        try:
            data = entry.data
            md = entry.metadata
            _body, start, size = entry_layout(data)
            messages = open_entry(md, data[start + size :], max_message_size)
        except PulsarWireError as exc:
            raise CompactionError(f"entry {pos[0]}:{pos[1]}: {exc}") from exc
        for msg in messages:
            holder = msg.single if msg.single is not None else md
            index = max(0, msg.batch_index)
            if not holder.HasField("partition_key"):
                if retain_null_key:
                    keyless[pos] = keyless.get(pos, 0) | (1 << index)
                continue
            key = holder.partition_key
            if not msg.payload or holder.null_value:
                latest.pop(key, None)
            else:
                latest[key] = (pos, index)
        read += 1
        if read % COMPACTION_SLICE == 0:
            await asyncio.sleep(0)
    masks = keyless
    for p, index in latest.values():
        masks[p] = masks.get(p, 0) | (1 << index)
    return CompactedView(horizon, masks)
