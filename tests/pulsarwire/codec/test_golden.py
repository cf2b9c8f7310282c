"""Golden bytes: the frames the official client (pulsar-client, C++ core) really sends, against our codec.

The official client talks to :class:`tests.helpers.recorder.Recorder`, a fake
broker that keeps the exact bytes of every inbound frame. For each captured
frame we check that

* our decoder reads it, and what it reads is what the test asked the official
  client to send (payloads after decompression and unbatching, keys,
  properties, event times, sequence ids);
* our encoder, given the decoded command, metadata and (still compressed)
  payload, writes the very same bytes, CRC32C included;
* where we know every input, a frame built from scratch with our encoder is
  byte-identical too (that is the bar our own client has to clear); only
  compressed bytes are reused, as compressors differ between libraries.

The other direction is covered as well: entries built by our codec, sent in
MESSAGE frames by our encoder, are read and acknowledged by the official
consumer.

The receipts the recorder sends decide the message ids the official client
reports, so ids are checked end to end, and :class:`MessageId`'s byte form is
compared with the official ``MessageId.serialize()``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import crc32c as crc32c_lib
import pulsar
import pytest
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from pulsarwire.codec import (
    ChunkReassembler,
    MessageId,
    compress,
    decode_frames,
    encode_batch,
    encode_command,
    encode_payload_command,
    is_chunk,
    open_entry,
    uncompressed_payload,
)
from pulsarwire.proto import pb
from tests.helpers.recorder import Captured, Recorder

T = pb.BaseCommand
TOPIC = "persistent://public/default/golden"
LOG = logging.getLogger("pulsar.official")
TIMEOUT_S = 10.0
TIMEOUT_MS = int(TIMEOUT_S * 1000)

COMPRESSIONS = [
    pytest.param(pulsar.CompressionType.NONE, pb.NONE, id="none"),
    pytest.param(pulsar.CompressionType.LZ4, pb.LZ4, id="lz4"),
    pytest.param(pulsar.CompressionType.ZLib, pb.ZLIB, id="zlib"),
    pytest.param(pulsar.CompressionType.ZSTD, pb.ZSTD, id="zstd"),
    pytest.param(pulsar.CompressionType.SNAPPY, pb.SNAPPY, id="snappy"),
]
CODECS = [pytest.param(p.values[1], id=p.id) for p in COMPRESSIONS]


@dataclass(frozen=True)
class Sent:
    """One message as handed to the official producer."""

    content: bytes
    properties: dict[str, str] = field(default_factory=dict)
    partition_key: str | None = None
    event_timestamp: int | None = None
    ordering_key: str | None = None

    def kwargs(self) -> dict[str, object]:
        kw: dict[str, object] = {}
        if self.properties:
            kw["properties"] = self.properties
        if self.partition_key is not None:
            kw["partition_key"] = self.partition_key
        if self.event_timestamp is not None:
            kw["event_timestamp"] = self.event_timestamp
        if self.ordering_key is not None:
            kw["ordering_key"] = self.ordering_key
        return kw


MESSAGES = [
    # Keys out of alphabetical order on purpose: the official client keeps insertion order.
    Sent(b"golden message 0 " * 10, {"zeta": "0", "alpha": "first"}, "key-0", 1_700_000_000_000),
    Sent(b"golden message 1 " * 60, {"only": "one"}, "key-1", 1_700_000_000_001, ordering_key="order-1"),
    Sent(bytes(range(256)) * 3, {}, "key-2", None),
    Sent(b"x", {}, None, 1_700_000_000_003),
]


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as rec:
        yield rec
    assert not rec.errors, f"the recorder failed while serving: {rec.errors!r}"


@pytest.fixture
def client(recorder: Recorder) -> Iterator[pulsar.Client]:
    # pulsar.Client connects lazily: a test may still change recorder.max_message_size.
    c = pulsar.Client(
        recorder.url, operation_timeout_seconds=int(TIMEOUT_S), connection_timeout_ms=TIMEOUT_MS, logger=LOG
    )
    try:
        yield c
    finally:
        c.close()
        del c  # release the C++ client here rather than at interpreter exit


# ---------------------------------------------------------------------------
# Checks shared by all tests
# ---------------------------------------------------------------------------


def unknown_fields(msg: Message, path: str = "") -> list[str]:
    """Paths of fields our .proto does not know, anywhere in ``msg``."""
    found = [f"{path or msg.DESCRIPTOR.name}#{f.field_number}" for f in UnknownFieldSet(msg)]
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        if fd.is_repeated:
            for i, v in enumerate(value):
                found += unknown_fields(v, f"{path}{fd.name}[{i}].")
        else:
            found += unknown_fields(value, f"{path}{fd.name}.")
    return found


def assert_golden(captured: Captured) -> None:
    """Frame layout, checksum and a byte-identical re-encoding of one captured frame."""
    raw = captured.raw
    frame = captured.decoded  # raises with our decoder's error if it rejected the official bytes
    name = T.Type.Name(frame.type)
    total = int.from_bytes(raw[:4], "big")
    cmd_size = int.from_bytes(raw[4:8], "big")
    assert total == len(raw) - 4
    assert raw[8 : 8 + cmd_size] == frame.command.SerializeToString(), f"{name}: command bytes differ"
    assert not unknown_fields(frame.command), f"{name}: fields missing from our .proto"
    if frame.payload is None:
        assert cmd_size == total - 4
        reencoded = encode_command(frame.command)
    else:
        section = raw[8 + cmd_size :]
        assert section[:2] == b"\x0e\x01"
        # The CRC32C the official client wrote, recomputed independently of our codec.
        assert int.from_bytes(section[2:6], "big") == crc32c_lib.crc32c(section[6:])
        assert section == frame.payload.entry
        assert not unknown_fields(frame.payload.metadata), f"{name}: metadata fields missing from our .proto"
        reencoded = encode_payload_command(frame.command, frame.payload.metadata, frame.payload.payload)
    assert reencoded == raw, f"{name}: re-encoded frame differs from the official bytes"


def assert_all_golden(recorder: Recorder) -> None:
    """Every captured frame is golden, and each connection's whole stream decodes to the same frames."""
    connections = recorder.captured_by_connection()
    assert connections
    for captured in connections:
        for c in captured:
            assert_golden(c)
        decoded = decode_frames(b"".join(c.raw for c in captured), recorder.max_message_size)
        assert [(f.command, f.payload) for f in decoded] == [(c.command, c.decoded.payload) for c in captured]


