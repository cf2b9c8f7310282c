"""Subscription types with two consumers, and durable resume of a subscription."""

from __future__ import annotations

import pulsar
import pytest

from tests.helpers.judge import (
    assert_exactly,
    assert_silent,
    drain,
    payloads,
    receive_n,
    send_all,
)


def test_exclusive_refuses_a_second_consumer(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    # A different type on the same subscription is refused as well while a consumer is connected.
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    values = payloads(20)
    send_all(producer, values)
    assert_exactly(receive_n(first, 20, ack=True), values)
    first.close()
    # Once the first is gone, a new exclusive consumer is welcome and resumes after the acked ones.
    second = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    more = payloads(5, "more")
    send_all(producer, more)
    assert_exactly(receive_n(second, 5, ack=True), more)
    assert_silent(second)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_shared_two_consumers_split_without_duplicates(
    client: pulsar.Client, topic: str, batching: bool
) -> None:
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=50)
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=50)
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=10)
    values = payloads(400)
    send_all(producer, values)
    got1: list[pulsar.Message] = []
    got2: list[pulsar.Message] = []
    # Alternate so neither consumer's small queue holds the dispatch back.
    while True:
        a = drain(c1, wait_ms=200)
        b = drain(c2, wait_ms=200)
        got1 += a
        got2 += b
        if not a and not b:
            break
    assert got1 and got2, "both shared consumers get a share"
    assert_exactly(got1 + got2, values)


def test_failover_only_active_receives_then_fails_over(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="c-a")
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="c-b")
    producer = client.create_producer(topic)
    values = payloads(40)
    send_all(producer, values[:20])
    # Which one is active is the broker's choice; exactly one of them receives everything.
    got1 = drain(c1, ack=False)
    got2 = drain(c2, ack=False)
    assert not (got1 and got2), "a failover standby consumer received messages"
    active, standby, got = (c1, c2, got1) if got1 else (c2, c1, got2)
    assert_exactly(got, values[:20])
    assert_silent(standby)
    for m in got[:10]:
        active.acknowledge(m)
    active.close()  # flushes its acks; the 10 unacked ones go to the standby
    send_all(producer, values[20:])
    taken_over = receive_n(standby, 30, ack=True)
    assert_exactly(taken_over, [m.data() for m in got[10:]] + values[20:])
    assert_silent(standby)


@pytest.mark.parametrize(
    "batching_type", [None, pulsar.BatchingType.KeyBased], ids=["single", "key-based-batches"]
)
def test_key_shared_each_key_on_one_consumer(
    client: pulsar.Client, topic: str, batching_type: pulsar.BatchingType | None
) -> None:
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
    if batching_type is None:
        producer = client.create_producer(topic)
    else:
        producer = client.create_producer(topic, batching_enabled=True, batching_type=batching_type)
    values = payloads(300)
    keys = {v: f"key-{i % 23}" for i, v in enumerate(values)}
    _send_keyed(producer, values, keys)
    got1 = drain(c1)
    got2 = drain(c2)
    got1 += drain(c1)
    assert_exactly(got1 + got2, values)
    keys1 = {m.partition_key() for m in got1}
    keys2 = {m.partition_key() for m in got2}
    assert not keys1 & keys2, f"keys on both consumers: {sorted(keys1 & keys2)}"
    assert keys1 and keys2, "23 keys over two consumers: both get some"
    # Per key, messages arrive in publish order.
    for got in (got1, got2):
        for key in {m.partition_key() for m in got}:
            seq = [m.data() for m in got if m.partition_key() == key]
            assert seq == [v for v in values if keys[v] == key]


