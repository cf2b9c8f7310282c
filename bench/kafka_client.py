"""Our Kafka client against confluent-kafka (librdkafka), same run, same broker: librdkafka's mock
cluster in its own process, 100-byte records.

Prints, each as records/s for both clients and the ratio ours/theirs (> 1: we are faster)
  * produce: ``--records`` ``produce()`` calls then ``flush()`` (idempotent, no compression)
  * consume: per-message ``consume(num_messages=1000)`` over the records from offset 0
  * arrow:   our Arrow bulk read of the same offset range vs confluent's ``consume(num_messages=…)``
Each figure is the best of ``--rounds``. Run: ``python bench/kafka_client.py`` (needs the test
extra for confluent-kafka, and pyarrow).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import confluent_kafka
import pyarrow.compute  # noqa: F401  (imported before timing: the Arrow reader uses it)

from pulsarwire.kafka import client as ours
from pulsarwire.kafka.client.arrow import ArrowReader
from tests.helpers.kafka_mock import mock_cluster

VALUE = b"x" * 100


def best(fn: Callable[[], float], rounds: int) -> float:
    return max(fn() for _ in range(rounds))


def produce_rate(make: Callable[[dict[str, object]], object], bootstrap: str, n: int) -> float:
    producer = make({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    producer.produce(topic, VALUE, partition=0)  # type: ignore[attr-defined]
    producer.flush(30)  # type: ignore[attr-defined]  # metadata and producer id learnt before timing
    start = time.perf_counter()
    for _ in range(n):
        try:
            producer.produce(topic, VALUE, partition=0)  # type: ignore[attr-defined]
        except BufferError:
            producer.poll(0.01)  # type: ignore[attr-defined]
            producer.produce(topic, VALUE, partition=0)  # type: ignore[attr-defined]
    left = producer.flush(60)  # type: ignore[attr-defined]
    took = time.perf_counter() - start
    assert left == 0, f"{left} records not delivered"
    if hasattr(producer, "close"):
        producer.close()
    return n / took


def fill(bootstrap: str, n: int) -> tuple[str, int, int]:
    """A topic holding ``n`` records in partition 0; (topic, low, high) watermarks (the mock
    drops old segments past a few MB, so the range read is the one it still has)."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0
    low, high = producer.list_topics(topic) and confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "watermarks"}
    ).get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), 10)
    return topic, low, high


def consume_rate(consumer: object, topic: str, n: int, tp: object) -> float:
    start = time.perf_counter()
    got = 0
    consumer.assign([tp])  # type: ignore[attr-defined]
    deadline = time.monotonic() + 120
    while got < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"consume: {got} of {n} records after 120 s")
        got += len(consumer.consume(num_messages=1000, timeout=5))  # type: ignore[attr-defined]
    took = time.perf_counter() - start
    consumer.close()  # type: ignore[attr-defined]
    return n / took


def theirs_consume(bootstrap: str, topic: str, low: int, high: int) -> float:
    c = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False}
    )
    return consume_rate(c, topic, high - low, confluent_kafka.TopicPartition(topic, 0, low))


def ours_consume(bootstrap: str, topic: str, low: int, high: int) -> float:
    c = ours.Consumer({"bootstrap.servers": bootstrap})
    return consume_rate(c, topic, high - low, ours.TopicPartition(topic, 0, low))


def ours_arrow(bootstrap: str, topic: str, low: int, high: int) -> float:
    n = high - low
    reader = ArrowReader({"bootstrap.servers": bootstrap})
    start = time.perf_counter()
    rows = sum(b.num_rows for b in reader.read(topic, 0, low, high))
    took = time.perf_counter() - start
    reader.close()
    assert rows == n
    return n / took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    n = args.records
    with mock_cluster() as bootstrap:
        rows = []
        theirs_p = best(lambda: produce_rate(confluent_kafka.Producer, bootstrap, n), args.rounds)
        ours_p = best(lambda: produce_rate(ours.Producer, bootstrap, n), args.rounds)
        rows.append(("produce + flush", ours_p, theirs_p))
        topic, low, high = fill(bootstrap, n)
        print(f"consume figures over offsets {low}..{high} ({high - low} records)")
        theirs_c = best(lambda: theirs_consume(bootstrap, topic, low, high), args.rounds)
        ours_c = best(lambda: ours_consume(bootstrap, topic, low, high), args.rounds)
        rows.append(("consume(num_messages=1000)", ours_c, theirs_c))
        ours_a = best(lambda: ours_arrow(bootstrap, topic, low, high), args.rounds)
        rows.append(("Arrow bulk read vs their consume", ours_a, theirs_c))
    print(f"{n} records of {len(VALUE)} bytes, librdkafka {confluent_kafka.libversion()[0]} mock cluster")
    print(f"{'':36} {'ours rec/s':>12} {'theirs rec/s':>13} {'ours/theirs':>12}")
    for name, mine, theirs in rows:
        print(f"{name:36} {mine:12,.0f} {theirs:13,.0f} {mine / theirs:12.2f}")


if __name__ == "__main__":
    main()
