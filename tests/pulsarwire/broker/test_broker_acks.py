"""Acknowledgement and redelivery: individual, cumulative, negative, ack timeout, batch-index acks."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.helpers.judge import (
    assert_exactly,
    assert_silent,
    payloads,
    receive_n,
    send_all,
)


def test_individual_ack_then_resubscribe_gets_exactly_the_unacked(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    values = payloads(40)
    send_all(producer, values)
    got = receive_n(consumer, 40)
    for m in got:
        if int(m.data()[-5:]) % 3 == 0:
            consumer.acknowledge(m)
    consumer.close()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    unacked = [v for v in values if int(v[-5:]) % 3 != 0]
    again = receive_n(consumer, len(unacked), ack=True)
    assert [m.data() for m in again] == unacked
    assert_silent(consumer)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_cumulative_ack(client: pulsar.Client, topic: str, batching: bool) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=10)
    values = payloads(50)
    ids = send_all(producer, values)
    got = receive_n(consumer, 50)
    # Acknowledge up to the last message of an entry: everything before it is acknowledged too.
    cut = 29
    if batching:
        # The last message of the batch that holds message 29.
        entry = (ids[cut].ledger_id(), ids[cut].entry_id())
        cut = max(i for i, mid in enumerate(ids) if (mid.ledger_id(), mid.entry_id()) == entry)
    consumer.acknowledge_cumulative(got[cut])
    consumer.close()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    rest = receive_n(consumer, 49 - cut, ack=True)
    assert [m.data() for m in rest] == values[cut + 1 :]
    assert_silent(consumer)


def test_cumulative_ack_is_refused_on_shared(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    producer.send(b"x")
    msg = consumer.receive(5000)
    with pytest.raises(pulsar.CumulativeAcknowledgementNotAllowedError):
        consumer.acknowledge_cumulative(msg)


@pytest.mark.parametrize(
    "sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Exclusive], ids=lambda t: t.name
)
def test_negative_ack_redelivers_exactly_the_nacked(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=sub_type, negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    values = payloads(20)
    send_all(producer, values)
    got = receive_n(consumer, 20)
    nacked = []
    for m in got:
        if int(m.data()[-5:]) % 4 == 1:
            consumer.negative_acknowledge(m)
            nacked.append(m.data())
        else:
            consumer.acknowledge(m)
    again = receive_n(consumer, len(nacked), ack=True)
    assert_exactly(again, nacked)
    if sub_type == pulsar.ConsumerType.Shared:
        # Apache Pulsar counts redeliveries on Shared/Key_Shared subscriptions.
        assert all(m.redelivery_count() == 1 for m in again)
    assert_silent(consumer)


def test_redeliver_unacknowledged_messages(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    values = payloads(10)
    send_all(producer, values)
    got = receive_n(consumer, 10)
    for m in got[:4]:
        consumer.acknowledge(m)
    time.sleep(0.3)  # let the client's grouped acks reach the broker first
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 6, ack=True)
    assert_exactly(again, values[4:])
    assert all(m.redelivery_count() == 1 for m in again)
    assert_silent(consumer)


def test_unacked_redelivered_to_other_consumer_after_close(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=1000)
    producer = client.create_producer(topic)
    values = payloads(30)
    send_all(producer, values)
    got1 = receive_n(c1, 30)  # all 30 went to c1 (the only consumer)
    for m in got1[:10]:
        c1.acknowledge(m)
    assert all(m.redelivery_count() == 0 for m in got1)
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert_silent(c2)  # nothing to hand out while c1 holds them
    c1.close()
    got2 = receive_n(c2, 20, ack=True)
    assert_exactly(got2, values[10:])
    # pulsarwire counts a redelivery caused by the consumer going away (Apache Pulsar reports 0 here).
    assert all(m.redelivery_count() == 1 for m in got2)
    assert_silent(c2)


def test_ack_timeout_redelivers_unacked(client: pulsar.Client, topic: str) -> None:
    # The C++ client refuses timeouts under 10 s.
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, unacked_messages_timeout_ms=10_000
    )
    producer = client.create_producer(topic)
    values = payloads(6)
    send_all(producer, values)
    got = receive_n(consumer, 6)
    for m in got[::2]:
        consumer.acknowledge(m)
    again = receive_n(consumer, 3, ack=True, timeout_ms=15_000)
    assert_exactly(again, values[1::2])
    assert all(m.redelivery_count() == 1 for m in again)
    assert_silent(consumer)


def test_batch_index_ack_resumes_with_only_unacked_messages_of_a_batch(
    client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
    )
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    values = payloads(30)
    ids = send_all(producer, values)
    assert len({(i.ledger_id(), i.entry_id()) for i in ids}) < 30, "messages were batched"
    got = receive_n(consumer, 30)
    acked = set()
    for m in got:
        if int(m.data()[-5:]) % 3 != 2:
            consumer.acknowledge(m)
            acked.add(m.data())
    consumer.close()
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
    )
    expected = [v for v in values if v not in acked]
    again = receive_n(consumer, len(expected), ack=True)
    assert [m.data() for m in again] == expected
    for m in again:  # the ids are those of the original batch positions
        assert m.message_id().batch_index() >= 0
    assert_silent(consumer)
    consumer.close()
    # Everything is acknowledged now.
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
    )
    assert_silent(consumer)


def test_batch_index_ack_partial_batch_then_negative_ack(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        batch_index_ack_enabled=True,
        negative_ack_redelivery_delay_ms=100,
    )
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    values = payloads(10)
    send_all(producer, values)
    got = receive_n(consumer, 10)
    for m in got[:7]:
        consumer.acknowledge(m)
    # The client sends grouped acks and negative acks from two independent 100 ms timers; were the
    # redelivery request first, the whole batch would come back (with Apache Pulsar too).
    time.sleep(0.3)
    for m in got[7:]:
        consumer.negative_acknowledge(m)
    again = receive_n(consumer, 3, ack=True)
    assert_exactly(again, values[7:])
    assert_silent(consumer)