def one(recorder: Recorder, type_: int) -> Captured:
    frames = recorder.frames(type_)
    assert len(frames) == 1, f"expected one {T.Type.Name(type_)}, got {len(frames)}"
    return frames[0]


class Callbacks:
    """Collects send_async results; wait() blocks until ``n`` have arrived."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.results: dict[int, tuple[pulsar.Result, pulsar.MessageId]] = {}
        self._cond = threading.Condition()

    def for_message(self, i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def callback(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            with self._cond:
                self.results[i] = (result, msg_id)
                self._cond.notify_all()

        return callback

    def wait(self) -> list[pulsar.MessageId]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.results) == self.n, TIMEOUT_S), self.results
        assert all(r == pulsar.Result.Ok for r, _ in self.results.values()), self.results
        return [self.results[i][1] for i in range(self.n)]


def produce(
    client: pulsar.Client, compression: pulsar.CompressionType, batching: bool
) -> list[pulsar.MessageId]:
    """Send MESSAGES with send_async + flush (a batch of all of them when batching); return their ids."""
    producer = client.create_producer(
        TOPIC,
        producer_name="golden-producer",
        compression_type=compression,
        batching_enabled=batching,
        batching_max_messages=len(MESSAGES),
        # Only the count closes the batch, never the timer: one deterministic batch.
        batching_max_publish_delay_ms=60_000,
        send_timeout_millis=TIMEOUT_MS,
    )
    callbacks = Callbacks(len(MESSAGES))
    for i, m in enumerate(MESSAGES):
        producer.send_async(m.content, callbacks.for_message(i), **m.kwargs())
    producer.flush()
    ids = callbacks.wait()
    producer.close()
    return ids


def key_values(props: dict[str, str]) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in props.items()]


def single_metadata(sequence_id: int, m: Sent) -> pb.SingleMessageMetadata:
    """The per-message header the official client writes into a batch (None leaves a field unset)."""
    return pb.SingleMessageMetadata(
        properties=key_values(m.properties),
        partition_key=m.partition_key,
        event_time=m.event_timestamp,
        ordering_key=m.ordering_key.encode() if m.ordering_key else None,
        sequence_id=sequence_id,
    )


def as_sent(content: bytes, md: pb.MessageMetadata | pb.SingleMessageMetadata) -> Sent:
    """What a message's (single-)metadata says was sent; both messages name these fields alike."""
    return Sent(
        content,
        {p.key: p.value for p in md.properties},
        md.partition_key if md.HasField("partition_key") else None,
        md.event_time if md.HasField("event_time") else None,
        md.ordering_key.decode() if md.HasField("ordering_key") else None,
    )


