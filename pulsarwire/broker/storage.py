"""Per-topic append-only entry log, in memory and optionally on disk.

An entry is what one SEND frame carried: the payload section (the 0x0e01 magic
and checksum when the producer sent them, metadata, payload), stored unchanged
and sent back unchanged in MESSAGE frames. Entries get (ledger_id, entry_id) positions; a
new ledger starts every ``entries_per_ledger`` entries and at every open, as
Pulsar's managed ledgers do, so ids cross ledgers.

On disk (``data_dir`` given) each topic has ``entries.log``::

    record := length:u32 crc:u32 ledger_id:u64 entry_id:u64 body[length - 16]
    crc    := crc32c(ledger_id .. body)

Records are written and flushed to the OS before the producer gets its
receipt, so they survive ``kill -9`` of the broker; ``fsync`` (per append or
never) decides about power loss. On open, a torn or corrupt tail is cut off at
the first bad record. Cursor positions live beside it in ``cursors.json``
(written atomically, see subscription.py).
"""

from __future__ import annotations

import bisect
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from pulsarwire.codec.frames import crc32c, decode_metadata, entry_layout
from pulsarwire.proto import pb

RECORD_HEAD = struct.Struct(">IIQQ")  # length, crc, ledger_id, entry_id
POSITION = struct.Struct(">QQ")


@dataclass(slots=True)
class Entry:
    ledger_id: int
    entry_id: int
    data: bytes  # magic .. payload
    metadata: pb.MessageMetadata

    @property
    def position(self) -> tuple[int, int]:
        return (self.ledger_id, self.entry_id)

    @property
    def num_messages(self) -> int:
        """Messages in the entry, at least 1 (the broker refuses other counts at publish; an entry
        stored before that check with a count below 1 still costs one permit)."""
        md = self.metadata
        return max(1, md.num_messages_in_batch) if md.HasField("num_messages_in_batch") else 1

    @property
    def is_batch(self) -> bool:
        return self.metadata.HasField("num_messages_in_batch")

    @property
    def key(self) -> bytes:
        md = self.metadata
        if md.HasField("ordering_key"):
            return md.ordering_key
        return md.partition_key.encode()


def entry_metadata(data: bytes) -> pb.MessageMetadata:
    """Metadata of a stored entry (``data`` is the entry as sent: with or without the checksum section)."""
    _body, start, size = entry_layout(data)
    return decode_metadata(data[start : start + size])


def check_data_dir(data_dir: Path) -> None:
    """Make sure the broker can keep data in ``data_dir``: create it and write, flush and remove a
    probe file. Raises OSError naming the path and the reason (read-only, not a directory, full...)."""
    probe = data_dir / ".pulsarwire-write-probe"
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(probe, "wb") as f:
        f.write(b"probe")
        f.flush()
        os.fsync(f.fileno())
    probe.unlink()


def topic_dir(data_dir: Path, topic: str) -> Path:
    return data_dir / "topics" / quote(topic, safe="")


def stored_topics(data_dir: Path) -> list[str]:
    """Names of the topics stored under ``data_dir`` (loaded or not), as :func:`topic_dir` lays them out."""
    root = data_dir / "topics"
    return sorted(unquote(p.name) for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


class TopicLog:
    """The entries of one topic (a partition of a partitioned topic is a topic of its own)."""

    def __init__(
        self,
        topic: str,
        *,
        data_dir: Path | None = None,
        entries_per_ledger: int = 50_000,
        fsync: bool = False,
    ) -> None:
        self.topic = topic
        self.entries: list[Entry] = []
        self._keys: list[tuple[int, int]] = []
        self.trimmed = 0  # entries removed from the head (retention)
        self.entries_per_ledger = entries_per_ledger
        self.fsync = fsync
        self.ledger_id = 0
        self.next_entry_id = 0
        self.dir = topic_dir(data_dir, topic) if data_dir else None
        self._file = None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._recover()
            self._file = open(self.dir / "entries.log", "ab")  # noqa: SIM115 - lives as long as the log
        self._roll()

    # -- recovery ----------------------------------------------------------------
    def _recover(self) -> None:
        assert self.dir is not None
        path = self.dir / "entries.log"
        meta = self.dir / "log.json"
        if meta.exists():
            info = json.loads(meta.read_text())
            self.ledger_id = int(info.get("ledger_id", 0))
            self.trimmed = int(info.get("trimmed", 0))
        if not path.exists():
            return
        data = path.read_bytes()
        pos = good = 0
        while len(data) - pos >= RECORD_HEAD.size:
            length, crc, ledger, entry = RECORD_HEAD.unpack_from(data, pos)
            end = pos + 8 + length
            if length < 16 or end > len(data) or crc32c(data[pos + 8 : end]) != crc:
                break
            body = data[pos + 24 : end]
            try:
                md = entry_metadata(body)
            except Exception:
                break
            self.entries.append(Entry(ledger, entry, body, md))
            self._keys.append((ledger, entry))
            self.ledger_id = max(self.ledger_id, ledger)
            pos = good = end
        if good != len(data):
            with open(path, "r+b") as f:
                f.truncate(good)
        # The file keeps trimmed records (it is append-only); forget them again.
        del self.entries[: self.trimmed]
        del self._keys[: self.trimmed]

    def _save_meta(self) -> None:
        if self.dir is None:
            return
        tmp = self.dir / "log.json.tmp"
        tmp.write_text(json.dumps({"ledger_id": self.ledger_id, "trimmed": self.trimmed}))
        os.replace(tmp, self.dir / "log.json")

    def _roll(self) -> None:
        self.ledger_id += 1
        self.next_entry_id = 0
        self._save_meta()

    # -- appends -----------------------------------------------------------------
    def append(self, data: bytes, metadata: pb.MessageMetadata) -> Entry:
        if self.next_entry_id >= self.entries_per_ledger:
            self._roll()
        entry = Entry(self.ledger_id, self.next_entry_id, data, metadata)
        self.next_entry_id += 1
        if self._file is not None:
            body = POSITION.pack(entry.ledger_id, entry.entry_id) + data
            self._file.write(struct.pack(">II", len(body), crc32c(body)) + body)
            self._file.flush()
            if self.fsync:
                os.fsync(self._file.fileno())
        self.entries.append(entry)
        self._keys.append(entry.position)
        return entry

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- reads -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    @property
    def last_position(self) -> tuple[int, int]:
        """Position of the last entry, or (current ledger, -1) when empty."""
        return self._keys[-1] if self._keys else (self.ledger_id, -1)

    def index_after(self, position: tuple[int, int]) -> int:
        """Index of the first entry strictly after ``position``."""
        return bisect.bisect_right(self._keys, position)

    def index_at_or_after(self, position: tuple[int, int]) -> int:
        return bisect.bisect_left(self._keys, position)

    def index_of(self, position: tuple[int, int]) -> int | None:
        i = bisect.bisect_left(self._keys, position)
        return i if i < len(self._keys) and self._keys[i] == position else None

    def index_by_publish_time(self, timestamp_ms: int) -> int:
        """Index of the first entry published at or after ``timestamp_ms`` (len when none)."""
        for i, e in enumerate(self.entries):
            if e.metadata.publish_time >= timestamp_ms:
                return i
        return len(self.entries)

    def trim_head(self, count: int) -> None:
        """Drop the ``count`` oldest entries (retention); their data is gone for every reader."""
        count = min(count, len(self.entries))
        del self.entries[:count]
        del self._keys[:count]
        self.trimmed += count
        self._save_meta()
