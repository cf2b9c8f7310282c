"""Protocol-free pieces of an on-disk append-only log, shared by the Pulsar and the Kafka broker.

A log file is a sequence of checksummed records::

    record := length:u32 crc:u32 payload[length]     -- crc = crc32c(payload)

What a payload holds is the broker's business (Pulsar: ledger/entry ids and the entry as sent;
Kafka: a record batch with its broker-assigned base offset).

- :class:`RecordFile` appends records (one ``writev`` to the OS before the caller answers its
  client, so they survive ``kill -9``; ``fsync`` per append when asked), reads payloads back by
  file offset through the shared :class:`EntryCache`, and on open walks the file
  (:meth:`RecordFile.recover`) cutting a torn or corrupt tail at the first bad record, reading
  in chunks so a corrupt length never drives an allocation.
- :class:`EntryCache`: payloads recently appended or read, LRU bounded in bytes, shared by all
  logs of a broker.
- :class:`OpenFiles`: an LRU of file descriptors shared by all logs, so thousands of logs stay
  within the process's file limit (a log whose descriptor was closed reopens it on next use).
- :func:`topic_dir` / :func:`stored_topics`: a topic's directory is its percent-quoted name; a
  name whose quoted form passes the file system's 255-byte limit gets a truncated prefix, ``%%``
  (which quoting never produces) and the SHA-256 of the name, with the real name in a
  ``topic-name`` file inside.
- :func:`check_data_dir`: can the broker write there at all (a clear error at start, not at the
  first append).

A write that fails raises :class:`~pulsarwire.errors.StorageError` naming the file and the
reason; the partial record is cut off again, so the file stays as before the append (when even
that fails, the file refuses further appends until reopened, which cuts the torn tail).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, unquote

import crc32c as _crc32c

from pulsarwire.errors import StorageError

LENGTH_CRC = struct.Struct(">II")

#: Default size of the entry cache shared by all topics of a broker (``--cache-size-mb``).
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: Default number of logs open at once (``--max-open-logs``): well below the usual 1024 limit.
DEFAULT_MAX_OPEN_LOGS = 256
#: What the cache charges per entry on top of its bytes (key, LRU links, object headers).
CACHE_ITEM_OVERHEAD = 200
#: Recovery reads records in pieces of at most this many bytes.
READ_CHUNK = 1 << 20
#: Longest directory name (bytes) used as is; longer quoted names are hashed.
NAME_MAX = 255
LONG_NAME_MARK = "%%"
NAME_FILE = "topic-name"


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    return int(_crc32c.crc32c(data, value))


def reason(exc: OSError) -> str:
    """The operating system's words for ``exc`` (``No space left on device``)."""
    return exc.strerror or str(exc)


def write_all(fd: int, parts: list[bytes]) -> None:
    """Write ``parts`` in order; a short write continues where it stopped (and raises what stops it)."""
    written = os.writev(fd, parts)
    total = sum(len(p) for p in parts)
    if written == total:
        return
    rest = memoryview(b"".join(parts))[written:]
    while rest:
        rest = rest[os.write(fd, rest) :]


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


def prepare_topic_dir(path: Path, topic: str) -> None:
    """Create ``path`` (from :func:`topic_dir`), writing the real name inside when it is hashed."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        if LONG_NAME_MARK in path.name and not (path / NAME_FILE).exists():
            tmp = path / f"{NAME_FILE}.tmp"
            tmp.write_text(topic, "utf-8")
            os.replace(tmp, path / NAME_FILE)
    except OSError as exc:
        raise StorageError(path, f"cannot create the topic directory: {reason(exc)}") from None


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
            write_all(fd, [b"\0" * 4096])
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise StorageError(path, f"cannot use it as the data directory: {reason(exc)}") from None


# -- shared resources ---------------------------------------------------------------------------


class EntryCache:
    """Payloads of recently appended or read records, shared by every log of a broker (LRU).

    Holds at most ``max_bytes``, counting each payload's length plus :data:`CACHE_ITEM_OVERHEAD`;
    a payload bigger than that is never cached. 0 turns the cache off.
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
    """File descriptors of logs, shared by every log of a broker: at most ``max_open`` are open;
    opening one more closes the least recently used."""

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

