"""Dead-letter policy: after N redeliveries a message moves to the DLQ topic and is acked, never lost."""

from __future__ import annotations

import time

import pulsar

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client, ConsumerType, DeadLetterPolicy, InitialPosition
from pulsarwire.errors import OperationTimeoutError
from tests.helpers.judge import make_client, new_topic, read_n


def test_poison_message_goes_to_the_dead_letter_topic(shared_broker: Broker) -> None:
    topic = new_topic("dlq")
    dlq = topic + "-DLQ-custom"
    client = Client(shared_broker.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for v in (b"good-1", b"poison", b"good-2"):
            producer.send(v, properties={"k": v.decode()})
        consumer = client.subscribe(
            topic,
            "sub",
            consumer_type=ConsumerType.Shared,
            initial_position=InitialPosition.Earliest,
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2, dead_letter_topic=dlq),
        )
        seen: list[tuple[bytes, int]] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                msg = consumer.receive(500)
            except OperationTimeoutError:
                if sum(1 for v, _ in seen if v == b"poison") == 3:
                    break
                continue
            seen.append((msg.data(), msg.redelivery_count()))
            if msg.data() == b"poison":
                consumer.negative_acknowledge(msg)
            else:
                consumer.acknowledge(msg)
        assert sorted(seen) == [
            (b"good-1", 0),
            (b"good-2", 0),
            (b"poison", 0),
            (b"poison", 1),
            (b"poison", 2),
        ]
    finally:
        client.close()
    official = make_client(shared_broker.service_url)
    try:
        moved = read_n(official.create_reader(dlq, pulsar.MessageId.earliest), 1)[0]
        assert moved.data() == b"poison"
        assert moved.properties()["k"] == "poison" and moved.properties()["REAL_TOPIC"] == topic
    finally:
        official.close()
    # acked on the original subscription once the DLQ stored it
    deadline = time.monotonic() + 5
    while shared_broker.stats(topic)["subscriptions"]["sub"]["backlog"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert shared_broker.stats(topic)["subscriptions"]["sub"]["backlog"] == 0
