"""Batch payloads: many messages in one entry.

Grammar of an (uncompressed) batch payload, repeated ``num_messages_in_batch``
times with nothing after the last entry::

    entry := metadata_size:u32 metadata[metadata_size] payload[metadata.payload_size]

``metadata`` is a SingleMessageMetadata. The decoder checks the declared count
against what the bytes can hold (every entry takes at least 6 bytes) before
building anything, bounds every size by the bytes left, and rejects missing
entries and trailing bytes.

Speed: producers usually write runs of entries of one shape (same metadata size,
same payload size). After decoding an entry the usual way, the decoder guesses
that the entries after it have its shape: one ``struct`` call cuts up to
``_RUN_CHUNK`` of them into (metadata size, metadata, payload), one protobuf call
parses all their metadata (wrapped as the entries of a SingleMessageMetadataList),
and only the leading entries whose size prefix and payload_size confirm the guess
are kept: exactly the entries the one-by-one decoder would have made, at the same
positions. The first entry that differs is decoded the usual way (and any error is
raised there) and starts the next guess; after a short run the rest of the batch is
decoded one by one. :func:`split_batch_columns` walks the batch the same way but
reads the metadata fields column by column from one more parse of the metadata
concatenated, where that provably gives each entry's own values (see
:class:`_ColumnSink`); :func:`split_batch_raw` checks the same way and keeps each
entry's metadata as its bytes.

Batch-index acks use ``ack_set``: a little-endian array of int64 words where
bit i set means message i is *still unacknowledged* (Java BitSet.toLongArray).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

from google.protobuf.message import DecodeError

from pulsarwire.errors import (
    AckSetError,
    BatchCountError,
    BatchEntryError,
    BatchTrailingBytesError,
    BatchTruncatedError,
)
from pulsarwire.proto import pb

U32 = struct.Struct(">I")
#: Smallest possible entry: 4-byte size + payload_size field (tag + 1-byte varint).
MIN_ENTRY_SIZE = 6

Buffer = bytes | bytearray | memoryview


def encode_batch(entries: Iterable[tuple[pb.SingleMessageMetadata, Buffer]]) -> bytes:
    """Concatenate entries; each metadata's payload_size is set from its payload."""
    parts: list[bytes | Buffer] = []
    for smm, payload in entries:
        smm.payload_size = len(payload)
        md = smm.SerializeToString()
        parts.append(U32.pack(len(md)))
        parts.append(md)
        parts.append(payload)
    return b"".join(parts)


#: Entries the same-shape fast path cuts with one ``struct`` call (bounds the formats built).
_RUN_CHUNK = 128
#: A same-shape run shorter than this ends the guessing: the rest of the batch goes one by one.
_MIN_RUN = 16
_PAYLOAD_SIZE = attrgetter("payload_size")
_PROPERTIES = attrgetter("properties")


@functools.lru_cache(maxsize=64)
def _run_layout(md_size: int, payload_size: int, n: int) -> struct.Struct:
    """``n`` entries of one shape, each read as (metadata_size:u32, metadata, payload)."""
    return struct.Struct(">" + f"I{md_size}s{payload_size}s" * n)


class BatchColumns(NamedTuple):
    """The entries of one batch field by field, for columnar readers (the bulk Arrow path).

    A field that no entry sets is None; otherwise there is one value per entry, None
    where that entry does not set it. ``partition_keys`` are the key bytes as sent.
    Properties are flat: entry i has ``property_counts[i]`` of them, in order.
    """

    payloads: list[bytes]
    partition_keys: list[bytes | None] | None
    event_times: list[int | None] | None
    sequence_ids: list[int | None] | None
    property_counts: list[int] | None
    property_keys: list[str]
    property_values: list[str]


def split_batch(data: Buffer, count: int) -> tuple[list[pb.SingleMessageMetadata], list[bytes]]:
    """The ``count`` entries of a batch payload as parallel lists of metadata and payloads.

    The hot path of every consumer: runs of entries of one shape are decoded a run at
    a time (see the module docstring), everything else one entry at a time. Raises
    BatchCountError, BatchEntryError, BatchTruncatedError or BatchTrailingBytesError.
    """
    sink = _MetadataSink()
    payloads = _split(data, count, sink)
    return sink.metas, payloads


