"""One Kafka partition's log: record batches (magic 2) with broker-assigned offsets.

A stored batch is the producer's batch with its base offset (and partition leader epoch, 0)
written in by the broker -- neither is covered by the batch's CRC, so its bytes are otherwise
the producer's and go back to consumers unchanged. On disk (``directory`` given) the batches are
the payloads of a :class:`~pulsarwire._log.RecordFile` (``records.log``), the brokers' shared
checksummed log: written to the OS before the producer is answered (survives ``kill -9``), cut
at the first torn or corrupt record on open, read back through the shared entry cache.

Index. In memory, per batch, typed arrays: base offset, last offset, max timestamp (and its
running maximum, so a timestamp lookup bisects), file offset and length. Fetch finds the batch
holding an offset by binary search over the base offsets. Without a directory the batches
themselves stay in RAM.

Offsets: ``log_start_offset`` (0: nothing is deleted yet) .. ``next_offset`` (the log end
offset, which is the high watermark on a single node).
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pulsarwire._log import EntryCache, OpenFiles, RecordFile
from pulsarwire.kafka.codec.records import BATCH_HEADER, decode_batch

RECORDS_FILE = "records.log"
OFFSET = struct.Struct(">q")
EPOCH_AT = 12  # partition leader epoch: after base offset (8) and batch length (4)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The header facts of a stored batch (what recovery and the producer state need)."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    attributes: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int


def batch_info(data: bytes | memoryview) -> BatchInfo:
    """Header facts of the batch ``data`` starts with (at least BATCH_HEADER.size bytes)."""
    (base, _length, _epoch, _magic, _crc, attributes, last_delta, _base_ts, max_ts,
     producer_id, producer_epoch, base_sequence, count) = BATCH_HEADER.unpack_from(data)  # fmt: skip
    return BatchInfo(
        base, base + last_delta, max_ts, attributes, producer_id, producer_epoch, base_sequence, count
    )


class PartitionLog:
    """The batches of one partition (see the module docstring).

    ``on_recover`` is called with the facts of every batch read back from disk at open.
    Raises StorageError when the directory's log cannot be read.
    """

    def __init__(
        self,
        directory: Path | None,
        *,
        cache: EntryCache,
        files: OpenFiles,
        fsync: bool = False,
        on_recover: Callable[[BatchInfo], None] | None = None,
    ) -> None:
        self.log_start_offset = 0
        self.next_offset = 0
        self._base = array("q")
        self._last = array("q")
        self._max_ts = array("q")
        self._running_ts = array("q")
        self._pos = array("q")
        self._len = array("I")
        self._bodies: list[bytes] = []
        self._file: RecordFile | None = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._file = RecordFile(directory / RECORDS_FILE, cache=cache, files=files, fsync=fsync)

            def accept(offset: int, length: int, head: bytes, _fd: int) -> bool:
                if length < BATCH_HEADER.size or len(head) < BATCH_HEADER.size:
                    return False
                info = batch_info(head)
                if info.base_offset != self.next_offset or info.last_offset < info.base_offset:
                    return False  # offsets only grow, without gaps: anything else we did not write
                self._index(info, offset, length)
                if on_recover is not None:
                    on_recover(info)
                return True

            self._file.recover(accept)
            if self._base:
                self.log_start_offset = self._base[0]

    def __len__(self) -> int:
        return len(self._base)

    @property
    def high_watermark(self) -> int:
        return self.next_offset

    def _index(self, info: BatchInfo, pos: int, length: int) -> None:
        self._base.append(info.base_offset)
        self._last.append(info.last_offset)
        self._max_ts.append(info.max_timestamp)
        top = self._running_ts[-1] if self._running_ts else info.max_timestamp
        self._running_ts.append(max(top, info.max_timestamp))
        self._pos.append(pos)
        self._len.append(length)
        self.next_offset = info.last_offset + 1

    def append(self, batch: bytes) -> BatchInfo:
        """Store one validated v2 batch at the log end; returns its facts with the offsets given.

        Raises StorageError when the data dir refuses the write (nothing is then kept).
        """
        data = bytearray(batch)
        OFFSET.pack_into(data, 0, self.next_offset)
        struct.pack_into(">i", data, EPOCH_AT, 0)
        stored = bytes(data)
        info = batch_info(stored)
        pos = 0
        if self._file is not None:
            pos = self._file.append([stored])
        else:
            self._bodies.append(stored)
        self._index(info, pos, len(stored))
        return info

    def batch(self, i: int) -> bytes:
        """The stored bytes of batch ``i``."""
        if self._file is None:
            return self._bodies[i]
        return self._file.read(self._pos[i], self._len[i])

    def find(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (or the first after it); len(self) when none."""
        i = bisect.bisect_right(self._base, offset) - 1
        if i < 0:
            return 0
        return i if self._last[i] >= offset else i + 1

    def read(self, offset: int, max_bytes: int, *, min_one: bool) -> tuple[bytes, int]:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` of them -- except
        that with ``min_one`` the first batch comes even when it is larger (KIP-74).
        Returns (bytes, the index after the last batch read)."""
        i = self.find(offset)
        parts: list[bytes] = []
        size = 0
        n = len(self._base)
        while i < n:
            length = self._len[i]
            if size + length > max_bytes and not (min_one and not parts):
                break
            parts.append(self.batch(i))
            size += length
            i += 1
        return b"".join(parts), i

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped at or after ``timestamp``; None when none is."""
        i = bisect.bisect_left(self._running_ts, timestamp)
        while i < len(self._base):
            if self._max_ts[i] >= timestamp:
                batch = decode_batch(self.batch(i))
                for rec in batch.records:
                    ts = batch.base_timestamp + rec.timestamp_delta
                    if ts >= timestamp:
                        return batch.base_offset + rec.offset_delta, ts
            i += 1
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3); None when empty."""
        if not self._base:
            return None
        best = max(range(len(self._max_ts)), key=lambda j: self._max_ts[j])
        return self.offset_for_timestamp(self._max_ts[best])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
