"""Apache Kafka itself (``real_kafka``), judged by confluent-kafka (librdkafka): the fixture the
Kafka client and broker of later issues will be compared with.

Messages cross the two listeners both ways — produced on PLAINTEXT and read with SASL/PLAIN
credentials, and the reverse — with keys, headers and offsets intact; a wrong password is
refused with an authentication error and delivers nothing; consumer groups commit offsets with
the classic protocol and with KIP-848's ``consumer`` protocol; the admin API answers with
Kafka's error codes.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.real_kafka import RealKafka

pytestmark = pytest.mark.real


def new_topic() -> str:
    return f"real-{uuid.uuid4().hex[:10]}"


def produce(
    config: dict[str, Any], topic: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]
) -> list[int]:
    """Send ``(key, value, headers)`` records; their offsets, in order (each delivery checked)."""
    offsets: list[int] = []
    errors: list[KafkaError] = []

    def done(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5})
    for key, value, headers in records:
        producer.produce(topic, value, key, headers=headers, on_delivery=done)
    assert producer.flush(30) == 0, "records still queued after 30 s"
    assert errors == []
    return offsets


def consume(config: dict[str, Any], topic: str, n: int, group: str | None = None) -> list[Any]:
    """``n`` records of ``topic`` from the start, by a consumer of ``group`` (a new one by default)."""
    consumer = Consumer(
        {
            **config,
            "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert len(got) == n, f"{len(got)} of {n} records within 30 s"
    return got


def records(n: int, tag: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"k{i % 3}".encode(), f"{tag}-{i:03d}".encode(), [("n", str(i).encode())]) for i in range(n)]


@pytest.mark.parametrize(
    ("write", "read"), [("plain", "sasl"), ("sasl", "plain")], ids=["plaintext-to-sasl", "sasl-to-plaintext"]
)
def test_records_cross_the_listeners_intact(real_kafka: RealKafka, write: str, read: str) -> None:
    configs = {"plain": {"bootstrap.servers": real_kafka.bootstrap}, "sasl": real_kafka.sasl_config("alice")}
    topic = new_topic()
    sent = records(25, write)
    offsets = produce(configs[write], topic, sent)
    assert offsets == list(range(25))
    got = consume(configs[read], topic, 25)
    assert [(m.key(), m.value(), m.headers(), m.offset()) for m in got] == [
        (k, v, h, i) for i, (k, v, h) in enumerate(sent)
    ]


def test_a_wrong_password_is_refused_and_delivers_nothing(real_kafka: RealKafka) -> None:
    topic = new_topic()
    errors: list[KafkaError] = []
    producer = Producer(
        {
            **real_kafka.sasl_config("alice", password="not-her-password"),
            "error_cb": errors.append,
            "message.timeout.ms": 3000,
        }
    )
    failed: list[KafkaError] = []
    producer.produce(topic, b"never", on_delivery=lambda err, _msg: failed.append(err))
    producer.flush(10)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert len(failed) == 1 and failed[0] is not None
    admin = AdminClient({"bootstrap.servers": real_kafka.bootstrap})
    assert topic not in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_commits_and_resumes_from_its_offsets(real_kafka: RealKafka, protocol: str) -> None:
    topic, group = new_topic(), f"group-{protocol}-{uuid.uuid4().hex[:6]}"
    produce({"bootstrap.servers": real_kafka.bootstrap}, topic, records(10, "first"))
    sasl = {**real_kafka.sasl_config("bob"), "group.protocol": protocol}
    first = consume(sasl, topic, 10, group)
    assert [m.offset() for m in first] == list(range(10))
    produce(real_kafka.sasl_config("alice"), topic, records(5, "second"))
    then = consume({"bootstrap.servers": real_kafka.bootstrap, "group.protocol": protocol}, topic, 5, group)
    assert [m.value() for m in then] == [f"second-{i:03d}".encode() for i in range(5)]
    checker = Consumer({"bootstrap.servers": real_kafka.bootstrap, "group.id": group})
    try:
        [committed] = checker.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        checker.close()
    assert committed.offset == 15


def test_admin_answers_with_kafka_error_codes(real_kafka: RealKafka) -> None:
    admin = AdminClient(real_kafka.sasl_config("alice"))
    topic = new_topic()
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    # CreateTopics answers when the controller has the topic; the broker's metadata follows it
    deadline = time.monotonic() + 30
    while not (partitions := admin.list_topics(topic, timeout=10).topics[topic].partitions):
        assert time.monotonic() < deadline, f"{topic}: still unknown to Metadata 30 s after CreateTopics"
        time.sleep(0.2)
    assert len(partitions) == 3
    with pytest.raises(KafkaException) as again:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    assert again.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as too_many:
        admin.create_topics([NewTopic(name := new_topic(), num_partitions=1, replication_factor=3)])[
            name
        ].result(30)
    assert too_many.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
