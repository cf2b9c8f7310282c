"""Record batches walked into column buffers: what the Arrow reader and the consumer share.

:func:`decode_records` takes a Fetch answer's records field: for each v2 batch it checks the
header (length, magic, CRC32C over the bytes), hands control and aborted batches to
:class:`~pulsarwire.kafka.client.fetching.AbortedFilter`, decompresses within the codec's bound,
and has :class:`Columns` walk the records once (one-byte varints decoded inline), appending keys,
values and header bytes to one ``bytearray`` each and their end positions, offsets and
timestamps to ``array`` columns — no Python object per record. Every varint and length is
checked against the bytes left. A batch that breaks a rule ends the walk with a ``_BAD_MSG``
error naming topic, partition and offset; the rows before it are kept.

:meth:`Columns.to_batch` turns the buffers into a pyarrow RecordBatch of :func:`arrow_schema`
without a copy per value; :meth:`Columns.messages` into consumer ``Message`` objects.
"""

from __future__ import annotations

import struct
from array import array
from typing import TYPE_CHECKING, Any

import crc32c as _crc32c

from pulsarwire.kafka.client.errors import LOCAL_CODES, KafkaError
from pulsarwire.kafka.client.fetching import AbortedFilter
from pulsarwire.kafka.client.message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Headers, Message
from pulsarwire.kafka.codec import compression
from pulsarwire.kafka.codec.records import (
    BATCH_HEADER,
    COMPRESSION_MASK,
    CONTROL,
    CRC_FROM,
    DEFAULT_MAX_DECOMPRESSED,
    LOG_OVERHEAD,
    TIMESTAMP_LOG_APPEND,
    TRANSACTIONAL,
)
from pulsarwire.kafka.errors import KafkaWireError

if TYPE_CHECKING:
    import pyarrow as pa


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
    return pa.schema(
        [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.timestamp("ms")),
            pa.field("headers", pa.list_(header)),
        ]
    )


class BadRecords(Exception):
    """A records section breaks a rule (converted to KafkaException with the position)."""


