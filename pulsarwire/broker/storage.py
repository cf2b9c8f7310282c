"""Per-topic append-only entry log: a compact index in memory, entry bodies on disk behind a bounded cache.

An entry is what one SEND frame carried: the payload section (the 0x0e01 magic
and checksum when the producer sent them, metadata, payload), stored unchanged
and sent back unchanged in MESSAGE frames. Entries get (ledger_id, entry_id) positions; a
new ledger starts every ``entries_per_ledger`` entries and at every open, as
Pulsar's managed ledgers do, so ids cross ledgers.

On disk (``data_dir`` given) each topic has a directory (:func:`topic_dir`) with ``entries.log``::

    record := length:u32 crc:u32 ledger_id:u64 entry_id:u64 body[length - 16]
    crc    := crc32c(ledger_id .. body)

The record file, the cache, the descriptor LRU and the directory names are the brokers' shared
log (``pulsarwire/_log``); this module lays Pulsar's entries out in it.
Records are written to the OS (one ``writev``, no user-space buffer) before the producer gets
its receipt, so they survive ``kill -9`` of the broker; ``fsync`` (per append or never) decides
about power loss. On open the file is read record by record (memory bounded by the largest
record), and a torn or corrupt tail is cut off at the first bad record. ``log.json`` beside it
holds the current ledger id and how many head entries retention trimmed; cursor positions live
in ``cursors.json`` (written atomically, see subscription.py and topic.py).

Memory. With a data dir a topic keeps in RAM only an index of its entries, in typed arrays:
per entry the file offset and length of its body and the facts dispatch needs without reading
it -- the message count (0 for a non-batch entry), the murmur3 hash of its key (Key_Shared) and
its publish time: :data:`INDEX_BYTES_PER_ENTRY` bytes. Positions cost nothing per entry: entry
ids run consecutively within a ledger, so they are kept as one run (ledger, first entry id,
first index) per ledger. Bodies are read back through an :class:`EntryCache` shared by all
topics (LRU, bounded in bytes; appends enter it, since the tail is what live consumers read
next). Without a data dir the bodies are the storage and stay in RAM: an in-memory broker
grows with the data it holds, as its name says.

Files. Entry logs are opened through :class:`OpenFiles`, an LRU of file descriptors shared by
all topics: at most ``max_open`` are open at once; a log whose descriptor was closed reopens it
on its next read or append, so thousands of topics stay within the process's file limit.

Names. A topic's directory is its percent-quoted name. A name whose quoted form would pass
the file system's 255-byte limit gets a truncated prefix, ``%%`` (which quoting never
produces) and the SHA-256 of the name, with the real name in a ``topic-name`` file inside;
:func:`stored_topics` reads it from there.

Failures. A write that fails (ENOSPC, EACCES, EIO, EFBIG...) raises
:class:`~pulsarwire.errors.StorageError` naming the file and the reason; the partial record
is cut off again, so the log stays as it was before the append (when even that fails, the log
refuses further appends until the topic is reopened, which cuts the torn tail).
"""

from __future__ import annotations

import bisect
import json
import os
import struct
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import overload

from pulsarwire._log import (
    CACHE_ITEM_OVERHEAD,
    DEFAULT_CACHE_BYTES,
    DEFAULT_MAX_OPEN_LOGS,
    READ_CHUNK,
    EntryCache,
    OpenFiles,
    RecordFile,
    check_data_dir,
    prepare_topic_dir,
    reason,
    stored_topics,
    topic_dir,
)
from pulsarwire.codec.frames import decode_metadata, entry_layout
from pulsarwire.codec.hashing import murmur3_32
from pulsarwire.errors import PulsarWireError, StorageError
from pulsarwire.proto import pb

POSITION = struct.Struct(">QQ")  # ledger_id, entry_id: the first bytes of every record's payload

Position = tuple[int, int]

__all__ = [
    "CACHE_ITEM_OVERHEAD",
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_MAX_OPEN_LOGS",
    "INDEX_BYTES_PER_ENTRY",
    "READ_CHUNK",
    "Entry",
    "EntryCache",
    "OpenFiles",
    "Position",
    "TopicLog",
    "check_data_dir",
    "stored_topics",
    "topic_dir",
]

