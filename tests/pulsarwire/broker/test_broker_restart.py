"""Persistence: a broker restarted on the same data_dir keeps entries, cursors, dedup state and metadata."""

from __future__ import annotations

import re
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pulsar

from pulsarwire.broker import Broker
from tests.helpers.judge import (
    assert_exactly,
    assert_silent,
    drain,
    new_topic,
    payloads,
    position,
    read_n,
    receive_n,
    send_all,
)

Start = Callable[..., Broker]
MakeClient = Callable[[Broker], pulsar.Client]

#: comfortably more than cursor_flush_seconds (0.1 s) plus the client's ack grouping (0.1 s)
FLUSH_WAIT = 0.6


def _start(start_broker: Start, data_dir: Path, **config: object) -> Broker:
    return start_broker(data_dir=data_dir, entries_per_ledger=7, **config)


def test_restart_keeps_entries_and_durable_cursor(
    start_broker: Start, make_client: MakeClient, tmp_path: Path
) -> None:
    topic = new_topic("restart")
    b1 = _start(start_broker, tmp_path)
    c1 = make_client(b1)
    consumer = c1.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = c1.create_producer(topic)
    values = payloads(50)
    receipts = send_all(producer, values)
    assert len({r.ledger_id() for r in receipts}) > 1, "the entries span several ledgers"
    got = receive_n(consumer, 50)
    acked = {m.data() for m in got if int(m.data()[-5:]) % 3 == 0 or int(m.data()[-5:]) < 20}
    for m in got:
        if m.data() in acked:
            consumer.acknowledge(m)
    time.sleep(FLUSH_WAIT)
    c1.close()
    b1.stop()

    b2 = _start(start_broker, tmp_path)
    c2 = make_client(b2)
    reader = c2.create_reader(topic, pulsar.MessageId.earliest)
    stored = read_n(reader, 50)
    assert [m.data() for m in stored] == values
    assert [position(m.message_id()) for m in stored] == [position(r) for r in receipts]
    assert_silent(reader)
    consumer = c2.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    rest = receive_n(consumer, 50 - len(acked), ack=True)
    assert [m.data() for m in rest] == [v for v in values if v not in acked]
    assert_silent(consumer)
    # New entries go to a new ledger, after the old ones.
    new_id = c2.create_producer(topic).send(b"after-restart")
    assert new_id.ledger_id() > receipts[-1].ledger_id()
    assert receive_n(consumer, 1, ack=True)[0].data() == b"after-restart"
    assert reader.read_next(5000).data() == b"after-restart"


def test_acks_survive_a_crash_after_the_cursor_flush(
    start_broker: Start, make_client: MakeClient, tmp_path: Path
) -> None:
    """The data_dir is copied while the broker runs (what ``kill -9`` would leave behind)."""
    topic = new_topic("crash")
    live = tmp_path / "live"
    b1 = _start(start_broker, live)
    c1 = make_client(b1)
    consumer = c1.subscribe(topic, "sub")
    producer = c1.create_producer(topic, batching_enabled=True, batching_max_messages=5)
    values = payloads(40)
    send_all(producer, values)
    got = receive_n(consumer, 40)
    consumer.acknowledge_cumulative(got[24])  # a batch boundary: 5 batches of 5 acknowledged
    time.sleep(FLUSH_WAIT)
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)  # the consumer and producer are still connected

    b2 = _start(start_broker, crashed)
    c2 = make_client(b2)
    consumer = c2.subscribe(topic, "sub")
    rest = receive_n(consumer, 15, ack=True)
    assert [m.data() for m in rest] == values[25:]
    assert_silent(consumer)


def test_dedup_state_survives_restart(start_broker: Start, make_client: MakeClient, tmp_path: Path) -> None:
    topic = new_topic("restart-dedup")
    b1 = _start(start_broker, tmp_path, deduplication=True)
    c1 = make_client(b1)
    p1 = c1.create_producer(topic, producer_name="durable-producer")
    for seq in range(10):
        p1.send(f"v{seq}-first".encode(), sequence_id=seq)
    c1.close()
    b1.stop()

    b2 = _start(start_broker, tmp_path, deduplication=True)
    c2 = make_client(b2)
    p2 = c2.create_producer(topic, producer_name="durable-producer")
    assert p2.last_sequence_id() == 9
    for seq in range(5, 15):
        p2.send(f"v{seq}-second".encode(), sequence_id=seq)
    assert p2.last_sequence_id() == 14
    reader = c2.create_reader(topic, pulsar.MessageId.earliest)
    got = read_n(reader, 15)
    expected = [f"v{s}-first".encode() for s in range(10)] + [f"v{s}-second".encode() for s in range(10, 15)]
    assert [m.data() for m in got] == expected
    assert_silent(reader)


