"""Produce and consume through the broker: values, metadata, batching, compression and chunking round-trip."""

from __future__ import annotations

import random
from collections.abc import Callable

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.proto import pb
from tests.helpers.judge import (
    assert_exactly,
    assert_silent,
    new_topic,
    payloads,
    receive_n,
)
from tests.helpers.raw import RawConnection

COMPRESSIONS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c.name)
def test_round_trip_values_and_metadata(
    client: pulsar.Client, topic: str, batching: bool, compression: pulsar.CompressionType
) -> None:
    n = 120
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=25,
        batching_max_publish_delay_ms=50,
        compression_type=compression,
    )
    # Compressible and incompressible bodies, binary bytes and an empty one -- except for ZLib: the
    # C++ client cannot inflate its own zlib output of an empty body (uncompressed_size 0, inflate
    # returns Z_STREAM_ERROR) and discards the message as corrupt; that is a client bug, the broker
    # stores and returns the entry byte for byte.
    values = [b"x" * (i * 37) + bytes(range(256)) * (i % 3) + f"|{i}".encode() for i in range(n - 1)]
    values.append(b"" if compression != pulsar.CompressionType.ZLib else b"e")
    meta: dict[bytes, dict[str, object]] = {}
    results: list[pulsar.Result] = []
    for i, v in enumerate(values):
        # Every third message without any metadata: defaults must come back as defaults.
        kwargs: dict[str, object] = (
            {}
            if i % 3 == 0
            else {
                "properties": {"i": str(i), "kind": "odd" if i % 2 else "even", "ünï": "cödé"},
                "partition_key": f"key-{i % 7}",
                "event_timestamp": 1_700_000_000_000 + i,
            }
        )
        meta[v] = kwargs
        producer.send_async(v, lambda res, _mid: results.append(res), **kwargs)
    producer.flush()
    assert results == [pulsar.Result.Ok] * n

    got = receive_n(consumer, n, ack=True)
    assert_exactly(got, values)
    assert_silent(consumer)
    assert [m.data() for m in got] == values  # one producer, one consumer: publish order
    for m in got:
        kwargs = meta[m.data()]
        assert m.properties() == kwargs.get("properties", {})
        assert m.partition_key() == kwargs.get("partition_key", "")
        assert m.event_timestamp() == kwargs.get("event_timestamp", 0)
        assert m.publish_timestamp() > 0
        assert m.topic_name() == topic
        assert (m.message_id().batch_index() >= 0) == batching
    if batching:
        assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}) < n


def test_ordering_key_round_trips(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"v{i}".encode(), ordering_key=f"ok-{i}", partition_key=f"pk-{i}")
    got = receive_n(consumer, 5, ack=True)
    assert [m.data() for m in got] == [f"v{i}".encode() for i in range(5)]
    assert [m.ordering_key() for m in got] == [f"ok-{i}" for i in range(5)]
    assert [m.partition_key() for m in got] == [f"pk-{i}" for i in range(5)]


def test_live_consumer_sees_messages_in_order_with_receipts(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")  # Latest: subscribe before producing
    producer = client.create_producer(topic)
    values = payloads(200)
    receipts = [producer.send(v) for v in values]
    got = receive_n(consumer, len(values), ack=True)
    assert [m.data() for m in got] == values
    assert [str(m.message_id()) for m in got] == [str(r) for r in receipts]
    assert_silent(consumer)


@pytest.mark.parametrize(
    "compression", [pulsar.CompressionType.NONE, pulsar.CompressionType.LZ4], ids=lambda c: c.name
)
def test_chunked_1mb_message_is_received_intact(
    start_broker: Callable[..., Broker],
    make_client: Callable[[Broker], pulsar.Client],
    compression: pulsar.CompressionType,
) -> None:
    b = start_broker(max_message_size=100 * 1024)
    client = make_client(b)
    topic = new_topic("chunk")
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, chunking_enabled=True, batching_enabled=False, compression_type=compression
    )
    rnd = random.Random(7)
    big = rnd.randbytes(1024 * 1024)  # incompressible: really 11 chunks
    small = b"small-after"
    producer.send(big, properties={"k": "v"})
    producer.send(small)
    got = receive_n(consumer, 2, ack=True)
    assert got[0].data() == big
    assert got[0].properties() == {"k": "v"}
    assert got[1].data() == small
    assert_silent(consumer)
    # The chunks are separate entries on the broker.
    assert b.stats(topic)["entries"] > 10


def test_chunked_message_with_deduplication(
    start_broker: Callable[..., Broker], make_client: Callable[[Broker], pulsar.Client]
) -> None:
    b = start_broker(max_message_size=100 * 1024, deduplication=True)
    client = make_client(b)
    topic = new_topic("chunk-dedup")
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, producer_name="chunker", chunking_enabled=True, batching_enabled=False
    )
    big = bytes(range(256)) * 4096  # 1 MiB
    producer.send(big)
    producer.send(b"after")
    got = receive_n(consumer, 2, ack=True)
    assert got[0].data() == big
    assert got[1].data() == b"after"
    assert_silent(consumer)


def test_message_over_max_size_without_chunking_is_refused(
    start_broker: Callable[..., Broker], make_client: Callable[[Broker], pulsar.Client]
) -> None:
    b = start_broker(max_message_size=100 * 1024)
    client = make_client(b)
    topic = new_topic("too-big")
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"x" * (200 * 1024))
    producer.send(b"ok")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(5000).data() == b"ok"
    assert_silent(reader)


def test_corrupt_send_is_refused_and_the_connection_goes_on(shared_broker: Broker) -> None:
    from pulsarwire.codec import encode_payload_command, new_command

    topic = new_topic("crc")
    conn = RawConnection.to(shared_broker.service_url)
    try:
        cmd, p = new_command(pb.BaseCommand.PRODUCER)
        p.topic, p.producer_id, p.request_id = topic, 1, 1
        conn.send(cmd)
        name = conn.expect(pb.BaseCommand.PRODUCER_SUCCESS).command.producer_success.producer_name

        def send(seq: int, corrupt: bool) -> None:
            cmd, s = new_command(pb.BaseCommand.SEND)
            s.producer_id, s.sequence_id = 1, seq
            md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
            frame = bytearray(encode_payload_command(cmd, md, b"payload"))
            if corrupt:
                frame[-1] ^= 0xFF
            conn.sock.sendall(bytes(frame))

        send(0, corrupt=True)
        err = conn.expect(pb.BaseCommand.SEND_ERROR).command.send_error
        assert (err.sequence_id, err.error) == (0, pb.ChecksumError)
        send(1, corrupt=False)
        assert conn.expect(pb.BaseCommand.SEND_RECEIPT).command.send_receipt.sequence_id == 1
        assert shared_broker.stats(topic)["msg_in"] == 1  # only the good one was stored
    finally:
        conn.close()
