"""Our Kafka client against Apache Kafka itself (``real_kafka``), judged by confluent-kafka.

The admin client creates a topic, grows its partitions and deletes it, with Kafka's error codes
in the futures (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, UNKNOWN_TOPIC_OR_PARTITION); our
producer's idempotent, zstd-compressed records are read back by confluent-kafka with keys,
headers and offsets; under ``read_committed`` our consumer hides a transaction confluent-kafka
aborted and shows the committed one, and ``offsets_for_times`` finds the first offset at a
timestamp (-1 past the end).
"""

from __future__ import annotations

import time
import uuid

import confluent_kafka
import confluent_kafka.admin
import pytest

from pulsarwire.kafka.client import (
    AdminClient,
    Consumer,
    KafkaError,
    KafkaException,
    NewPartitions,
    NewTopic,
    Producer,
    TopicPartition,
)
from tests.helpers.real_kafka import RealKafka

pytestmark = pytest.mark.real


def wait_for_partitions(admin: AdminClient, topic: str, n: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10)
        if topic in md.topics and md.topics[topic].error is None and len(md.topics[topic].partitions) == n:
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic} did not get {n} partitions")


def test_admin_creates_grows_and_deletes_a_topic(real_kafka: RealKafka) -> None:
    topic = f"adm-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": real_kafka.bootstrap})
    try:
        assert admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30) is None
        wait_for_partitions(admin, topic, 2)
        with pytest.raises(KafkaException) as info:
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        assert info.value.error.name() == "TOPIC_ALREADY_EXISTS"
        assert admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30) is None
        wait_for_partitions(admin, topic, 3)
        with pytest.raises(KafkaException) as info:
            admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        assert info.value.error.name() == "INVALID_PARTITIONS"
        theirs = confluent_kafka.admin.AdminClient({"bootstrap.servers": real_kafka.bootstrap})
        assert len(theirs.list_topics(topic, timeout=10).topics[topic].partitions) == 3
        assert admin.delete_topics([topic])[topic].result(30) is None
        with pytest.raises(KafkaException) as info:
            admin.delete_topics([f"missing-{topic}"])[f"missing-{topic}"].result(30)
        assert info.value.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
    finally:
        admin.close()


def test_confluent_reads_our_idempotent_zstd_records(real_kafka: RealKafka) -> None:
    topic = f"prod-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": real_kafka.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    wait_for_partitions(admin, topic, 3)
    admin.close()
    reports: list[tuple[KafkaError | None, int, int]] = []
    producer = Producer({"bootstrap.servers": real_kafka.bootstrap, "compression.type": "zstd"})
    for i in range(30):
        producer.produce(
            topic,
            b"value-%d" % i,
            key=b"key-%d" % i,
            headers={"n": b"%d" % i},
            on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset())),
        )
    assert producer.flush(30) == 0
    producer.close()
    assert all(err is None for err, _, _ in reports) and len(reports) == 30
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": real_kafka.bootstrap, "group.id": uuid.uuid4().hex}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(3)])
    got: list[confluent_kafka.Message] = []
    deadline = time.monotonic() + 30
    while len(got) < 30 and time.monotonic() < deadline:
        got.extend(m for m in consumer.consume(30, 1) if m.error() is None)
    consumer.close()
    assert sorted((m.partition(), m.offset()) for m in got) == sorted((p, o) for _, p, o in reports)
    assert {m.key(): (m.value(), m.headers()) for m in got} == {
        b"key-%d" % i: (b"value-%d" % i, [("n", b"%d" % i)]) for i in range(30)
    }


def test_read_committed_hides_an_aborted_transaction(real_kafka: RealKafka) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    txn = confluent_kafka.Producer(
        {"bootstrap.servers": real_kafka.bootstrap, "transactional.id": uuid.uuid4().hex}
    )
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"aborted", partition=0, timestamp=1_700_000_000_000)
    txn.flush(30)
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, b"kept", partition=0, timestamp=1_700_000_100_000)
    txn.commit_transaction(30)
    for isolation, visible in (("read_committed", [b"kept"]), ("read_uncommitted", [b"aborted", b"kept"])):
        consumer = Consumer({"bootstrap.servers": real_kafka.bootstrap, "isolation.level": isolation})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            got = consumer.consume(len(visible), 20)
            assert [m.value() for m in got] == visible
            assert all(m.error() is None for m in got)
            assert consumer.consume(1, 0.5) == []  # control records are never handed out
            later = int(time.time() * 1000) + 86_400_000
            found = consumer.offsets_for_times(
                [TopicPartition(topic, 0, 0), TopicPartition(topic, 0, later)], 10
            )
            assert [(tp.offset, tp.error) for tp in found] == [(0, None), (-1, None)]
        finally:
            consumer.close()