@pytest.mark.parametrize(
    "sub_type", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Shared], ids=lambda t: t.name
)
def test_durable_subscription_resumes_after_acknowledged(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    producer = client.create_producer(topic)
    values = payloads(100)
    consumer = client.subscribe(topic, "durable", consumer_type=sub_type)
    send_all(producer, values)
    assert_exactly(receive_n(consumer, 50, ack=True), values[:50])
    consumer.close()
    consumer = client.subscribe(topic, "durable", consumer_type=sub_type)
    rest = receive_n(consumer, 50, ack=True)
    assert [m.data() for m in rest] == values[50:]
    assert_silent(consumer)
    consumer.close()
    # Fully acknowledged: a third consumer gets only what is published next.
    consumer = client.subscribe(topic, "durable", consumer_type=sub_type)
    assert_silent(consumer)
    producer.send(b"next")
    assert receive_n(consumer, 1, ack=True)[0].data() == b"next"


def test_initial_position_applies_only_to_a_new_subscription(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    send_all(producer, payloads(5, "old"))
    latest = client.subscribe(topic, "latest-sub", initial_position=pulsar.InitialPosition.Latest)
    earliest = client.subscribe(topic, "earliest-sub", initial_position=pulsar.InitialPosition.Earliest)
    new = payloads(5, "new")
    send_all(producer, new)
    assert_exactly(receive_n(latest, 5, ack=True), new)
    assert_silent(latest)
    assert_exactly(receive_n(earliest, 10, ack=True), payloads(5, "old") + new)
    assert_silent(earliest)
    earliest.close()
    # The subscription exists now: Earliest on resubscribe does not rewind it.
    again = client.subscribe(topic, "earliest-sub", initial_position=pulsar.InitialPosition.Earliest)
    assert_silent(again)


def test_unsubscribe_deletes_the_cursor(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    send_all(producer, payloads(3))
    receive_n(consumer, 3, ack=True)
    consumer.unsubscribe()
    consumer.close()
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    assert_exactly(receive_n(consumer, 3, ack=True), payloads(3))
    assert_silent(consumer)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_flow_control_with_a_small_receiver_queue(client: pulsar.Client, topic: str, batching: bool) -> None:
    consumer = client.subscribe(topic, "sub", receiver_queue_size=7)
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_messages=5, block_if_queue_full=True
    )
    values = payloads(1500)
    send_all(producer, values)
    got = receive_n(consumer, 1500, ack=True)
    assert [m.data() for m in got] == values
    assert_silent(consumer)


@pytest.mark.timeout(60)
def test_zero_queue_consumers_get_messages_only_when_receiving(client: pulsar.Client, topic: str) -> None:
    # A zero-queue consumer asks for one message per receive(); the client refuses receive(timeout).
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=0)
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=0)
    producer = client.create_producer(topic)
    values = payloads(10)
    send_all(producer, values)
    # c1 takes 4 one by one; nothing was pushed to c2 meanwhile, so it gets exactly the other 6.
    first = [c1.receive() for _ in range(4)]
    second = [c2.receive() for _ in range(6)]
    for c, msgs in ((c1, first), (c2, second)):
        for m in msgs:
            c.acknowledge(m)
    assert [m.data() for m in first] == values[:4]
    assert_exactly(first + second, values)


@pytest.mark.parametrize("then", ["ack", "close"])
def test_key_shared_consumer_joining_midstream_keeps_key_order(
    client: pulsar.Client, topic: str, then: str
) -> None:
    """As Apache Pulsar: a consumer that joins while messages are pending gets none of the newer ones
    until everything delivered before it joined is acknowledged (or redelivered to it)."""
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="ks-a")
    producer = client.create_producer(topic)
    values = payloads(80)
    keys = {v: f"key-{i % 8}" for i, v in enumerate(values)}
    _send_keyed(producer, values[:40], keys)
    held = receive_n(c1, 40)  # all of them, unacknowledged
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="ks-b")
    _send_keyed(producer, values[40:], keys)
    newer1 = drain(c1, ack=False)
    assert 0 < len(newer1) < 40, "c1 keeps its own keys' newer messages"
    assert_silent(c2)  # c2's keys wait for the older messages held by c1
    if then == "ack":
        for m in held + newer1:
            c1.acknowledge(m)
        got2 = drain(c2)
        assert_exactly(held + newer1 + got2, values)
        first, second = held + newer1, got2
    else:
        c1.close()  # everything c1 held goes to c2, before c2's newer messages
        got2 = drain(c2)
        assert_exactly(got2, values)
        first, second = [], got2
    for key in set(keys.values()):
        seq = [m.data() for m in first + second if m.partition_key() == key]
        assert seq == [v for v in values if keys[v] == key], key


def _send_keyed(producer: pulsar.Producer, values: list[bytes], keys: dict[bytes, str]) -> None:
    results: list[pulsar.Result] = []
    for v in values:
        producer.send_async(v, lambda res, _mid: results.append(res), partition_key=keys[v])
    producer.flush()
    assert results == [pulsar.Result.Ok] * len(values)