def test_batch_index_acks_survive_restart(
    start_broker: Start, make_client: MakeClient, tmp_path: Path
) -> None:
    topic = new_topic("restart-batch-ack")
    b1 = _start(start_broker, tmp_path)
    c1 = make_client(b1)
    consumer = c1.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
    )
    producer = c1.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    values = payloads(30)
    send_all(producer, values)
    got = receive_n(consumer, 30)
    acked = set()
    for m in got:
        if int(m.data()[-5:]) % 4 != 1:
            consumer.acknowledge(m)
            acked.add(m.data())
    consumer.close()
    time.sleep(FLUSH_WAIT)
    c1.close()
    b1.stop()

    b2 = _start(start_broker, tmp_path)
    c2 = make_client(b2)
    consumer = c2.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
    )
    expected = [v for v in values if v not in acked]
    assert [m.data() for m in receive_n(consumer, len(expected), ack=True)] == expected
    assert_silent(consumer)


def test_partitioned_topic_and_termination_survive_restart(
    start_broker: Start, make_client: MakeClient, tmp_path: Path
) -> None:
    topic = new_topic("restart-part")
    b1 = _start(start_broker, tmp_path)
    b1.create_partitioned_topic(topic, 3)
    c1 = make_client(b1)
    producer = c1.create_producer(
        topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    values = payloads(30)
    send_all(producer, values)
    producer.close()
    b1.terminate_topic(f"{topic}-partition-0")
    c1.close()
    b1.stop()

    b2 = _start(start_broker, tmp_path)
    c2 = make_client(b2)
    assert len(c2.get_topic_partitions(topic)) == 3
    consumer = c2.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    assert_exactly(drain(consumer), values)
    try:
        c2.create_producer(f"{topic}-partition-0")
    except pulsar.TopicTerminated:
        pass
    else:
        raise AssertionError("partition 0 was terminated before the restart")
    c2.create_producer(f"{topic}-partition-1").send(b"still-open")


def test_regex_subscription_finds_topics_stored_before_restart(
    start_broker: Start, make_client: MakeClient, tmp_path: Path
) -> None:
    prefix = f"rxr-{uuid.uuid4().hex[:8]}"
    topics = [f"persistent://public/default/{prefix}-{i}" for i in range(2)]
    b1 = _start(start_broker, tmp_path)
    c1 = make_client(b1)
    expected = []
    for t in topics:
        values = payloads(5, t[-1])
        send_all(c1.create_producer(t), values)
        expected += values
    c1.close()
    b1.stop()

    b2 = _start(start_broker, tmp_path)
    c2 = make_client(b2)
    consumer = c2.subscribe(
        re.compile(rf"persistent://public/default/{prefix}-.*"),
        "sub",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    assert_exactly(receive_n(consumer, 10, ack=True), expected)
    assert_silent(consumer)


def test_trim_topic_drops_the_oldest_entries(
    start_broker: Start, make_client: MakeClient, tmp_path: Path
) -> None:
    topic = new_topic("trim")
    b1 = _start(start_broker, tmp_path)
    c1 = make_client(b1)
    consumer = c1.subscribe(topic, "sub")  # a durable cursor left behind by the trim
    values = payloads(20)
    send_all(c1.create_producer(topic), values)
    consumer.close()
    b1.trim_topic(topic, 8)
    reader = c1.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in read_n(reader, 12)] == values[8:]
    assert_silent(reader)
    consumer = c1.subscribe(topic, "sub")
    assert [m.data() for m in receive_n(consumer, 12, ack=True)] == values[8:]
    assert_silent(consumer)
    c1.close()
    b1.stop()
    # The trim is durable too.
    b2 = _start(start_broker, tmp_path)
    reader = make_client(b2).create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in read_n(reader, 12)] == values[8:]
    assert_silent(reader)
