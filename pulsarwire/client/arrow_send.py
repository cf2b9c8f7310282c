"""Bulk produce from Arrow: rows of a ``pyarrow.RecordBatch`` straight into batch payloads.

:func:`rows_from_arrow` checks the columns (value, and optionally key, properties, event
time, sequence id) and keeps them as Arrow buffers: the values and keys as one byte buffer
plus offsets each, no Python object per row. :meth:`ArrowRows.encode` writes the batch
payload of rows ``[start, end)`` with their sequence ids: each entry is
``u32 metadata size, SingleMessageMetadata, payload``, where the metadata is written from
precomputed field tags and varints in field-number order (properties = 1, partition_key = 2,
payload_size = 3, event_time = 5, sequence_id = 8), exactly the bytes
:func:`pulsarwire.codec.batch.encode_batch` gives for the messages ``send`` would have
batched (an event time of 0 and a null key are left out, as ``send`` leaves them out).

The producer (:meth:`pulsarwire.client.producer.PartitionProducer.send_arrow`) groups rows
into entries, assigns sequence ids and hands each entry to the usual send machinery. pyarrow
is imported here at module level; only ``send_arrow`` imports this module.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pulsarwire.errors import ArrowColumnError, ArrowValueError

_U32 = struct.Struct(">I").pack
_PROPERTY = b"\x0a"
_KEY = b"\x12"
_PAYLOAD_SIZE = b"\x18"
_EVENT_TIME = b"\x28"
_SEQUENCE_ID = b"\x40"
#: varints of the small numbers (payload and key sizes mostly), precomputed
_SMALL = [bytes([n]) if n < 0x80 else bytes([n & 0x7F | 0x80, n >> 7]) for n in range(1 << 14)]


def varint(n: int) -> bytes:
    """The protobuf varint of a non-negative ``n``."""
    if n < 1 << 14:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class ArrowRows:
    """The checked columns of one batch of rows, ready to encode (see the module docstring).

    ``values``/``value_offsets``: the payloads, row i is ``values[value_offsets[i]:value_offsets[i+1]]``.
    ``prefixes``: per row, the metadata fields before payload_size (properties and key), or None
    when no row has any. ``event_times``: per row (0: none), or None. ``sequence_ids``: the
    column's ids, or None when the producer assigns them.
    """

    count: int
    values: memoryview
    value_offsets: list[int]
    prefixes: list[bytes] | None
    keys: list[str | None] | None
    properties: list[dict[str, str] | None] | None
    event_times: list[int] | None
    sequence_ids: list[int] | None

    def properties_of(self, i: int) -> dict[str, str] | None:
        """Row ``i``'s properties (None: none)."""
        return self.properties[i] if self.properties is not None else None

    def sizes(self) -> list[int]:
        """Each row's payload size."""
        o = self.value_offsets
        return [o[i + 1] - o[i] for i in range(self.count)]

    def payload(self, i: int) -> bytes:
        """Row ``i``'s payload."""
        return bytes(self.values[self.value_offsets[i] : self.value_offsets[i + 1]])

    def encode(self, start: int, end: int, sequence_ids: list[int]) -> bytes:
        """The batch payload of rows ``[start, end)``, with ``sequence_ids`` (one per row)."""
        values = self.values
        offsets = self.value_offsets
        prefixes = self.prefixes
        times = self.event_times
        parts: list[bytes | memoryview] = []
        add = parts.append
        small = _SMALL
        for j, i in enumerate(range(start, end)):
            lo = offsets[i]
            hi = offsets[i + 1]
            size = hi - lo
            seq = sequence_ids[j]
            md = _PAYLOAD_SIZE + (small[size] if size < 16384 else varint(size))
            if prefixes is not None:
                md = prefixes[i] + md
            if times is not None and times[i]:
                md += _EVENT_TIME + varint(times[i])
            md += _SEQUENCE_ID + (small[seq] if seq < 16384 else varint(seq))
            add(_U32(len(md)))
            add(md)
            add(values[lo:hi])
        return b"".join(parts)


def rows_from_arrow(
    batch: Any,
    *,
    value: str = "value",
    key: str | None = "key",
    properties: str | None = "properties",
    event_time: str | None = "event_time",
    sequence_id: str | None = "sequence_id",
) -> ArrowRows:
    """Check and take the columns of ``batch`` (a RecordBatch or Table).

    ``value`` must exist (binary or string, no nulls); the others are used when the batch has
    a column of that name (None: never). Raises ArrowColumnError for a missing value column or
    a column of another type, ArrowValueError for a null value, a negative event time or
    sequence id, or sequence ids that do not increase.
    """
    batch = as_record_batch(batch)
    names = set(batch.schema.names)
    if value not in names:
        raise ArrowColumnError(f"no value column {value!r} (columns: {sorted(names)})")
    n = batch.num_rows
    data, offsets = _binary(batch.column(value), value, nulls=False)
    keys = _keys(batch.column(key), key) if key is not None and key in names else None
    prefixes: list[bytes] | None = None
    if keys is not None:
        prefixes = [b"" if k is None else _KEY + varint(len(k.encode())) + k.encode() for k in keys]
    rows_properties: list[dict[str, str] | None] | None = None
    if properties is not None and properties in names:
        rows_properties = _properties(batch.column(properties), properties)
        if rows_properties is not None:
            props = [_encode_properties(p) for p in rows_properties]
            prefixes = props if prefixes is None else [p + q for p, q in zip(props, prefixes, strict=True)]
    times = (
        _event_times(batch.column(event_time), event_time)
        if event_time is not None and event_time in names
        else None
    )
    seqs = (
        _sequence_ids(batch.column(sequence_id), sequence_id)
        if sequence_id is not None and sequence_id in names
        else None
    )
    return ArrowRows(n, data, offsets, prefixes, keys, rows_properties, times, seqs)


