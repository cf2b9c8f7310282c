"""Batch payloads: many messages in one entry.

Grammar of an (uncompressed) batch payload, repeated ``num_messages_in_batch``
times with nothing after the last entry::

    entry := metadata_size:u32 metadata[metadata_size] payload[metadata.payload_size]

``metadata`` is a SingleMessageMetadata. The decoder checks the declared count
against what the bytes can hold (every entry takes at least 6 bytes) before
building anything, bounds every size by the bytes left, and rejects missing
entries and trailing bytes.

Batch-index acks use ``ack_set``: a little-endian array of int64 words where
bit i set means message i is *still unacknowledged* (Java BitSet.toLongArray).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

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


def split_batch(data: Buffer, count: int) -> tuple[list[pb.SingleMessageMetadata], list[bytes]]:
    """The ``count`` entries of a batch payload as parallel lists of metadata and payloads.

    One pass, no generator: the hot path of every consumer. Raises BatchCountError,
    BatchEntryError, BatchTruncatedError or BatchTrailingBytesError.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    end = len(buf)
    if count <= 0:
        raise BatchCountError(f"num_messages_in_batch is {count}")
    if count * MIN_ENTRY_SIZE > end:
        raise BatchCountError(f"{count} messages cannot fit in a batch payload of {end} bytes")
    pos = 0
    unpack = U32.unpack_from
    parse = pb.SingleMessageMetadata.FromString
    metas: list[pb.SingleMessageMetadata] = []
    payloads: list[bytes] = []
    for i in range(count):
        if end - pos < 4:
            raise BatchTruncatedError(f"batch declares {count} messages but holds only {i}")
        (md_size,) = unpack(buf, pos)
        pos += 4
        if md_size > end - pos:
            raise BatchEntryError(f"entry {i}: metadata size {md_size} is past the batch ({end - pos} left)")
        try:
            smm = parse(buf[pos : pos + md_size])
        except (DecodeError, ValueError) as exc:
            raise BatchEntryError(f"entry {i}: invalid SingleMessageMetadata: {exc}") from None
        pos += md_size
        size = smm.payload_size
        if size <= 0 and not smm.HasField("payload_size"):
            raise BatchEntryError(f"entry {i}: SingleMessageMetadata without payload_size")
        if size < 0 or size > end - pos:
            raise BatchEntryError(f"entry {i}: payload size {size} is out of bounds ({end - pos} left)")
        metas.append(smm)
        payloads.append(buf[pos : pos + size])
        pos += size
    if pos != end:
        raise BatchTrailingBytesError(f"{end - pos} bytes after the last of {count} batch entries")
    return metas, payloads


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
