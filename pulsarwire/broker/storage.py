"""Per-topic append-only entry log: a compact index in memory, entry bodies on disk behind a bounded cache.

An entry is what one SEND frame carried: the payload section (the 0x0e01 magic
and checksum when the producer sent them, metadata, payload), stored unchanged
and sent back unchanged in MESSAGE frames. Entries get (ledger_id, entry_id) positions; a
new ledger starts every ``entries_per_ledger`` entries and at every open, as
Pulsar's managed ledgers do, so ids cross ledgers.

On disk (``data_dir`` given) each topic has a directory (:func:`topic_dir`) with ``entries.log``::

    record := length:u32 crc:u32 ledger_id:u64 entry_id:u64 body[length - 16]
    crc    := crc32c(ledger_id .. body)

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
import hashlib
import itertools
import json
import os
import struct
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import overload
from urllib.parse import quote, unquote

from pulsarwire.codec.frames import crc32c, decode_metadata, entry_layout
from pulsarwire.codec.hashing import murmur3_32
from pulsarwire.errors import PulsarWireError, StorageError
from pulsarwire.proto import pb

RECORD_HEAD = struct.Struct(">IIQQ")  # length, crc, ledger_id, entry_id
LENGTH_CRC = struct.Struct(">II")
POSITION = struct.Struct(">QQ")

Position = tuple[int, int]

#: Default size of the entry cache shared by all topics of a broker (``--cache-size-mb``).
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: Default number of entry logs open at once (``--max-open-logs``): well below the usual 1024 limit.
DEFAULT_MAX_OPEN_LOGS = 256
#: What the cache charges per entry on top of its bytes (key, LRU links, object headers).
CACHE_ITEM_OVERHEAD = 200
#: Recovery reads records in pieces of at most this many bytes.
READ_CHUNK = 1 << 20
#: Longest directory name (bytes) used as is; longer quoted names are hashed.
NAME_MAX = 255
LONG_NAME_MARK = "%%"
NAME_FILE = "topic-name"

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


# -- names on disk ------------------------------------------------------------------------------


def topic_dir(data_dir: Path, topic: str) -> Path:
    """The directory of ``topic`` under ``data_dir`` (see the module docstring for long names)."""
    quoted = quote(topic, safe="")
    if len(quoted) <= NAME_MAX:  # every name that fits keeps the layout it always had
        return data_dir / "topics" / quoted
    digest = hashlib.sha256(topic.encode()).hexdigest()
    prefix = quoted[: NAME_MAX - len(LONG_NAME_MARK) - len(digest)]
    cut = prefix.rfind("%", len(prefix) - 2)
    if cut >= 0:  # do not end on half an escape
        prefix = prefix[:cut]
    return data_dir / "topics" / f"{prefix}{LONG_NAME_MARK}{digest}"


def stored_topics(data_dir: Path) -> list[str]:
    """Names of the topics stored under ``data_dir`` (loaded or not), as :func:`topic_dir` lays them out."""
    root = data_dir / "topics"
    if not root.is_dir():
        return []
    names = []
    for p in root.iterdir():
        if not p.is_dir():
            continue
        if LONG_NAME_MARK not in p.name:
            names.append(unquote(p.name))
            continue
        try:
            name = (p / NAME_FILE).read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # created, its name not yet written: nothing was stored in it either
        if topic_dir(data_dir, name) == p:
            names.append(name)
    return sorted(names)


def check_data_dir(path: Path) -> None:
    """Make sure ``path`` is (or can be made) a directory the broker can write files in.

    Raises StorageError naming the path and the reason (not a directory, permission denied,
    no space left, read-only file system...).
    """
    probe = path / f".write-check-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, [b"\0" * 4096])
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise StorageError(path, f"cannot use it as the data directory: {_reason(exc)}") from None


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


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Write ``parts`` in order; a short write continues where it stopped (and raises what stops it)."""
    written = os.writev(fd, parts)
    total = sum(len(p) for p in parts)
    if written == total:
        return
    rest = memoryview(b"".join(parts))[written:]
    while rest:
        rest = rest[os.write(fd, rest) :]


# -- shared resources ---------------------------------------------------------------------------