#: ``accept(payload_offset, payload_length, head, fd)`` -> keep going? ``head`` holds the
#: payload's first bytes (at most READ_CHUNK); ``fd`` reads the rest when the caller needs it.
Accept = Callable[[int, int, bytes, int], bool]


class RecordFile:
    """One log file of checksummed records (see the module docstring)."""

    def __init__(self, path: Path, *, cache: EntryCache, files: OpenFiles, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self.serial = next(_serials)
        self.end = 0  # size of the good records
        self._cache = cache
        self._files = files
        self._failed: str | None = None

    def recover(self, accept: Accept) -> None:
        """Walk the file's good records, oldest first, calling ``accept`` for each; the file is cut
        after the last record accepted (a bad checksum, a torn tail or ``accept`` returning
        False ends the walk). Raises StorageError when the file cannot be read."""
        good = 0
        try:
            if not self.path.exists():
                return
            with open(self.path, "rb", buffering=READ_CHUNK) as f:
                size = os.fstat(f.fileno()).st_size
                while size - good >= LENGTH_CRC.size:
                    length, crc = LENGTH_CRC.unpack(f.read(LENGTH_CRC.size))
                    end = good + LENGTH_CRC.size + length
                    if end > size:
                        break
                    head = f.read(min(length, READ_CHUNK))
                    value, left = crc32c(head), length - len(head)
                    while left and (chunk := f.read(min(left, READ_CHUNK))):
                        value, left = crc32c(chunk, value), left - len(chunk)
                    if left or value != crc:
                        break
                    if not accept(good + LENGTH_CRC.size, length, head, f.fileno()):
                        break
                    good = end
            if good != size:
                with open(self.path, "r+b") as f:
                    f.truncate(good)
        except OSError as exc:
            raise StorageError(self.path, f"cannot read the log: {reason(exc)}") from None
        self.end = good

    def append(self, parts: list[bytes]) -> int:
        """Append one record whose payload is ``parts`` joined; returns the payload's file offset.

        The payload enters the cache when it is one part. Raises StorageError when the write
        fails (nothing of the record is then kept).
        """
        if self._failed is not None:
            raise StorageError(self.path, f"the log is unusable until reopened: {self._failed}")
        crc = 0
        length = 0
        for part in parts:
            crc = crc32c(part, crc)
            length += len(part)
        head = LENGTH_CRC.pack(length, crc)
        start = self.end
        try:
            fd = self._files.fd(self.serial, self.path)
        except OSError as exc:
            raise StorageError(self.path, f"cannot open: {reason(exc)}") from None
        try:
            write_all(fd, [head, *parts])
            if self.fsync:
                os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, start)
            except OSError as undo:
                self._failed = f"a failed write could not be cut off: {reason(undo)}"
            raise StorageError(self.path, f"write failed: {reason(exc)}") from None
        self.end = start + len(head) + length
        offset = start + len(head)
        if len(parts) == 1:
            self._cache.put((self.serial, offset), parts[0])
        return offset

    def cache(self, offset: int, data: bytes) -> None:
        """Put the payload at ``offset`` in the cache (the caller knows it, e.g. without a prefix)."""
        self._cache.put((self.serial, offset), data)

    def read(self, offset: int, length: int) -> bytes:
        """The ``length`` payload bytes at ``offset`` (through the cache); raises StorageError."""
        key = (self.serial, offset)
        data = self._cache.get(key)
        if data is not None:
            return data
        parts = []
        try:
            fd = self._files.fd(self.serial, self.path)
            while length:
                part = os.pread(fd, length, offset)
                if not part:
                    raise StorageError(self.path, f"record at offset {offset} is past the end of the file")
                parts.append(part)
                offset += len(part)
                length -= len(part)
        except OSError as exc:
            raise StorageError(self.path, f"read failed: {reason(exc)}") from None
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._cache.put(key, data)
        return data

    def close(self) -> None:
        self._files.close(self.serial)