def as_record_batch(batch: Any) -> Any:
    """``batch`` as one RecordBatch (a Table's chunks combined); ArrowColumnError for anything else."""
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks()
        chunks = batch.to_batches()
        return chunks[0] if chunks else pa.RecordBatch.from_pylist([], schema=batch.schema)
    if not isinstance(batch, pa.RecordBatch):
        raise ArrowColumnError(f"send_arrow takes a pyarrow RecordBatch or Table, not {type(batch).__name__}")
    return batch


def split_by_partition(batch: Any, chosen: list[int]) -> list[tuple[int, Any]]:
    """The rows of a RecordBatch by partition (row i goes to ``chosen[i]``), in row order within
    each; one ``(partition, RecordBatch)`` per partition that gets rows, by partition."""
    where = pa.array(chosen, pa.int64())
    return [(p, batch.filter(pc.equal(where, p))) for p in sorted(set(chosen))]


def _binary(col: Any, name: str, *, nulls: bool) -> tuple[memoryview, list[int]]:
    """The bytes and offsets of a binary/string column (large variants cast down)."""
    t = col.type
    if pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        col = col.cast(pa.binary() if pa.types.is_large_binary(t) else pa.string())
    elif not (pa.types.is_binary(t) or pa.types.is_string(t)):
        raise ArrowColumnError(f"column {name!r} is {t}: send_arrow sends binary or string values")
    if not nulls and col.null_count:
        raise ArrowValueError(f"column {name!r} has {col.null_count} nulls")
    _, offs, data = col.buffers()
    start = col.offset
    offsets = memoryview(offs).cast("i")[start : start + len(col) + 1].tolist() if offs is not None else [0]
    return memoryview(data if data is not None else b""), offsets


def _keys(col: Any, name: str) -> list[str | None]:
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise ArrowColumnError(f"column {name!r} is {col.type}: keys are strings")
    keys: list[str | None] = col.to_pylist()
    return keys


def _properties(col: Any, name: str) -> list[dict[str, str] | None] | None:
    """Each row's properties (in the map's order); None when no row has any."""
    t = col.type
    if not (pa.types.is_map(t) and pa.types.is_string(t.key_type) and pa.types.is_string(t.item_type)):
        raise ArrowColumnError(f"column {name!r} is {t}: properties are map<string, string>")
    if len(col.keys) == 0:
        return None
    if col.items.null_count:
        raise ArrowValueError(f"column {name!r} has a null property value")
    return [None if row is None else dict(row) for row in col.to_pylist()]


def _encode_properties(props: dict[str, str] | None) -> bytes:
    """SingleMessageMetadata field 1 (KeyValue key = 1, value = 2) for each property."""
    if not props:
        return b""
    fields = []
    for k, v in props.items():
        kb = k.encode()
        vb = v.encode()
        kv = b"\x0a" + varint(len(kb)) + kb + b"\x12" + varint(len(vb)) + vb
        fields.append(_PROPERTY + varint(len(kv)) + kv)
    return b"".join(fields)


def _event_times(col: Any, name: str) -> list[int]:
    """Event times in ms since the epoch (0: none) from a timestamp or integer (ms) column."""
    t = col.type
    if pa.types.is_timestamp(t):
        col = col.cast(pa.timestamp("ms", tz=t.tz)).cast(pa.int64())
    elif not pa.types.is_integer(t):
        raise ArrowColumnError(f"column {name!r} is {t}: event times are timestamps or integers (ms)")
    col = col.fill_null(0).cast(pa.int64())
    if len(col) and pc.min(col).as_py() < 0:
        raise ArrowValueError(f"column {name!r} has a negative event time")
    times: list[int] = col.to_pylist()
    return times


def _sequence_ids(col: Any, name: str) -> list[int]:
    if not pa.types.is_integer(col.type):
        raise ArrowColumnError(f"column {name!r} is {col.type}: sequence ids are integers")
    if col.null_count:
        raise ArrowValueError(f"column {name!r} has {col.null_count} nulls")
    ids: list[int] = col.cast(pa.int64()).to_pylist()
    if ids and ids[0] < 0:
        raise ArrowValueError(f"column {name!r}: sequence id {ids[0]} is negative")
    if any(b <= a for a, b in itertools.pairwise(ids)):
        raise ArrowValueError(f"column {name!r}: sequence ids must increase from row to row")
    return ids
