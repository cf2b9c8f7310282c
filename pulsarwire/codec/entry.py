"""From one stored entry (metadata + payload) to the messages it holds.

An entry is either a single message or a batch; either may be compressed.
:func:`open_entry` decompresses (bounded by ``max_uncompressed_size``) and
splits a batch into its messages. The result keeps per-message metadata so
callers can build client messages, Arrow columns or broker-side views.
:func:`unpack_entry` does the same with nothing made per message but its payload
and its metadata bytes (the consumer's hot path: a message parses its metadata
only when asked for what it holds).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import NamedTuple

from google.protobuf.unknown_fields import UnknownFieldSet

from pulsarwire.codec.batch import is_batch, split_batch, split_batch_raw
from pulsarwire.codec.compression import decompress
from pulsarwire.codec.frames import DEFAULT_MAX_MESSAGE_SIZE
from pulsarwire.errors import UnknownCompressionError
from pulsarwire.proto import pb

_COMPRESSION_FIELD = pb.MessageMetadata.DESCRIPTOR.fields_by_name["compression"].number


class EntryMessage(NamedTuple):
    """One message of an entry: its batch index (-1 when not batched), per-message metadata, payload.

    A NamedTuple rather than a dataclass: one is made per message on the consumer's hot path.
    """

    batch_index: int
    single: pb.SingleMessageMetadata | None
    payload: bytes


def uncompressed_payload(
    md: pb.MessageMetadata, payload: bytes, max_uncompressed_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> bytes:
    """The entry payload after decompression (see :func:`pulsarwire.codec.compression.decompress`).

    Raises UnknownCompressionError for a compression value this protocol does
    not define (protobuf keeps it as an unknown field and would read NONE).
    """
    if md.compression == pb.NONE:
        unknown = UnknownFieldSet(md)
        for i in range(len(unknown)):
            if unknown[i].field_number == _COMPRESSION_FIELD:
                raise UnknownCompressionError(f"unknown compression type {unknown[i].data}")
    return decompress(md.compression, payload, md.uncompressed_size, max_uncompressed_size)


def open_entry(
    md: pb.MessageMetadata, payload: bytes, max_uncompressed_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> list[EntryMessage]:
    """Decompress and unbatch an entry; raises the typed compression/batch errors."""
    data = uncompressed_payload(md, payload, max_uncompressed_size)
    if not is_batch(md):
        return [EntryMessage(-1, None, data)]
    metas, payloads = split_batch(data, md.num_messages_in_batch)
    # tuple.__new__ straight from the zipped fields: NamedTuple's own __new__ is a Python call
    # per message, the largest cost left on this path.
    fields = zip(range(len(metas)), metas, payloads, strict=True)
    return list(map(tuple.__new__, repeat(EntryMessage), fields))


def unpack_entry(
    md: pb.MessageMetadata, payload: bytes, max_uncompressed_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> tuple[Sequence[bytes | None], list[bytes]]:
    """:func:`open_entry` as two parallel lists: each message's serialized SingleMessageMetadata
    (None when not batched; checked, not kept parsed) and its payload. Same errors."""
    data = uncompressed_payload(md, payload, max_uncompressed_size)
    if not is_batch(md):
        return [None], [data]
    return split_batch_raw(data, md.num_messages_in_batch)
