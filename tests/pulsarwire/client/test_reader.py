"""pulsarwire readers (earliest, latest, a given id, inclusive or not), has_message_available, seek.

The semantics are those the broker suite established with the official client:
a start id or a seek id is exclusive unless ``start_message_id_inclusive``, and
for a batch message id the earlier indexes of its batch are dropped too.
"""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest

from pulsarwire.client.blocking import Client, ConsumerType, InitialPosition, Reader
from pulsarwire.codec.message_id import MessageId
from tests.helpers.judge import payloads, send_all
from tests.helpers.pw_client import (
    position,
    pw_assert_silent,
    pw_receive_n,
    to_pw_id,
)


def produce(
    client: pulsar.Client, topic: str, n: int, batching: bool, prefix: str = "m"
) -> tuple[list[bytes], list[pulsar.MessageId]]:
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=7)
    values = payloads(n, prefix)
    ids = send_all(producer, values)
    producer.close()
    if batching:
        assert len({(i.ledger_id(), i.entry_id()) for i in ids}) < n, "the producer did not batch"
    return values, ids


def read_all(reader: Reader) -> list[bytes]:
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(5000).data())
    return out


# -- readers ----------------------------------------------------------------------------------------


def test_reader_from_earliest(client: pulsar.Client, pw: Client, topic: str, batching: bool) -> None:
    values, ids = produce(client, topic, 30, batching)
    reader = pw.create_reader(topic, MessageId.EARLIEST)
    assert reader.has_message_available()
    got = pw_receive_n(reader, 30)
    assert [m.data() for m in got] == values
    assert [position(m.message_id()) for m in got] == [position(i) for i in ids]
    assert not reader.has_message_available()
    pw_assert_silent(reader)


def test_reader_from_latest(client: pulsar.Client, pw: Client, topic: str, batching: bool) -> None:
    produce(client, topic, 10, batching)
    reader = pw.create_reader(topic, MessageId.LATEST)
    assert not reader.has_message_available()
    pw_assert_silent(reader)
    new, _ = produce(client, topic, 12, batching, "new")
    assert reader.has_message_available()
    assert [m.data() for m in pw_receive_n(reader, 12)] == new
    assert not reader.has_message_available()
    pw_assert_silent(reader)


def test_reader_on_an_empty_topic(client: pulsar.Client, pw: Client, topic: str) -> None:
    client.create_producer(topic).close()  # the topic exists, it has no message
    for start in (MessageId.EARLIEST, MessageId.LATEST):
        reader = pw.create_reader(topic, start)
        assert not reader.has_message_available()
        reader.close()
    reader = pw.create_reader(topic, MessageId.EARLIEST)
    client.create_producer(topic).send(b"first")
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"first"
    assert not reader.has_message_available()


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
@pytest.mark.parametrize("k", [0, 9, 16, 29])
def test_reader_from_a_message_id(
    client: pulsar.Client, pw: Client, topic: str, batching: bool, inclusive: bool, k: int
) -> None:
    values, ids = produce(client, topic, 30, batching)
    start = to_pw_id(ids[k])
    assert position(start) == position(ids[k])
    reader = pw.create_reader(topic, start, start_message_id_inclusive=inclusive)
    first = k if inclusive else k + 1
    assert reader.has_message_available() is (first < 30)
    got = pw_receive_n(reader, 30 - first)
    assert [m.data() for m in got] == values[first:]
    assert not reader.has_message_available()
    pw_assert_silent(reader)


def test_reader_from_an_id_of_its_own_messages(
    client: pulsar.Client, pw: Client, topic: str, batching: bool
) -> None:
    values, _ = produce(client, topic, 20, batching)
    seen = pw_receive_n(pw.create_reader(topic, MessageId.EARLIEST), 20)
    for k in (3, 11):
        for start in (seen[k].message_id(), MessageId.deserialize(seen[k].message_id().serialize())):
            reader = pw.create_reader(topic, start)
            assert read_all(reader) == values[k + 1 :]
            reader.close()


def test_has_message_available_follows_the_reader(client: pulsar.Client, pw: Client, topic: str) -> None:
    values, _ = produce(client, topic, 3, False)
    reader = pw.create_reader(topic, MessageId.EARLIEST)
    seen = read_all(reader)
    assert seen == values
    more, _ = produce(client, topic, 9, True, "more")
    seen += read_all(reader)
    assert seen == values + more
    pw_assert_silent(reader)


# -- seek -------------------------------------------------------------------------------------------


def _produce_in_two_eras(client: pulsar.Client, topic: str) -> tuple[list[bytes], list[bytes], int]:
    producer = client.create_producer(topic)
    before, after = payloads(10, "before"), payloads(10, "after")
    send_all(producer, before)
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    send_all(producer, after)
    producer.close()
    return before, after, cut


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
def test_consumer_seek_by_message_id(
    client: pulsar.Client, pw: Client, topic: str, batching: bool, inclusive: bool
) -> None:
    values, ids = produce(client, topic, 20, batching)
    consumer = pw.subscribe(
        topic, "sub", initial_position=InitialPosition.Earliest, start_message_id_inclusive=inclusive
    )
    assert [m.data() for m in pw_receive_n(consumer, 20, ack=True)] == values
    pw_assert_silent(consumer)
    k = 5 if not batching else next(i for i, mid in enumerate(ids) if mid.batch_index() == 3)
    consumer.seek(to_pw_id(ids[k]))
    first = k if inclusive else k + 1
    # Delivery resumes at once, no new publish needed.
    assert [m.data() for m in pw_receive_n(consumer, 20 - first, ack=True)] == values[first:]
    pw_assert_silent(consumer)
    consumer.seek(MessageId.EARLIEST)
    assert [m.data() for m in pw_receive_n(consumer, 20, ack=True)] == values
    pw_assert_silent(consumer)
    consumer.seek(MessageId.LATEST)
    pw_assert_silent(consumer)
    client.create_producer(topic).send(b"after-seek-latest")
    assert pw_receive_n(consumer, 1, ack=True)[0].data() == b"after-seek-latest"
    pw_assert_silent(consumer)


