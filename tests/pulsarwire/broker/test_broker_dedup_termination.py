"""Broker-side deduplication by producer name and sequence id; topic termination."""

from __future__ import annotations

from collections.abc import Callable

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.broker.server import understands_end_of_topic
from tests.helpers.judge import (
    assert_silent,
    new_topic,
    payloads,
    position,
    read_n,
    receive_n,
    send_all,
)

Start = Callable[..., Broker]
MakeClient = Callable[[Broker], pulsar.Client]


def _read_all(client: pulsar.Client, topic: str, n: int) -> list[pulsar.Message]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = read_n(reader, n)
    assert_silent(reader)
    reader.close()
    return got


def test_dedup_new_producer_with_same_name_resending_overlap(
    start_broker: Start, make_client: MakeClient
) -> None:
    b = start_broker(deduplication=True)
    client = make_client(b)
    topic = new_topic("dedup")
    p1 = client.create_producer(topic, producer_name="dedup-producer")
    assert p1.last_sequence_id() == -1
    for seq in range(10):
        p1.send(f"v{seq}-first".encode(), sequence_id=seq)
    assert p1.last_sequence_id() == 9
    p1.close()

    p2 = client.create_producer(topic, producer_name="dedup-producer")
    assert p2.last_sequence_id() == 9  # from the broker's PRODUCER_SUCCESS
    for seq in range(5, 15):  # 5..9 overlap and are dropped, 10..14 are new
        p2.send(f"v{seq}-second".encode(), sequence_id=seq)
    assert p2.last_sequence_id() == 14
    # The same producer resending an old sequence id is dropped too.
    p2.send(b"v3-third", sequence_id=3)

    got = _read_all(client, topic, 15)
    expected = [f"v{s}-first".encode() for s in range(10)] + [f"v{s}-second".encode() for s in range(10, 15)]
    assert [m.data() for m in got] == expected
    assert b.stats(topic)["msg_in"] == 15


def test_dedup_batched_producer_continues_after_reconnect(
    start_broker: Start, make_client: MakeClient
) -> None:
    b = start_broker(deduplication=True)
    client = make_client(b)
    topic = new_topic("dedup-batch")
    p1 = client.create_producer(
        topic, producer_name="batcher", batching_enabled=True, batching_max_messages=8
    )
    first = payloads(20, "a")
    ids = send_all(p1, first)
    assert [i.batch_index() for i in ids[16:]] == [0, 1, 2, 3], "batches of 8, 8 and 4"
    assert p1.last_sequence_id() == 19
    p1.close()
    p2 = client.create_producer(
        topic, producer_name="batcher", batching_enabled=True, batching_max_messages=8
    )
    # The C++ client sends no highest_sequence_id for a batch, so Apache Pulsar records the batch's
    # first sequence id (16) as the producer's last one, and so does pulsarwire.
    assert p2.last_sequence_id() == 16
    second = payloads(5, "b")
    send_all(p2, second)  # sequence ids continue at 17: above 16, so nothing is taken for a duplicate
    assert p2.last_sequence_id() == 21
    got = _read_all(client, topic, 25)
    assert [m.data() for m in got] == first + second


def test_dedup_resent_batch_is_dropped(start_broker: Start, make_client: MakeClient) -> None:
    b = start_broker(deduplication=True)
    client = make_client(b)
    topic = new_topic("dedup-rebatch")
    p1 = client.create_producer(
        topic, producer_name="rebatcher", batching_enabled=True, batching_max_messages=10
    )
    values = payloads(10)
    for i, v in enumerate(values):
        p1.send_async(v, None, sequence_id=100 + i)
    p1.flush()
    p1.close()
    p2 = client.create_producer(
        topic, producer_name="rebatcher", batching_enabled=True, batching_max_messages=10
    )
    assert p2.last_sequence_id() == 100  # the batch's first sequence id, as above
    for i, v in enumerate(values):  # the whole batch again, as after a lost receipt
        p2.send_async(v + b"-again", None, sequence_id=100 + i)
    p2.flush()
    p2.send(b"new", sequence_id=110)
    got = _read_all(client, topic, 11)
    assert [m.data() for m in got] == [*values, b"new"]


def test_without_dedup_a_resend_is_stored_twice(start_broker: Start, make_client: MakeClient) -> None:
    b = start_broker(deduplication=False)
    client = make_client(b)
    topic = new_topic("nodedup")
    p1 = client.create_producer(topic, producer_name="plain")
    for seq in range(3):
        p1.send(b"v%d" % seq, sequence_id=seq)
    p1.close()
    p2 = client.create_producer(topic, producer_name="plain")
    assert p2.last_sequence_id() == -1  # the broker keeps no sequence ids without dedup
    for seq in range(3):
        p2.send(b"v%d" % seq, sequence_id=seq)
    got = _read_all(client, topic, 6)
    assert [m.data() for m in got] == [b"v0", b"v1", b"v2"] * 2


def test_producer_name_in_use_is_refused(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, producer_name="only-one")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="only-one")


def test_terminate_topic(shared_broker: Broker, client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    behind = client.subscribe(topic, "behind", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    values = payloads(10)
    ids = send_all(producer, values)
    last = shared_broker.terminate_topic(topic)
    assert last == (ids[-1].ledger_id(), ids[-1].entry_id())
    # The connected producer is refused (the broker closes it, its reconnection fails) ...
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"too-late")
    # ... and so is a new one.
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    # The messages published before termination are all delivered, once, and nothing after.
    assert [m.data() for m in receive_n(consumer, 10, ack=True)] == values
    assert_silent(consumer)
    # Once "sub" has acknowledged everything, Apache Pulsar sends REACHED_END_OF_TOPIC. The C++ core of
    # the Python client (4.2) has no case for it: it would drop the connection (every producer and
    # consumer on it) and resubscribe, in a loop. The broker does not send it to such clients, so the
    # connection "sub" shares with "behind" stays up.
    accepted = shared_broker.connections_accepted
    assert position(behind.get_last_message_id())[:2] == last
    assert [m.data() for m in receive_n(behind, 10)] == values
    assert_silent(behind)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in read_n(reader, 10)] == values
    assert not reader.has_message_available()
    assert_silent(reader)
    assert_silent(consumer)
    assert shared_broker.connections_accepted == accepted, "the client reconnected"


def test_end_of_topic_notice_only_to_clients_that_handle_it() -> None:
    # The C++ core up to 4.2 drops its connection on REACHED_END_OF_TOPIC (see test_terminate_topic).
    assert not understands_end_of_topic("Pulsar-CPP-v4.2.0")
    assert not understands_end_of_topic("Pulsar-CPP-v3.13.1")
    assert understands_end_of_topic("Pulsar-CPP-v4.3.0")
    assert understands_end_of_topic("Pulsar-CPP-v10.0.0")
    assert understands_end_of_topic("Pulsar-Java-v4.0.0")
    assert understands_end_of_topic("Pulsar-Go-v0.14.0")
    assert understands_end_of_topic("pulsarwire/0.1")
    assert understands_end_of_topic("")