def assert_ids(official: pulsar.MessageId, expected: MessageId) -> None:
    assert (official.ledger_id(), official.entry_id(), official.partition(), official.batch_index()) == (
        expected.ledger_id,
        expected.entry_id,
        expected.partition,
        expected.batch_index,
    )


# ---------------------------------------------------------------------------
# Connection and producer setup
# ---------------------------------------------------------------------------


def test_connect_lookup_and_producer_frames(recorder: Recorder, client: pulsar.Client) -> None:
    producer = client.create_producer(
        TOPIC, producer_name="golden-producer", properties={"pz": "1", "pa": "2"}
    )
    producer.close()
    recorder.wait_for_frames(T.CLOSE_PRODUCER)
    assert_all_golden(recorder)

    connect = one(recorder, T.CONNECT).command.connect
    assert connect.client_version.startswith("Pulsar-CPP-v")
    assert connect.protocol_version >= 20
    assert connect.auth_method_name == "none"
    assert connect.HasField("feature_flags")
    assert connect.feature_flags.supports_auth_refresh
    assert connect.feature_flags.supports_broker_entry_metadata

    assert one(recorder, T.PARTITIONED_METADATA).command.partitionMetadata.topic == TOPIC
    assert one(recorder, T.LOOKUP).command.lookupTopic.topic == TOPIC

    # The PRODUCER frame rebuilt from scratch: the official client sets several defaults explicitly,
    # and sorts the producer properties by key.
    captured = one(recorder, T.PRODUCER)
    got = captured.command.producer
    expected = pb.BaseCommand(
        type=T.PRODUCER,
        producer=pb.CommandProducer(
            topic=TOPIC,
            producer_id=got.producer_id,
            request_id=got.request_id,
            producer_name="golden-producer",
            encrypted=False,
            metadata=[pb.KeyValue(key="pa", value="2"), pb.KeyValue(key="pz", value="1")],
            epoch=0,
            user_provided_producer_name=True,
            producer_access_mode=pb.Shared,
        ),
    )
    assert encode_command(expected) == captured.raw

    close = one(recorder, T.CLOSE_PRODUCER).command.close_producer
    assert close.producer_id == got.producer_id


def test_pong_answers_our_ping(recorder: Recorder, client: pulsar.Client) -> None:
    producer = client.create_producer(TOPIC)
    recorder.connections[0].ping()
    pong = recorder.wait_for_frames(T.PONG)[0]
    producer.close()
    assert_golden(pong)
    # The official client sends the empty sub-message explicitly (field 19, length 0).
    assert pong.raw == encode_command(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong()))
    assert pong.raw.endswith(b"\x9a\x01\x00")


