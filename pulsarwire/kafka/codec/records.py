"""Kafka record batches (magic 2) and legacy message sets (magic 0 and 1, read only).

Grammar of a v2 batch (big-endian; ``varint``/``varlong`` are zigzag, see ``primitives.py``)::

    batch   := base_offset:int64 batch_length:int32 partition_leader_epoch:int32 magic:int8(=2)
               crc:uint32 attributes:int16 last_offset_delta:int32 base_timestamp:int64
               max_timestamp:int64 producer_id:int64 producer_epoch:int16 base_sequence:int32
               count:int32 records            -- records compressed as a whole per attributes
    record  := length:varint attributes:int8 timestamp_delta:varlong offset_delta:varint
               key_length:varint key value_length:varint value header_count:varint header*
    header  := key_length:varint key(utf8) value_length:varint value   -- lengths -1: null
    attributes := bits 0-2 compression | bit 3 log-append time | bit 4 transactional
                  | bit 5 control | bit 6 delete horizon

``batch_length`` counts the bytes after itself; ``crc`` is CRC32C from ``attributes`` to the end.
A control batch holds one record with key ``version:int16 type:int16`` (0 abort, 1 commit) and
value ``version:int16 coordinator_epoch:int32``.

Legacy messages (magic 0/1; CRC32 from ``magic`` to the end; a compressed wrapper's value is an
inner message set, whose offsets are relative for magic 1)::

    message := offset:int64 size:int32 crc:uint32 magic:int8 attributes:int8
               [timestamp:int64 if magic 1] key:bytes value:bytes

Every length is checked against the bytes left before it is used, every reader checks that all
bytes were consumed, and decompressed sections are bounded by ``max_decompressed``.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import crc32c as _crc32c

from pulsarwire.kafka.codec import compression
from pulsarwire.kafka.codec.primitives import INT8, Reader, write_varint, write_varlong
from pulsarwire.kafka.errors import (
    KafkaCrcMismatchError,
    KafkaEncodeError,
    KafkaLengthError,
    KafkaRecordError,
    KafkaStringError,
    KafkaTrailingBytesError,
    KafkaTruncatedError,
    KafkaVarintError,
)

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
LOG_OVERHEAD = struct.Struct(">qi")  # base_offset, batch_length: every batch/message starts so
MAGIC_AT = 16  # offset of the magic byte (after base offset, length, leader epoch)
CRC_FROM = 21  # the CRC32C covers attributes .. end
LEGACY_HEAD = struct.Struct(">IbB")  # crc, magic, attributes
LEGACY_TIMESTAMP = struct.Struct(">q")
LEGACY_LEN = struct.Struct(">i")
CONTROL_KEY = struct.Struct(">hh")
CONTROL_VALUE = struct.Struct(">hi")

TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
DELETE_HORIZON = 0x40
COMPRESSION_MASK = 0x07

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a v2 batch; offsets and timestamps are deltas from the batch's bases."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A v2 record batch (magic 2)."""

    base_offset: int
    records: tuple[Record, ...]
    base_timestamp: int = 0
    max_timestamp: int = 0
    last_offset_delta: int = -1
    compression: int = compression.NONE
    attributes: int = 0  # the non-compression bits (TRANSACTIONAL, CONTROL, ...)
    partition_leader_epoch: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """A message of a magic 0/1 message set, with its absolute offset (wrappers unpacked)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None


def make_batch(
    base_offset: int,
    records: list[tuple[bytes | None, bytes | None, tuple[Header, ...]]],
    *,
    timestamp: int,
    compression_codec: int = compression.NONE,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
) -> RecordBatch:
    """A batch of ``(key, value, headers)`` records, offsets consecutive, all at ``timestamp``."""
    recs = tuple(Record(i, 0, k, v, h) for i, (k, v, h) in enumerate(records))
    return RecordBatch(
        base_offset, recs, timestamp, timestamp, len(recs) - 1, compression_codec, attributes,
        -1, producer_id, producer_epoch, base_sequence,
    )  # fmt: skip


def control_batch(
    base_offset: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
) -> RecordBatch:
    """The COMMIT/ABORT marker a transaction coordinator writes."""
    key = CONTROL_KEY.pack(0, 1 if commit else 0)
    value = CONTROL_VALUE.pack(0, coordinator_epoch)
    return RecordBatch(
        base_offset, (Record(0, 0, key, value),), timestamp, timestamp, 0, compression.NONE,
        TRANSACTIONAL | CONTROL, -1, producer_id, producer_epoch, NO_SEQUENCE,
    )  # fmt: skip


def control_type(record: Record) -> tuple[bool, int]:
    """(is commit, coordinator epoch) of a control record; raises KafkaRecordError if malformed."""
    if record.key is None or len(record.key) != CONTROL_KEY.size:
        raise KafkaRecordError("control record key is not 4 bytes")
    if record.value is None or len(record.value) < CONTROL_VALUE.size:
        raise KafkaRecordError("control record value is shorter than 6 bytes")
    _, kind = CONTROL_KEY.unpack(record.key)
    if kind not in (0, 1):
        raise KafkaRecordError(f"control record type {kind} is neither abort (0) nor commit (1)")
    return kind == 1, CONTROL_VALUE.unpack_from(record.value)[1]


def _write_nullable(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def _encode_record(out: bytearray, rec: Record) -> None:
    body = bytearray()
    body.append(rec.attributes & 0xFF)
    write_varlong(body, rec.timestamp_delta)
    write_varint(body, rec.offset_delta)
    _write_nullable(body, rec.key)
    _write_nullable(body, rec.value)
    write_varint(body, len(rec.headers))
    for hkey, hvalue in rec.headers:
        raw = hkey.encode("utf-8")
        write_varint(body, len(raw))
        body += raw
        _write_nullable(body, hvalue)
    write_varint(out, len(body))
    out += body


def encode_batch(batch: RecordBatch) -> bytes:
    """The bytes of ``batch`` (records compressed with ``batch.compression``, CRC computed)."""
    records = bytearray()
    for rec in batch.records:
        _encode_record(records, rec)
    section = compression.compress(batch.compression, bytes(records))
    attributes = (batch.attributes & ~COMPRESSION_MASK) | (batch.compression & COMPRESSION_MASK)
    try:
        head = BATCH_HEADER.pack(
            batch.base_offset, BATCH_HEADER.size - 12 + len(section), batch.partition_leader_epoch, 2, 0,
            attributes, batch.last_offset_delta, batch.base_timestamp, batch.max_timestamp,
            batch.producer_id, batch.producer_epoch, batch.base_sequence, len(batch.records),
        )  # fmt: skip
    except struct.error as exc:
        raise KafkaEncodeError(f"record batch field out of range: {exc}") from None
    out = bytearray(head)
    out += section
    struct.pack_into(">I", out, 17, _crc32c.crc32c(memoryview(out)[CRC_FROM:]))
    return bytes(out)


def _nullable(r: Reader, what: str) -> bytes | None:
    n = r.varint(what)
    if n == -1:
        return None
    if n < -1:
        raise KafkaLengthError(f"{what}: negative length {n}")
    return r.take(n, what)


def _decode_record(r: Reader) -> Record:
    length = r.varint("record length")
    if length < 0 or length > r.remaining:
        raise KafkaTruncatedError(f"record length {length} is over the {r.remaining} bytes left")
    rec = Reader(r.buf, r.pos, r.pos + length)
    attributes = rec.integer(INT8, "record attributes") & 0xFF
    timestamp_delta = rec.varlong("record timestamp delta")
    offset_delta = rec.varint("record offset delta")
    key = _nullable(rec, "record key")
    value = _nullable(rec, "record value")
    count = rec.varint("record header count")
    if count < 0 or count > rec.remaining:
        raise KafkaLengthError(f"record header count {count} does not fit the {rec.remaining} bytes left")
    headers: list[Header] = []
    for _ in range(count):
        hlen = rec.varint("header key length")
        hkey = rec.text(hlen, "header key")
        headers.append((hkey, _nullable(rec, "header value")))
    rec.done("record")
    r.pos = rec.end
    return Record(offset_delta, timestamp_delta, key, value, tuple(headers), attributes)


def decode_batch(data: bytes | memoryview, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> RecordBatch:
    """Decode exactly one v2 batch; raises a KafkaProtocolError subclass if anything is off."""
    r = Reader(data)
    batch = _decode_batch_at(r, max_decompressed)
    r.done("record batch")
    return batch


def _decode_batch_at(r: Reader, max_decompressed: int, walk_only: bool = False) -> RecordBatch:
    start = r.pos
    if r.remaining < BATCH_HEADER.size:
        raise KafkaTruncatedError(f"record batch header needs {BATCH_HEADER.size} bytes, {r.remaining} left")
    (base_offset, length, leader_epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
     producer_id, producer_epoch, base_sequence, count) = BATCH_HEADER.unpack_from(r.buf, start)  # fmt: skip
    if magic != 2:
        raise KafkaRecordError(f"record batch magic is {magic}, expected 2")
    if length < BATCH_HEADER.size - 12:
        raise KafkaLengthError(f"record batch length {length} is below the header's size")
    if length > r.remaining - 12:
        raise KafkaTruncatedError(f"record batch of {length} bytes is over the {r.remaining - 12} bytes left")
    end = start + 12 + length
    actual = _crc32c.crc32c(r.buf[start + CRC_FROM : end])
    if actual != crc:
        raise KafkaCrcMismatchError(
            f"record batch at offset {base_offset}: CRC32C {actual:#010x}, header says {crc:#010x}",
            expected=crc, actual=actual,
        )  # fmt: skip
    codec = attributes & COMPRESSION_MASK
    section: bytes | memoryview = r.buf[start + BATCH_HEADER.size : end]
    if codec != compression.NONE:
        section = compression.decompress(codec, bytes(section), max_decompressed)
    if count < 0 or count > len(section):
        raise KafkaLengthError(f"record batch count {count} does not fit its {len(section)} bytes")
    if walk_only:
        if count != last_delta + 1:
            raise KafkaRecordError(f"record batch at {base_offset}: {count} records, last delta {last_delta}")
        _walk_records(section, count, base_offset)
        records: tuple[Record, ...] = ()
    else:
        rr = Reader(section)
        records = tuple(_decode_record(rr) for _ in range(count))
        rr.done(f"records of the batch at offset {base_offset}")
    r.pos = end
    return RecordBatch(
        base_offset, records, base_ts, max_ts, last_delta, codec, attributes & ~COMPRESSION_MASK & 0xFFFF,
        leader_epoch, producer_id, producer_epoch, base_sequence,
    )  # fmt: skip


def check_batch(data: bytes | memoryview, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> RecordBatch:
    """Check exactly one v2 batch as :func:`decode_batch` would, without building its records,
    and that its records' offset deltas run 0, 1, 2... (what a producer must send); returns
    the batch with ``records`` empty. A broker validates each produced batch with it: it refuses
    what ``decode_batch`` refuses, with the same KafkaProtocolError subclass (or
    KafkaRecordError when a wrong offset delta comes first), at a fraction of the cost."""
    r = Reader(data)
    batch = _decode_batch_at(r, max_decompressed, walk_only=True)
    r.done("record batch")
    return batch


def _uvarint_at(buf: bytes | memoryview, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """(value, next position) of the unsigned varint at ``pos`` (before ``end``), as Reader.uvarint."""
    result = shift = 0
    for i in range(max_bytes):
        if pos >= end:
            raise KafkaTruncatedError("record: varint truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if i == max_bytes - 1 and ((max_bytes == 5 and b > 0x0F) or result >> 64):
                raise KafkaVarintError("record: varint over its width")
            return result, pos
        shift += 7
    raise KafkaVarintError(f"record: varint longer than {max_bytes} bytes")


def _zigzag_at(buf: bytes | memoryview, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    if pos + 1 < end:  # one or two bytes (most lengths and deltas) without a loop
        v = buf[pos]
        if v < 0x80:
            return (v >> 1) ^ -(v & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            v = (v & 0x7F) | (c << 7)
            return (v >> 1) ^ -(v & 1), pos + 2
    v, pos = _uvarint_at(buf, pos, end, max_bytes)
    return (v >> 1) ^ -(v & 1), pos


def _skip_nullable(buf: bytes | memoryview, p: int, end: int, what: str) -> int:
    n, p = _zigzag_at(buf, p, end)
    if n < -1:
        raise KafkaLengthError(f"{what}: negative length {n}")
    if n > end - p:
        raise KafkaTruncatedError(f"{what}: needs {n} bytes, {end - p} left")
    return p + n if n > 0 else p


def _walk_records(buf: bytes | memoryview, count: int, base_offset: int) -> None:
    """Check ``count`` records fill ``buf`` exactly, as ``_decode_record`` reads them."""
    pos, end = 0, len(buf)
    zigzag, skip = _zigzag_at, _skip_nullable  # locals: this loop runs once per produced record
    for i in range(count):
        length, pos = zigzag(buf, pos, end)
        if length < 0 or length > end - pos:
            raise KafkaTruncatedError(f"record length {length} is over the {end - pos} bytes left")
        rec_end = pos + length
        if pos + 1 > rec_end:
            raise KafkaTruncatedError("record attributes: truncated")
        _, p = zigzag(buf, pos + 1, rec_end, 10)  # timestamp delta
        delta, p = zigzag(buf, p, rec_end)
        if delta != i:
            raise KafkaRecordError(f"record {i} of the batch at {base_offset} has offset delta {delta}")
        p = skip(buf, p, rec_end, "record key")
        p = skip(buf, p, rec_end, "record value")
        headers, p = zigzag(buf, p, rec_end)
        if headers < 0 or headers > rec_end - p:
            raise KafkaLengthError(f"record header count {headers} does not fit the {rec_end - p} bytes left")
        for _ in range(headers):
            n, p = zigzag(buf, p, rec_end)
            if n < 0:
                raise KafkaLengthError(f"header key: negative length {n}")
            if n > rec_end - p:
                raise KafkaTruncatedError(f"header key: needs {n} bytes, {rec_end - p} left")
            try:
                bytes(buf[p : p + n]).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise KafkaStringError(f"header key: not UTF-8 ({exc.reason})") from None
            p = skip(buf, p + n, rec_end, "header value")
        if p != rec_end:
            raise KafkaTrailingBytesError(f"record: {rec_end - p} bytes left over")
        pos = rec_end
    if pos != end:
        raise KafkaTrailingBytesError(f"records of the batch at offset {base_offset}: {end - pos} left over")


def decode_batches(
    data: bytes | memoryview, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED, partial_tail: bool = False
) -> list[RecordBatch]:
    """All v2 batches of a records field. With ``partial_tail`` (a Fetch answer, cut at the
    fetch size) an incomplete last batch is dropped instead of raising KafkaTruncatedError."""
    r = Reader(data)
    out: list[RecordBatch] = []
    while r.remaining:
        if partial_tail and _incomplete(r):
            break
        out.append(_decode_batch_at(r, max_decompressed))
    return out


def _incomplete(r: Reader) -> bool:
    if r.remaining < LOG_OVERHEAD.size:
        return True
    _, length = LOG_OVERHEAD.unpack_from(r.buf, r.pos)
    return bool(length > r.remaining - LOG_OVERHEAD.size)


def magic_of(data: bytes | memoryview) -> int:
    """The magic byte of the first batch or message of ``data`` (0, 1 or 2)."""
    if len(data) <= MAGIC_AT:
        raise KafkaTruncatedError("records are too short to hold a magic byte")
    return int(data[MAGIC_AT])


def decode_message_set(
    data: bytes | memoryview, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED, _depth: int = 0
) -> list[LegacyMessage]:
    """The messages of a legacy (magic 0/1) message set, compressed wrappers unpacked."""
    r = Reader(data)
    out: list[LegacyMessage] = []
    while r.remaining:
        offset, size = r.unpack(LOG_OVERHEAD, "message offset and size")
        assert isinstance(offset, int) and isinstance(size, int)
        if size < LEGACY_HEAD.size + 8 or size > r.remaining:
            raise KafkaLengthError(f"message at offset {offset}: size {size} does not fit")
        m = Reader(r.buf, r.pos, r.pos + size)
        r.pos += size
        crc, magic, attributes = m.unpack(LEGACY_HEAD, "message header")
        assert isinstance(crc, int) and isinstance(magic, int) and isinstance(attributes, int)
        actual = zlib.crc32(m.buf[m.pos - 2 : m.end])
        if actual != crc:
            raise KafkaCrcMismatchError(
                f"message at offset {offset}: CRC32 {actual:#010x}, header says {crc:#010x}",
                expected=crc, actual=actual,
            )  # fmt: skip
        if magic not in (0, 1):
            raise KafkaRecordError(f"message at offset {offset}: magic {magic} in a legacy message set")
        timestamp = m.integer(LEGACY_TIMESTAMP, "message timestamp") if magic == 1 else None
        key = _legacy_bytes(m, "message key")
        value = _legacy_bytes(m, "message value")
        m.done(f"message at offset {offset}")
        codec = attributes & COMPRESSION_MASK
        if codec == compression.NONE:
            out.append(LegacyMessage(offset, magic, attributes, timestamp, key, value))
            continue
        if _depth:
            raise KafkaRecordError(f"message at offset {offset}: compressed message inside a compressed one")
        inner = decode_message_set(
            compression.decompress(codec, value or b"", max_decompressed),
            max_decompressed=max_decompressed, _depth=1,
        )  # fmt: skip
        if magic == 1 and inner:  # inner offsets are relative; the wrapper has the last one's
            shift = offset - inner[-1].offset
            inner = [LegacyMessage(i.offset + shift, i.magic, i.attributes, i.timestamp, i.key, i.value)
                     for i in inner]  # fmt: skip
        out.extend(inner)
    return out


def _legacy_bytes(m: Reader, what: str) -> bytes | None:
    n = m.integer(LEGACY_LEN, what)
    if n == -1:
        return None
    return m.take(n, what)


def encode_message(offset: int, magic: int, key: bytes | None, value: bytes | None, *,
                   timestamp: int = 0, attributes: int = 0) -> bytes:  # fmt: skip
    """One legacy message (used by tests and by the broker's down-conversion, if ever needed)."""
    body = bytearray(LEGACY_HEAD.pack(0, magic, attributes))
    if magic == 1:
        body += LEGACY_TIMESTAMP.pack(timestamp)
    for part in (key, value):
        if part is None:
            body += LEGACY_LEN.pack(-1)
        else:
            body += LEGACY_LEN.pack(len(part)) + part
    struct.pack_into(">I", body, 0, zlib.crc32(memoryview(body)[4:]))
    return LOG_OVERHEAD.pack(offset, len(body)) + bytes(body)
