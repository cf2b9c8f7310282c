"""Spark → Pulsar: rows/s of the ``pulsarwire`` sink beside the official client's ``send_async``.

One SparkSession (local[2]); a DataFrame of ``--rows`` rows (a 100-byte string value and a
key, built by Spark in 2 partitions, cached and counted before any clock starts) written to
a fresh topic of our broker (a subprocess, deduplication on):

  (a) plain: ``df.write.format("pulsarwire")`` with a topic (at-least-once)
  (b) exactly-once: the same with ``producerNamePrefix`` and ``batchId`` (names and sequence
      ids derived from the batch and the row: a rerun is dropped by the broker)
  (c) the official client alone, no Spark: one producer, ``send_async`` of the same number of
      100-byte messages (batched, a callback counting receipts), then ``flush``

rows/s = rows / seconds from the write's call to its return (every receipt in); best of
``--repeat``; ratios against (c). After each write (untimed) the topic is read back: it must
hold exactly the rows written, or the benchmark stops.
Goal (issue 18): (b) >= 300k rows/s at 1M rows on local[2].
Run: ``python bench/spark_sink.py [--rows 1000000]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid

import pulsar
from brokers import machine, pulsarwire_broker
from local_spark import local_spark

from pulsarwire import Client, MessageId


def official_send_async(url: str, rows: int) -> float:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            f"persistent://public/default/official-{uuid.uuid4().hex[:8]}",
            batching_enabled=True,
            block_if_queue_full=True,
            max_pending_messages=10_000,
        )
        payload = b"x" * 100
        done = threading.Event()
        count = [0]

        def receipt(_result: object, _mid: object) -> None:
            count[0] += 1
            if count[0] == rows:
                done.set()

        t = time.perf_counter()
        for _ in range(rows):
            producer.send_async(payload, receipt)
        producer.flush()
        done.wait(300)
        took = time.perf_counter() - t
        producer.close()
        return took
    finally:
        client.close()


def stored(url: str, topic: str) -> int:
    """How many messages ``topic`` holds (read back with the bulk reader, untimed)."""
    client = Client(url)
    try:
        probe = client.subscribe(topic, "bench-count")
        last = probe.get_last_message_id()
        probe.close()
        return sum(
            rb.num_rows for rb in client.read_arrow(topic, MessageId.EARLIEST, last, batch_rows=50_000)
        )
    finally:
        client.close()


def spark_write(df: object, url: str, exactly_once: bool, run: int, rows: int) -> float:
    """Seconds to write ``df`` to a new topic; checks that the topic then holds exactly ``rows``."""
    topic = f"persistent://public/default/sink-{uuid.uuid4().hex[:8]}"
    writer = df.write.format("pulsarwire").option("service.url", url).option("topic", topic).mode("append")  # type: ignore[attr-defined]
    if exactly_once:
        writer = writer.option("producerNamePrefix", f"bench-{run}").option("batchId", str(run))
    t = time.perf_counter()
    writer.save()
    took = time.perf_counter() - t
    have = stored(url, topic)
    if have != rows:
        raise SystemExit(f"{topic}: {have} messages stored, {rows} written")
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = local_spark()
    df = (
        spark.range(0, args.rows, 1, 2)
        .selectExpr("rpad(CAST(id AS STRING), 100, 'x') AS value", "CAST(id % 97 AS STRING) AS key")
        .cache()
    )
    df.count()
    print(machine())
    print(f"{args.rows:,} rows of 100 B in 2 Spark partitions, local[2], best of {args.repeat}")
    with pulsarwire_broker("--dedup") as url:
        spark_write(df.limit(1000), url, True, 10_000, 1000)  # warm-up: Python workers started
        best = {"plain": float("inf"), "exactly-once": float("inf"), "official": float("inf")}
        for run in range(args.repeat):
            best["plain"] = min(best["plain"], spark_write(df, url, False, run, args.rows))
            best["exactly-once"] = min(best["exactly-once"], spark_write(df, url, True, run, args.rows))
            best["official"] = min(best["official"], official_send_async(url, args.rows))
        labels = {
            "plain": "(a) sink, plain",
            "exactly-once": "(b) sink, exactly-once",
            "official": "(c) official send_async",
        }
        for name, seconds in best.items():
            print(f"{labels[name]:<26} {args.rows / seconds:>12,.0f} rows/s  ({seconds:.1f} s)")
        for name in ("plain", "exactly-once"):
            print(f"ratio {name} / official send_async: {best['official'] / best[name]:.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