# ---------------------------------------------------------------------------
# SEND: every compression, batched and not
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batch"])
@pytest.mark.parametrize(("compression", "codec"), COMPRESSIONS)
def test_send_frames(
    recorder: Recorder, client: pulsar.Client, compression: pulsar.CompressionType, codec: int, batching: bool
) -> None:
    ids = produce(client, compression, batching)
    assert_all_golden(recorder)
    sends = recorder.frames(T.SEND)
    assert len(sends) == (1 if batching else len(MESSAGES))

    received = []
    for seq, captured in enumerate(sends):
        send, payload = captured.command.send, captured.payload
        md = payload.metadata
        assert send.producer_id == one(recorder, T.PRODUCER).command.producer.producer_id
        assert send.sequence_id == seq == md.sequence_id
        assert md.producer_name == "golden-producer"
        assert md.compression == codec
        messages = open_entry(md, payload.payload)
        if codec != pb.NONE:
            assert md.uncompressed_size == len(uncompressed_payload(md, payload.payload))
        if batching:
            assert send.num_messages == len(MESSAGES) == md.num_messages_in_batch
            assert [m.batch_index for m in messages] == list(range(len(MESSAGES)))
            for i, m in enumerate(messages):
                assert m.single is not None and m.single.sequence_id == i
                received.append(as_sent(m.payload, m.single))
        else:
            assert not md.HasField("num_messages_in_batch")
            assert [m.batch_index for m in messages] == [-1]
            received.append(as_sent(messages[0].payload, md))
    assert received == MESSAGES
    for sent, got in zip(MESSAGES, received, strict=True):
        assert list(got.properties) == list(sent.properties)  # insertion order is kept on the wire

    # The ids the official client reports come from our SEND_RECEIPTs.
    entries = recorder.entries(TOPIC)
    for i, official in enumerate(ids):
        entry = entries[0 if batching else i].message_id
        assert_ids(official, MessageId(entry.ledger_id, entry.entry_id, -1, i if batching else -1))


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batch"])
@pytest.mark.parametrize(("compression", "codec"), COMPRESSIONS)
def test_send_frames_rebuilt_from_scratch(
    recorder: Recorder, client: pulsar.Client, compression: pulsar.CompressionType, codec: int, batching: bool
) -> None:
    """Our encoder, fed only what the test sent, writes the official bytes.

    Only publish_time (a clock reading), the ids the client allocated and the compressed payload
    are taken from the capture. The compressed payload must decompress to exactly the bytes we
    build (metadata and batch layout), but it is reused rather than recompressed: compressed bytes
    are not a wire contract, and they do differ for LZ4 (the client bundles another liblz4
    release; a 13 KB text compresses differently) and SNAPPY (Google snappy in the client, the
    Rust `snap` crate behind python-snappy/cramjam). Our zlib and zstd output happened to match.
    """
    produce(client, compression, batching)
    sends = recorder.frames(T.SEND)
    producer_id = one(recorder, T.PRODUCER).command.producer.producer_id

    def reuse_compressed(captured: Captured, uncompressed: bytes) -> bytes:
        payload = captured.payload
        assert uncompressed_payload(payload.metadata, payload.payload) == uncompressed
        if codec == pb.NONE:
            assert payload.payload == uncompressed
        return payload.payload

    expected: list[bytes] = []
    if batching:
        publish_time = sends[0].payload.metadata.publish_time
        batch = encode_batch((single_metadata(i, m), m.content) for i, m in enumerate(MESSAGES))
        # The batch's own metadata carries the partition key of its first message.
        md = pb.MessageMetadata(
            producer_name="golden-producer",
            sequence_id=0,
            publish_time=publish_time,
            partition_key=MESSAGES[0].partition_key,
            compression=codec if codec != pb.NONE else None,
            uncompressed_size=len(batch) if codec != pb.NONE else None,
            num_messages_in_batch=len(MESSAGES),
        )
        cmd = pb.BaseCommand(
            type=T.SEND,
            send=pb.CommandSend(producer_id=producer_id, sequence_id=0, num_messages=len(MESSAGES)),
        )
        expected.append(encode_payload_command(cmd, md, reuse_compressed(sends[0], batch)))
    else:
        for i, m in enumerate(MESSAGES):
            md = pb.MessageMetadata(
                producer_name="golden-producer",
                sequence_id=i,
                publish_time=sends[i].payload.metadata.publish_time,
                properties=key_values(m.properties),
                partition_key=m.partition_key,
                compression=codec if codec != pb.NONE else None,
                uncompressed_size=len(m.content) if codec != pb.NONE else None,
                event_time=m.event_timestamp,
                ordering_key=m.ordering_key.encode() if m.ordering_key else None,
            )
            cmd = pb.BaseCommand(type=T.SEND, send=pb.CommandSend(producer_id=producer_id, sequence_id=i))
            expected.append(encode_payload_command(cmd, md, reuse_compressed(sends[i], m.content)))
    assert [c.raw for c in sends] == expected


