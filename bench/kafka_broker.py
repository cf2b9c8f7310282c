"""Kafka broker throughput: confluent-kafka producing and consuming through our broker, beside
the same run against librdkafka's in-memory mock cluster (``test.mock.num.brokers``).

Each run: a confluent-kafka producer sends ``--messages`` records of ``--size`` bytes to a fresh
one-partition topic (lz4, ``linger.ms`` 5, batches up to 1 MiB, acks=all, idempotent), timed from
the first ``produce`` to the end of ``flush``; then a consumer ``assign``s the partition from the
beginning and reads them all, timed from ``assign`` to the last record. Our broker runs as
``python -m pulsarwire.kafka.broker --port 0`` in its own process (a data dir in a temporary
directory: records go to the OS before each acknowledgement), so it never shares the GIL with
the client; the mock cluster lives in librdkafka's threads inside a holder producer of this
process, its brokers reached through the addresses its metadata gives.

Run: ``python bench/kafka_broker.py [--messages 200000] [--size 100] [--rounds 3]``. The runs of
the two alternate (a shared machine's load hits both alike); prints every run, the best of each
and the ratios pulsarwire / mock.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from brokers import machine, version
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pulsarwire.testing.process import kafka_broker_process


@contextmanager
def our_broker() -> Iterator[str]:
    with (
        tempfile.TemporaryDirectory(prefix="kafka-bench-") as data,
        kafka_broker_process("--data-dir", data) as bs,
    ):
        yield bs


@contextmanager
def mock_cluster() -> Iterator[str]:
    holder = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers
    yield ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    holder.flush(5)


def produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "lz4",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "acks": "all",
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"x" * size
    failed: list[Any] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=b"%d" % (i % 1000), partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    if left or failed:
        raise SystemExit(
            f"produce to {bootstrap}: {left} records undelivered, {len(failed)} failed ({failed[:1]})"
        )
    return elapsed


def consume(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 10 << 20,
        }
    )
    start = time.perf_counter()
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        for m in c.consume(10_000, 0.5):
            if m.error():
                raise SystemExit(f"consume from {bootstrap}: {m.error()}")
            got += 1
    elapsed = time.perf_counter() - start
    c.close()
    if got != n:
        raise SystemExit(f"consume from {bootstrap}: {got} of {n} records within 120 s")
    return elapsed


def run(name: str, bootstrap: str, n: int, size: int, *, create: bool) -> tuple[float, float]:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    if create:  # the mock cluster creates topics when first produced to
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    produce(bootstrap, f"{topic}", min(n, 5000), size)  # warm-up: connections, metadata, lz4
    produced = produce(bootstrap, topic, n, size)
    consumed = consume(bootstrap, topic, n + min(n, 5000))
    p_rate, c_rate = n / produced, (n + min(n, 5000)) / consumed
    print(f"{name:>10}: produce {p_rate:>10,.0f} records/s   consume {c_rate:>10,.0f} records/s")
    return p_rate, c_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs of each; the best counts")
    args = parser.parse_args()
    print(machine(), f"confluent-kafka {version('confluent-kafka')}")
    print(f"{args.messages} records of {args.size} bytes, lz4, one partition")
    ours: list[tuple[float, float]] = []
    mock: list[tuple[float, float]] = []
    with our_broker() as our_bootstrap, mock_cluster() as mock_bootstrap:
        for _ in range(args.rounds):  # interleaved, so that both see the same machine
            ours.append(run("pulsarwire", our_bootstrap, args.messages, args.size, create=True))
            mock.append(run("mock", mock_bootstrap, args.messages, args.size, create=False))
    best_ours = [max(r[i] for r in ours) for i in (0, 1)]
    best_mock = [max(r[i] for r in mock) for i in (0, 1)]
    print(f"best of {args.rounds}: pulsarwire produce {best_ours[0]:,.0f}/s consume {best_ours[1]:,.0f}/s;"
          f" mock produce {best_mock[0]:,.0f}/s consume {best_mock[1]:,.0f}/s")  # fmt: skip
    print(
        f"ratio pulsarwire / mock: produce {best_ours[0] / best_mock[0]:.2f},"
        f" consume {best_ours[1] / best_mock[1]:.2f}"
    )


if __name__ == "__main__":
    main()