# Index columns of a data-dir log: typecode per column (offset, length, count, key hash, publish time).
_DISK_COLUMNS = "qIiIQ"
INDEX_BYTES_PER_ENTRY = sum(array(t).itemsize for t in _DISK_COLUMNS)


@dataclass(slots=True, eq=False)
class Entry:
    """One stored entry as the broker sees it: its position and index facts; the bytes on demand.

    ``data`` is read from the log (through the cache) on every access unless the entry was
    built with its bytes (in-memory logs, a fresh append); ``metadata`` is parsed from it
    unless given.
    """

    ledger_id: int
    entry_id: int
    #: num_messages_in_batch for a batch entry (at least 1), 0 for a single message
    count: int
    #: murmur3_32 of the ordering key, else of the partition key (Key_Shared routing)
    key_hash: int
    publish_time: int
    _body: bytes | Callable[[], bytes] = field(repr=False)
    _metadata: pb.MessageMetadata | None = field(default=None, repr=False)

    @property
    def position(self) -> Position:
        return (self.ledger_id, self.entry_id)

    @property
    def num_messages(self) -> int:
        """Messages in the entry, at least 1 (the broker refuses other counts at publish; an entry
        stored before that check with a count below 1 still costs one permit)."""
        return max(1, self.count)

    @property
    def is_batch(self) -> bool:
        return self.count != 0

    @property
    def data(self) -> bytes:
        """The entry as sent (magic .. payload). Raises StorageError when it cannot be read."""
        body = self._body
        return body if isinstance(body, bytes) else body()

    @property
    def metadata(self) -> pb.MessageMetadata:
        return self._metadata if self._metadata is not None else entry_metadata(self.data)


def entry_metadata(data: bytes) -> pb.MessageMetadata:
    """Metadata of a stored entry (``data`` is the entry as sent: with or without the checksum section)."""
    _body, start, size = entry_layout(data)
    return decode_metadata(data[start : start + size])


def entry_facts(md: pb.MessageMetadata) -> tuple[int, int, int]:
    """What the index keeps of an entry's metadata: (count, key hash, publish time), see :class:`Entry`."""
    count = max(1, md.num_messages_in_batch) if md.HasField("num_messages_in_batch") else 0
    key = md.ordering_key if md.HasField("ordering_key") else md.partition_key.encode()
    return count, murmur3_32(key), md.publish_time


def _record_metadata(fd: int, offset: int, length: int, prefix: bytes) -> pb.MessageMetadata:
    """Metadata of the body of ``length`` bytes at ``offset`` whose first bytes are ``prefix``
    (the whole body is read only when its metadata does not fit in the prefix)."""
    try:
        _start, md_start, md_size = entry_layout(prefix)
    except PulsarWireError:
        if len(prefix) == length:
            raise
        prefix = os.pread(fd, length, offset)
        _start, md_start, md_size = entry_layout(prefix)
    return decode_metadata(prefix[md_start : md_start + md_size])


class _Entries(Sequence[Entry]):
    """A log's entries as a read-only sequence (slices are views); each item is built on access."""

    __slots__ = ("_log", "_range")

    def __init__(self, log: TopicLog, indexes: range) -> None:
        self._log = log
        self._range = indexes

    def __len__(self) -> int:
        return len(self._range)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> _Entries: ...
    def __getitem__(self, i: int | slice) -> Entry | _Entries:
        if isinstance(i, slice):
            return _Entries(self._log, self._range[i])
        return self._log.entry(self._range[i])


