"""Sans-IO codec of the Pulsar binary protocol: frames, payloads, batches, compression, ids, hashes.

Nothing here touches sockets, threads or clocks; every function works on bytes
and protobuf messages and raises errors from :mod:`pulsarwire.errors`.
"""

from __future__ import annotations

from pulsarwire.codec.batch import (
    ack_set_for,
    decode_batch,
    encode_batch,
    is_batch,
    iter_batch,
    unacked_indexes,
)
from pulsarwire.codec.chunks import ChunkedMessage, ChunkReassembler, DroppedChunks, is_chunk
from pulsarwire.codec.compression import compress, decompress
from pulsarwire.codec.entry import EntryMessage, open_entry, uncompressed_payload, unpack_entry
from pulsarwire.codec.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
    Frame,
    FrameDecoder,
    Payload,
    crc32c,
    decode_command,
    decode_frames,
    decode_metadata,
    decode_payload_section,
    encode_command,
    encode_payload_command,
    encode_payload_section,
    encode_with_stored_entry,
    new_command,
    sub_command,
)
from pulsarwire.codec.hashing import java_string_hash, murmur3_32, murmur3_32_hash, sign_safe_mod
from pulsarwire.codec.message_id import InvalidMessageIdError, MessageId

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "FRAME_PADDING",
    "ChunkReassembler",
    "ChunkedMessage",
    "DroppedChunks",
    "EntryMessage",
    "Frame",
    "FrameDecoder",
    "InvalidMessageIdError",
    "MessageId",
    "Payload",
    "ack_set_for",
    "compress",
    "crc32c",
    "decode_batch",
    "decode_command",
    "decode_frames",
    "decode_metadata",
    "decode_payload_section",
    "decompress",
    "encode_batch",
    "encode_command",
    "encode_payload_command",
    "encode_payload_section",
    "encode_with_stored_entry",
    "is_batch",
    "is_chunk",
    "iter_batch",
    "java_string_hash",
    "murmur3_32",
    "murmur3_32_hash",
    "new_command",
    "open_entry",
    "sign_safe_mod",
    "sub_command",
    "unacked_indexes",
    "uncompressed_payload",
    "unpack_entry",
]