# ---------------------------------------------------------------------------
# Consuming: SUBSCRIBE, FLOW, ACK
# ---------------------------------------------------------------------------


def test_subscribe_flow_and_ack_frames(recorder: Recorder, client: pulsar.Client) -> None:
    produce(client, pulsar.CompressionType.NONE, batching=False)
    entries = [e.message_id for e in recorder.entries(TOPIC)]
    consumer = client.subscribe(
        TOPIC,
        "golden-sub",
        consumer_name="golden-consumer",
        receiver_queue_size=7,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    msgs = [consumer.receive(TIMEOUT_MS) for _ in MESSAGES]
    assert [m.data() for m in msgs] == [m.content for m in MESSAGES]
    for msg, entry in zip(msgs, entries, strict=True):
        assert_ids(msg.message_id(), entry)
        assert MessageId.deserialize(msg.message_id().serialize()) == entry

    # Individual acks are grouped (100 ms) and may share one ACK frame.
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[1])

    def individually_acked(r: Recorder) -> set[MessageId]:
        return {
            MessageId.from_proto(mid)
            for c in r.frames(T.ACK)
            if c.command.ack.ack_type == pb.CommandAck.Individual
            for mid in c.command.ack.message_id
        }

    recorder.wait_for(lambda r: individually_acked(r) == {entries[0], entries[1]}, TIMEOUT_S)
    consumer.acknowledge_cumulative(msgs[-1])
    recorder.wait_for(
        lambda r: any(c.command.ack.ack_type == pb.CommandAck.Cumulative for c in r.frames(T.ACK)),
        TIMEOUT_S,
    )
    last = consumer.get_last_message_id()
    assert_ids(last, entries[-1])
    consumer.close()
    recorder.wait_for_frames(T.CLOSE_CONSUMER)
    assert_all_golden(recorder)

    subscribe_frame = one(recorder, T.SUBSCRIBE)
    sub = subscribe_frame.command.subscribe
    assert (sub.topic, sub.subscription, sub.subType, sub.consumer_name) == (
        TOPIC,
        "golden-sub",
        pb.CommandSubscribe.Exclusive,
        "golden-consumer",
    )
    assert sub.initialPosition == pb.CommandSubscribe.Earliest
    assert sub.durable
    # Rebuilt from scratch: these are the fields (defaults included) the official client sets.
    expected = pb.BaseCommand(
        type=T.SUBSCRIBE,
        subscribe=pb.CommandSubscribe(
            topic=TOPIC,
            subscription="golden-sub",
            subType=pb.CommandSubscribe.Exclusive,
            consumer_id=sub.consumer_id,
            request_id=sub.request_id,
            consumer_name="golden-consumer",
            priority_level=0,
            durable=True,
            read_compacted=False,
            initialPosition=pb.CommandSubscribe.Earliest,
            replicate_subscription_state=False,
        ),
    )
    assert encode_command(expected) == subscribe_frame.raw

    flow = recorder.frames(T.FLOW)[0]
    assert flow.raw == encode_command(
        pb.BaseCommand(type=T.FLOW, flow=pb.CommandFlow(consumer_id=sub.consumer_id, messagePermits=7))
    )

    cumulative = [c for c in recorder.frames(T.ACK) if c.command.ack.ack_type == pb.CommandAck.Cumulative]
    assert len(cumulative) == 1
    assert cumulative[0].raw == encode_command(
        pb.BaseCommand(
            type=T.ACK,
            ack=pb.CommandAck(
                consumer_id=sub.consumer_id,
                ack_type=pb.CommandAck.Cumulative,
                message_id=[entries[-1].to_proto()],
            ),
        )
    )
    assert one(recorder, T.GET_LAST_MESSAGE_ID).command.getLastMessageId.consumer_id == sub.consumer_id
    assert one(recorder, T.CLOSE_CONSUMER).command.close_consumer.consumer_id == sub.consumer_id


