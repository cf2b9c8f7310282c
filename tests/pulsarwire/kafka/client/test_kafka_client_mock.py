"""Our Kafka client against librdkafka's mock cluster (its own process), judged by confluent-kafka.

confluent-kafka reads what our producer writes (every codec, keys, null keys, headers,
timestamps) and writes what our consumer reads (every codec); keyed records land where
librdkafka's ``murmur2_random`` partitioner puts them (and Kafka's own murmur2 test vectors hold);
null keys stick to one partition per batch; backpressure raises ``BufferError``; a partition out
of range is a typed delivery error; the consumer seeks, pauses, resumes, reports positions and
watermarks, applies ``auto.offset.reset`` and hides aborted transactions under
``read_committed``. One mock cluster serves the whole module; each test uses its own topics.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from pulsarwire.kafka.client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from pulsarwire.kafka.client.arrow import ArrowReader, arrow_schema
from pulsarwire.kafka.client.partitioner import murmur2, partition_for_key
from tests.helpers.kafka_mock import mock_cluster

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 4  # the mock's topics


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with mock_cluster() as address:
        yield address


def new_topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def our_produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **conf: Any) -> list[Any]:
    """Produce ``records`` (produce() keyword arguments) with our producer; the delivery reports."""
    reports: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **conf})
    try:
        for rec in records:
            producer.produce(topic, on_delivery=lambda err, msg: reports.append((err, msg)), **rec)
        assert producer.flush(20) == 0
        assert len(producer) == 0
    finally:
        producer.close()
    return reports


def their_consume(bootstrap: str, topic: str, n: int) -> list[Any]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got.extend(m for m in consumer.consume(n - len(got), 1) if m.error() is None)
        return got
    finally:
        consumer.close()


def their_produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **conf: Any) -> list[Any]:
    reports: list[Any] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **conf})
    for rec in records:
        producer.produce(topic, on_delivery=lambda err, msg: reports.append((err, msg)), **rec)
    assert producer.flush(20) == 0
    assert all(err is None for err, _ in reports)
    return [msg for _, msg in reports]


def our_consume(bootstrap: str, partitions: list[TopicPartition], n: int, **conf: Any) -> list[Message]:
    consumer = Consumer({"bootstrap.servers": bootstrap, **conf})
    try:
        consumer.assign(partitions)
        got: list[Message] = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got.extend(consumer.consume(n - len(got), 1))
        return got
    finally:
        consumer.close()


def records(n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "key": f"k{i}".encode(),
            "value": f"{tag}-{i}".encode() * 3,
            "headers": [("i", str(i).encode()), ("n", None)],
            "timestamp": 1_700_000_000_000 + i,
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_reads_what_we_produce(bootstrap: str, codec: str) -> None:
    topic = new_topic()
    sent = [*records(12, codec), {"value": b"no key"}, {"key": b"no value"}]
    reports = our_produce(bootstrap, topic, sent, **{"compression.type": codec})
    assert [err for err, _ in reports] == [None] * len(sent)
    got = their_consume(bootstrap, topic, len(sent))
    assert len(got) == len(sent)
    seen = {(m.key(), m.value()): m for m in got}
    for rec in sent[:12]:
        m = seen[(rec["key"], rec["value"])]
        assert m.headers() == [("i", rec["headers"][0][1]), ("n", None)]
        assert m.timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, rec["timestamp"])
    assert (None, b"no key") in seen and (b"no value", None) in seen
    # our delivery reports name the partition and offset confluent read them at
    for _, msg in reports:
        m = seen[(msg.key(), msg.value())]
        assert (msg.partition(), msg.offset()) == (m.partition(), m.offset())


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_what_confluent_produces(bootstrap: str, codec: str) -> None:
    topic = new_topic()
    sent = records(12, codec)
    reports = their_produce(bootstrap, topic, sent, **{"compression.type": codec})
    got = our_consume(bootstrap, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)], 12)
    assert all(m.error() is None for m in got)
    mine = sorted((m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp()) for m in got)
    where = {m.key(): (m.partition(), m.offset()) for m in reports}
    theirs = sorted(
        (
            *where[rec["key"]],
            rec["key"],
            rec["value"],
            rec["headers"],
            (TIMESTAMP_CREATE_TIME, rec["timestamp"]),
        )
        for rec in sent
    )
    assert mine == theirs


def test_keys_land_where_librdkafka_murmur2_puts_them(bootstrap: str) -> None:
    # Kafka's own test vectors for Utils.murmur2 (clients' UtilsTest), as signed ints
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"abc": 479470107,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    }
    assert {k: murmur2(k) - (1 << 32) if murmur2(k) >= 1 << 31 else murmur2(k) for k in vectors} == vectors
    topic = new_topic()
    keys = [f"key-{i}-{'x' * (i % 7)}".encode() for i in range(60)] + [b"", b"a", b"ab", b"abc"]
    theirs = their_produce(
        bootstrap, topic, [{"key": k, "value": b"v"} for k in keys], partitioner="murmur2_random"
    )
    assert {m.key(): m.partition() for m in theirs} == {k: partition_for_key(k, PARTITIONS) for k in keys}
    ours = our_produce(bootstrap, topic, [{"key": k, "value": b"v"} for k in keys])
    assert {m.key(): m.partition() for _, m in ours} == {m.key(): m.partition() for m in theirs}


def test_null_keys_stick_to_one_partition_per_batch(bootstrap: str) -> None:
    topic = new_topic()
    reports = our_produce(bootstrap, topic, [{"value": b"%d" % i} for i in range(50)], **{"linger.ms": 1000})
    assert len({msg.partition() for _, msg in reports}) == 1


def test_a_full_queue_raises_buffer_error_and_loses_nothing(bootstrap: str) -> None:
    topic = new_topic()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 5, "linger.ms": 10000}
    )
    try:
        for i in range(5):
            producer.produce(topic, b"%d" % i, key=b"k")
        assert len(producer) == 5
        with pytest.raises(BufferError, match="Queue full"):
            producer.produce(topic, b"one too many", key=b"k")
        assert producer.flush(20) == 0
        producer.produce(topic, b"5", key=b"k")
        assert producer.flush(20) == 0
    finally:
        producer.close()
    assert sorted(m.value() for m in their_consume(bootstrap, topic, 6)) == [b"%d" % i for i in range(6)]


def test_an_unknown_partition_is_a_typed_delivery_error(bootstrap: str) -> None:
    topic = new_topic()
    reports = our_produce(bootstrap, topic, [{"value": b"x", "partition": PARTITIONS + 3}, {"value": b"y"}])
    errors = {msg.value(): err for err, msg in reports}
    assert errors[b"y"] is None
    err = errors[b"x"]
    assert isinstance(err, KafkaError) and err.code() == KafkaError._UNKNOWN_PARTITION  # type: ignore[attr-defined]
    assert topic in err.str() and f"[{PARTITIONS + 3}]" in err.str()


def test_seek_pause_resume_position_and_watermarks(bootstrap: str) -> None:
    topic = new_topic()
    their_produce(bootstrap, topic, [{"value": b"%d" % i, "partition": 0} for i in range(10)])
    tp = TopicPartition(topic, 0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    try:
        assert consumer.get_watermark_offsets(tp) == (0, 10)
        consumer.assign([tp])
        assert [m.offset() for m in consumer.consume(4, 10)] == [0, 1, 2, 3]
        assert consumer.position([tp])[0].offset == 4
        consumer.seek(TopicPartition(topic, 0, 7))
        assert [m.value() for m in consumer.consume(3, 10)] == [b"7", b"8", b"9"]
        assert consumer.position([tp])[0].offset == 10
        assert consumer.get_watermark_offsets(tp, cached=True) == (0, 10)
        consumer.pause([tp])
        their_produce(bootstrap, topic, [{"value": b"10", "partition": 0}])
        assert consumer.poll(0.5) is None
        consumer.resume([tp])
        msg = consumer.poll(10)
        assert msg is not None and (msg.offset(), msg.value()) == (10, b"10")
        consumer.seek(TopicPartition(topic, 0, OFFSET_BEGINNING))
        assert consumer.poll(10).offset() == 0  # type: ignore[union-attr]
    finally:
        consumer.close()


def test_auto_offset_reset_latest_and_explicit_end(bootstrap: str) -> None:
    topic = new_topic()
    their_produce(bootstrap, topic, [{"value": b"old", "partition": 1}])
    for start in (TopicPartition(topic, 1), TopicPartition(topic, 1, OFFSET_END)):
        consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "latest"})
        try:
            consumer.assign([start])
            assert consumer.poll(1) is None
            their_produce(bootstrap, topic, [{"value": b"new", "partition": 1}])
            msg = consumer.poll(10)
            assert msg is not None and msg.value() == b"new"
        finally:
            consumer.close()


def test_auto_offset_reset_error_is_an_error_event(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(new_topic(), 0)])
        msg = consumer.poll(5)
        assert msg is not None and msg.error() is not None
        assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET  # type: ignore[union-attr, attr-defined]
    finally:
        consumer.close()


def test_list_topics_has_confluents_shape(bootstrap: str) -> None:
    topic = new_topic()
    their_produce(bootstrap, topic, [{"value": b"x"}])
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        md = consumer.list_topics(topic, timeout=10)
    finally:
        consumer.close()
    assert list(md.brokers) == [1] and md.brokers[1].port == int(bootstrap.rsplit(":", 1)[1])
    assert sorted(md.topics[topic].partitions) == list(range(PARTITIONS))
    assert md.topics[topic].error is None and md.topics[topic].partitions[0].leader == 1


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_the_arrow_reader_reads_an_offset_range_as_confluent_wrote_it(bootstrap: str, codec: str) -> None:
    pa = pytest.importorskip("pyarrow")  # the "arrow" extra; installed with the test extra
    topic = new_topic()
    sent = [
        {
            "key": None if i % 3 == 0 else b"k%d" % i,
            "value": None if i == 7 else b"v%d" % i,
            "partition": 0,
            "headers": [("h", b"%d" % i), ("null", None)] if i % 2 else None,
            "timestamp": 1_700_000_000_000 + i,
        }
        for i in range(300)
    ]
    their_produce(
        bootstrap, topic, sent, **{"compression.type": codec, "linger.ms": 50, "batch.num.messages": 50}
    )
    reader = ArrowReader({"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": 4096})
    try:
        batches = list(reader.read(topic, 0, 5, 290))
        with pytest.raises(KafkaException, match=r"the range ends at 400 but the partition ends at 300"):
            list(reader.read(topic, 0, 290, 400))
    finally:
        reader.close()
    assert len(batches) > 1  # several Fetch answers (4 KiB per partition)
    table = pa.Table.from_batches(batches)
    assert table.schema == arrow_schema()
    rows = table.to_pylist()
    assert [r["offset"] for r in rows] == list(range(5, 290))
    for r in rows:
        rec = sent[r["offset"]]
        assert (r["key"], r["value"], r["topic"], r["partition"]) == (rec["key"], rec["value"], topic, 0)
        assert r["timestamp"].timestamp() * 1000 == pytest.approx(rec["timestamp"])
        assert [(h["key"], h["value"]) for h in r["headers"]] == (rec["headers"] or [])


def test_a_missing_topic_is_one_error_event_naming_it(bootstrap: str) -> None:
    topic = new_topic()  # never written: the consumer does not create topics
    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = consumer.consume(5, 1.5)
    finally:
        consumer.close()
    assert len(got) == 1
    err = got[0].error()
    assert err is not None and err.name() == "UNKNOWN_TOPIC_OR_PARTITION" and f"{topic} [0]" in err.str()


def test_partition_eof_events_when_asked(bootstrap: str) -> None:
    topic = new_topic()
    their_produce(bootstrap, topic, [{"value": b"%d" % i, "partition": 3} for i in range(3)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 3, 0)])
        got = consumer.consume(4, 10)
    finally:
        consumer.close()
    assert [m.value() for m in got[:3]] == [b"0", b"1", b"2"]
    eof = got[3].error()
    assert eof is not None and eof.code() == KafkaError._PARTITION_EOF  # type: ignore[attr-defined]
    assert got[3].offset() == 3


def test_the_byte_bound_of_the_queue_raises_buffer_error(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "queue.buffering.max.kbytes": 1, "linger.ms": 10000})
    try:
        producer.produce(new_topic(), b"x" * 600)
        with pytest.raises(BufferError, match="Queue full"):
            producer.produce(new_topic(), b"y" * 600)
        assert producer.flush(20) == 0
    finally:
        producer.close()