class EntryCache:
    """Bodies of recently appended or read entries, shared by every topic of a broker (LRU).

    Holds at most ``max_bytes``, counting each body's length plus :data:`CACHE_ITEM_OVERHEAD`;
    a body bigger than that is never cached. 0 turns the cache off.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError("the entry cache size cannot be negative")
        self.max_bytes = max_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[tuple[int, int], bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple[int, int]) -> bytes | None:
        data = self._items.get(key)
        if data is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return data

    def put(self, key: tuple[int, int], data: bytes) -> None:
        cost = len(data) + CACHE_ITEM_OVERHEAD
        if cost > self.max_bytes or key in self._items:
            return
        self._items[key] = data
        self.size += cost
        while self.size > self.max_bytes:
            _key, old = self._items.popitem(last=False)
            self.size -= len(old) + CACHE_ITEM_OVERHEAD


class OpenFiles:
    """File descriptors of entry logs, shared by every topic of a broker: at most ``max_open``
    are open; opening one more closes the least recently used."""

    def __init__(self, max_open: int = DEFAULT_MAX_OPEN_LOGS) -> None:
        if max_open < 1:
            raise ValueError("at least one entry log must be allowed open")
        self.max_open = max_open
        self._fds: OrderedDict[int, int] = OrderedDict()  # log serial -> fd

    def __len__(self) -> int:
        return len(self._fds)

    def fd(self, serial: int, path: Path) -> int:
        """The descriptor of log ``serial`` (opened for append and pread when needed); raises OSError."""
        fd = self._fds.get(serial)
        if fd is not None:
            self._fds.move_to_end(serial)
            return fd
        while len(self._fds) >= self.max_open:
            _serial, old = self._fds.popitem(last=False)
            os.close(old)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._fds[serial] = fd
        return fd

    def close(self, serial: int) -> None:
        fd = self._fds.pop(serial, None)
        if fd is not None:
            os.close(fd)


_serials = itertools.count(1)


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
        self._serial = next(_serials)
        self._cache = cache if cache is not None else EntryCache()
        self._files = files if files is not None else OpenFiles()
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
        self._end = 0  # data dir: size of the log's good records
        self._failed: str | None = None
        self.dir = topic_dir(data_dir, topic) if data_dir else None
        self._path = self.dir / "entries.log" if self.dir is not None else None
        if self.dir is not None:
            self._prepare_dir(self.dir)
            self._recover()
        self._roll()

    # -- recovery ----------------------------------------------------------------
    def _prepare_dir(self, path: Path) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            if LONG_NAME_MARK in path.name and not (path / NAME_FILE).exists():
                tmp = path / f"{NAME_FILE}.tmp"
                tmp.write_text(self.topic, "utf-8")
                os.replace(tmp, path / NAME_FILE)
        except OSError as exc:
            raise StorageError(path, f"cannot create the topic directory: {_reason(exc)}") from None

    def _recover(self) -> None:
        assert self.dir is not None and self._path is not None
        meta = self.dir / "log.json"
        try:
            if meta.exists():
                info = json.loads(meta.read_text())
                self.ledger_id = int(info.get("ledger_id", 0))
                self.trimmed = int(info.get("trimmed", 0))
            if self._path.exists():
                self._read_records(self._path)
        except OSError as exc:
            raise StorageError(self._path, f"cannot read the entry log: {_reason(exc)}") from None

    def _read_records(self, path: Path) -> None:
        """Index every good record of ``path``; cut the file at the first bad one.

        A record is read in chunks of at most READ_CHUNK bytes (its checksum computed as they
        come), keeping only the first: a corrupt length never makes a big allocation.
        """
        good = count = 0
        last: Position = (-1, -1)
        with open(path, "rb", buffering=READ_CHUNK) as f:
            size = os.fstat(f.fileno()).st_size
            while size - good >= RECORD_HEAD.size:
                length, crc = LENGTH_CRC.unpack(f.read(LENGTH_CRC.size))
                end = good + LENGTH_CRC.size + length
                if length < POSITION.size or end > size:
                    break
                head = f.read(min(length, READ_CHUNK))
                value, left = crc32c(head), length - len(head)
                while left and (chunk := f.read(min(left, READ_CHUNK))):
                    value, left = crc32c(chunk, value), left - len(chunk)
                if left or value != crc:
                    break
                position = POSITION.unpack_from(head)
                if position <= last:  # ids only grow: anything else is not a record we wrote
                    break
                if count >= self.trimmed:
                    offset = good + RECORD_HEAD.size
                    try:
                        md = _record_metadata(
                            f.fileno(), offset, length - POSITION.size, head[POSITION.size :]
                        )
                    except PulsarWireError:
                        break
                    self._index(position, entry_facts(md))
                    if self._on_recover is not None:
                        self._on_recover(md)
                    self._offsets.append(offset)
                    self._lengths.append(length - POSITION.size)
                self.ledger_id = max(self.ledger_id, position[0])
                last = position
                count += 1
                good = end
        if good != size:
            with open(path, "r+b") as f:
                f.truncate(good)
        self._end = good

    def _save_meta(self, ledger_id: int, trimmed: int) -> None:
        if self.dir is None:
            return
        tmp = self.dir / "log.json.tmp"
        try:
            tmp.write_text(json.dumps({"ledger_id": ledger_id, "trimmed": trimmed}))
            os.replace(tmp, self.dir / "log.json")
        except OSError as exc:
            raise StorageError(self.dir / "log.json", f"cannot write: {_reason(exc)}") from None

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
        if self._failed is not None:
            raise StorageError(self._path, f"the log is unusable until reopened: {self._failed}")
        if self.next_entry_id >= self.entries_per_ledger:
            self._roll()
        position = (self.ledger_id, self.next_entry_id)
        facts = entry_facts(metadata)
        if self._path is not None:
            offset = self._write(position, data)
            self._offsets.append(offset)
            self._lengths.append(len(data))
            self._cache.put((self._serial, offset), data)
        else:
            self._bodies.append(data)
        self._index(position, facts)
        self.next_entry_id += 1
        return Entry(*position, *facts, data, metadata)

    def _write(self, position: Position, data: bytes) -> int:
        """Append one record; returns the file offset of its body."""
        assert self._path is not None
        ids = POSITION.pack(*position)
        head = LENGTH_CRC.pack(POSITION.size + len(data), crc32c(data, crc32c(ids))) + ids
        start = self._end
        try:
            fd = self._files.fd(self._serial, self._path)
        except OSError as exc:
            raise StorageError(self._path, f"cannot open: {_reason(exc)}") from None
        try:
            _write_all(fd, [head, data])
            if self.fsync:
                os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, start)
            except OSError as undo:
                self._failed = f"a failed write could not be cut off: {_reason(undo)}"
            raise StorageError(self._path, f"write failed: {_reason(exc)}") from None
        self._end = start + len(head) + len(data)
        return start + len(head)

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
        self._files.close(self._serial)

    # -- reads -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._counts)

    @property
    def entries(self) -> Sequence[Entry]:
        """The entries as a sequence; each item is built from the index when accessed."""
        return _Entries(self, range(len(self)))

    def entry(self, i: int) -> Entry:
        """The entry at index ``i`` (0 = oldest kept); its bytes are read when asked for."""
        if self._path is None:
            body: bytes | Callable[[], bytes] = self._bodies[i]
        else:
            body = partial(self._read, self._offsets[i], self._lengths[i])
        return Entry(*self.position(i), self._counts[i], self._hashes[i], self._times[i], body)

    def num_messages(self, i: int) -> int:
        return max(1, self._counts[i])

    def _read(self, offset: int, length: int) -> bytes:
        assert self._path is not None
        key = (self._serial, offset)
        data = self._cache.get(key)
        if data is not None:
            return data
        parts = []
        try:
            fd = self._files.fd(self._serial, self._path)
            while length:
                part = os.pread(fd, length, offset)
                if not part:
                    raise StorageError(self._path, f"entry at offset {offset} is past the end of the file")
                parts.append(part)
                offset += len(part)
                length -= len(part)
        except OSError as exc:
            raise StorageError(self._path, f"read failed: {_reason(exc)}") from None
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._cache.put(key, data)
        return data

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
