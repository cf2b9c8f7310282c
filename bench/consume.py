"""Consumer throughput: pulsarwire (per message, and the bulk Arrow path) against the official client.

One topic holds ``--messages`` batched (1000 per batch), LZ4-compressed 100-byte messages.
Each reader reads all of them from the start, on its own subscription, same broker, same run:

  (a) pulsarwire ``receive`` + ``acknowledge`` per message (blocking API)
  (b) pulsarwire ``read_arrow`` (bulk path for Spark: RecordBatches, no object per message)
  (c) official client ``receive`` + ``acknowledge``
  (d) official client ``batch_receive`` (1000 per call) + ``acknowledge``
  (e) pulsarwire ``batch_receive`` (1000 per call) + ``acknowledge`` (blocking API)

(b), (d) and (e) time the whole read from scratch, creating the reader/consumer included, best of
3 runs alternating; (a) and (c) start their clocks after subscribing.

The broker runs in a subprocess. Goals: (b) >= 2x (d) (issue 8); (a) >= 1x (c) and (e) >= 2x (d)
(issue 18). Every library a reader uses is imported before the clocks start (pyarrow and
pyarrow.compute take ~0.3 s to import, as long as (b) takes to read 200k messages; the official
client's library is imported too).
Run: ``python bench/consume.py [--messages 200000]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pulsar
import pyarrow.compute  # noqa: F401  (imported before timing: see the module docstring)
from brokers import machine, pulsarwire_broker

from pulsarwire.client.blocking import Client, CompressionType, InitialPosition
from pulsarwire.codec import MessageId


def fill(url: str, topic: str, count: int, size: int, *, last: bool = True) -> MessageId | None:
    """Produce ``count`` LZ4-batched messages; the last message id (non-partitioned topics)."""
    payload = os.urandom(size // 2 + 1).hex().encode()[:size]
    client = Client(url)
    try:
        producer = client.create_producer(
            topic, compression_type=CompressionType.LZ4, block_if_queue_full=True, max_pending_messages=20_000
        )
        for _ in range(count):
            producer.send_async(payload, None)
        producer.flush()
        if not last:
            return None
        probe = client.subscribe(topic, "probe")
        last = probe.get_last_message_id()
        probe.close()
        return last
    finally:
        client.close()


REPEAT = 3


def pulsarwire_receive(url: str, topic: str, count: int) -> float:
    client = Client(url)
    try:
        consumer = client.subscribe(topic, "pw-a", initial_position=InitialPosition.Earliest)
        started = time.perf_counter()
        for _ in range(count):
            consumer.acknowledge(consumer.receive(30_000))
        return time.perf_counter() - started
    finally:
        client.close()


def pulsarwire_bulk(url: str, topic: str, count: int, last: MessageId) -> float:
    client = Client(url)
    try:
        started = time.perf_counter()
        rows = sum(
            rb.num_rows for rb in client.read_arrow(topic, MessageId.EARLIEST, last, batch_rows=50_000)
        )
        elapsed = time.perf_counter() - started
        assert rows == count, (rows, count)
        return elapsed
    finally:
        client.close()


def official_receive(url: str, topic: str, count: int) -> float:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "off-c", initial_position=pulsar.InitialPosition.Earliest)
        started = time.perf_counter()
        for _ in range(count):
            consumer.acknowledge(consumer.receive(30_000))
        return time.perf_counter() - started
    finally:
        client.close()


def ack_batches(consumer: Any, take: Callable[[], Any], count: int) -> None:
    """The loop of (d) and (e), the same for both clients: take batches until ``count`` messages
    came, each acknowledged with ``consumer.acknowledge`` (looked up per message, as a user writes it)."""
    got = 0
    while got < count:
        messages = take()
        for m in messages:
            consumer.acknowledge(m)
        got += len(messages)


def official_batch_receive(url: str, topic: str, count: int) -> float:
    """Like (b), the clock includes creating the consumer: both read the range from scratch."""
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        started = time.perf_counter()
        consumer = client.subscribe(
            topic,
            f"off-d-{uuid.uuid4().hex[:8]}",
            initial_position=pulsar.InitialPosition.Earliest,
            batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(1000, -1, 100),
        )
        ack_batches(consumer, consumer.batch_receive, count)
        return time.perf_counter() - started
    finally:
        client.close()


def pulsarwire_batch_receive(url: str, topic: str, count: int) -> float:
    """Like (d): the clock includes subscribing, 1000 messages per call, each acknowledged."""
    client = Client(url)
    try:
        started = time.perf_counter()
        consumer = client.subscribe(
            topic, f"pw-e-{uuid.uuid4().hex[:8]}", initial_position=InitialPosition.Earliest
        )
        ack_batches(consumer, functools.partial(consumer.batch_receive, 1000, timeout_ms=100), count)
        return time.perf_counter() - started
    finally:
        client.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    args = p.parse_args(argv)
    n = args.messages
    print(machine())
    print(f"workload: {n} x {args.size}-byte messages, batched by 1000, LZ4, read from the start")
    with pulsarwire_broker() as url:
        topic = f"persistent://public/default/bench-consume-{uuid.uuid4().hex[:8]}"
        last = fill(url, topic, n, args.size)
        assert last is not None
        # The bulk reads take well under a second: best of REPEAT, alternating, so that one
        # scheduling hiccup on a shared machine does not decide the ratio.
        bulk, batch, pw_batch = [], [], []
        for _ in range(REPEAT):
            bulk.append(pulsarwire_bulk(url, topic, n, last))
            batch.append(official_batch_receive(url, topic, n))
            pw_batch.append(pulsarwire_batch_receive(url, topic, n))
        rates = {
            "(a) pulsarwire receive+ack": n / pulsarwire_receive(url, topic, n),
            "(b) pulsarwire bulk arrow": n / min(bulk),
            "(c) official receive+ack": n / official_receive(url, topic, n),
            "(d) official batch_receive": n / min(batch),
            "(e) pulsarwire batch_receive": n / min(pw_batch),
        }
    for name, rate in rates.items():
        print(f"{name:<30} {rate:>12,.0f} msgs/s")
    for name, runs in (("(b)", bulk), ("(d)", batch), ("(e)", pw_batch)):
        print(f"{name} every run, in order: " + ", ".join(f"{n / t:,.0f}" for t in runs) + " msgs/s")
    print(
        f"ratio (a)/(c): {rates['(a) pulsarwire receive+ack'] / rates['(c) official receive+ack']:.2f}"
        " (goal >= 1)"
    )
    batch_ratio = rates["(e) pulsarwire batch_receive"] / rates["(d) official batch_receive"]
    print(f"ratio (e)/(d): {batch_ratio:.2f} (goal >= 2)")
    bulk_ratio = rates["(b) pulsarwire bulk arrow"] / rates["(d) official batch_receive"]
    print(f"ratio (b)/(d): {bulk_ratio:.2f} (goal >= 2)")


if __name__ == "__main__":
    main()
