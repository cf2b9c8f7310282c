"""Bad input the codec must survive: one test per case of TESTING.md ("Bad input a decoder must survive").

Every case must end in the *specific* error class (checked with ``type(err) is cls``, not just
``isinstance``), that class must derive from PulsarWireError, no allocation may be sized by an
untrusted number (checked with tracemalloc where the number is huge), and a payload-level error
must leave the FrameDecoder aligned on the next frame.

The cases for four codec bugs found while writing this file (unknown compression read as NONE,
LZ4 with a declared size of 0, MessageId.parse/deserialize range and required-field checks) are
regression tests now.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest
import zstandard

from pulsarwire.codec import (
    FRAME_PADDING,
    ChunkReassembler,
    Frame,
    FrameDecoder,
    InvalidMessageIdError,
    MessageId,
    ack_set_for,
    compress,
    decode_batch,
    decode_frames,
    decompress,
    encode_batch,
    encode_command,
    encode_payload_command,
    encode_payload_section,
    iter_batch,
    new_command,
    open_entry,
    unacked_indexes,
)
from pulsarwire.errors import (
    AckSetError,
    BadMagicError,
    BatchCountError,
    BatchEntryError,
    BatchTrailingBytesError,
    BatchTruncatedError,
    BrokerEntryMetadataError,
    ChecksumMismatchError,
    ChunkError,
    CommandSizeError,
    CompressionError,
    DecompressedSizeMismatchError,
    DecompressionFailedError,
    FrameTooLargeError,
    FrameTooShortError,
    MalformedCommandError,
    MalformedMetadataError,
    MetadataSizeError,
    MissingSubCommandError,
    PulsarWireError,
    TruncatedFrameError,
    UncompressedSizeLimitError,
    UnknownCommandTypeError,
    UnknownCompressionError,
)
from pulsarwire.proto import pb

U32 = struct.Struct(">I")
T = pb.BaseCommand
CODECS = [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
CODEC_IDS = ["LZ4", "ZLIB", "ZSTD", "SNAPPY"]
MAX = 1024 * 1024  # max_uncompressed_size used where a test does not care


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


@contextmanager
def raises(cls: type[PulsarWireError], match: str | None = None) -> Iterator[pytest.ExceptionInfo[Exception]]:
    """Expect exactly ``cls`` (not a sibling or parent); any non-PulsarWireError propagates and fails."""
    assert issubclass(cls, PulsarWireError)
    with pytest.raises(PulsarWireError, match=match) as info:
        yield info
    assert type(info.value) is cls, f"expected {cls.__name__}, got {type(info.value).__name__}: {info.value}"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def meta(**kw: Any) -> pb.MessageMetadata:
    fields: dict[str, Any] = {"producer_name": "p", "sequence_id": 1, "publish_time": 1_700_000_000_000}
    fields.update(kw)
    return pb.MessageMetadata(**fields)


def message_cmd(ledger: int = 7, entry: int = 9) -> pb.BaseCommand:
    cmd, sub = new_command(T.MESSAGE)
    sub.consumer_id = 1
    sub.message_id.ledgerId = ledger
    sub.message_id.entryId = entry
    return cmd


def send_cmd(producer_id: int = 3, sequence_id: int = 42) -> pb.BaseCommand:
    cmd, sub = new_command(T.SEND)
    sub.producer_id = producer_id
    sub.sequence_id = sequence_id
    return cmd


def raw_frame(command: bytes, section: bytes = b"") -> bytes:
    """A frame with correct outer sizes around arbitrary command/section bytes."""
    return U32.pack(4 + len(command) + len(section)) + U32.pack(len(command)) + command + section


def message_frame(section: bytes) -> bytes:
    return raw_frame(message_cmd().SerializeToString(), section)


def good_section(payload: bytes = b"hello") -> bytes:
    return encode_payload_section(meta(), payload)


def ping_frame() -> bytes:
    return encode_command(new_command(T.PING)[0])


def flow_frame(permits: int = 100) -> bytes:
    cmd, sub = new_command(T.FLOW)
    sub.consumer_id = 5
    sub.messagePermits = permits
    return encode_command(cmd)


def decode_one(data: bytes, *, verify_checksum: bool = True) -> Frame:
    dec = FrameDecoder(verify_checksum=verify_checksum)
    dec.feed(data)
    frame = dec.next_frame()
    assert frame is not None, "frame incomplete"
    return frame


def batch_entry(payload: bytes, **smm_fields: Any) -> bytes:
    return encode_batch([(pb.SingleMessageMetadata(**smm_fields), payload)])


def raw_batch_entry(smm_bytes: bytes, payload: bytes) -> bytes:
    return U32.pack(len(smm_bytes)) + smm_bytes + payload


def test_every_codec_error_is_a_pulsarwire_error() -> None:
    for cls in (
        FrameTooShortError,
        FrameTooLargeError,
        CommandSizeError,
        TruncatedFrameError,
        MalformedCommandError,
        UnknownCommandTypeError,
        MissingSubCommandError,
        BadMagicError,
        ChecksumMismatchError,
        BrokerEntryMetadataError,
        MetadataSizeError,
        MalformedMetadataError,
        UnknownCompressionError,
        UncompressedSizeLimitError,
        DecompressedSizeMismatchError,
        DecompressionFailedError,
        BatchCountError,
        BatchEntryError,
        BatchTruncatedError,
        BatchTrailingBytesError,
        AckSetError,
        ChunkError,
        InvalidMessageIdError,
    ):
        assert issubclass(cls, PulsarWireError), cls


# ---------------------------------------------------------------------------
# outer frame sizes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("total", [0, 1, 2, 3])
def test_total_size_below_minimum(total: int) -> None:
    dec = FrameDecoder()
    dec.feed(U32.pack(total) + b"\x00" * 8)
    with raises(FrameTooShortError):
        dec.next_frame()


def test_total_size_below_minimum_is_seen_from_the_header_alone() -> None:
    dec = FrameDecoder()
    dec.feed(U32.pack(2))
    with raises(FrameTooShortError):
        dec.next_frame()


def test_total_size_over_negotiated_max_plus_padding() -> None:
    dec = FrameDecoder(max_message_size=1000)
    dec.feed(U32.pack(1000 + FRAME_PADDING + 1))
    with raises(FrameTooLargeError):
        dec.next_frame()


def test_total_size_at_negotiated_max_plus_padding_is_accepted() -> None:
    dec = FrameDecoder(max_message_size=1000)
    dec.feed(U32.pack(1000 + FRAME_PADDING) + U32.pack(2))
    assert dec.next_frame() is None  # waits for the rest, no error


def test_lowered_max_message_size_applies_to_the_next_frame() -> None:
    dec = FrameDecoder()
    dec.set_max_message_size(100)
    dec.feed(U32.pack(100 + FRAME_PADDING + 1))
    with raises(FrameTooLargeError):
        dec.next_frame()


def test_claimed_2gib_frame_is_rejected_from_its_4_byte_header_without_allocating() -> None:
    dec = FrameDecoder()
    tracemalloc.start()
    try:
        dec.feed(U32.pack(2**31 - 1))  # 2 GiB, still a valid u31, far over the 5 MiB default
        try:
            dec.next_frame()
        except PulsarWireError as exc:
            err: Exception | None = exc
        else:
            err = None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert type(err) is FrameTooLargeError
    assert dec.buffered == 4
    assert peak < 256 * 1024, f"rejecting the header allocated {peak} bytes"


@pytest.mark.parametrize("total", [2**31, 2**31 + 1, 2**32 - 1])
def test_total_size_at_or_above_2_pow_31_even_if_the_negotiated_max_is_larger(total: int) -> None:
    dec = FrameDecoder(max_message_size=2**33)
    dec.feed(U32.pack(total))
    with raises(FrameTooLargeError):
        dec.next_frame()


@pytest.mark.parametrize("cut", [1, 3, 4, 7, 8, 12, -1])
def test_eof_mid_frame(cut: int) -> None:
    data = encode_payload_command(message_cmd(), meta(), b"payload")
    dec = FrameDecoder()
    dec.feed(data[:cut])
    assert dec.next_frame() is None
    with raises(TruncatedFrameError):
        dec.eof()


def test_eof_after_whole_frames_is_clean_and_decode_frames_reports_leftovers() -> None:
    data = ping_frame() + flow_frame()
    dec = FrameDecoder()
    dec.feed(data)
    assert [f.type for f in dec] == [T.PING, T.FLOW]
    dec.eof()
    with raises(TruncatedFrameError):
        decode_frames(data + data[:5])


def test_command_size_past_the_frame() -> None:
    dec = FrameDecoder()
    dec.feed(U32.pack(10) + U32.pack(7) + b"\x00" * 6)
    with raises(CommandSizeError):
        dec.next_frame()


def test_command_size_past_the_frame_is_seen_before_the_frame_arrives() -> None:
    dec = FrameDecoder()
    dec.feed(U32.pack(1000) + U32.pack(997))
    with raises(CommandSizeError):
        dec.next_frame()


def test_command_size_filling_the_frame_exactly_is_fine() -> None:
    cmd = flow_frame()[8:]
    frame = decode_one(raw_frame(cmd))
    assert frame.type == T.FLOW


@pytest.mark.parametrize("total", [4, 10])
def test_command_size_zero(total: int) -> None:
    dec = FrameDecoder()
    dec.feed(U32.pack(total) + U32.pack(0) + b"\x00" * (total - 4))
    with raises(CommandSizeError):
        dec.next_frame()


# ---------------------------------------------------------------------------
# the BaseCommand
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(b"\xff", id="truncated-varint-tag"),
        pytest.param(b"\x08", id="tag-without-value"),
        pytest.param(b"\x08\x80", id="truncated-varint-value"),
        pytest.param(b"\x0f", id="invalid-wire-type"),
        pytest.param(b"\x08\x12\x92\x01\x05ab", id="length-past-end"),
        pytest.param(b"\x00\x00", id="field-number-zero"),
    ],
)
def test_malformed_command_protobuf(command: bytes) -> None:
    with raises(MalformedCommandError):
        decode_one(raw_frame(command))


def test_command_without_type() -> None:
    # Only a CommandPing sub-message (field 18), no type field.
    with raises(MalformedCommandError):
        decode_one(raw_frame(b"\x92\x01\x00"))


def test_command_missing_required_fields_of_its_sub_message() -> None:
    cmd = pb.BaseCommand(type=T.SEND)
    cmd.send.producer_id = 1  # sequence_id (required) left out
    with raises(MalformedCommandError, match="sequence_id"):
        decode_one(raw_frame(cmd.SerializePartialToString()))


@pytest.mark.parametrize("type_", [1, 41, 99, 1000, 2**31 - 1])
def test_unknown_command_type(type_: int) -> None:
    with raises(UnknownCommandTypeError, match=str(type_)):
        decode_one(raw_frame(b"\x08" + varint(type_)))


@pytest.mark.parametrize("type_", [T.SEND, T.MESSAGE, T.CONNECT, T.CONNECTED, T.ACK, T.FLOW, T.LOOKUP])
def test_type_set_but_sub_message_missing(type_: int) -> None:
    with raises(MissingSubCommandError):
        decode_one(raw_frame(b"\x08" + varint(type_)))


@pytest.mark.parametrize("type_", [T.PING, T.PONG])
def test_ping_and_pong_without_sub_message_are_accepted_by_design(type_: int) -> None:
    frame = decode_one(raw_frame(b"\x08" + varint(type_)))
    assert frame.type == type_
    assert frame.payload is None
    assert frame.command.HasField("ping") if type_ == T.PING else frame.command.HasField("pong")


# ---------------------------------------------------------------------------
# the payload section
# ---------------------------------------------------------------------------


def test_bad_magic() -> None:
    section = bytearray(good_section())
    section[0:2] = b"\x0e\x03"
    with raises(BadMagicError, match="0x0e03"):
        decode_one(message_frame(bytes(section)))


@pytest.mark.parametrize("size", [1, 2, 9])
def test_payload_section_too_short_for_magic_checksum_and_size(size: int) -> None:
    with raises(BadMagicError):
        decode_one(message_frame(good_section()[:size]))


def test_checksum_mismatch_names_the_message_id_of_a_message_frame() -> None:
    data = bytearray(encode_payload_command(message_cmd(ledger=123, entry=456), meta(), b"payload"))
    data[-1] ^= 0x01
    with raises(ChecksumMismatchError, match="123:456") as info:
        decode_one(bytes(data))
    err = info.value
    assert isinstance(err, ChecksumMismatchError)
    assert err.message_id == MessageId(123, 456)
    assert err.expected != err.actual


def test_checksum_mismatch_of_a_send_frame_names_producer_and_sequence() -> None:
    data = bytearray(encode_payload_command(send_cmd(producer_id=3, sequence_id=42), meta(), b"payload"))
    data[-3] ^= 0x80
    with raises(ChecksumMismatchError, match="producer 3 sequence 42") as info:
        decode_one(bytes(data))
    assert isinstance(info.value, ChecksumMismatchError)
    assert info.value.message_id == "producer 3 sequence 42"
    # The decoder hands over the decoded command so a broker can answer SEND_ERROR.
    assert isinstance(info.value.command, pb.BaseCommand)
    assert (info.value.command.send.producer_id, info.value.command.send.sequence_id) == (3, 42)


def test_checksum_mismatch_in_the_metadata_is_caught_too() -> None:
    data = bytearray(encode_payload_command(message_cmd(), meta(), b"payload"))
    md_start = len(data) - len(b"payload") - len(meta().SerializeToString())
    data[md_start + 3] ^= 0x01  # inside the producer name
    with raises(ChecksumMismatchError):
        decode_one(bytes(data))


def test_checksum_is_not_verified_when_disabled() -> None:
    data = bytearray(encode_payload_command(message_cmd(), meta(), b"payload"))
    data[-1] ^= 0x01
    frame = decode_one(bytes(data), verify_checksum=False)
    assert frame.payload is not None
    assert frame.payload.payload == b"payloae"


def test_broker_entry_metadata_size_past_the_frame() -> None:
    section = b"\x0e\x02" + U32.pack(1000) + good_section()
    with raises(BrokerEntryMetadataError, match="1000"):
        decode_one(message_frame(section))


@pytest.mark.parametrize("tail", [b"", b"\x00", b"\x00\x00\x00"], ids=["0", "1", "3"])
def test_broker_entry_metadata_size_truncated(tail: bytes) -> None:
    with raises(BrokerEntryMetadataError):
        decode_one(message_frame(b"\x0e\x02" + tail))


def test_broker_entry_metadata_malformed_protobuf() -> None:
    section = b"\x0e\x02" + U32.pack(2) + b"\xff\xff" + good_section()
    with raises(BrokerEntryMetadataError):
        decode_one(message_frame(section))


@pytest.mark.parametrize("md_size", [1000, 2**32 - 1])
def test_metadata_size_past_the_frame(md_size: int) -> None:
    section = bytearray(good_section())
    section[6:10] = U32.pack(md_size)
    with raises(MetadataSizeError, match=str(md_size)):
        decode_one(message_frame(bytes(section)))


@pytest.mark.parametrize("missing", ["producer_name", "sequence_id", "publish_time"])
def test_required_metadata_field_missing(missing: str) -> None:
    md = meta()
    md.ClearField(missing)  # type: ignore[arg-type]
    section = encode_payload_section(md.SerializePartialToString(), b"payload")  # valid checksum
    with raises(MalformedMetadataError, match=missing):
        decode_one(message_frame(section))


def test_metadata_malformed_protobuf() -> None:
    section = encode_payload_section(b"\x0a\x05ab", b"payload")  # string longer than the metadata
    with raises(MalformedMetadataError):
        decode_one(message_frame(section))


# ---------------------------------------------------------------------------
# the stream stays aligned after an error inside a complete frame
# ---------------------------------------------------------------------------


def _corrupt_checksum() -> bytes:
    data = bytearray(encode_payload_command(message_cmd(), meta(), b"payload"))
    data[-1] ^= 0x01
    return bytes(data)


def _bad_magic() -> bytes:
    section = bytearray(good_section())
    section[0:2] = b"\xca\xfe"
    return message_frame(bytes(section))


def _metadata_size() -> bytes:
    section = bytearray(good_section())
    section[6:10] = U32.pack(10_000)
    return message_frame(bytes(section))


def _missing_metadata() -> bytes:
    md = meta()
    md.ClearField("producer_name")
    return message_frame(encode_payload_section(md.SerializePartialToString(), b"x"))


def _bem() -> bytes:
    return message_frame(b"\x0e\x02" + U32.pack(5000) + good_section())


ALIGNMENT_CASES = [
    pytest.param(_bad_magic, BadMagicError, id="bad-magic"),
    pytest.param(_corrupt_checksum, ChecksumMismatchError, id="checksum"),
    pytest.param(_metadata_size, MetadataSizeError, id="metadata-size"),
    pytest.param(_missing_metadata, MalformedMetadataError, id="metadata-required"),
    pytest.param(_bem, BrokerEntryMetadataError, id="broker-entry-metadata"),
    pytest.param(lambda: raw_frame(b"\x08\x63"), UnknownCommandTypeError, id="unknown-type"),
    pytest.param(lambda: raw_frame(b"\x08\x06"), MissingSubCommandError, id="missing-sub"),
    pytest.param(lambda: raw_frame(b"\xff\xff"), MalformedCommandError, id="malformed-command"),
]


@pytest.mark.parametrize(("build", "error"), ALIGNMENT_CASES)
@pytest.mark.parametrize("chunk", [0, 1, 7], ids=["whole", "bytewise", "7-bytes"])
def test_decoder_stays_aligned_after_an_error_inside_a_frame(
    build: Callable[[], bytes], error: type[PulsarWireError], chunk: int
) -> None:
    good = encode_payload_command(message_cmd(ledger=1, entry=2), meta(), b"next one")
    stream = build() + good + ping_frame()
    dec = FrameDecoder()
    frames = []
    errors = []
    step = chunk or len(stream)
    for i in range(0, len(stream), step):
        dec.feed(stream[i : i + step])
        while True:
            try:
                frame = dec.next_frame()
            except PulsarWireError as exc:
                errors.append(exc)
                continue
            if frame is None:
                break
            frames.append(frame)
    dec.eof()
    assert [type(e) for e in errors] == [error]
    assert [f.type for f in frames] == [T.MESSAGE, T.PING]
    assert frames[0].payload is not None
    assert frames[0].payload.payload == b"next one"
    assert MessageId.from_proto(frames[0].sub.message_id) == MessageId(1, 2)


# ---------------------------------------------------------------------------
# compression
# ---------------------------------------------------------------------------

DATA = bytes(range(256)) * 8  # 2 KiB, compressible


@pytest.mark.parametrize("codec", [5, 7, 255, -1])
def test_unknown_compression_type(codec: int) -> None:
    with raises(UnknownCompressionError):
        decompress(codec, b"whatever", 8, MAX)
    with raises(UnknownCompressionError):
        compress(codec, b"whatever")


def test_unknown_compression_type_on_the_wire() -> None:
    md_bytes = meta(uncompressed_size=5).SerializeToString() + b"\x40\x07"  # field 8 (compression) = 7
    frame = decode_one(message_frame(encode_payload_section(md_bytes, b"\x01\x02\x03")))
    assert frame.payload is not None
    with raises(UnknownCompressionError):
        open_entry(frame.payload.metadata, frame.payload.payload, MAX)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_uncompressed_size_over_the_limit_does_not_allocate(codec: int) -> None:
    data = compress(codec, DATA)
    tracemalloc.start()
    try:
        try:
            decompress(codec, data, 2**31, 5 * 1024 * 1024)
        except PulsarWireError as exc:
            err: Exception | None = exc
        else:
            err = None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert type(err) is UncompressedSizeLimitError
    assert peak < 256 * 1024, f"rejecting the size allocated {peak} bytes"


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_uncompressed_size_over_the_limit_through_open_entry(codec: int) -> None:
    md = meta(compression=codec, uncompressed_size=2**32 - 1)
    with raises(UncompressedSizeLimitError):
        open_entry(md, compress(codec, DATA), MAX)


def test_uncompressed_size_limit_boundary() -> None:
    data = compress(pb.ZSTD, DATA)
    assert decompress(pb.ZSTD, data, len(DATA), len(DATA)) == DATA
    with raises(UncompressedSizeLimitError):
        decompress(pb.ZSTD, data, len(DATA), len(DATA) - 1)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_decompressed_output_smaller_than_declared(codec: int) -> None:
    with raises(DecompressedSizeMismatchError):
        decompress(codec, compress(codec, DATA), len(DATA) + 1, MAX)
    with raises(DecompressedSizeMismatchError):
        decompress(codec, compress(codec, DATA), 2 * len(DATA), MAX)


@pytest.mark.parametrize(
    ("codec", "error"),
    [
        # The LZ4 block format has no length of its own: output that does not fit the declared
        # size is indistinguishable from a corrupt block, so the codec reports DecompressionFailed.
        pytest.param(pb.LZ4, DecompressionFailedError, id="LZ4"),
        pytest.param(pb.ZLIB, DecompressedSizeMismatchError, id="ZLIB"),
        pytest.param(pb.ZSTD, DecompressedSizeMismatchError, id="ZSTD"),
        pytest.param(pb.SNAPPY, DecompressedSizeMismatchError, id="SNAPPY"),
    ],
)
@pytest.mark.parametrize("declared", [1, len(DATA) - 1])
def test_decompressed_output_bigger_than_declared(
    codec: int, error: type[PulsarWireError], declared: int
) -> None:
    with raises(error):
        decompress(codec, compress(codec, DATA), declared, MAX)


@pytest.mark.parametrize("declared", [1, len(DATA) - 1, len(DATA) + 1])
def test_zstd_frame_without_content_size_output_size_mismatch(declared: int) -> None:
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    assert zstandard.frame_content_size(frame) == -1
    assert decompress(pb.ZSTD, frame, len(DATA), MAX) == DATA
    with raises(DecompressedSizeMismatchError):
        decompress(pb.ZSTD, frame, declared, MAX)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_empty_payload_round_trips_with_declared_size_zero(codec: int) -> None:
    assert decompress(codec, compress(codec, b""), 0, MAX) == b""


@pytest.mark.parametrize(
    "codec",
    [
        pytest.param(pb.LZ4, id="LZ4"),
        pytest.param(pb.ZLIB, id="ZLIB"),
        pytest.param(pb.ZSTD, id="ZSTD"),
        pytest.param(pb.SNAPPY, id="SNAPPY"),
    ],
)
def test_declared_size_zero_with_non_empty_output(codec: int) -> None:
    with raises(DecompressedSizeMismatchError):
        decompress(codec, compress(codec, DATA), 0, MAX)


LZ4_GARBAGE = [b"\xff" * 16, b"\xf0\x10", bytes([0x1F]) + b"x" + b"\x00\xff"]
ZLIB_GARBAGE = [b"not zlib at all", b"\x78\x9c\xff\xff\xff", zlib.compress(DATA)[:-1] + b"\x00"]
ZSTD_GARBAGE = [b"\x00" * 16, b"\x28\xb5\x2f\xfd" + b"\xff" * 12, b"garbage!"]
# snappy: the 0x80 0x10 prefix is the varint 2048 = len(DATA), so the header agrees with the metadata.
SNAPPY_GARBAGE = [
    b"\xff" * 16,
    b"\x80\x10" + b"\x00" * 16,
    b"\x80\x10" + b"\x01\x00" * 8,
    b"\x80\x10\xfe\xff\xff",
]


@pytest.mark.parametrize(
    ("codec", "data"),
    [(pb.LZ4, g) for g in LZ4_GARBAGE]
    + [(pb.ZLIB, g) for g in ZLIB_GARBAGE]
    + [(pb.ZSTD, g) for g in ZSTD_GARBAGE]
    + [(pb.SNAPPY, g) for g in SNAPPY_GARBAGE],
    ids=lambda v: v.hex()[:16] if isinstance(v, bytes) else pb.CompressionType.Name(v),
)
def test_corrupt_compressed_bytes(codec: int, data: bytes) -> None:
    with raises(DecompressionFailedError):
        decompress(codec, data, len(DATA), MAX)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_every_bit_flip_of_a_compressed_payload_gives_data_or_a_compression_error(codec: int) -> None:
    data = compress(codec, DATA)
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 1 << (i % 8)
        try:
            out = decompress(codec, bytes(flipped), len(DATA), MAX)
        except CompressionError:
            continue
        assert len(out) == len(DATA)


# ---------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------


def _two_entries() -> bytes:
    return batch_entry(b"0123456789", sequence_id=1) + batch_entry(b"abcdefghij", sequence_id=2)


@pytest.mark.parametrize("count", [0, -1, -(2**31)])
def test_num_messages_in_batch_not_positive(count: int) -> None:
    with raises(BatchCountError):
        decode_batch(_two_entries(), count)


@pytest.mark.parametrize("count", [0, -5])
def test_num_messages_in_batch_not_positive_through_open_entry(count: int) -> None:
    with raises(BatchCountError):
        open_entry(meta(num_messages_in_batch=count), _two_entries(), MAX)


@pytest.mark.parametrize("count", [100, 2**31 - 1])
def test_num_messages_in_batch_more_than_the_bytes_allow_is_raised_before_any_entry(count: int) -> None:
    it = iter_batch(_two_entries(), count)
    with raises(BatchCountError):
        next(it)


@pytest.mark.parametrize("payload_size", [11, 1000, 2**31 - 1, -1, -(2**31)])
def test_entry_payload_size_out_of_bounds(payload_size: int) -> None:
    smm = pb.SingleMessageMetadata(payload_size=payload_size).SerializeToString()
    data = raw_batch_entry(smm, b"0123456789")
    with raises(BatchEntryError):
        decode_batch(data, 1)


@pytest.mark.parametrize("md_size", [9, 1000, 2**32 - 1])
def test_entry_metadata_size_out_of_bounds(md_size: int) -> None:
    data = U32.pack(md_size) + b"\x18\x02ab" + b"\x00" * 4
    with raises(BatchEntryError):
        decode_batch(data, 1)


def test_entry_metadata_size_out_of_bounds_in_a_later_entry() -> None:
    data = batch_entry(b"0123456789") + U32.pack(50) + b"\x18\x00" * 3
    with raises(BatchEntryError, match="entry 1"):
        decode_batch(data, 2)


def test_entry_metadata_malformed_protobuf() -> None:
    with raises(BatchEntryError):
        decode_batch(raw_batch_entry(b"\xff\xff\xff", b"abc"), 1)


def test_entry_metadata_without_required_payload_size() -> None:
    # entry 0: empty SingleMessageMetadata (no payload_size); entry 1: a valid 2-byte message.
    data = raw_batch_entry(b"", b"") + raw_batch_entry(b"\x18\x02", b"ab")
    assert len(data) == 12
    with raises(BatchEntryError):
        decode_batch(data, 2)


@pytest.mark.parametrize("extra", [b"\x00", b"\x00" * 4, batch_entry(b"zz")])
def test_trailing_bytes_after_the_last_entry(extra: bytes) -> None:
    with raises(BatchTrailingBytesError):
        decode_batch(_two_entries() + extra, 2)


@pytest.mark.parametrize(("count", "extra"), [(3, b""), (4, b""), (3, b"\x00\x00")])
def test_fewer_entries_than_declared(count: int, extra: bytes) -> None:
    data = _two_entries() + extra
    assert count * 6 <= len(data)  # passes the cheap count check, fails on the entries
    with raises(BatchTruncatedError):
        decode_batch(data, count)


def test_batch_errors_surface_through_open_entry_with_compression() -> None:
    raw = _two_entries() + b"\x00"
    for codec in CODECS:
        md = meta(num_messages_in_batch=2, compression=codec, uncompressed_size=len(raw))
        with raises(BatchTrailingBytesError):
            open_entry(md, compress(codec, raw), MAX)


# ---------------------------------------------------------------------------
# ack_set / batch_index
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch_size", "unacked"), [(10, [10]), (10, [-1]), (1, [1]), (64, [64]), (65, [200])]
)
def test_ack_set_for_batch_index_out_of_range(batch_size: int, unacked: list[int]) -> None:
    with raises(AckSetError):
        ack_set_for(batch_size, unacked)


@pytest.mark.parametrize("batch_size", [0, -1])
def test_ack_set_batch_size_not_positive(batch_size: int) -> None:
    with raises(AckSetError):
        ack_set_for(batch_size, [])
    with raises(AckSetError):
        unacked_indexes([1], batch_size)


@pytest.mark.parametrize(
    ("ack_set", "batch_size"),
    [
        ([1 << 10], 10),  # bit just past the end
        ([-1], 63),  # sign bit = index 63
        ([0, 1], 64),  # a second word for a one-word batch
        ([0, 0], 10),
        ([-1, 1 << 5], 69),  # index 69 in the second word
    ],
)
def test_ack_set_out_of_range_for_the_batch(ack_set: list[int], batch_size: int) -> None:
    with raises(AckSetError):
        unacked_indexes(ack_set, batch_size)


def test_ack_set_at_the_edges_is_accepted() -> None:
    assert unacked_indexes([-1], 64) == list(range(64))
    assert unacked_indexes([0, 1 << 4], 69) == [68]
    assert unacked_indexes([], 3) == [0, 1, 2]


# ---------------------------------------------------------------------------
# chunks
# ---------------------------------------------------------------------------


def chunk_md(uuid: str, cid: int, num: int, total: int) -> pb.MessageMetadata:
    return meta(uuid=uuid, chunk_id=cid, num_chunks_from_msg=num, total_chunk_msg_size=total)


def test_chunks_join_when_consistent() -> None:
    r: ChunkReassembler[str] = ChunkReassembler()
    assert r.add(chunk_md("u", 0, 3, 9), b"abc", "id0", 0) is None
    assert r.add(chunk_md("u", 1, 3, 9), b"def", "id1", 1) is None
    msg = r.add(chunk_md("u", 2, 3, 9), b"ghi", "id2", 2)
    assert msg is not None
    assert (msg.payload, msg.chunk_ids) == (b"abcdefghi", ("id0", "id1", "id2"))
    assert (r.pending, r.buffered_bytes, r.dropped) == (0, 0, [])


def test_chunk_gap() -> None:
    r: ChunkReassembler[str] = ChunkReassembler()
    r.add(chunk_md("u", 0, 3, 9), b"abc", "id0", 0)
    with raises(ChunkError):
        r.add(chunk_md("u", 2, 3, 9), b"ghi", "id2", 1)
    assert [(d.uuid, d.chunk_ids) for d in r.dropped] == [("u", ("id0",))]
    assert (r.pending, r.buffered_bytes) == (0, 0)


@pytest.mark.parametrize(("num", "total"), [(4, 9), (2, 9), (3, 10), (3, 8)])
def test_chunk_count_or_total_changes(num: int, total: int) -> None:
    r: ChunkReassembler[str] = ChunkReassembler()
    r.add(chunk_md("u", 0, 3, 9), b"abc", "id0", 0)
    with raises(ChunkError):
        r.add(chunk_md("u", 1, num, total), b"def", "id1", 1)
    assert [d.chunk_ids for d in r.dropped] == [("id0",)]
    assert (r.pending, r.buffered_bytes) == (0, 0)


def test_chunks_exceeding_the_declared_total() -> None:
    r: ChunkReassembler[str] = ChunkReassembler()
    r.add(chunk_md("u", 0, 2, 5), b"abc", "id0", 0)
    with raises(ChunkError):
        r.add(chunk_md("u", 1, 2, 5), b"def", "id1", 1)
    assert [d.chunk_ids for d in r.dropped] == [("id0",)]
    assert (r.pending, r.buffered_bytes) == (0, 0)


def test_first_chunk_alone_exceeding_the_declared_total() -> None:
    r: ChunkReassembler[str] = ChunkReassembler()
    with raises(ChunkError):
        r.add(chunk_md("u", 0, 2, 2), b"abc", "id0", 0)
    assert (r.pending, r.buffered_bytes) == (0, 0)


def test_chunks_joined_smaller_than_the_declared_total() -> None:
    r: ChunkReassembler[str] = ChunkReassembler()
    r.add(chunk_md("u", 0, 2, 100), b"abc", "id0", 0)
    with raises(ChunkError):
        r.add(chunk_md("u", 1, 2, 100), b"def", "id1", 1)
    assert [d.chunk_ids for d in r.dropped] == [("id0", "id1")]
    assert (r.pending, r.buffered_bytes) == (0, 0)


@pytest.mark.parametrize(
    ("cid", "num", "total"),
    [(3, 3, 9), (-1, 3, 9), (0, 0, 9), (0, -2, 9), (0, 2, -1), (0, 2, 2**31 - 1)],
)
def test_chunk_metadata_out_of_range(cid: int, num: int, total: int) -> None:
    r: ChunkReassembler[str] = ChunkReassembler(max_message_size=1024 * 1024)
    with raises(ChunkError):
        r.add(chunk_md("u", cid, num, total), b"abc", "id", 0)
    assert (r.pending, r.buffered_bytes) == (0, 0)


@pytest.mark.parametrize("missing", ["uuid", "chunk_id", "num_chunks_from_msg"])
def test_chunk_metadata_missing_field(missing: str) -> None:
    md = chunk_md("u", 0, 2, 6)
    md.ClearField(missing)  # type: ignore[arg-type]
    with raises(ChunkError):
        ChunkReassembler[str]().add(md, b"abc", "id", 0)


def test_chunk_without_its_first_chunk() -> None:
    r: ChunkReassembler[str] = ChunkReassembler()
    with raises(ChunkError):
        r.add(chunk_md("u", 1, 3, 9), b"def", "id1", 0)
    assert (r.pending, r.buffered_bytes) == (0, 0)


def test_duplicate_chunk_is_counted_not_buffered() -> None:
    r: ChunkReassembler[str] = ChunkReassembler()
    r.add(chunk_md("u", 0, 2, 6), b"abc", "id0", 0)
    assert r.add(chunk_md("u", 0, 2, 6), b"abc", "id0-again", 1) is None
    assert (r.duplicates, r.buffered_bytes) == (1, 3)
    msg = r.add(chunk_md("u", 1, 2, 6), b"def", "id1", 2)
    assert msg is not None
    assert msg.chunk_ids == ("id0", "id1")


def test_too_many_pending_evicts_the_oldest_and_records_it() -> None:
    r: ChunkReassembler[str] = ChunkReassembler(max_pending=2)
    for i, uuid in enumerate(["a", "b", "c"]):
        r.add(chunk_md(uuid, 0, 2, 6), b"abc", f"{uuid}0", i)
    assert r.pending == 2
    assert r.buffered_bytes == 6
    assert [(d.uuid, d.chunk_ids) for d in r.dropped] == [("a", ("a0",))]
    assert "pending" in r.dropped[0].reason
    # The evicted message's next chunk is refused, not mixed into something else.
    with raises(ChunkError):
        r.add(chunk_md("a", 1, 2, 6), b"def", "a1", 5)
    assert r.take_dropped()[0].uuid == "a"
    assert r.dropped == []


def test_expiry_drops_old_contexts_and_returns_them() -> None:
    r: ChunkReassembler[str] = ChunkReassembler(expire_after_ms=1000)
    r.add(chunk_md("old", 0, 2, 6), b"abc", "o0", 0)
    r.add(chunk_md("new", 0, 2, 6), b"abc", "n0", 900)
    assert r.expire(1000) == []
    expired = r.expire(1001)
    assert [(d.uuid, d.chunk_ids, d.reason) for d in expired] == [("old", ("o0",), "expired")]
    assert r.dropped == expired
    assert (r.pending, r.buffered_bytes) == (1, 3)


def test_buffered_bytes_bound_evicts_others_first() -> None:
    r: ChunkReassembler[str] = ChunkReassembler(max_buffered_bytes=100)
    r.add(chunk_md("a", 0, 2, 120), b"x" * 60, "a0", 0)
    r.add(chunk_md("b", 0, 2, 120), b"y" * 60, "b0", 1)
    assert r.buffered_bytes <= 100
    assert [(d.uuid, d.reason) for d in r.dropped] == [("a", "chunk buffer full")]
    assert (r.pending, r.buffered_bytes) == (1, 60)


def test_buffered_bytes_bound_on_a_single_message() -> None:
    r: ChunkReassembler[str] = ChunkReassembler(max_buffered_bytes=100)
    r.add(chunk_md("a", 0, 2, 120), b"x" * 60, "a0", 0)
    with raises(ChunkError):
        r.add(chunk_md("a", 1, 2, 120), b"x" * 60, "a1", 1)
    assert [(d.uuid, d.chunk_ids) for d in r.dropped] == [("a", ("a0",))]
    assert (r.pending, r.buffered_bytes) == (0, 0)


def test_buffered_bytes_never_exceed_the_bound_under_a_chunk_storm() -> None:
    r: ChunkReassembler[int] = ChunkReassembler(max_pending=4, max_buffered_bytes=1000)
    n = 0
    for round_ in range(5):
        for u in range(10):
            with suppress(ChunkError):
                r.add(chunk_md(f"m{u}", round_, 5, 5 * 150), b"z" * 150, n, n)
            n += 1
            assert r.buffered_bytes <= 1000
            assert r.pending <= 4


# ---------------------------------------------------------------------------
# MessageId
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", " ", "abc", "1", "1:2:3:4:5", "1:x", "1.5:2", "1::2", ":", "0x10:1", "1:2:", "earliest:1", "-:1"],
)
def test_message_id_parse_garbage(text: str) -> None:
    with raises(InvalidMessageIdError):
        MessageId.parse(text)
    assert issubclass(InvalidMessageIdError, ValueError)


@pytest.mark.parametrize(
    "text",
    [
        "9223372036854775808:0",  # ledger 2**63: not a Java long
        "18446744073709551616:0",  # 2**64
        "0:-9223372036854775809",
        "1:1:2147483648",  # partition past int32
        "1:1:-1:2147483648",  # batch_index past int32
        "1_0:2",  # Long.parseLong rejects underscores
    ],
)
def test_message_id_parse_out_of_range(text: str) -> None:
    with raises(InvalidMessageIdError):
        MessageId.parse(text)


@pytest.mark.parametrize(
    "data",
    [b"\xff", b"\x08", b"\x08\x80", b"\x0a\x05ab", b"\x08\x01\x10\x02garbage", b"\x0f\x00"],
)
def test_message_id_deserialize_garbage(data: bytes) -> None:
    with raises(InvalidMessageIdError):
        MessageId.deserialize(data)


@pytest.mark.parametrize("data", [b"", b"\x08\x01", b"\x10\x01", b"\x18\x05"])
def test_message_id_deserialize_missing_required_fields(data: bytes) -> None:
    with raises(InvalidMessageIdError):
        MessageId.deserialize(data)
