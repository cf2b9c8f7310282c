"""Readers (earliest, latest, a given id, inclusive or not), has_message_available, seek, last message id."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.helpers.judge import (
    assert_exactly,
    assert_silent,
    drain,
    payloads,
    position,
    read_n,
    receive_n,
    send_all,
)


def _produce(
    client: pulsar.Client, topic: str, n: int, batching: bool
) -> tuple[list[bytes], list[pulsar.MessageId]]:
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=7)
    values = payloads(n)
    ids = send_all(producer, values)
    producer.close()
    if batching:
        assert len({(i.ledger_id(), i.entry_id()) for i in ids}) < n
    return values, ids


def test_reader_from_earliest_reads_everything_once(
    client: pulsar.Client, topic: str, batching: bool
) -> None:
    values, ids = _produce(client, topic, 30, batching)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.has_message_available()
    got = read_n(reader, 30)
    assert [m.data() for m in got] == values
    assert [position(m.message_id()) for m in got] == [position(i) for i in ids]
    assert not reader.has_message_available()
    assert_silent(reader)


def test_reader_from_latest_reads_only_new_messages(
    client: pulsar.Client, topic: str, batching: bool
) -> None:
    _produce(client, topic, 10, batching)
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    assert not reader.has_message_available()
    assert_silent(reader)
    new, _ = _produce(client, topic, 12, batching)
    assert reader.has_message_available()
    got = read_n(reader, 12)
    assert [m.data() for m in got] == new
    assert not reader.has_message_available()
    assert_silent(reader)


def test_reader_on_empty_topic(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic).close()  # the topic exists, it has no message
    for start in (pulsar.MessageId.earliest, pulsar.MessageId.latest):
        reader = client.create_reader(topic, start)
        assert not reader.has_message_available()
        reader.close()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    producer = client.create_producer(topic)
    producer.send(b"first")
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"first"
    assert not reader.has_message_available()


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
@pytest.mark.parametrize("k", [0, 9, 16, 29])
def test_reader_from_a_message_id(
    client: pulsar.Client, topic: str, batching: bool, inclusive: bool, k: int
) -> None:
    values, ids = _produce(client, topic, 30, batching)
    reader = client.create_reader(topic, ids[k], start_message_id_inclusive=inclusive)
    first = k if inclusive else k + 1
    expected = values[first:]
    if expected:
        assert reader.has_message_available()
    got = read_n(reader, len(expected))
    assert [m.data() for m in got] == expected
    assert not reader.has_message_available()
    assert_silent(reader)


def test_reader_from_a_deserialized_message_id(client: pulsar.Client, topic: str, batching: bool) -> None:
    values, ids = _produce(client, topic, 20, batching)
    start = pulsar.MessageId.deserialize(ids[11].serialize())
    reader = client.create_reader(topic, start)
    assert [m.data() for m in read_n(reader, 8)] == values[12:]
    assert_silent(reader)


def test_has_message_available_follows_the_reader(client: pulsar.Client, topic: str) -> None:
    values, _ = _produce(client, topic, 3, False)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    seen = []
    while reader.has_message_available():
        seen.append(reader.read_next(5000).data())
    assert seen == values
    more, _ = _produce(client, topic, 2, True)
    while reader.has_message_available():
        seen.append(reader.read_next(5000).data())
    assert seen == values + more


# With the official clients a seek by message id is exclusive unless the consumer is configured
# start_message_id_inclusive: the broker rewinds to the entry of the id (as Apache Pulsar's
# resetCursor does) and the client drops the message at the id itself, or the earlier indexes of
# its batch.
@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
def test_consumer_seek_by_message_id_redelivers_immediately(
    client: pulsar.Client, topic: str, batching: bool, inclusive: bool
) -> None:
    values, ids = _produce(client, topic, 20, batching)
    consumer = client.subscribe(
        topic, "sub", initial_position=pulsar.InitialPosition.Earliest, start_message_id_inclusive=inclusive
    )
    assert_exactly(receive_n(consumer, 20, ack=True), values)
    assert_silent(consumer)
    k = 5 if not batching else next(i for i, mid in enumerate(ids) if mid.batch_index() == 3)
    consumer.seek(ids[k])
    first = k if inclusive else k + 1
    got = receive_n(consumer, 20 - first, ack=True)  # no new publish needed
    assert [m.data() for m in got] == values[first:]
    assert_silent(consumer)
    consumer.seek(pulsar.MessageId.earliest)
    assert [m.data() for m in receive_n(consumer, 20, ack=True)] == values
    assert_silent(consumer)
    consumer.seek(pulsar.MessageId.latest)
    assert_silent(consumer)
    producer = client.create_producer(topic)
    producer.send(b"after-seek-latest")
    assert receive_n(consumer, 1, ack=True)[0].data() == b"after-seek-latest"
    assert_silent(consumer)


def test_seek_on_a_shared_subscription_rewinds_every_consumer(client: pulsar.Client, topic: str) -> None:
    values, _ = _produce(client, topic, 30, False)
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    c1.seek(pulsar.MessageId.earliest)
    got = drain(c1) + drain(c2) + drain(c1)
    assert_exactly(got, values)


def _produce_in_two_eras(client: pulsar.Client, topic: str) -> tuple[list[bytes], list[bytes], int]:
    producer = client.create_producer(topic)
    before = payloads(10, "before")
    after = payloads(10, "after")
    send_all(producer, before)
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    send_all(producer, after)
    producer.close()
    return before, after, cut


def test_consumer_seek_by_timestamp(client: pulsar.Client, topic: str) -> None:
    before, after, cut = _produce_in_two_eras(client, topic)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    assert_exactly(receive_n(consumer, 20, ack=True), before + after)
    consumer.seek(cut)
    assert [m.data() for m in receive_n(consumer, 10, ack=True)] == after
    assert_silent(consumer)
    consumer.seek(0)
    assert [m.data() for m in receive_n(consumer, 20, ack=True)] == before + after
    assert_silent(consumer)
    consumer.seek(int(time.time() * 1000) + 60_000)  # in the future: nothing
    assert_silent(consumer)


def test_reader_seek_by_message_id_and_timestamp(client: pulsar.Client, topic: str) -> None:
    before, after, cut = _produce_in_two_eras(client, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = read_n(reader, 20)
    assert [m.data() for m in got] == before + after
    assert not reader.has_message_available()
    reader.seek(got[4].message_id())  # exclusive, as for a consumer
    assert reader.has_message_available()
    assert [m.data() for m in read_n(reader, 15)] == (before + after)[5:]
    assert_silent(reader)
    reader.seek(cut)
    assert [m.data() for m in read_n(reader, 10)] == after
    assert not reader.has_message_available()
    assert_silent(reader)
    reader.seek(pulsar.MessageId.earliest)
    assert [m.data() for m in read_n(reader, 20)] == before + after
    assert_silent(reader)


def test_get_last_message_id(client: pulsar.Client, topic: str, batching: bool) -> None:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    _, ids = _produce(client, topic, 17, batching)
    last = consumer.get_last_message_id()
    assert position(last) == position(ids[-1])
    if batching:
        assert last.batch_index() == ids[-1].batch_index() >= 0
    # Still the last one after consuming: the last *published* id, not a cursor position.
    receive_n(consumer, 17, ack=True)
    assert position(consumer.get_last_message_id()) == position(ids[-1])


def test_get_last_message_id_on_empty_topic(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    last = consumer.get_last_message_id()
    assert last.entry_id() == -1