class Columns:
    """Growing column buffers of one RecordBatch."""

    def __init__(self) -> None:
        self.n = 0
        self.keys = bytearray()
        self.key_ends = array("i", [0])
        self.key_valid = bytearray()
        self.values = bytearray()
        self.value_ends = array("i", [0])
        self.value_valid = bytearray()
        self.offsets = array("q")
        self.timestamps = array("q")
        self.log_append = bytearray()  # per record: 1 if its timestamp is the log-append time
        self.header_ends = array("i", [0])
        self.hkeys = bytearray()
        self.hkey_ends = array("i", [0])
        self.hvalues = bytearray()
        self.hvalue_ends = array("i", [0])
        self.hvalue_valid = bytearray()

    def mark(self) -> tuple[int, ...]:
        """Where every column ends now (to undo a batch that turns out bad)."""
        return (
            self.n,
            len(self.keys),
            len(self.values),
            len(self.hkeys),
            len(self.hvalues),
            len(self.hkey_ends),
            len(self.hvalue_valid),
        )

    def truncate(self, mark: tuple[int, ...]) -> None:
        n, k, v, hk, hv, hke, hvv = mark
        self.n = n
        del self.keys[k:], self.values[v:], self.hkeys[hk:], self.hvalues[hv:]
        del self.key_ends[n + 1 :], self.value_ends[n + 1 :], self.header_ends[n + 1 :]
        del (
            self.key_valid[n:],
            self.value_valid[n:],
            self.offsets[n:],
            self.timestamps[n:],
            self.log_append[n:],
        )
        del self.hkey_ends[hke:], self.hvalue_ends[hke:], self.hvalue_valid[hvv:]

    def add_section(
        self,
        sec: bytes,
        count: int,
        base_offset: int,
        base_ts: int,
        max_ts: int,
        log_append: bool,
        start: int,
        end: int,
    ) -> None:
        """Append the records of one (decompressed) section whose offsets fall in [start, end)."""
        pos, limit = 0, len(sec)
        keys, values = self.keys, self.values
        key_ends, value_ends, key_valid, value_valid = (
            self.key_ends,
            self.value_ends,
            self.key_valid,
            self.value_valid,
        )
        offsets, timestamps, header_ends = self.offsets, self.timestamps, self.header_ends
        n_headers = len(self.hkey_ends) - 1
        for _ in range(count):
            if pos < limit and (b := sec[pos]) < 0x80:  # one-byte varint, inline
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = _varint(sec, pos, limit)
            rec_end = pos + length
            if length < 0 or rec_end > limit:
                raise BadRecords(f"record length {length} is over the {limit - pos} bytes left")
            pos += 1  # attributes
            if pos < rec_end and (b := sec[pos]) < 0x80:  # one-byte varint, inline
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = _varint(sec, pos, rec_end)
            if pos < rec_end and (b := sec[pos]) < 0x80:  # one-byte varint, inline
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = _varint(sec, pos, rec_end)
            if pos < rec_end and (b := sec[pos]) < 0x80:  # one-byte varint, inline
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = _varint(sec, pos, rec_end)
            kpos = pos
            if klen >= 0:
                pos += klen
            elif klen != -1:
                raise BadRecords(f"record key length {klen}")
            if pos < rec_end and (b := sec[pos]) < 0x80:  # one-byte varint, inline
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = _varint(sec, pos, rec_end)
            vpos = pos
            if vlen >= 0:
                pos += vlen
            elif vlen != -1:
                raise BadRecords(f"record value length {vlen}")
            if pos < rec_end and (b := sec[pos]) < 0x80:  # one-byte varint, inline
                hcount = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                hcount, pos = _varint(sec, pos, rec_end)
            if pos > rec_end or hcount < 0 or hcount > rec_end - pos:
                raise BadRecords("record fields run past the record's length")
            offset = base_offset + off_delta
            if offset < start or offset >= end:
                pos = rec_end
                continue
            if klen >= 0:
                keys += sec[kpos : kpos + klen]
                key_valid.append(1)
            else:
                key_valid.append(0)
            key_ends.append(len(keys))
            if vlen >= 0:
                values += sec[vpos : vpos + vlen]
                value_valid.append(1)
            else:
                value_valid.append(0)
            value_ends.append(len(values))
            offsets.append(offset)
            timestamps.append(max_ts if log_append else base_ts + ts_delta)
            self.log_append.append(log_append)
            for _ in range(hcount):
                hk, pos = _varint(sec, pos, rec_end)
                if hk < 0 or pos + hk > rec_end:
                    raise BadRecords(f"header key length {hk}")
                self.hkeys += sec[pos : pos + hk]
                self.hkey_ends.append(len(self.hkeys))
                pos += hk
                hv, pos = _varint(sec, pos, rec_end)
                if hv >= 0:
                    if pos + hv > rec_end:
                        raise BadRecords(f"header value length {hv}")
                    self.hvalues += sec[pos : pos + hv]
                    pos += hv
                    self.hvalue_valid.append(1)
                elif hv == -1:
                    self.hvalue_valid.append(0)
                else:
                    raise BadRecords(f"header value length {hv}")
                self.hvalue_ends.append(len(self.hvalues))
            n_headers += hcount
            header_ends.append(n_headers)
            if pos != rec_end:
                raise BadRecords(f"{rec_end - pos} bytes left over in the record at offset {offset}")
            self.n += 1
        if pos != limit:
            raise BadRecords(f"{limit - pos} bytes after the batch's {count} records")

    def messages(self, topic: str, partition: int) -> list[Message]:
        """The rows as consumer messages (one object per record: the per-message API's cost)."""
        out: list[Message] = []
        keys, values, hkeys, hvalues = (
            bytes(self.keys),
            bytes(self.values),
            bytes(self.hkeys),
            bytes(self.hvalues),
        )
        ke, ve, he, hke, hve = (
            self.key_ends,
            self.value_ends,
            self.header_ends,
            self.hkey_ends,
            self.hvalue_ends,
        )
        kv, vv, hvv, la = self.key_valid, self.value_valid, self.hvalue_valid, self.log_append
        offsets, timestamps = self.offsets, self.timestamps
        for i in range(self.n):
            headers: Headers | None = None
            if he[i] != he[i + 1]:
                headers = [
                    (
                        hkeys[hke[h] : hke[h + 1]].decode("utf-8", "replace"),
                        hvalues[hve[h] : hve[h + 1]] if hvv[h] else None,
                    )
                    for h in range(he[i], he[i + 1])
                ]
            out.append(
                Message(
                    topic,
                    partition,
                    offsets[i],
                    keys[ke[i] : ke[i + 1]] if kv[i] else None,
                    values[ve[i] : ve[i + 1]] if vv[i] else None,
                    headers,
                    timestamps[i],
                    TIMESTAMP_LOG_APPEND_TIME if la[i] else TIMESTAMP_CREATE_TIME,
                )
            )
        return out

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        import pyarrow as pa
        import pyarrow.compute as pc

        n = self.n
        schema = arrow_schema()

        def validity(flags: bytearray) -> pa.Buffer | None:
            if all(flags):
                return None
            mask = pc.not_equal(pa.Array.from_buffers(pa.uint8(), len(flags), [None, pa.py_buffer(flags)]), 0)
            return mask.buffers()[1]

        def binary(
            typ: pa.DataType, count: int, flags: bytearray, ends: array[int], data: bytearray
        ) -> pa.Array:
            return pa.Array.from_buffers(
                typ, count, [validity(flags), pa.py_buffer(ends), pa.py_buffer(data)]
            )

        hcount = len(self.hkey_ends) - 1
        header_struct = pa.StructArray.from_arrays(
            [
                binary(pa.string(), hcount, bytearray(b"\1" * hcount), self.hkey_ends, self.hkeys),
                binary(pa.binary(), hcount, self.hvalue_valid, self.hvalue_ends, self.hvalues),
            ],
            fields=list(schema.field("headers").type.value_type),
        )
        list_ends = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(self.header_ends)])
        headers = pa.ListArray.from_arrays(list_ends, header_struct)
        columns = [
            binary(pa.binary(), n, self.key_valid, self.key_ends, self.keys),
            binary(pa.binary(), n, self.value_valid, self.value_ends, self.values),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.offsets)]),
            pa.Array.from_buffers(pa.timestamp("ms"), n, [None, pa.py_buffer(self.timestamps)]),
            headers,
        ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _varint(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """A zigzag varint (at most 10 bytes) at ``pos``, not reading at or past ``limit``."""
    if pos >= limit:
        raise BadRecords("a varint runs past its record")
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result, shift = b & 0x7F, 7
    while True:
        pos += 1
        if pos >= limit or shift > 63:
            raise BadRecords("a varint runs past its record or its 10 bytes")
        b = buf[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos + 1
        shift += 7


def decode_records(
    cols: Columns,
    data: bytes,
    aborted: list[dict[str, Any]] | None,
    read_committed: bool,
    topic: str,
    partition: int,
    start: int,
    end: int,
) -> tuple[int, KafkaError | None]:
    """Append the records at offsets ``[start, end)`` of a Fetch answer's records field (v2
    batches; a cut last batch is left for the next fetch) to ``cols``. Returns the next offset to
    fetch and, if a batch breaks a rule, a ``_BAD_MSG`` error naming it: the rows before it are
    kept and the returned offset is that batch's (nothing after it is read)."""
    txn = AbortedFilter(aborted, read_committed)
    pos, position, total = 0, start, len(data)
    mv = memoryview(data)
    while total - pos >= LOG_OVERHEAD.size:
        base_offset, length = LOG_OVERHEAD.unpack_from(data, pos)
        if total - pos - LOG_OVERHEAD.size < length:
            break  # the answer's cut last batch
        where = f"{topic} [{partition}] at offset {base_offset}"
        rows_before = cols.mark()
        try:
            if length < BATCH_HEADER.size - 12:
                raise BadRecords(f"batch length {length}")
            (_, _, _, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id, _, _, count) = (
                BATCH_HEADER.unpack_from(data, pos)
            )
            if magic != 2:
                raise BadRecords(f"magic {magic}: not a record batch v2")
            batch_end = pos + 12 + length
            actual = _crc32c.crc32c(mv[pos + CRC_FROM : batch_end])
            if actual != crc:
                raise BadRecords(f"CRC32C {actual:#010x}, header says {crc:#010x}")
            last_offset = base_offset + last_delta
            keep = txn.keep(
                last_offset,
                producer_id,
                bool(attributes & TRANSACTIONAL),
                bool(attributes & CONTROL),
                raw=mv[pos:batch_end],
            )
            if keep and last_offset >= position and base_offset < end:
                section: bytes = bytes(mv[pos + BATCH_HEADER.size : batch_end])
                codec = attributes & COMPRESSION_MASK
                if codec != compression.NONE:
                    section = compression.decompress(codec, section, DEFAULT_MAX_DECOMPRESSED)
                if count < 0 or count > len(section):
                    raise BadRecords(f"count {count} does not fit the batch's {len(section)} bytes")
                cols.add_section(
                    section,
                    count,
                    base_offset,
                    base_ts,
                    max_ts,
                    bool(attributes & TIMESTAMP_LOG_APPEND),
                    position,
                    end,
                )
        except (BadRecords, KafkaWireError, struct.error) as exc:
            cols.truncate(rows_before)
            return max(position, base_offset), KafkaError(LOCAL_CODES["_BAD_MSG"], f"{where}: {exc}")
        position = max(position, min(last_offset + 1, end))
        pos = batch_end
        if position >= end:
            break
    return position, None
