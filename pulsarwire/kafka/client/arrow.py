"""Offset ranges of a Kafka partition read straight into pyarrow RecordBatches.

:class:`ArrowReader` (configured like a consumer) fetches ``[start, end)`` of one partition and
yields RecordBatches of :func:`arrow_schema` — ``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``headers`` — for Spark and other columnar readers.

No Python object is made per record: each record batch's header is checked (magic, length,
CRC32C over the bytes, then bounded decompression — the codec's rules and limits), and the
records section is walked once, appending keys and values to one ``bytearray`` each, their end
positions and the offsets and timestamps to ``array`` columns, which become Arrow buffers without
a copy per value. Every varint and length is checked against the bytes left; a batch that breaks
a rule raises :class:`~pulsarwire.kafka.client.errors.KafkaException` (``_BAD_MSG``) naming
topic, partition and offset — nothing is skipped. ``isolation.level`` applies as in the consumer
(``fetching.AbortedFilter``). A range past the partition's end raises ``OFFSET_OUT_OF_RANGE``
naming what exists, once the end stopped moving for ``fetch.wait.max.ms``.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import crc32c as _crc32c

from pulsarwire.kafka.client.base import ClientBase
from pulsarwire.kafka.client.errors import LOCAL_CODES, KafkaError, KafkaException
from pulsarwire.kafka.client.fetching import AbortedFilter, fetch_body
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

FETCH = 1
_HEAD = BATCH_HEADER


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


class _Bad(Exception):
    """A records section breaks a rule (converted to KafkaException with the position)."""


class _Columns:
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
        self.header_ends = array("i", [0])
        self.hkeys = bytearray()
        self.hkey_ends = array("i", [0])
        self.hvalues = bytearray()
        self.hvalue_ends = array("i", [0])
        self.hvalue_valid = bytearray()

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
                raise _Bad(f"record length {length} is over the {limit - pos} bytes left")
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
                raise _Bad(f"record key length {klen}")
            if pos < rec_end and (b := sec[pos]) < 0x80:  # one-byte varint, inline
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = _varint(sec, pos, rec_end)
            vpos = pos
            if vlen >= 0:
                pos += vlen
            elif vlen != -1:
                raise _Bad(f"record value length {vlen}")
            if pos < rec_end and (b := sec[pos]) < 0x80:  # one-byte varint, inline
                hcount = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                hcount, pos = _varint(sec, pos, rec_end)
            if pos > rec_end or hcount < 0 or hcount > rec_end - pos:
                raise _Bad("record fields run past the record's length")
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
            for _ in range(hcount):
                hk, pos = _varint(sec, pos, rec_end)
                if hk < 0 or pos + hk > rec_end:
                    raise _Bad(f"header key length {hk}")
                self.hkeys += sec[pos : pos + hk]
                self.hkey_ends.append(len(self.hkeys))
                pos += hk
                hv, pos = _varint(sec, pos, rec_end)
                if hv >= 0:
                    if pos + hv > rec_end:
                        raise _Bad(f"header value length {hv}")
                    self.hvalues += sec[pos : pos + hv]
                    pos += hv
                    self.hvalue_valid.append(1)
                elif hv == -1:
                    self.hvalue_valid.append(0)
                else:
                    raise _Bad(f"header value length {hv}")
                self.hvalue_ends.append(len(self.hvalues))
            n_headers += hcount
            header_ends.append(n_headers)
            if pos != rec_end:
                raise _Bad(f"{rec_end - pos} bytes left over in the record at offset {offset}")
            self.n += 1
        if pos != limit:
            raise _Bad(f"{limit - pos} bytes after the batch's {count} records")

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
        raise _Bad("a varint runs past its record")
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result, shift = b & 0x7F, 7
    while True:
        pos += 1
        if pos >= limit or shift > 63:
            raise _Bad("a varint runs past its record or its 10 bytes")
        b = buf[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos + 1
        shift += 7


class ArrowReader(ClientBase):
    """Reads offset ranges into pyarrow RecordBatches (consumer configuration keys)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        super().__init__(conf, "consumer")
        c = self._config
        self._read_committed = c.get_str("isolation.level") == "read_committed"
        self._fetch_sizes = (
            c.get_int("fetch.wait.max.ms"),
            c.get_int("fetch.min.bytes"),
            c.get_int("fetch.max.bytes"),
            c.get_int("max.partition.fetch.bytes"),
        )

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        """RecordBatches of the records at offsets ``[start, end)`` (one per Fetch answer)."""
        position = start
        stalled_at = -1
        while position < end:
            answer = self._run(self._fetch(topic, partition, position))
            if answer["error_code"]:
                code = answer["error_code"]
                raise KafkaException(
                    KafkaError(code, f"{topic} [{partition}] at offset {position}: {KafkaError(code)}")
                )
            cols = _Columns()
            next_position = self._decode(cols, topic, partition, position, end, answer)
            if cols.n:
                yield cols.to_batch(topic, partition)
            if next_position == position:
                high = answer["high_watermark"]
                if high <= position:
                    if stalled_at == high:
                        text = (
                            f"{topic} [{partition}]: the range ends at {end} but the partition ends at {high}"
                        )
                        raise KafkaException(KafkaError(1, text))
                    stalled_at = high
            position = next_position

    async def _fetch(self, topic: str, partition: int, position: int) -> dict[str, Any]:
        info = await self._cluster.topic(topic, auto_create=False)
        part = info.partitions.get(partition) if info is not None else None
        if part is None or part.leader < 0:
            await self._cluster.refresh([topic])
            raise KafkaException(KafkaError(3, f"{topic} [{partition}]: no such partition or no leader"))
        wait, least, most, per_partition = self._fetch_sizes
        body = fetch_body(
            [(topic, partition, position)],
            max_wait_ms=wait,
            min_bytes=least,
            max_bytes=most,
            partition_max_bytes=per_partition,
            read_committed=self._read_committed,
        )
        answer = await self._cluster.request(part.leader, FETCH, body)
        for t in answer["responses"]:
            for p in t["partitions"]:
                if p["partition_index"] == partition:
                    return p  # type: ignore[no-any-return]
        raise KafkaException(
            KafkaError(LOCAL_CODES["_BAD_MSG"], f"{topic} [{partition}]: Fetch answer lacks it")
        )

    def _decode(
        self, cols: _Columns, topic: str, partition: int, start: int, end: int, answer: dict[str, Any]
    ) -> int:
        data = answer["records"] or b""
        txn = AbortedFilter(answer.get("aborted_transactions"), self._read_committed)
        pos, position, total = 0, start, len(data)
        mv = memoryview(data)
        while total - pos >= LOG_OVERHEAD.size:
            base_offset, length = LOG_OVERHEAD.unpack_from(data, pos)
            if total - pos - LOG_OVERHEAD.size < length:
                break  # the answer's cut last batch
            where = f"{topic} [{partition}] at offset {base_offset}"
            try:
                if length < _HEAD.size - 12:
                    raise _Bad(f"batch length {length}")
                (_, _, _, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id, _, _, count) = (
                    _HEAD.unpack_from(data, pos)
                )
                if magic != 2:
                    raise _Bad(f"magic {magic}: only record batches v2 are read into Arrow")
                batch_end = pos + 12 + length
                actual = _crc32c.crc32c(mv[pos + CRC_FROM : batch_end])
                if actual != crc:
                    raise _Bad(f"CRC32C {actual:#010x}, header says {crc:#010x}")
                last_offset = base_offset + last_delta
                keep = txn.keep(
                    last_offset,
                    producer_id,
                    bool(attributes & TRANSACTIONAL),
                    bool(attributes & CONTROL),
                    raw=mv[pos:batch_end],
                )
                if keep and last_offset >= position and base_offset < end:
                    section: bytes = bytes(mv[pos + _HEAD.size : batch_end])
                    codec = attributes & COMPRESSION_MASK
                    if codec != compression.NONE:
                        section = compression.decompress(codec, section, DEFAULT_MAX_DECOMPRESSED)
                    if count < 0 or count > len(section):
                        raise _Bad(f"count {count} does not fit the batch's {len(section)} bytes")
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
            except (_Bad, KafkaWireError, struct.error) as exc:
                raise KafkaException(KafkaError(LOCAL_CODES["_BAD_MSG"], f"{where}: {exc}")) from None
            position = max(position, min(last_offset + 1, end))
            pos = batch_end
            if position >= end:
                break
        return position

    def close(self) -> None:
        self._close_loop()
