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

Transactions. A transactional batch opens its producer's transaction in the partition (its first
offset kept in ``open_transactions``) until a control batch (COMMIT or ABORT marker) closes it;
an aborted one is remembered as (producer id, first offset, marker offset) in ``aborted``. The
last stable offset is the first offset of the oldest open transaction (else the high
watermark): ``read_committed`` consumers read below it and skip what ``aborted`` lists. All of
it follows from the batches, so it is rebuilt when the log is read back at open.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pulsarwire._log import EntryCache, OpenFiles, RecordFile, crc32c, reason
from pulsarwire.errors import StorageError
from pulsarwire.kafka.codec.records import (
    BATCH_HEADER,
    CONTROL,
    CRC_FROM,
    TIMESTAMP_LOG_APPEND,
    TRANSACTIONAL,
    control_type,
    decode_batch,
)
from pulsarwire.kafka.errors import KafkaProtocolError

RECORDS_FILE = "records.log"
OFFSET = struct.Struct(">q")
EPOCH_AT = 12  # partition leader epoch: after base offset (8) and batch length (4)
CRC = struct.Struct(">I")
CRC_AT = 17  # after the leader epoch and the magic byte
ATTRIBUTES = struct.Struct(">h")
ATTRIBUTES_AT = CRC_FROM
MAX_TIMESTAMP_AT = 35  # attributes (2), last offset delta (4), base timestamp (8) after the CRC's start


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

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)


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
        #: producer id -> first offset of its transaction still open in this partition
        self.open_transactions: dict[int, int] = {}
        #: (producer id, first offset, offset of the ABORT marker), in marker order
        self.aborted: list[tuple[int, int, int]] = []
        self._markers = array("q")  # the markers' offsets of ``aborted``, for bisecting
        self._file: RecordFile | None = None
        self._directory = directory
        self._made = (
            False  # the directory is made at the first append: a topic of many partitions costs nothing
        )
        if directory is not None:
            self._file = RecordFile(directory / RECORDS_FILE, cache=cache, files=files, fsync=fsync)

            def accept(offset: int, length: int, head: bytes, _fd: int) -> bool:
                if length < BATCH_HEADER.size or len(head) < BATCH_HEADER.size:
                    return False
                info = batch_info(head)
                if info.base_offset != self.next_offset or info.last_offset < info.base_offset:
                    return False  # offsets only grow, without gaps: anything else we did not write
                if info.is_control:
                    try:
                        self._transaction(info, _is_commit(head[:length]))
                    except KafkaProtocolError:
                        return False
                else:
                    self._transaction(info, None)
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

    @property
    def last_stable_offset(self) -> int:
        return min(self.open_transactions.values(), default=self.next_offset)

    def _transaction(self, info: BatchInfo, commit: bool | None) -> None:
        """Track transactions: ``commit`` is the marker's kind for a control batch, else None."""
        if info.is_control:
            first = self.open_transactions.pop(info.producer_id, None)
            if commit is False and first is not None:
                self.aborted.append((info.producer_id, first, info.base_offset))
                self._markers.append(info.base_offset)
        elif info.is_transactional:
            self.open_transactions.setdefault(info.producer_id, info.base_offset)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [start, end)."""
        i = bisect.bisect_left(self._markers, start)  # those ended before ``start`` are skipped unseen
        return [(pid, first) for pid, first, _marker in self.aborted[i:] if first < end]

    def _index(self, info: BatchInfo, pos: int, length: int) -> None:
        self._base.append(info.base_offset)
        self._last.append(info.last_offset)
        self._max_ts.append(info.max_timestamp)
        top = self._running_ts[-1] if self._running_ts else info.max_timestamp
        self._running_ts.append(max(top, info.max_timestamp))
        self._pos.append(pos)
        self._len.append(length)
        self.next_offset = info.last_offset + 1

    def append(
        self, batch: bytes, *, commit: bool | None = None, log_append_time: int | None = None
    ) -> BatchInfo:
        """Store one validated v2 batch at the log end; returns its facts with the offsets given.
        ``commit`` says what a control batch marks (True: COMMIT, False: ABORT);
        ``log_append_time`` (ms) stamps the batch as a ``LogAppendTime`` topic does: the
        timestamp type bit set and the max timestamp replaced (its CRC computed again).

        Raises StorageError when the data dir refuses the write (nothing is then kept).
        """
        data = bytearray(batch)
        OFFSET.pack_into(data, 0, self.next_offset)
        struct.pack_into(">i", data, EPOCH_AT, 0)
        if log_append_time is not None:
            (attributes,) = ATTRIBUTES.unpack_from(data, ATTRIBUTES_AT)
            ATTRIBUTES.pack_into(data, ATTRIBUTES_AT, attributes | TIMESTAMP_LOG_APPEND)
            OFFSET.pack_into(data, MAX_TIMESTAMP_AT, log_append_time)
            CRC.pack_into(data, CRC_AT, crc32c(memoryview(data)[CRC_FROM:]))
        stored = bytes(data)
        info = batch_info(stored)
        pos = 0
        if self._file is not None:
            if not self._made:
                assert self._directory is not None
                try:
                    self._directory.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StorageError(
                        self._directory, f"cannot create the directory: {reason(exc)}"
                    ) from None
                self._made = True
            pos = self._file.append([stored])
        else:
            self._bodies.append(stored)
        self._transaction(info, commit)
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

    def read(
        self, offset: int, max_bytes: int, *, min_one: bool, upto: int | None = None
    ) -> tuple[bytes, int]:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` of them -- except
        that with ``min_one`` the first batch comes even when it is larger (KIP-74) -- and none
        starting at or after ``upto`` (the last stable offset for ``read_committed``).
        Returns (bytes, the offset after the last batch read)."""
        i = self.find(offset)
        parts: list[bytes] = []
        size = 0
        n = len(self._base)
        end = offset
        while i < n and (upto is None or self._base[i] < upto):
            length = self._len[i]
            if size + length > max_bytes and not (min_one and not parts):
                break
            parts.append(self.batch(i))
            size += length
            end = self._last[i] + 1
            i += 1
        return b"".join(parts), end

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
        return self.offset_for_timestamp(self._running_ts[-1])  # the running maximum's last is the max

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _is_commit(data: bytes) -> bool:
    """Whether the control batch ``data`` is a COMMIT marker (raises KafkaProtocolError if malformed)."""
    batch = decode_batch(data)
    if not batch.records:
        raise KafkaProtocolError("a control batch without its record")
    return control_type(batch.records[0])[0]