@pytest.mark.parametrize("codec", CODECS)
def test_official_consumer_reads_entries_we_encoded(
    recorder: Recorder, client: pulsar.Client, codec: int
) -> None:
    """The reverse direction: a batch and a single message built by our codec, framed by our encoder."""
    batch = encode_batch((single_metadata(i, m), m.content) for i, m in enumerate(MESSAGES))
    batch_md = pb.MessageMetadata(
        producer_name="pulsarwire",
        sequence_id=0,
        publish_time=1_700_000_100_000,
        compression=codec,
        uncompressed_size=len(batch),
        num_messages_in_batch=len(MESSAGES),
    )
    batch_id = recorder.store(TOPIC, batch_md, compress(codec, batch))
    single = b"a single message " * 20
    single_md = pb.MessageMetadata(
        producer_name="pulsarwire",
        sequence_id=len(MESSAGES),
        publish_time=1_700_000_100_001,
        properties=[pb.KeyValue(key="k", value="v")],
        partition_key="single-key",
        event_time=1_700_000_000_042,
        compression=codec,
        uncompressed_size=len(single),
    )
    # Broker entry metadata (magic 0x0e02) in front, as a broker adds it: the client must skip it.
    bem = pb.BrokerEntryMetadata(broker_timestamp=1_700_000_100_002, index=41)
    single_id = recorder.store(TOPIC, single_md, compress(codec, single), bem)

    consumer = client.subscribe(TOPIC, "golden-sub", initial_position=pulsar.InitialPosition.Earliest)
    msgs = [consumer.receive(TIMEOUT_MS) for _ in range(len(MESSAGES) + 1)]
    for i, (msg, sent) in enumerate(zip(msgs, MESSAGES, strict=False)):
        assert msg.data() == sent.content
        assert msg.properties() == sent.properties
        assert msg.partition_key() == (sent.partition_key or "")
        assert msg.event_timestamp() == (sent.event_timestamp or 0)
        assert msg.ordering_key() == (sent.ordering_key or "")
        assert msg.publish_timestamp() == 1_700_000_100_000
        assert_ids(msg.message_id(), MessageId(batch_id.ledger_id, batch_id.entry_id, -1, i))
        # The official id of a batched message carries batch_size; ours reads and writes it the same.
        official_bytes = msg.message_id().serialize()
        ours = MessageId.deserialize(official_bytes)
        assert (ours.batch_index, ours.batch_size) == (i, len(MESSAGES))
        assert ours.serialize() == official_bytes
    last = msgs[-1]
    assert (last.data(), last.properties(), last.partition_key(), last.event_timestamp()) == (
        single,
        {"k": "v"},
        "single-key",
        1_700_000_000_042,
    )
    assert_ids(last.message_id(), single_id)

    # Acking every message of the batch (no batch-index acks) acks the whole entry in one id.
    for msg in msgs[:-1]:
        consumer.acknowledge(msg)
    recorder.wait_for_frames(T.ACK)
    consumer.acknowledge_cumulative(last)
    recorder.wait_for_frames(T.ACK, 2)
    consumer.close()
    recorder.wait_for_frames(T.CLOSE_CONSUMER)
    assert_all_golden(recorder)
    acks = recorder.frames(T.ACK)
    consumer_id = one(recorder, T.SUBSCRIBE).command.subscribe.consumer_id
    assert [c.raw for c in acks] == [
        encode_command(
            pb.BaseCommand(
                type=T.ACK,
                ack=pb.CommandAck(consumer_id=consumer_id, ack_type=kind, message_id=[mid.to_proto()]),
            )
        )
        for kind, mid in [(pb.CommandAck.Individual, batch_id), (pb.CommandAck.Cumulative, single_id)]
    ]


