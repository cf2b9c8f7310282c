"""pulsarwire consumers over several topics (list, regex, partitions), at a topic's end, corrupt entries."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client, ConsumerType, InitialPosition
from pulsarwire.client.message import Message
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import CorruptMessageError, ReachedEndOfTopicError
from tests.helpers.judge import assert_exactly, new_topic, payloads, receive_n, send_all
from tests.helpers.pw_client import (
    Position,
    backlog,
    position,
    pw_assert_silent,
    pw_receive_n,
)

EARLIEST = InitialPosition.Earliest


def where(m: Message | pulsar.Message) -> tuple[bytes, str, int, Position]:
    """Payload, topic, partition and position of a message of either client."""
    mid = m.message_id()
    partition = mid.partition if isinstance(mid, MessageId) else mid.partition()
    return (m.data(), m.topic_name(), partition, position(mid))


def produce(
    client: pulsar.Client, topic: str, values: list[bytes], *, batching: bool = False
) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=5)
    ids = send_all(producer, values)
    producer.close()
    return ids


def test_multi_topic_list(client: pulsar.Client, pw: Client) -> None:
    topics = [new_topic("multi") for _ in range(3)]
    sent = {t: payloads(20, f"t{i}") for i, t in enumerate(topics)}
    for i, t in enumerate(topics):
        produce(client, t, sent[t], batching=i == 1)
    consumer = pw.subscribe(topics, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST)
    got = pw_receive_n(consumer, 60)
    assert_exactly([m.data() for m in got], [v for vs in sent.values() for v in vs])
    for t in topics:  # each message names its topic, in publish order per topic
        assert [m.data() for m in got if m.topic_name() == t] == sent[t]
    acked = {m.data() for m in got[::2]}
    for m in got[::2]:
        consumer.acknowledge(m)  # acks go to the right topic
    pw_assert_silent(consumer)
    consumer.close()
    consumer = pw.subscribe(topics, "sub", consumer_type=ConsumerType.Shared)
    rest = [v for vs in sent.values() for v in vs if v not in acked]
    assert_exactly([m.data() for m in pw_receive_n(consumer, len(rest), ack=True)], rest)
    pw_assert_silent(consumer)


@pytest.mark.parametrize("n_existing", [1, 2])
def test_regex_subscription_picks_up_a_topic_created_later(
    client: pulsar.Client, pw: Client, n_existing: int
) -> None:
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    existing = [f"persistent://public/default/{prefix}-{i}" for i in range(n_existing)]
    for t in existing:
        produce(client, t, [f"{t}-old".encode()])
    produce(client, f"persistent://public/default/other-{prefix}", [b"not-matching"])
    consumer = pw.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "sub",
        initial_position=EARLIEST,
        pattern_auto_discovery_period=0.5,
    )
    got = pw_receive_n(consumer, n_existing, ack=True)
    assert_exactly([m.data() for m in got], [f"{t}-old".encode() for t in existing])
    later = f"persistent://public/default/{prefix}-later"
    values = payloads(10, "later")
    produce(client, later, values)
    got = pw_receive_n(consumer, 10, ack=True, timeout_ms=5000)
    assert [m.data() for m in got] == values
    assert {m.topic_name() for m in got} == {later}
    produce(client, existing[0], [b"new-on-old"])
    assert pw_receive_n(consumer, 1, ack=True)[0].data() == b"new-on-old"
    pw_assert_silent(consumer)
    consumer.close()
    # Every ack went to the topic of its message: nothing comes back on any of them.
    consumer = pw.subscribe(re.compile(f"persistent://public/default/{prefix}-.*"), "sub")
    assert sorted(consumer.topic().split(",")) == sorted([*existing, later])
    pw_assert_silent(consumer)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_partitioned_topic_through_one_consumer(
    shared_broker: Broker, client: pulsar.Client, pw: Client, topic: str, batching: bool
) -> None:
    shared_broker.create_partitioned_topic(topic, 3)
    assert pw.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    judge = client.subscribe(topic, "judge", initial_position=pulsar.InitialPosition.Earliest)
    consumer = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Failover, initial_position=EARLIEST)
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=5)
    values = payloads(90)
    for i, v in enumerate(values):
        producer.send_async(v, None, partition_key=f"k{i % 7}")
    producer.flush()
    got = pw_receive_n(consumer, 90)
    expected = receive_n(judge, 90)

    assert sorted(map(where, got)) == sorted(map(where, expected))
    assert {m.message_id().partition for m in got} == {0, 1, 2}
    assert all(m.topic_name() == f"{topic}-partition-{m.message_id().partition}" for m in got)
    for m in got:
        consumer.acknowledge(m)
    pw_assert_silent(consumer)
    consumer.close()
    consumer = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Failover)
    pw_assert_silent(consumer)
    producer.send(b"one-more", partition_key="x")
    assert pw_receive_n(consumer, 1, ack=True)[0].data() == b"one-more"


def test_end_of_topic_after_everything_is_acked(
    shared_broker: Broker, client: pulsar.Client, pw: Client, topic: str
) -> None:
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST)
    values = payloads(10)
    produce(client, topic, values[:4])
    assert [m.data() for m in pw_receive_n(consumer, 4, ack=True)] == values[:4]
    produce(client, topic, values[4:])
    shared_broker.terminate_topic(topic)
    # What was published before the termination is still delivered, then the end is reported.
    assert [m.data() for m in pw_receive_n(consumer, 6, ack=True)] == values[4:]
    with pytest.raises(ReachedEndOfTopicError):
        consumer.receive(3000)
    with pytest.raises(ReachedEndOfTopicError):  # and stays reported
        consumer.receive(100)
    consumer.close()
    again = pw.subscribe(topic, "sub")
    with pytest.raises(ReachedEndOfTopicError):
        again.receive(3000)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_corrupt_entry_raises_naming_it_and_is_not_acked(
    start_broker: Callable[..., Broker],
    make_client: Callable[[Broker], pulsar.Client],
    make_pw: Callable[[Broker], Client],
    topic: str,
    batching: bool,
) -> None:
    b = start_broker()
    client, pw = make_client(b), make_pw(b)
    values = payloads(10)
    ids = produce(client, topic, values, batching=batching)
    first_entry = [v for v, i in zip(values, ids, strict=True) if i.entry_id() == ids[0].entry_id()]
    b.inject(corrupt_dispatches=1)
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST)
    with pytest.raises(CorruptMessageError) as err:
        consumer.receive(5000)
    bad = err.value.message_id
    assert (bad.ledger_id, bad.entry_id) == (ids[0].ledger_id(), ids[0].entry_id())
    assert f"{ids[0].ledger_id()}:{ids[0].entry_id()}" in str(err.value)
    rest = values[len(first_entry) :]
    assert [m.data() for m in pw_receive_n(consumer, len(rest), ack=True)] == rest
    pw_assert_silent(consumer)
    consumer.close()
    # Never acknowledged: still in the backlog, and delivered (intact) to the next consumer.
    assert backlog(b, topic, "sub") == len(first_entry)
    consumer = pw.subscribe(topic, "sub")
    assert [m.data() for m in pw_receive_n(consumer, len(first_entry), ack=True)] == first_entry
    pw_assert_silent(consumer)


def test_regex_subscription_learns_new_topics_from_the_topic_watcher(
    client: pulsar.Client, pw: Client, shared_broker: Broker
) -> None:
    # Discovery polling is slowed down to a minute: only the broker's WATCH_TOPIC_UPDATE can be fast.
    prefix = f"watched-{uuid.uuid4().hex[:8]}"
    produce(client, f"persistent://public/default/{prefix}-0", [b"first"])
    consumer = pw.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "sub",
        initial_position=EARLIEST,
        pattern_auto_discovery_period=60,
    )
    assert pw_receive_n(consumer, 1, ack=True)[0].data() == b"first"
    later = f"persistent://public/default/{prefix}-later"
    produce(client, later, [b"from-the-new-topic"])
    got = pw_receive_n(consumer, 1, ack=True, timeout_ms=5000)
    assert got[0].data() == b"from-the-new-topic" and got[0].topic_name() == later