class TopicLog:
    """The entries of one topic (a partition of a partitioned topic is a topic of its own).

    ``cache`` and ``files`` are shared by the broker's topics (a log gets its own when not given).
    ``on_recover`` is called with the metadata of every entry read back from disk at open.
    Raises StorageError when the topic's directory cannot be created or its log read.
    """

    def __init__(
        self,
        topic: str,
        *,
        data_dir: Path | None = None,
        entries_per_ledger: int = 50_000,
        fsync: bool = False,
        cache: EntryCache | None = None,
        files: OpenFiles | None = None,
        on_recover: Callable[[pb.MessageMetadata], None] | None = None,
    ) -> None:
        self.topic = topic
        self._on_recover = on_recover
        self.trimmed = 0  # entries removed from the head (retention)
        self.entries_per_ledger = entries_per_ledger
        self.fsync = fsync
        self.ledger_id = 0
        self.next_entry_id = 0
        cache = cache if cache is not None else EntryCache()
        files = files if files is not None else OpenFiles()
        # Positions: one run of consecutive entry ids per ledger stretch: (ledger, first id), first index.
        self._run_keys: list[Position] = []
        self._run_index: list[int] = []
        # Per-entry columns (see the module docstring).
        self._counts = array("i")
        self._hashes = array("I")
        self._times = array("Q")
        self._offsets = array("q")  # data dir: file offset of the body
        self._lengths = array("I")  # data dir: length of the body
        self._bodies: list[bytes] = []  # in memory: the bodies themselves
        self.dir = topic_dir(data_dir, topic) if data_dir else None
        self._file = (
            RecordFile(self.dir / "entries.log", cache=cache, files=files, fsync=fsync)
            if self.dir is not None
            else None
        )
        if self.dir is not None:
            prepare_topic_dir(self.dir, topic)
            self._recover()
        self._roll()

    # -- recovery ----------------------------------------------------------------
    def _recover(self) -> None:
        assert self.dir is not None and self._file is not None
        meta = self.dir / "log.json"
        try:
            if meta.exists():
                info = json.loads(meta.read_text())
                self.ledger_id = int(info.get("ledger_id", 0))
                self.trimmed = int(info.get("trimmed", 0))
        except OSError as exc:
            raise StorageError(meta, f"cannot read: {reason(exc)}") from None
        count = 0
        last: Position = (-1, -1)

        def accept(offset: int, length: int, head: bytes, fd: int) -> bool:
            """Index one good record (memory bounded by the read piece, see RecordFile.recover)."""
            nonlocal count, last
            if length < POSITION.size:
                return False
            position = POSITION.unpack_from(head)
            if position <= last:  # ids only grow: anything else is not a record we wrote
                return False
            if count >= self.trimmed:
                body = offset + POSITION.size
                try:
                    md = _record_metadata(fd, body, length - POSITION.size, head[POSITION.size :])
                except PulsarWireError:
                    return False
                self._index(position, entry_facts(md))
                if self._on_recover is not None:
                    self._on_recover(md)
                self._offsets.append(body)
                self._lengths.append(length - POSITION.size)
            self.ledger_id = max(self.ledger_id, position[0])
            last = position
            count += 1
            return True

        self._file.recover(accept)

    def _save_meta(self, ledger_id: int, trimmed: int) -> None:
        if self.dir is None:
            return
        tmp = self.dir / "log.json.tmp"
        try:
            tmp.write_text(json.dumps({"ledger_id": ledger_id, "trimmed": trimmed}))
            os.replace(tmp, self.dir / "log.json")
        except OSError as exc:
            raise StorageError(self.dir / "log.json", f"cannot write: {reason(exc)}") from None

    def _roll(self) -> None:
        self._save_meta(self.ledger_id + 1, self.trimmed)
        self.ledger_id += 1
        self.next_entry_id = 0

    # -- appends -----------------------------------------------------------------
    def append(self, data: bytes, metadata: pb.MessageMetadata) -> Entry:
        """Store an entry; returns it with its position.

        Raises StorageError when the data dir refuses the write: nothing of the entry is then
        kept (the partial record is cut off again), and the next append starts where it started.
        """
        if self.next_entry_id >= self.entries_per_ledger:
            self._roll()
        position = (self.ledger_id, self.next_entry_id)
        facts = entry_facts(metadata)
        if self._file is not None:
            offset = self._file.append([POSITION.pack(*position), data]) + POSITION.size
            self._offsets.append(offset)
            self._lengths.append(len(data))
            self._file.cache(offset, data)
        else:
            self._bodies.append(data)
        self._index(position, facts)
        self.next_entry_id += 1
        return Entry(*position, *facts, data, metadata)

    def _index(self, position: Position, facts: tuple[int, int, int]) -> None:
        n = len(self._counts)
        if self._run_keys:
            ledger, first = self._run_keys[-1]
            if ledger != position[0] or first + n - self._run_index[-1] != position[1]:
                self._run_keys.append(position)
                self._run_index.append(n)
        else:
            self._run_keys.append(position)
            self._run_index.append(n)
        count, key_hash, publish_time = facts
        self._counts.append(count)
        self._hashes.append(key_hash)
        self._times.append(publish_time)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    # -- reads -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._counts)

    @property
    def entries(self) -> Sequence[Entry]:
        """The entries as a sequence; each item is built from the index when accessed."""
        return _Entries(self, range(len(self)))

    def entry(self, i: int) -> Entry:
        """The entry at index ``i`` (0 = oldest kept); its bytes are read when asked for."""
        if self._file is None:
            body: bytes | Callable[[], bytes] = self._bodies[i]
        else:
            body = partial(self._read, self._offsets[i], self._lengths[i])
        return Entry(*self.position(i), self._counts[i], self._hashes[i], self._times[i], body)

    def num_messages(self, i: int) -> int:
        return max(1, self._counts[i])

    def _read(self, offset: int, length: int) -> bytes:
        assert self._file is not None
        return self._file.read(offset, length)

    def position(self, i: int) -> Position:
        """Position of the entry at index ``i``."""
        if i < 0:
            i += len(self._counts)
        starts = self._run_index
        if i >= starts[-1]:  # mostly the tail
            ledger, first = self._run_keys[-1]
            return (ledger, first + i - starts[-1])
        r = bisect.bisect_right(starts, i) - 1
        ledger, first = self._run_keys[r]
        return (ledger, first + i - starts[r])

    def positions(self, start: int = 0) -> Iterator[tuple[Position, int]]:
        """(position, messages) of every entry from index ``start`` on, oldest first."""
        n = len(self)
        r = max(0, bisect.bisect_right(self._run_index, start) - 1)
        i = start
        while i < n:
            ledger, first = self._run_keys[r]
            run_start = self._run_index[r]
            run_end = self._run_index[r + 1] if r + 1 < len(self._run_index) else n
            for j in range(i, run_end):
                yield (ledger, first + j - run_start), max(1, self._counts[j])
            i = run_end
            r += 1

    @property
    def last_position(self) -> Position:
        """Position of the last entry, or (current ledger, -1) when empty."""
        return self.position(len(self) - 1) if len(self) else (self.ledger_id, -1)

    def _locate(self, position: Position) -> tuple[int, bool]:
        """(index of the first entry at or after ``position``, whether that entry is at it)."""
        keys = self._run_keys
        r = len(keys) - 1 if keys and position >= keys[-1] else bisect.bisect_right(keys, position) - 1
        if r < 0:
            return 0, False
        ledger, first = keys[r]
        start = self._run_index[r]
        end = self._run_index[r + 1] if r + 1 < len(keys) else len(self._counts)
        if position[0] == ledger and position[1] - first < end - start:
            return start + position[1] - first, True
        return end, False

    def index_after(self, position: Position) -> int:
        """Index of the first entry strictly after ``position``."""
        i, exact = self._locate(position)
        return i + 1 if exact else i

    def index_at_or_after(self, position: Position) -> int:
        return self._locate(position)[0]

    def index_of(self, position: Position) -> int | None:
        i, exact = self._locate(position)
        return i if exact else None

    def index_by_publish_time(self, timestamp_ms: int) -> int:
        """Index of the first entry published at or after ``timestamp_ms`` (len when none)."""
        for i, t in enumerate(self._times):
            if t >= timestamp_ms:
                return i
        return len(self)

    def trim_head(self, count: int) -> None:
        """Drop the ``count`` oldest entries (retention); their data is gone for every reader."""
        count = max(0, min(count, len(self)))
        self._save_meta(self.ledger_id, self.trimmed + count)
        n = len(self)
        keys: list[Position] = []
        starts: list[int] = []
        for r, (ledger, first) in enumerate(self._run_keys):
            start = self._run_index[r]
            end = self._run_index[r + 1] if r + 1 < len(self._run_index) else n
            if end <= count:
                continue
            if start < count:
                first += count - start
                start = count
            keys.append((ledger, first))
            starts.append(start - count)
        self._run_keys, self._run_index = keys, starts
        for column in (self._counts, self._hashes, self._times, self._offsets, self._lengths):
            del column[:count]
        del self._bodies[:count]
        self.trimmed += count