def test_cumulative_ack_inside_a_batch_acks_the_entry_before(
    recorder: Recorder, client: pulsar.Client
) -> None:
    """Without batch-index acks, a cumulative ack of a partly read batch names the previous entry."""
    produce(client, pulsar.CompressionType.NONE, batching=True)
    (entry,) = recorder.entries(TOPIC)
    consumer = client.subscribe(TOPIC, "golden-sub", initial_position=pulsar.InitialPosition.Earliest)
    consumer.receive(TIMEOUT_MS)
    second = consumer.receive(TIMEOUT_MS)
    assert_ids(second.message_id(), MessageId(entry.message_id.ledger_id, entry.message_id.entry_id, -1, 1))
    consumer.acknowledge_cumulative(second)
    (ack,) = recorder.wait_for_frames(T.ACK)
    consumer.close()
    assert_golden(ack)
    mid = MessageId.from_proto(ack.command.ack.message_id[0])
    assert ack.command.ack.ack_type == pb.CommandAck.Cumulative
    assert mid == MessageId(entry.message_id.ledger_id, entry.message_id.entry_id - 1)


# ---------------------------------------------------------------------------
# Chunking
# ---------------------------------------------------------------------------

#: The official serialize() of the id of a message chunked into entries 1000:0..1000:4 (the recorder's
#: first ledger is 1000): ledgerId 1000, entryId 4, first_chunk_message_id {ledgerId 1000, entryId 0}.
CHUNKED_MESSAGE_ID = bytes.fromhex("08e80710043a0508e8071000")


