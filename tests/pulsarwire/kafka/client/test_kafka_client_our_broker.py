"""Our Kafka client against our own Kafka broker (``python -m pulsarwire.kafka.broker``, its own
process): the two halves of issues 31 and 32 meet.

Our producer's records (every codec, keys, headers) come back through our consumer and our
Arrow reader at the offsets the delivery reports gave; our admin client creates a topic, grows
it, deletes it, and gets the broker's error codes for the wrong requests.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

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
from pulsarwire.kafka.client.arrow import ArrowReader
from pulsarwire.testing.process import kafka_broker_process

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with kafka_broker_process("--num-partitions", "2") as address:
        yield address


@pytest.mark.parametrize("codec", CODECS)
def test_our_records_come_back_through_our_consumer_and_arrow_reader(bootstrap: str, codec: str) -> None:
    topic = f"ours-{uuid.uuid4().hex[:8]}"
    reports: list[tuple[KafkaError | None, int, int, bytes | None]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec})
    for i in range(20):
        producer.produce(
            topic,
            b"value-%d" % i,
            key=b"key-%d" % i,
            headers=[("n", b"%d" % i)],
            on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset(), msg.key())),
        )
    assert producer.flush(20) == 0
    producer.close()
    assert [r[0] for r in reports] == [None] * 20
    where = {key: (p, o) for _, p, o, key in reports}
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        got = consumer.consume(20, 10)
    finally:
        consumer.close()
    assert sorted((m.key(), m.partition(), m.offset(), m.value(), m.headers()) for m in got) == sorted(
        (b"key-%d" % i, *where[b"key-%d" % i], b"value-%d" % i, [("n", b"%d" % i)]) for i in range(20)
    )
    pytest.importorskip("pyarrow")  # the "arrow" extra; installed with the test extra
    reader = ArrowReader({"bootstrap.servers": bootstrap})
    try:
        ends = {p: 1 + max(o for pp, o in where.values() if pp == p) for p in {p for p, _ in where.values()}}
        rows = [r for p, end in ends.items() for b in reader.read(topic, p, 0, end) for r in b.to_pylist()]
    finally:
        reader.close()
    assert sorted((r["key"], r["partition"], r["offset"]) for r in rows) == sorted(
        (k, p, o) for k, (p, o) in where.items()
    )


def test_our_admin_client_on_our_broker(bootstrap: str) -> None:
    topic = f"adm-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        assert admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10) is None
        with pytest.raises(KafkaException) as info:
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
        assert info.value.error.name() == "TOPIC_ALREADY_EXISTS"
        assert admin.create_partitions([NewPartitions(topic, 3)])[topic].result(10) is None
        deadline = time.monotonic() + 10
        while len(admin.list_topics(topic).topics[topic].partitions) != 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert admin.delete_topics([topic])[topic].result(10) is None
        with pytest.raises(KafkaException) as info:
            admin.delete_topics([topic])[topic].result(10)
        assert info.value.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
    finally:
        admin.close()