def split_batch_raw(data: Buffer, count: int) -> tuple[list[bytes], list[bytes]]:
    """The ``count`` entries of a batch payload as parallel lists of serialized metadata and
    payloads: checked as :func:`split_batch` checks them (same errors), the metadata left as
    bytes for whoever needs it to parse (a consumer's message, when asked for its properties).
    """
    sink = _RawSink()
    payloads = _split(data, count, sink)
    return sink.raw, payloads


def split_batch_columns(data: Buffer, count: int) -> BatchColumns:
    """The ``count`` entries of a batch payload as columns, without an object per entry where
    the bytes allow (see :class:`_ColumnSink`).

    Exactly what :func:`split_batch` gives, field by field, with the same checks and errors:
    BatchCountError, BatchEntryError, BatchTruncatedError or BatchTrailingBytesError.
    """
    sink = _ColumnSink()
    payloads = _split(data, count, sink)
    return sink.columns(payloads)


class _Sink(Protocol):
    """Where the decoder puts each entry's metadata."""

    def add(self, smm: pb.SingleMessageMetadata, md: bytes) -> None:
        """One entry decoded on its own, and its metadata bytes."""

    def take_run(self, mds: list[bytes], size: int) -> int:
        """Add the leading entries of ``mds`` (metadata of entries one after the other, all
        of the same length) whose metadata parses and says ``payload_size`` is ``size``;
        return how many. Never raises: the decoder goes on one by one from the first
        entry not taken."""


def _split(data: Buffer, count: int, sink: _Sink) -> list[bytes]:
    """Validate the batch layout, hand every entry's metadata to ``sink``; the payloads."""
    buf = data if isinstance(data, bytes) else bytes(data)
    end = len(buf)
    if count <= 0:
        raise BatchCountError(f"num_messages_in_batch is {count}")
    if count * MIN_ENTRY_SIZE > end:
        raise BatchCountError(f"{count} messages cannot fit in a batch payload of {end} bytes")
    pos = 0
    unpack = U32.unpack_from
    parse = pb.SingleMessageMetadata.FromString
    payloads: list[bytes] = []
    guess = True
    i = 0
    while i < count:
        if end - pos < 4:
            raise BatchTruncatedError(f"batch declares {count} messages but holds only {i}")
        (md_size,) = unpack(buf, pos)
        pos += 4
        if md_size > end - pos:
            raise BatchEntryError(f"entry {i}: metadata size {md_size} is past the batch ({end - pos} left)")
        md = buf[pos : pos + md_size]
        try:
            smm = parse(md)
        except (DecodeError, ValueError) as exc:
            raise BatchEntryError(f"entry {i}: invalid SingleMessageMetadata: {exc}") from None
        pos += md_size
        size = smm.payload_size
        if size <= 0 and not smm.HasField("payload_size"):
            raise BatchEntryError(f"entry {i}: SingleMessageMetadata without payload_size")
        if size < 0 or size > end - pos:
            raise BatchEntryError(f"entry {i}: payload size {size} is out of bounds ({end - pos} left)")
        sink.add(smm, md)
        payloads.append(buf[pos : pos + size])
        pos += size
        i += 1
        if guess and i < count:
            n = _same_shape_run(buf, pos, count - i, md_size, size, sink, payloads)
            i += n
            pos += n * (4 + md_size + size)
            guess = n >= _MIN_RUN
    if pos != end:
        raise BatchTrailingBytesError(f"{end - pos} bytes after the last of {count} batch entries")
    return payloads


