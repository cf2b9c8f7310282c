"""Round-trip properties of the codec (hypothesis).

* frames: random commands of many types, SEND/MESSAGE with random metadata, payload and
  optional broker entry metadata, encode → decode equal, whole or fed in random splits
  (down to one byte at a time);
* batches: random SingleMessageMetadata and payloads through every compression codec, via
  compress/decompress and open_entry;
* ack_set_for / unacked_indexes; MessageId str/parse, serialize/deserialize and its order;
* partition hashes against an independent reference and known vectors.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarwire.codec import (
    EntryMessage,
    Frame,
    FrameDecoder,
    MessageId,
    ack_set_for,
    compress,
    decode_batch,
    decompress,
    encode_batch,
    encode_command,
    encode_payload_command,
    encode_with_stored_entry,
    java_string_hash,
    murmur3_32,
    murmur3_32_hash,
    new_command,
    open_entry,
    unacked_indexes,
    unpack_entry,
)
from pulsarwire.proto import pb
from tests.helpers.examples import examples

T = pb.BaseCommand
ALL_CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
CODEC_IDS = ["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"]

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=12)
small_bytes = st.binary(max_size=16)
payloads = st.binary(max_size=600)


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------


@st.composite
def key_values(draw: st.DrawFn, max_size: int = 4) -> list[pb.KeyValue]:
    pairs = draw(st.lists(st.tuples(text, text), max_size=max_size))
    return [pb.KeyValue(key=k, value=v) for k, v in pairs]


@st.composite
def message_id_data(draw: st.DrawFn) -> pb.MessageIdData:
    m = pb.MessageIdData(ledgerId=draw(u64), entryId=draw(u64))
    if draw(st.booleans()):
        m.partition = draw(i32)
    if draw(st.booleans()):
        m.batch_index = draw(i32)
        m.batch_size = draw(st.integers(0, 2**31 - 1))
    m.ack_set.extend(draw(st.lists(i64, max_size=3)))
    return m


@st.composite
def simple_commands(draw: st.DrawFn) -> pb.BaseCommand:
    """A payload-free command of one of several types, with random field values."""
    kind = draw(
        st.sampled_from(
            [
                T.CONNECT,
                T.CONNECTED,
                T.PING,
                T.PONG,
                T.FLOW,
                T.ACK,
                T.PRODUCER,
                T.SEND_RECEIPT,
                T.ERROR,
                T.CLOSE_PRODUCER,
                T.LOOKUP,
                T.SUBSCRIBE,
            ]
        )
    )
    cmd, sub = new_command(kind)
    if kind == T.CONNECT:
        sub.client_version = draw(text)
        sub.protocol_version = draw(st.integers(0, 21))
        if draw(st.booleans()):
            sub.auth_method_name = draw(text)
            sub.auth_data = draw(small_bytes)
        sub.feature_flags.supports_auth_refresh = draw(st.booleans())
    elif kind == T.CONNECTED:
        sub.server_version = draw(text)
        sub.protocol_version = draw(st.integers(0, 21))
        if draw(st.booleans()):
            sub.max_message_size = draw(st.integers(1, 2**31 - 1))
    elif kind == T.FLOW:
        sub.consumer_id = draw(u64)
        sub.messagePermits = draw(u32)
    elif kind == T.ACK:
        sub.consumer_id = draw(u64)
        sub.ack_type = draw(st.sampled_from([pb.CommandAck.Individual, pb.CommandAck.Cumulative]))
        for m in draw(st.lists(message_id_data(), min_size=1, max_size=3)):
            sub.message_id.add().CopyFrom(m)
        if draw(st.booleans()):
            sub.request_id = draw(u64)
    elif kind == T.PRODUCER:
        sub.topic = draw(text)
        sub.producer_id = draw(u64)
        sub.request_id = draw(u64)
        sub.metadata.extend(draw(key_values()))
        if draw(st.booleans()):
            sub.producer_name = draw(text)
    elif kind == T.SEND_RECEIPT:
        sub.producer_id = draw(u64)
        sub.sequence_id = draw(u64)
        if draw(st.booleans()):
            sub.message_id.CopyFrom(draw(message_id_data()))
    elif kind == T.ERROR:
        sub.request_id = draw(u64)
        sub.error = draw(st.sampled_from(list(pb.ServerError.values())))
        sub.message = draw(text)
    elif kind == T.CLOSE_PRODUCER:
        sub.producer_id = draw(u64)
        sub.request_id = draw(u64)
    elif kind == T.LOOKUP:
        sub.topic = draw(text)
        sub.request_id = draw(u64)
        sub.authoritative = draw(st.booleans())
    elif kind == T.SUBSCRIBE:
        sub.topic = draw(text)
        sub.subscription = draw(text)
        sub.subType = draw(st.sampled_from(list(pb.CommandSubscribe.SubType.values())))
        sub.consumer_id = draw(u64)
        sub.request_id = draw(u64)
        if draw(st.booleans()):
            sub.start_message_id.CopyFrom(draw(message_id_data()))
    return cmd


@st.composite
def message_metadata(draw: st.DrawFn) -> pb.MessageMetadata:
    md = pb.MessageMetadata(producer_name=draw(text), sequence_id=draw(u64), publish_time=draw(u64))
    md.properties.extend(draw(key_values()))
    md.replicate_to.extend(draw(st.lists(text, max_size=2)))
    optional: dict[str, st.SearchStrategy[Any]] = {
        "partition_key": text,
        "ordering_key": small_bytes,
        "event_time": u64,
        "compression": st.sampled_from(ALL_CODECS),
        "uncompressed_size": u32,
        "num_messages_in_batch": i32,
        "highest_sequence_id": u64,
        "schema_version": small_bytes,
        "deliver_at_time": i64,
        "null_value": st.booleans(),
        "uuid": text,
        "num_chunks_from_msg": i32,
        "total_chunk_msg_size": i32,
        "chunk_id": i32,
        "txnid_least_bits": u64,
    }
    for name in draw(st.sets(st.sampled_from(sorted(optional)))):
        setattr(md, name, draw(optional[name]))
    return md


@st.composite
def payload_commands(draw: st.DrawFn) -> pb.BaseCommand:
    if draw(st.booleans()):
        cmd, sub = new_command(T.SEND)
        sub.producer_id = draw(u64)
        sub.sequence_id = draw(u64)
        if draw(st.booleans()):
            sub.num_messages = draw(st.integers(1, 1000))
        if draw(st.booleans()):
            sub.highest_sequence_id = draw(u64)
        return cmd
    cmd, sub = new_command(T.MESSAGE)
    sub.consumer_id = draw(u64)
    sub.message_id.CopyFrom(draw(message_id_data()))
    if draw(st.booleans()):
        sub.redelivery_count = draw(u32)
    sub.ack_set.extend(draw(st.lists(i64, max_size=3)))
    return cmd


@st.composite
def broker_entry_metadata(draw: st.DrawFn) -> pb.BrokerEntryMetadata | None:
    if draw(st.booleans()):
        return None
    bem = pb.BrokerEntryMetadata()
    if draw(st.booleans()):
        bem.broker_timestamp = draw(u64)
    if draw(st.booleans()):
        bem.index = draw(u64)
    return bem


@dataclass
class Spec:
    """An expected frame and its encoding."""

    command: pb.BaseCommand
    metadata: pb.MessageMetadata | None = None
    payload: bytes = b""
    bem: pb.BrokerEntryMetadata | None = None

    def encode(self) -> bytes:
        if self.metadata is None:
            return encode_command(self.command)
        return encode_payload_command(self.command, self.metadata, self.payload, self.bem)


@st.composite
def frame_specs(draw: st.DrawFn) -> Spec:
    if draw(st.booleans()):
        return Spec(draw(simple_commands()))
    return Spec(
        draw(payload_commands()), draw(message_metadata()), draw(payloads), draw(broker_entry_metadata())
    )


def assert_frame(frame: Frame, spec: Spec) -> None:
    assert frame.command == spec.command
    assert frame.type == spec.command.type
    if spec.metadata is None:
        assert frame.payload is None
        return
    assert frame.payload is not None
    assert frame.payload.metadata == spec.metadata
    assert frame.payload.payload == spec.payload
    assert frame.payload.broker_entry_metadata == spec.bem
    # The stored entry (magic .. end) re-frames to the same bytes when there is no broker metadata.
    if spec.bem is None:
        assert encode_with_stored_entry(frame.command, frame.payload.entry) == spec.encode()


def decode_in_pieces(stream: bytes, cuts: list[int]) -> list[Frame]:
    dec = FrameDecoder()
    frames: list[Frame] = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        dec.feed(stream[prev:cut])
        prev = cut
        frames.extend(dec)
    dec.eof()
    assert dec.buffered == 0
    return frames


# ---------------------------------------------------------------------------
# frames
# ---------------------------------------------------------------------------


@SETTINGS
@given(spec=frame_specs())
def test_frame_round_trip(spec: Spec) -> None:
    dec = FrameDecoder()
    dec.feed(spec.encode())
    frame = dec.next_frame()
    assert frame is not None
    assert_frame(frame, spec)
    assert dec.next_frame() is None
    dec.eof()


@SETTINGS
@given(specs=st.lists(frame_specs(), min_size=1, max_size=6), data=st.data())
def test_frame_stream_round_trip_in_random_splits(specs: list[Spec], data: st.DataObject) -> None:
    stream = b"".join(s.encode() for s in specs)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20), label="cuts")
    frames = decode_in_pieces(stream, cuts)
    assert len(frames) == len(specs)
    for frame, spec in zip(frames, specs, strict=True):
        assert_frame(frame, spec)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(frame_specs(), min_size=1, max_size=3))
def test_frame_stream_round_trip_one_byte_at_a_time(specs: list[Spec]) -> None:
    stream = b"".join(s.encode() for s in specs)
    frames = decode_in_pieces(stream, list(range(len(stream))))
    assert len(frames) == len(specs)
    for frame, spec in zip(frames, specs, strict=True):
        assert_frame(frame, spec)


# ---------------------------------------------------------------------------
# compression and batches
# ---------------------------------------------------------------------------

SMM_OPTIONAL: dict[str, st.SearchStrategy[Any]] = {
    "partition_key": text,
    "ordering_key": small_bytes,
    "event_time": u64,
    "sequence_id": u64,
    "null_value": st.booleans(),
    "compacted_out": st.booleans(),
    "partition_key_b64_encoded": st.booleans(),
}


@st.composite
def batch_entries(draw: st.DrawFn) -> list[tuple[dict[str, Any], bytes]]:
    """(SingleMessageMetadata fields, payload) pairs; fields as a dict so each test builds fresh messages."""
    out = []
    for _ in range(draw(st.integers(1, 12))):
        fields: dict[str, Any] = {
            "properties": [(k, v) for k, v in draw(st.lists(st.tuples(text, text), max_size=3))],
        }
        for name in draw(st.sets(st.sampled_from(sorted(SMM_OPTIONAL)))):
            fields[name] = draw(SMM_OPTIONAL[name])
        out.append((fields, draw(st.binary(max_size=200))))
    return out


def smm(fields: dict[str, Any], payload_size: int | None = None) -> pb.SingleMessageMetadata:
    m = pb.SingleMessageMetadata(**{k: v for k, v in fields.items() if k != "properties"})
    m.properties.extend(pb.KeyValue(key=k, value=v) for k, v in fields["properties"])
    if payload_size is not None:
        m.payload_size = payload_size
    return m


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
@SETTINGS
@given(data=st.binary(max_size=4000))
def test_compress_decompress_round_trip(codec: int, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed, len(data), len(data)) == data


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=batch_entries(), producer=message_metadata())
def test_batch_round_trip_through_compression_and_open_entry(
    codec: int, entries: list[tuple[dict[str, Any], bytes]], producer: pb.MessageMetadata
) -> None:
    raw = encode_batch([(smm(f), p) for f, p in entries])
    expected = [(smm(f, len(p)), p) for f, p in entries]
    assert decode_batch(raw, len(entries)) == expected

    md = pb.MessageMetadata()
    md.CopyFrom(producer)
    md.compression = codec  # type: ignore[assignment]
    md.uncompressed_size = len(raw)
    md.num_messages_in_batch = len(entries)
    # Through the wire too: the entry's metadata and payload come back out of a MESSAGE frame.
    cmd, sub = new_command(T.MESSAGE)
    sub.consumer_id = 1
    sub.message_id.ledgerId, sub.message_id.entryId = 3, 4
    dec = FrameDecoder()
    dec.feed(encode_payload_command(cmd, md, compress(codec, raw)))
    frame = dec.next_frame()
    assert frame is not None and frame.payload is not None
    messages = open_entry(frame.payload.metadata, frame.payload.payload, len(raw))
    assert messages == [EntryMessage(i, s, p) for i, (s, p) in enumerate(expected)]
    singles, payloads = unpack_entry(frame.payload.metadata, frame.payload.payload, len(raw))
    assert payloads == [p for _, p in expected]
    parsed = [None if s is None else pb.SingleMessageMetadata.FromString(s) for s in singles]
    assert parsed == [s for s, _ in expected]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=CODEC_IDS)
@SETTINGS
@given(payload=st.binary(max_size=2000))
def test_single_message_entry_round_trip(codec: int, payload: bytes) -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    md.compression = codec  # type: ignore[assignment]
    md.uncompressed_size = len(payload)
    assert open_entry(md, compress(codec, payload), len(payload)) == [EntryMessage(-1, None, payload)]
    assert unpack_entry(md, compress(codec, payload), len(payload)) == ([None], [payload])


# ---------------------------------------------------------------------------
# ack_set
# ---------------------------------------------------------------------------


@st.composite
def batch_and_unacked(draw: st.DrawFn) -> tuple[int, set[int]]:
    size = draw(st.integers(1, 300))
    return size, draw(st.sets(st.integers(0, size - 1)))


@settings(max_examples=examples(300), deadline=None)
@given(case=batch_and_unacked())
def test_ack_set_round_trip(case: tuple[int, set[int]]) -> None:
    size, unacked = case
    words = ack_set_for(size, unacked)
    assert len(words) == (size + 63) // 64
    assert all(-(2**63) <= w < 2**63 for w in words)
    assert unacked_indexes(words, size) == sorted(unacked)
    # The words survive the protobuf (repeated int64) unchanged.
    wire = pb.MessageIdData.FromString(
        pb.MessageIdData(ledgerId=1, entryId=2, ack_set=words).SerializeToString()
    )
    assert unacked_indexes(list(wire.ack_set), size) == sorted(unacked)


# ---------------------------------------------------------------------------
# MessageId
# ---------------------------------------------------------------------------

plain_message_ids = st.builds(
    MessageId,
    ledger_id=i64,
    entry_id=i64,
    partition=i32,
    batch_index=i32,
    batch_size=st.integers(0, 2**31 - 1),
)
message_ids = st.one_of(
    plain_message_ids,
    # a chunked message's id carries the id of its first chunk
    st.builds(
        MessageId,
        ledger_id=i64,
        entry_id=i64,
        partition=i32,
        batch_index=st.just(-1),
        first_chunk_message_id=plain_message_ids,
    ),
)


def fields_of(m: MessageId) -> tuple[object, ...]:
    first = m.first_chunk_message_id
    return (
        m.ledger_id,
        m.entry_id,
        m.partition,
        m.batch_index,
        m.batch_size,
        None if first is None else fields_of(first),
    )


@settings(max_examples=examples(300), deadline=None)
@given(m=message_ids)
def test_message_id_str_parse_round_trip(m: MessageId) -> None:
    back = MessageId.parse(str(m))
    assert back == m
    # The string form carries neither batch_size nor the first chunk's id.
    assert fields_of(back) == (*fields_of(m)[:4], 0, None)


@settings(max_examples=examples(300), deadline=None)
@given(m=message_ids)
def test_message_id_serialize_deserialize_round_trip(m: MessageId) -> None:
    back = MessageId.deserialize(m.serialize())
    assert back == m
    assert fields_of(back) == fields_of(m)
    assert hash(back) == hash(m)


@settings(max_examples=examples(300), deadline=None)
@given(
    a=message_ids,
    b=message_ids,
    partition=i32,
)
def test_message_id_order_is_tuple_order_within_a_partition(
    a: MessageId, b: MessageId, partition: int
) -> None:
    a, b = a.with_partition(partition), b.with_partition(partition)
    ka, kb = (a.ledger_id, a.entry_id, a.batch_index), (b.ledger_id, b.entry_id, b.batch_index)
    assert (a < b) == (ka < kb)
    assert (a <= b) == (ka <= kb)
    assert (a > b) == (ka > kb)
    assert (a >= b) == (ka >= kb)
    assert (a == b) == (ka == kb)
    if a == b:
        assert hash(a) == hash(b)


@settings(max_examples=examples(100), deadline=None)
@given(ids=st.lists(message_ids, max_size=20))
def test_message_id_sorting_matches_tuple_sorting(ids: list[MessageId]) -> None:
    ids = [m.with_partition(0) for m in ids]
    by_key = sorted(ids, key=lambda m: (m.ledger_id, m.entry_id, m.batch_index))
    assert [fields_of(m)[:3] for m in sorted(ids)] == [fields_of(m)[:3] for m in by_key]


@settings(max_examples=examples(100), deadline=None)
@given(m=message_ids)
def test_message_id_entry_sorts_before_its_batch_indexes(m: MessageId) -> None:
    whole = m.entry()
    assert whole.batch_index == -1
    if m.batch_index >= 0:
        assert whole < m


def test_earliest_and_latest_bound_real_ids() -> None:
    m = MessageId(0, 0, -1, 0)
    assert MessageId.EARLIEST < m < MessageId.LATEST
    assert MessageId.parse("earliest") is MessageId.EARLIEST
    assert MessageId.parse("LATEST") is MessageId.LATEST
    assert MessageId.deserialize(MessageId.EARLIEST.serialize()) == MessageId.EARLIEST
    assert MessageId.deserialize(MessageId.LATEST.serialize()) == MessageId.LATEST


# ---------------------------------------------------------------------------
# hashing
# ---------------------------------------------------------------------------


def java_hash_reference(s: str) -> int:
    """Java String.hashCode() & Integer.MAX_VALUE, from its definition over UTF-16 code units."""
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    h: int = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return h & 0x7FFFFFFF


unicode_text = st.text(
    alphabet=st.one_of(
        st.characters(exclude_categories=["Cs"]),
        st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF, exclude_categories=["Cs"]),
    ),
    max_size=40,
)


@settings(max_examples=examples(300), deadline=None)
@given(s=unicode_text)
def test_java_string_hash_matches_the_java_definition(s: str) -> None:
    assert java_string_hash(s) == java_hash_reference(s)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("😀", 1772899),  # U+1F600 = surrogates D83D DE00: 55357 * 31 + 56832
        ("persistent://public/default/t", java_hash_reference("persistent://public/default/t")),
    ],
)
def test_java_string_hash_vectors(key: str, expected: int) -> None:
    assert java_string_hash(key) == expected


@pytest.mark.parametrize(("key", "expected"), [("k1", 2110152746), ("k2", 1479966664)])
def test_murmur3_32_hash_vectors_of_the_java_client(key: str, expected: int) -> None:
    assert murmur3_32_hash(key) == expected


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"\xff\xff\xff\xff", 0, 0x76293B50),
        (b"\x21\x43\x65\x87", 0, 0xF55B516B),
        (b"\x21\x43\x65", 0, 0x7E4A8634),
        (b"\x21\x43", 0, 0xA0F7B07A),
        (b"\x21", 0, 0x72661CF4),
        (b"\x00\x00\x00\x00", 0, 0x2362F9DE),
        (b"Hello, world!", 1234, 0xFAF6CDB3),
        (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
    ],
)
def test_murmur3_32_reference_vectors(data: bytes, seed: int, expected: int) -> None:
    assert murmur3_32(data, seed) == expected


@settings(max_examples=examples(200), deadline=None)
@given(s=unicode_text)
def test_murmur3_32_hash_is_murmur3_of_utf8_masked(s: str) -> None:
    h = murmur3_32_hash(s)
    assert 0 <= h <= 0x7FFFFFFF
    assert h == murmur3_32(s.encode("utf-8")) & 0x7FFFFFFF
    assert struct.pack(">I", murmur3_32(s.encode("utf-8")))  # always a u32