@pytest.mark.parametrize("target", ["forward", "back"])
def test_consumer_seek_with_a_full_receive_queue_drops_everything_from_before(
    client: pulsar.Client, pw: Client, topic: str, batching: bool, target: str
) -> None:
    values, ids = produce(client, topic, 200, batching)
    consumer = pw.subscribe(
        topic, "sub", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest
    )
    head = pw_receive_n(consumer, 50, ack=True)  # the rest (150) is queued or on the wire
    assert [m.data() for m in head] == values[:50]
    k = 160 if target == "forward" else 20
    consumer.seek(to_pw_id(ids[k]))
    got = pw_receive_n(consumer, 199 - k, ack=True)
    assert [m.data() for m in got] == values[k + 1 :]
    pw_assert_silent(consumer)


def test_consumer_seek_by_time(client: pulsar.Client, pw: Client, topic: str) -> None:
    before, after, cut = _produce_in_two_eras(client, topic)
    consumer = pw.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    first = pw_receive_n(consumer, 3)  # most of the topic still queued
    assert [m.data() for m in first] == before[:3]
    consumer.seek(cut)
    assert [m.data() for m in pw_receive_n(consumer, 10, ack=True)] == after
    pw_assert_silent(consumer)
    consumer.seek(0)
    assert [m.data() for m in pw_receive_n(consumer, 20, ack=True)] == before + after
    pw_assert_silent(consumer)
    consumer.seek(int(time.time() * 1000) + 60_000)  # in the future: nothing
    pw_assert_silent(consumer)


def test_reader_seek_by_message_id_and_time(client: pulsar.Client, pw: Client, topic: str) -> None:
    before, after, cut = _produce_in_two_eras(client, topic)
    everything = before + after
    reader = pw.create_reader(topic, MessageId.EARLIEST)
    got = pw_receive_n(reader, 20)
    assert [m.data() for m in got] == everything
    assert not reader.has_message_available()
    reader.seek(got[4].message_id())  # exclusive, as for a consumer
    assert reader.has_message_available()
    assert [m.data() for m in pw_receive_n(reader, 15)] == everything[5:]
    pw_assert_silent(reader)
    reader.seek(cut)
    assert reader.has_message_available()
    assert [m.data() for m in pw_receive_n(reader, 10)] == after
    assert not reader.has_message_available()
    pw_assert_silent(reader)
    reader.seek(MessageId.EARLIEST)
    assert reader.has_message_available()
    assert [m.data() for m in pw_receive_n(reader, 20)] == everything
    pw_assert_silent(reader)
    reader.seek(int(time.time() * 1000) + 60_000)  # in the future: nothing
    assert not reader.has_message_available()
    pw_assert_silent(reader)


def test_reader_seek_with_a_full_queue(client: pulsar.Client, pw: Client, topic: str, batching: bool) -> None:
    values, ids = produce(client, topic, 200, batching)
    reader = pw.create_reader(topic, MessageId.EARLIEST)
    assert [m.data() for m in pw_receive_n(reader, 10)] == values[:10]
    reader.seek(to_pw_id(ids[150]))
    assert [m.data() for m in pw_receive_n(reader, 49)] == values[151:]
    assert not reader.has_message_available()
    reader.seek(to_pw_id(ids[30]))
    assert [m.data() for m in pw_receive_n(reader, 5)] == values[31:36]
    reader.seek(cut_time(client, topic))
    more = payloads(3, "late")
    send_all(client.create_producer(topic), more)
    assert [m.data() for m in pw_receive_n(reader, 3)] == more
    pw_assert_silent(reader)


def cut_time(client: pulsar.Client, topic: str) -> int:
    """A publish time after everything on ``topic`` so far."""
    time.sleep(0.02)
    cut = int(time.time() * 1000)
    time.sleep(0.02)
    return cut


def test_reader_reconnecting_after_a_seek_by_time_keeps_the_seek(
    client: pulsar.Client, pw: Client, topic: str, shared_broker: Any
) -> None:
    """The connection drops between seek(time) and the first read: nothing from before the seek."""
    _, after, cut = _produce_in_two_eras(client, topic)
    reader = pw.create_reader(topic, MessageId.EARLIEST)
    reader.seek(cut)
    # the broker resets the consumer after a seek: once it has resubscribed (and maybe already
    # prefetched what follows the seek), cut the connection before anything is read
    deadline = time.monotonic() + 10
    while shared_broker.drop_connections(topic) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert [m.data() for m in pw_receive_n(reader, 10)] == after
    pw_assert_silent(reader)
    # a seek whose messages were prefetched (not read) when the connection went
    reader.seek(cut)
    time.sleep(0.5)
    assert shared_broker.drop_connections(topic) >= 1
    assert [m.data() for m in pw_receive_n(reader, 10)] == after
    pw_assert_silent(reader)
    # and once something was read, a reconnect resumes after it (not at the seek time again)
    reader.seek(cut)
    assert [m.data() for m in pw_receive_n(reader, 3)] == after[:3]
    assert shared_broker.drop_connections(topic) >= 1
    assert [m.data() for m in pw_receive_n(reader, 7)] == after[3:]
    pw_assert_silent(reader)