def _same_shape_run(
    buf: bytes, pos: int, limit: int, md_size: int, size: int, sink: _Sink, payloads: list[bytes]
) -> int:
    """Take the entries at ``pos`` that have this shape (at most ``limit``); how many.

    An entry is taken only when its size prefix is ``md_size``, its metadata parses
    and its payload_size is ``size``, and every entry before it was taken: then the
    one-by-one decoder would have found it at the same place and made the same
    metadata and payload. Nothing is raised here; what is not taken is left to that
    decoder. Every entry read lies inside the batch (``n`` is bounded by the bytes left).
    """
    stride = 4 + md_size + size
    n = min(limit, (len(buf) - pos) // stride)
    fields: list[Any] = []  # (metadata size, metadata, payload) of each entry, flat
    while n > 0:
        k = min(n, _RUN_CHUNK)
        chunk = _run_layout(md_size, size, k).unpack_from(buf, pos)
        prefixes = chunk[0::3]
        if prefixes.count(md_size) != k:  # another shape starts inside this chunk
            k = next(j for j, prefix in enumerate(prefixes) if prefix != md_size)
            fields += chunk[: 3 * k]
            break
        fields += chunk
        pos += k * stride
        n -= k
    if not fields:
        return 0
    taken = sink.take_run(fields[1::3], size)
    payloads += fields[2::3][:taken]
    return taken


def _parse_run(mds: list[bytes]) -> tuple[bytes, pb.SingleMessageMetadataList] | None:
    """The metadata of a run parsed in one call (each wrapped as an entry of a
    SingleMessageMetadataList), with the wrapper bytes; None when some do not parse."""
    wrapped = pb.SingleMessageMetadataBytes(entries=mds).SerializeToString()
    try:
        return wrapped, pb.SingleMessageMetadataList.FromString(wrapped)
    except (DecodeError, ValueError):
        return None


def _leading_with_size(entries: list[pb.SingleMessageMetadata], size: int) -> int:
    """How many leading entries say ``payload_size`` is ``size``."""
    sizes = list(map(_PAYLOAD_SIZE, entries))
    taken = len(entries)
    if sizes.count(size) != taken:
        taken = next(j for j, s in enumerate(sizes) if s != size)
    if size == 0:  # payload_size 0 and payload_size missing read alike
        taken = next((j for j, e in enumerate(entries[:taken]) if not e.HasField("payload_size")), taken)
    return taken


class _MetadataSink:
    """Collects each entry's parsed SingleMessageMetadata (for :func:`split_batch`)."""

    def __init__(self) -> None:
        self.metas: list[pb.SingleMessageMetadata] = []

    def add(self, smm: pb.SingleMessageMetadata, md: bytes) -> None:
        self.metas.append(smm)

    def take_run(self, mds: list[bytes], size: int) -> int:
        parsed = _parse_run(mds)
        if parsed is None:
            return 0
        entries = list(parsed[1].entries)
        taken = _leading_with_size(entries, size)
        self.metas += entries[:taken]
        return taken


class _RawSink:
    """Collects each entry's metadata bytes, parsed only to be checked (for :func:`split_batch_raw`):
    bytes are no work for the garbage collector, a parsed message is one object more per entry.
    A run's payload sizes are read as one column where that is exact (see :class:`_ColumnSink`):
    even objects dropped at once count, as a burst of them sets off young collections, which
    promote whatever else is alive then (the messages waiting in a receive queue)."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []

    def add(self, smm: pb.SingleMessageMetadata, md: bytes) -> None:
        self.raw.append(md)

    def take_run(self, mds: list[bytes], size: int) -> int:
        parsed = _parse_run(mds)
        if parsed is None:
            return 0
        if _sized_columns(mds, *parsed, size) is not None:  # the sizes as one column: no object per entry
            taken = len(mds)
        else:
            taken = _leading_with_size(list(parsed[1].entries), size)
        self.raw += mds[:taken]
        return taken


class _ColumnSink:
    """Collects the fields of every entry as columns (for :func:`split_batch_columns`).

    Metadata of many entries concatenated and parsed as one SingleMessageMetadataColumns
    holds every occurrence of each field, entry after entry. When each entry holds each
    singular field at most once, a field found once per entry is set in every entry, in
    order, and one found 0 times in none. That holds when re-serializing the entries
    (parsed one per entry of a SingleMessageMetadataList) gives back the very same bytes
    (protobuf writes each known field once, in field order, and keeps unknown fields as
    they came) and no varint field came length-delimited (the probe message:
    SingleMessageMetadata keeps such a field as an unknown one while a repeated varint
    field would read it as packed values). Otherwise, or when a field is set in some
    entries only, the entries are read one by one. Properties are counted entry by
    entry; their keys and values come from the columns.

    Entries decoded one by one wait in ``pending`` and are read together.
    """

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.event_times: list[int | None] = []
        self.sequence_ids: list[int | None] = []
        self.property_counts: list[int] = []
        self.property_keys: list[str] = []
        self.property_values: list[str] = []
        self.has_key = self.has_event_time = self.has_sequence_id = False
        self.pending_raw: list[bytes] = []
        self.pending: list[pb.SingleMessageMetadata] = []

    def add(self, smm: pb.SingleMessageMetadata, md: bytes) -> None:
        self.pending_raw.append(md)
        self.pending.append(smm)

    def take_run(self, mds: list[bytes], size: int) -> int:
        parsed = _parse_run(mds)
        if parsed is None:
            return 0
        wrapped, run = parsed
        cols = _sized_columns(mds, wrapped, run, size)
        if cols is not None:
            self._flush()
            self._add_columns(cols, run.entries, len(mds))
            return len(mds)
        entries = list(run.entries)
        taken = _leading_with_size(entries, size)
        self.pending_raw += mds[:taken]
        self.pending += entries[:taken]
        return taken

    def columns(self, payloads: list[bytes]) -> BatchColumns:
        self._flush()
        return BatchColumns(
            payloads,
            self.keys if self.has_key else None,
            self.event_times if self.has_event_time else None,
            self.sequence_ids if self.has_sequence_id else None,
            self.property_counts if self.property_keys else None,
            self.property_keys,
            self.property_values,
        )

    def _flush(self) -> None:
        if not self.pending:
            return
        parsed = _parse_run(self.pending_raw)
        cols = None if parsed is None else _exact_columns(self.pending_raw, *parsed)
        if cols is not None:
            self._add_columns(cols, self.pending, len(self.pending))
        else:
            for smm in self.pending:
                self._add_entry(smm)
        self.pending_raw = []
        self.pending = []

    def _add_columns(
        self, cols: pb.SingleMessageMetadataColumns, entries: Iterable[pb.SingleMessageMetadata], k: int
    ) -> None:
        self.has_key = _extend(self.keys, cols.partition_key, k) or self.has_key
        self.has_event_time = _extend(self.event_times, cols.event_time, k) or self.has_event_time
        self.has_sequence_id = _extend(self.sequence_ids, cols.sequence_id, k) or self.has_sequence_id
        if cols.properties:
            self.property_counts += map(len, map(_PROPERTIES, entries))
            for kv in cols.properties:
                self.property_keys.append(kv.key)
                self.property_values.append(kv.value)
        else:
            self.property_counts += [0] * k

    def _add_entry(self, smm: pb.SingleMessageMetadata) -> None:
        if smm.HasField("partition_key"):
            self.keys.append(key_bytes(smm.partition_key))
            self.has_key = True
        else:
            self.keys.append(None)
        if smm.HasField("event_time"):
            self.event_times.append(smm.event_time)
            self.has_event_time = True
        else:
            self.event_times.append(None)
        if smm.HasField("sequence_id"):
            self.sequence_ids.append(smm.sequence_id)
            self.has_sequence_id = True
        else:
            self.sequence_ids.append(None)
        self.property_counts.append(len(smm.properties))
        for kv in smm.properties:
            self.property_keys.append(kv.key)
            self.property_values.append(kv.value)


def _exact_columns(
    mds: list[bytes], wrapped: bytes, run: pb.SingleMessageMetadataList
) -> pb.SingleMessageMetadataColumns | None:
    """The columns of entries whose metadata ``run`` parsed from ``wrapped``, when they provably
    give each entry's own values (see :class:`_ColumnSink`) and every field of them is set
    in all entries or in none; else None."""
    if run.SerializePartialToString() != wrapped:
        return None
    joined = b"".join(mds)
    try:
        if pb.SingleMessageMetadataColumnsProbe.FromString(joined).ListFields():
            return None
        cols = pb.SingleMessageMetadataColumns.FromString(joined)
    except (DecodeError, ValueError):
        return None
    k = len(mds)
    if all(len(c) in (0, k) for c in (cols.partition_key, cols.event_time, cols.sequence_id)):
        return cols
    return None


def _sized_columns(
    mds: list[bytes], wrapped: bytes, run: pb.SingleMessageMetadataList, size: int
) -> pb.SingleMessageMetadataColumns | None:
    """The run's columns (:func:`_exact_columns`) when they are exact and every entry's
    payload_size is ``size``: then the whole run is taken; else None."""
    cols = _exact_columns(mds, wrapped, run)
    if cols is not None and list(cols.payload_size).count(size) == len(mds):
        return cols
    return None


def key_bytes(key: str | bytes) -> bytes:
    """A partition key as sent: protobuf gives str, or bytes when the key is not valid UTF-8."""
    return key.encode() if isinstance(key, str) else key


def as_text(value: str | bytes) -> str:
    """A protobuf string field as text: bytes that are not valid UTF-8 (protobuf hands those
    back as bytes) are decoded with U+FFFD for the bad sequences, as the Java client does."""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _extend(column: list[Any], values: Sequence[Any], k: int) -> bool:
    """Append a run's ``k`` values (or k Nones when the run has none); True when it had values."""
    if values:
        column += values
        return True
    column += [None] * k
    return False


def iter_batch(data: Buffer, count: int) -> Iterator[tuple[pb.SingleMessageMetadata, bytes]]:
    """Yield ``(SingleMessageMetadata, payload)`` for each of the ``count`` entries.

    The whole batch is validated before the first entry is yielded (see :func:`split_batch`).
    """
    metas, payloads = split_batch(data, count)
    yield from zip(metas, payloads, strict=True)


def decode_batch(data: Buffer, count: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """All entries of a batch payload, validated (see :func:`iter_batch`)."""
    return list(iter_batch(data, count))


# ---------------------------------------------------------------------------
# ack_set bitsets
# ---------------------------------------------------------------------------


def ack_set_for(batch_size: int, unacked: Iterable[int]) -> list[int]:
    """Encode the indexes in ``unacked`` as an ack_set of signed 64-bit words."""
    if batch_size <= 0:
        raise AckSetError(f"batch size {batch_size} must be positive")
    words = [0] * ((batch_size + 63) // 64)
    for i in unacked:
        if not 0 <= i < batch_size:
            raise AckSetError(f"batch index {i} outside a batch of {batch_size}")
        words[i >> 6] |= 1 << (i & 63)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def unacked_indexes(ack_set: Sequence[int], batch_size: int) -> list[int]:
    """Indexes whose bit is set (still unacked) in ``ack_set``, for a batch of ``batch_size``.

    An empty ack_set means every message is unacked. Raises AckSetError when
    the set has more words than the batch needs or sets bits past its end.
    """
    if batch_size <= 0:
        raise AckSetError(f"batch size {batch_size} must be positive")
    if not ack_set:
        return list(range(batch_size))
    if len(ack_set) > (batch_size + 63) // 64:
        raise AckSetError(f"ack_set of {len(ack_set)} words for a batch of {batch_size}")
    out: list[int] = []
    for w, word in enumerate(ack_set):
        bits = word & 0xFFFFFFFFFFFFFFFF
        base = w * 64
        while bits:
            low = bits & -bits
            i = base + low.bit_length() - 1
            if i >= batch_size:
                raise AckSetError(f"ack_set marks index {i} in a batch of {batch_size}")
            out.append(i)
            bits ^= low
    return out


def is_batch(md: pb.MessageMetadata) -> bool:
    """True when the entry is a batch (the producer set num_messages_in_batch, even to 1)."""
    return md.HasField("num_messages_in_batch")
