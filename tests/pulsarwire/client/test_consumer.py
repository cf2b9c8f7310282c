"""pulsarwire consumers on our broker, fed by the official producer: subscription types, acks, permits.

Every test states the exact message set a consumer must get: nothing
missing, nothing duplicated, nothing acknowledged coming back.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client, ConsumerType, InitialPosition
from pulsarwire.errors import AlreadyClosedError, ConsumerBusy, InvalidConfigurationError
from tests.helpers.judge import assert_exactly, payloads, send_all
from tests.helpers.pw_client import (
    backlog,
    pw_assert_silent,
    pw_drain,
    pw_receive_n,
)

EARLIEST = InitialPosition.Earliest


def produce(
    client: pulsar.Client, topic: str, n: int, *, batching: bool = False, prefix: str = "m"
) -> list[bytes]:
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=7)
    values = payloads(n, prefix)
    ids = send_all(producer, values)
    producer.close()
    if batching:
        assert len({(i.ledger_id(), i.entry_id()) for i in ids}) < n, "the producer did not batch"
    return values


def number(data: bytes) -> int:
    return int(data[-5:])


# -- subscription types -----------------------------------------------------------------------------


def test_exclusive_refuses_a_second_consumer(client: pulsar.Client, pw: Client, topic: str) -> None:
    first = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive, initial_position=EARLIEST)
    with pytest.raises(ConsumerBusy):
        pw.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    with pytest.raises(ConsumerBusy):  # a different type on a subscription in use is refused too
        pw.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    values = produce(client, topic, 30)
    assert [m.data() for m in pw_receive_n(first, 30, ack=True)] == values
    pw_assert_silent(first)
    first.close()
    second = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    more = produce(client, topic, 5, prefix="more")
    assert [m.data() for m in pw_receive_n(second, 5, ack=True)] == more
    pw_assert_silent(second)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_shared_two_consumers_split_exactly(
    client: pulsar.Client, pw: Client, topic: str, batching: bool
) -> None:
    c1 = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=20)
    c2 = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=20)
    values = produce(client, topic, 200, batching=batching)
    got1 = pw_drain(c1)
    got2 = pw_drain(c2)
    got1 += pw_drain(c1)
    assert got1 and got2, f"one consumer got nothing: {len(got1)} / {len(got2)}"
    assert_exactly([m.data() for m in got1 + got2], values)


def test_failover_only_the_active_consumer_receives_then_the_other_takes_over(
    client: pulsar.Client, pw: Client, topic: str
) -> None:
    # The broker orders failover consumers by (priority, name): "a" is active.
    a = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Failover, consumer_name="a")
    b = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Failover, consumer_name="b")
    values = produce(client, topic, 40)
    got = pw_receive_n(a, 40)
    assert [m.data() for m in got] == values
    pw_assert_silent(b)
    for m in got[:15]:
        a.acknowledge(m)
    a.close()
    taken = pw_receive_n(b, 25, ack=True)
    assert [m.data() for m in taken] == values[15:]
    more = produce(client, topic, 10, prefix="more")
    assert [m.data() for m in pw_receive_n(b, 10, ack=True)] == more
    pw_assert_silent(b)


def test_key_shared_each_key_goes_to_one_consumer(client: pulsar.Client, pw: Client, topic: str) -> None:
    c1 = pw.subscribe(topic, "sub", consumer_type=ConsumerType.KeyShared, consumer_name="c1")
    c2 = pw.subscribe(topic, "sub", consumer_type=ConsumerType.KeyShared, consumer_name="c2")
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(12)]
    sent: dict[str, list[bytes]] = defaultdict(list)
    for i in range(240):
        key = keys[i % len(keys)]
        value = f"{key}-{i:05d}".encode()
        sent[key].append(value)
        producer.send_async(value, None, partition_key=key)
    producer.flush()
    got1, got2 = pw_drain(c1), pw_drain(c2)
    got1 += pw_drain(c1)
    assert got1 and got2, f"one consumer got nothing: {len(got1)} / {len(got2)}"
    assert_exactly([m.data() for m in got1 + got2], [v for vs in sent.values() for v in vs])
    by_consumer = [{m.partition_key() for m in got} for got in (got1, got2)]
    assert not by_consumer[0] & by_consumer[1], f"keys on both consumers: {by_consumer[0] & by_consumer[1]}"
    for got in (got1, got2):  # and in publish order per key
        for key in {m.partition_key() for m in got}:
            assert [m.data() for m in got if m.partition_key() == key] == sent[key]


# -- acknowledgements -------------------------------------------------------------------------------


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize(
    "sub_type", [ConsumerType.Exclusive, ConsumerType.Shared], ids=["exclusive", "shared"]
)
def test_individual_acks_are_never_redelivered(
    client: pulsar.Client, pw: Client, topic: str, batching: bool, sub_type: int
) -> None:
    consumer = pw.subscribe(topic, "sub", consumer_type=sub_type, initial_position=EARLIEST)
    values = produce(client, topic, 60, batching=batching)
    got = pw_receive_n(consumer, 60)
    assert [m.data() for m in got] == values
    for m in got:
        if number(m.data()) % 3 == 0:
            consumer.acknowledge(m)
    consumer.close()
    consumer = pw.subscribe(topic, "sub", consumer_type=sub_type)
    unacked = [v for v in values if number(v) % 3 != 0]
    again = pw_receive_n(consumer, len(unacked))
    assert [m.data() for m in again] == unacked
    # The same ids as at the first delivery.
    first_ids = {m.data(): m.message_id() for m in got}
    assert all(m.message_id() == first_ids[m.data()] for m in again)
    for m in again:
        consumer.acknowledge(m)
    pw_assert_silent(consumer)
    consumer.close()
    consumer = pw.subscribe(topic, "sub", consumer_type=sub_type)
    pw_assert_silent(consumer)


def test_partly_acked_batch_without_batch_index_acks_comes_back_whole(
    client: pulsar.Client, pw: Client, topic: str
) -> None:
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, batch_index_ack_enabled=False)
    values = produce(client, topic, 21, batching=True)  # 3 batches of 7
    got = pw_receive_n(consumer, 21)
    entries = sorted({(m.message_id().ledger_id, m.message_id().entry_id) for m in got})
    assert len(entries) == 3
    for m in got:  # the first batch entirely, one message of the second
        mid = m.message_id()
        if (mid.ledger_id, mid.entry_id) == entries[0] or m.data() == values[8]:
            consumer.acknowledge(m)
    consumer.close()
    consumer = pw.subscribe(topic, "sub", batch_index_ack_enabled=False)
    assert [m.data() for m in pw_receive_n(consumer, 14, ack=True)] == values[7:]
    pw_assert_silent(consumer)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("batch_index_acks", [True, False], ids=["index-acks", "entry-acks"])
def test_cumulative_ack(
    client: pulsar.Client, pw: Client, topic: str, batching: bool, batch_index_acks: bool
) -> None:
    options = {"consumer_type": ConsumerType.Exclusive, "batch_index_ack_enabled": batch_index_acks}
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, **options)
    values = produce(client, topic, 50, batching=batching)
    got = pw_receive_n(consumer, 50)
    cut = 31  # in the middle of a batch of 7 (28..34)
    consumer.acknowledge_cumulative(got[cut])
    consumer.close()
    consumer = pw.subscribe(topic, "sub", **options)
    first = cut + 1
    if batching and not batch_index_acks:  # only whole entries are acknowledged
        first = cut - cut % 7
    assert [m.data() for m in pw_receive_n(consumer, 50 - first)] == values[first:]
    pw_assert_silent(consumer)


@pytest.mark.parametrize(
    "sub_type", [ConsumerType.Shared, ConsumerType.KeyShared], ids=["shared", "key_shared"]
)
def test_cumulative_ack_is_refused_on_shared(
    client: pulsar.Client, pw: Client, topic: str, sub_type: int
) -> None:
    consumer = pw.subscribe(topic, "sub", consumer_type=sub_type)
    values = produce(client, topic, 3)
    got = pw_receive_n(consumer, 3)
    with pytest.raises(InvalidConfigurationError):
        consumer.acknowledge_cumulative(got[-1])
    consumer.close()
    consumer = pw.subscribe(topic, "sub", consumer_type=sub_type)  # nothing was acknowledged
    assert [m.data() for m in pw_receive_n(consumer, 3, ack=True)] == values


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize(
    "sub_type", [ConsumerType.Exclusive, ConsumerType.Shared], ids=["exclusive", "shared"]
)
def test_negative_ack_redelivers_exactly_the_nacked(
    client: pulsar.Client, pw: Client, topic: str, batching: bool, sub_type: int
) -> None:
    # The nack delay is longer than the ack grouping time (100 ms): acks of a batch's other
    # messages reach the broker before the redelivery request, so only the nacked come back.
    consumer = pw.subscribe(
        topic, "sub", consumer_type=sub_type, initial_position=EARLIEST, negative_ack_redelivery_delay_ms=300
    )
    values = produce(client, topic, 40, batching=batching)
    nacked = []
    for m in pw_receive_n(consumer, 40):
        if number(m.data()) % 4 == 1:
            consumer.negative_acknowledge(m)
            nacked.append(m.data())
        else:
            consumer.acknowledge(m)
    started = time.monotonic()
    again = pw_receive_n(consumer, len(nacked))
    assert time.monotonic() - started >= 0.25, "redelivered before the nack delay"
    assert [m.data() for m in again] == nacked
    assert all(m.redelivery_count() == 1 for m in again)
    for m in again:
        consumer.acknowledge(m)
    pw_assert_silent(consumer, 600)
    consumer.close()
    consumer = pw.subscribe(topic, "sub", consumer_type=sub_type)
    pw_assert_silent(consumer)
    assert values


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_ack_timeout_redelivers_the_unacked(
    client: pulsar.Client, pw: Client, topic: str, batching: bool
) -> None:
    consumer = pw.subscribe(
        topic,
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=EARLIEST,
        unacked_messages_timeout_ms=500,
    )
    values = produce(client, topic, 30, batching=batching)
    got = pw_receive_n(consumer, 30)
    for m in got:
        if number(m.data()) % 2 == 0:
            consumer.acknowledge(m)
    started = time.monotonic()
    again = pw_receive_n(consumer, 15, timeout_ms=3000)
    assert time.monotonic() - started >= 0.3, "redelivered before the ack timeout"
    assert [m.data() for m in again] == values[1::2]
    assert all(m.redelivery_count() == 1 for m in again)
    for m in again:
        consumer.acknowledge(m)
    pw_assert_silent(consumer, 1000)  # acked in time: not redelivered again


def test_redeliver_unacknowledged_messages(client: pulsar.Client, pw: Client, topic: str) -> None:
    consumer = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST)
    values = produce(client, topic, 10)
    got = pw_receive_n(consumer, 10)
    for m in got[:4]:
        consumer.acknowledge(m)
    time.sleep(0.3)  # the grouped acks reach the broker first
    consumer.redeliver_unacknowledged_messages()
    again = pw_receive_n(consumer, 6, ack=True)
    assert [m.data() for m in again] == values[4:]
    pw_assert_silent(consumer)


def test_redelivery_before_the_grouped_acks_went_out_skips_only_the_acked(
    client: pulsar.Client, pw: Client, topic: str
) -> None:
    # The acks wait (1 s grouping) while the broker sends the batches again: the consumer itself
    # drops what it acknowledged, and only that.
    consumer = pw.subscribe(
        topic, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST, ack_group_time_ms=1000
    )
    values = produce(client, topic, 21, batching=True)  # 3 batches of 7
    got = pw_receive_n(consumer, 21)
    acked = {m.data() for m in got if number(m.data()) % 7 in (0, 3, 4) or number(m.data()) < 7}
    for m in got:
        if m.data() in acked:
            consumer.acknowledge(m)
    consumer.redeliver_unacknowledged_messages()
    rest = [v for v in values if v not in acked]
    assert [m.data() for m in pw_receive_n(consumer, len(rest), ack=True)] == rest
    pw_assert_silent(consumer)
    consumer.close()
    consumer = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    pw_assert_silent(consumer)


def test_batch_index_ack_resubscribe_gets_only_the_unacked_indexes(
    shared_broker: Broker, client: pulsar.Client, pw: Client, topic: str
) -> None:
    consumer = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST)
    values = produce(client, topic, 35, batching=True)
    got = pw_receive_n(consumer, 35)
    assert all(m.message_id().batch_size == 7 for m in got)
    acked = [m.data() for m in got if number(m.data()) % 3 != 2]
    for m in got:
        if m.data() in acked:
            consumer.acknowledge(m)
    consumer.close()
    unacked = [v for v in values if v not in acked]
    assert backlog(shared_broker, topic, "sub") == len(unacked)
    consumer = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    again = pw_receive_n(consumer, len(unacked))
    # The broker sends whole entries with an ack_set; the consumer drops the acknowledged indexes.
    assert [m.data() for m in again] == unacked
    first_ids = {m.data(): m.message_id() for m in got}
    assert [m.message_id() for m in again] == [first_ids[v] for v in unacked]
    # Acking the rest of each batch completes it: nothing left, nothing comes back.
    for m in again:
        consumer.acknowledge(m)
    consumer.close()
    assert backlog(shared_broker, topic, "sub") == 0
    consumer = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    pw_assert_silent(consumer)


# -- permits ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_small_receiver_queue_gets_everything_exactly_once(
    client: pulsar.Client, pw: Client, topic: str, batching: bool
) -> None:
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST, receiver_queue_size=10)
    values = produce(client, topic, 1000, batching=batching)
    got = pw_receive_n(consumer, 1000)
    assert [m.data() for m in got] == values
    for m in got:  # partly acknowledged batches, skipped at the next delivery
        if number(m.data()) % 3 == 0:
            consumer.acknowledge(m)
    pw_assert_silent(consumer)
    consumer.close()
    consumer = pw.subscribe(topic, "sub", receiver_queue_size=10)
    unacked = [v for v in values if number(v) % 3 != 0]
    assert [m.data() for m in pw_receive_n(consumer, len(unacked), ack=True)] == unacked
    pw_assert_silent(consumer)
    # The permits the skipped messages took were given back: new messages still flow.
    more = produce(client, topic, 100, batching=batching, prefix="more")
    assert [m.data() for m in pw_receive_n(consumer, 100, ack=True)] == more
    pw_assert_silent(consumer)


# -- the rest of the consumer API -------------------------------------------------------------------


def test_batch_receive_last_message_id_unsubscribe_close(
    client: pulsar.Client, pw: Client, topic: str
) -> None:
    consumer = pw.subscribe(topic, "sub", initial_position=EARLIEST)
    assert consumer.get_last_message_id().entry_id == -1  # nothing published yet
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=7)
    values = payloads(25)
    ids = send_all(producer, values)
    last = consumer.get_last_message_id()
    assert (last.ledger_id, last.entry_id, last.batch_index) == (
        ids[-1].ledger_id(),
        ids[-1].entry_id(),
        ids[-1].batch_index(),
    )
    got: list[bytes] = []
    while len(got) < 25:
        batch = consumer.batch_receive(10, timeout_ms=1000)
        assert 0 < len(batch) <= 10
        for m in batch:
            consumer.acknowledge(m)
        got += [m.data() for m in batch]
    assert got == values
    assert consumer.batch_receive(10, timeout_ms=200) == []
    consumer.unsubscribe()  # the cursor is gone: a new subscription starts at the latest position
    consumer = pw.subscribe(topic, "sub")
    pw_assert_silent(consumer)
    producer.send(b"new")
    new = pw_receive_n(consumer, 1)[0]
    assert new.data() == b"new"
    consumer.close()
    with pytest.raises(AlreadyClosedError):
        consumer.receive(100)
    with pytest.raises(AlreadyClosedError):
        consumer.acknowledge(new)


def test_key_shared_sticky_ranges_pin_keys_and_refuse_overlaps(shared_broker: Broker, pw: Client) -> None:
    from pulsarwire.client.blocking import KeySharedPolicy
    from pulsarwire.codec.hashing import murmur3_32
    from pulsarwire.errors import ConsumerAssignError, OperationTimeoutError
    from tests.helpers.judge import new_topic

    topic = new_topic("sticky")
    halves = [((0, 32767),), ((32768, 65535),)]
    consumers = [
        pw.subscribe(
            topic,
            "sub",
            consumer_type=ConsumerType.KeyShared,
            initial_position=InitialPosition.Earliest,
            key_shared_policy=KeySharedPolicy(sticky_ranges=ranges),
        )
        for ranges in halves
    ]
    with pytest.raises(ConsumerAssignError):
        pw.subscribe(
            topic,
            "sub",
            consumer_type=ConsumerType.KeyShared,
            key_shared_policy=KeySharedPolicy(sticky_ranges=((30000, 40000),)),
        )
    producer = pw.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(40)]
    for k in keys:
        producer.send(k.encode(), partition_key=k)
    for index, consumer in enumerate(consumers):
        lo, hi = halves[index][0]
        mine = [k for k in keys if lo <= murmur3_32(k.encode()) % 65536 <= hi]
        got = [consumer.receive(5000).data().decode() for _ in mine]
        assert sorted(got) == sorted(mine)
        with pytest.raises(OperationTimeoutError):
            consumer.receive(300)