def test_chunked_send_frames(recorder: Recorder, client: pulsar.Client) -> None:
    recorder.max_message_size = 10 * 1024  # advertised in CONNECTED; the client connects on first use
    data = random.Random(20240601).randbytes(50_000)  # incompressible, deterministic
    producer = client.create_producer(
        TOPIC, producer_name="golden-producer", chunking_enabled=True, batching_enabled=False
    )
    msg_id = producer.send(data, properties={"big": "yes"})
    producer.close()
    assert_all_golden(recorder)

    sends = recorder.frames(T.SEND)
    assert len(sends) == 5
    uuids = set()
    reassembler: ChunkReassembler[MessageId] = ChunkReassembler()
    entries = recorder.entries(TOPIC)
    joined = None
    for i, captured in enumerate(sends):
        send, payload = captured.command.send, captured.payload
        md = payload.metadata
        assert is_chunk(md)
        assert send.is_chunk
        assert send.sequence_id == 0 == md.sequence_id  # all chunks share the sequence id
        assert md.chunk_id == i
        assert md.num_chunks_from_msg == len(sends)
        assert md.total_chunk_msg_size == len(data)
        assert {p.key: p.value for p in md.properties} == {"big": "yes"}
        # A chunk's frame is a little over max_message_size (command and metadata come on top);
        # our decoder, limited to the advertised size, must still accept it.
        assert len(captured.raw) - 4 > recorder.max_message_size or i == len(sends) - 1
        assert len(decode_frames(captured.raw, recorder.max_message_size)) == 1
        uuids.add(md.uuid)
        joined = reassembler.add(md, payload.payload, entries[i].message_id, now_ms=0)
        assert (joined is None) == (i < len(sends) - 1)
    assert len(uuids) == 1
    assert joined is not None and joined.payload == data
    assert joined.chunk_ids == tuple(e.message_id for e in entries)
    assert reassembler.pending == 0 and reassembler.buffered_bytes == 0

    # The official id of a chunked message: the last chunk's position plus the first chunk's.
    assert_ids(msg_id, entries[-1].message_id)
    official = pb.MessageIdData.FromString(msg_id.serialize())
    assert MessageId.from_proto(official.first_chunk_message_id) == entries[0].message_id
    assert msg_id.serialize() == CHUNKED_MESSAGE_ID

    # The official consumer reassembles the chunks we re-deliver and acks every chunk.
    consumer = client.subscribe(TOPIC, "golden-sub", initial_position=pulsar.InitialPosition.Earliest)
    received = consumer.receive(TIMEOUT_MS)
    assert received.data() == data
    consumer.acknowledge(received)
    (ack,) = recorder.wait_for_frames(T.ACK)
    consumer.close()
    assert_golden(ack)
    acked = [MessageId.from_proto(m) for m in ack.command.ack.message_id]
    assert acked == [e.message_id for e in entries]


def test_chunked_message_id_round_trips() -> None:
    mid = MessageId.deserialize(CHUNKED_MESSAGE_ID)
    assert mid.first_chunk_message_id is not None
    assert mid.serialize() == CHUNKED_MESSAGE_ID


# ---------------------------------------------------------------------------
# MessageId byte form
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ledger_id", "entry_id", "partition", "batch_index"),
    [
        (1, 2, -1, -1),
        (1, 2, 3, -1),
        (0, 0, -1, 0),
        (7, 8, 0, 5),
        (123_456_789_012, 42, 15, 999),
        (2**63 - 1, 2**63 - 1, -1, -1),
        (-1, -1, -1, -1),
        (5, -1, -1, -1),
    ],
)
def test_message_id_bytes_match_official(
    ledger_id: int, entry_id: int, partition: int, batch_index: int
) -> None:
    official = pulsar.MessageId(partition, ledger_id, entry_id, batch_index)
    ours = MessageId(ledger_id, entry_id, partition, batch_index)
    official_bytes = official.serialize()
    assert ours.serialize() == official_bytes
    parsed = MessageId.deserialize(official_bytes)
    assert (parsed.ledger_id, parsed.entry_id, parsed.partition, parsed.batch_index) == (
        ledger_id,
        entry_id,
        partition,
        batch_index,
    )
    back = pulsar.MessageId.deserialize(ours.serialize())
    assert (back.ledger_id(), back.entry_id(), back.partition(), back.batch_index()) == (
        ledger_id,
        entry_id,
        partition,
        batch_index,
    )
    assert back == official._msg_id


def test_message_id_earliest_and_latest_match_official() -> None:
    assert MessageId.EARLIEST.serialize() == pulsar.MessageId.earliest.serialize()
    assert MessageId.LATEST.serialize() == pulsar.MessageId.latest.serialize()
    assert MessageId.deserialize(pulsar.MessageId.earliest.serialize()) == MessageId.EARLIEST
    assert MessageId.deserialize(pulsar.MessageId.latest.serialize()) == MessageId.LATEST


def test_message_id_with_batch_size_matches_official() -> None:
    # pulsar.MessageId() cannot set batch_size; an id read back from bytes keeps it.
    ours = MessageId(5, 6, -1, 2, batch_size=10)
    official = pulsar.MessageId.deserialize(ours.serialize())
    assert official.serialize() == ours.serialize()
    assert MessageId.deserialize(official.serialize()).batch_size == 10
