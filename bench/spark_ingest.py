"""Spark ingest: Pulsar → Delta rows/s through the ``pulsarwire`` source, beside Spark's own source.

One partitioned topic (``--partitions``, default 2) holds ``--messages`` batched, LZ4
100-byte messages in our broker (a subprocess). Both runs use the same SparkSession
(local[2]), the same trigger (availableNow / bounded micro-batches) and the same sink:
``foreachBatch`` → :func:`pipelines.exactly_once.write_delta_exactly_once` (idempotent
deltalake write, offset store, broker ack) for Pulsar, and the same idempotent deltalake
write for the baseline:

  (a) ``pulsarwire`` source → Delta
  (b) Spark's ``rate-micro-batch`` source (same rows per batch, 100-byte values) → Delta
  (c) ``pulsarwire`` source → ``noop`` sink (what reading alone costs)

Goal (issue 6): (a) >= 300k rows/s. Run: ``python bench/spark_ingest.py [--messages 1000000]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from brokers import machine, pulsarwire_broker
from consume import fill

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


WARMUP = "persistent://public/default/ingest-warmup"


def pulsar_to_delta(spark, url: str, topic: str, work: Path, per_batch: int, sink: str) -> tuple[int, float]:
    from pipelines.exactly_once import ExactlyOnceJob, close_clients, write_delta_exactly_once

    source = {"service.url": url, "topic": topic, "subscriptionName": f"bench-{sink}"}
    ck = str(work / f"ck-{sink}")
    job = ExactlyOnceJob("bench", ck, str(work / "offsets"), source)
    reader = spark.readStream.format("pulsarwire")
    limit = {"maxMessagesPerTrigger": str(per_batch)} if per_batch else {}
    for k, v in {**source, "startingOffsets": "earliest", **limit}.items():
        reader = reader.option(k, v)
    df = reader.load().select(
        "key", "value", "topic", "partition", "ledgerId", "entryId", "batchIndex", "publishTime"
    )

    def write(batch, batch_id: int) -> None:
        if sink == "delta":
            write_delta_exactly_once(batch, batch_id, str(work / "pulsar_table"), job)
        else:
            batch.write.format("noop").mode("overwrite").save()

    t = time.perf_counter()
    q = df.writeStream.foreachBatch(write).option("checkpointLocation", ck).trigger(availableNow=True).start()
    q.awaitTermination()
    elapsed = time.perf_counter() - t
    close_clients()
    total = sum(p["numInputRows"] for p in q.recentProgress)
    return total, elapsed


def rate_to_delta(spark, work: Path, count: int, per_batch: int) -> tuple[int, float]:
    from pipelines.delta import write_idempotent

    target = str(work / "rate_table")
    rows = 0

    def write(batch, batch_id: int) -> None:
        nonlocal rows
        n = write_idempotent(batch, target, "bench-rate", batch_id)
        rows += (per_batch or count) if n else 0

    df = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", per_batch or count)
        .option("numPartitions", 2)
        .load()
        .selectExpr(
            "CAST(NULL AS BINARY) AS key",
            "CAST(rpad(sha2(CAST(value AS STRING), 256), 100, 'x') AS BINARY) AS value",
            "timestamp AS publishTime",
            "value AS entryId",
        )
    )
    t = time.perf_counter()
    q = df.writeStream.foreachBatch(write).option("checkpointLocation", str(work / "ck-rate")).start()
    while rows < count and q.isActive:
        time.sleep(0.05)
    q.stop()
    elapsed = time.perf_counter() - t
    return rows, elapsed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--per-batch", type=int, default=250_000)
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession

    import pipelines

    work = Path(tempfile.mkdtemp(prefix="spark-ingest-"))
    topic = "persistent://public/default/ingest"
    try:
        with pulsarwire_broker("--partitioned-topic", f"{topic}={args.partitions}") as url:
            t = time.perf_counter()
            fill(url, topic, args.messages, 100, last=False)
            fill(url, WARMUP, 2000, 100, last=False)
            fill_s = time.perf_counter() - t
            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.memory", "4g")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            pipelines.register(spark)
            # Spark's first query starts its Python workers and JIT: not part of any figure
            pulsar_to_delta(spark, url, WARMUP, work, args.per_batch, "warmup")
            noop_rows, noop_s = pulsar_to_delta(spark, url, topic, work, args.per_batch, "noop")
            rows, pulsar_s = pulsar_to_delta(spark, url, topic, work, args.per_batch, "delta")
            rate_rows, rate_s = rate_to_delta(spark, work, args.messages, args.per_batch)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(machine())
    print(
        f"{args.messages} messages of 100 bytes, {args.partitions} partitions, "
        f"{args.per_batch} per micro-batch, Spark local[2]; filled in {fill_s:.1f} s"
    )
    a = rows / pulsar_s
    b = rate_rows / rate_s
    c = noop_rows / noop_s
    print(f"(a) pulsarwire source -> Delta : {rows:>9} rows in {pulsar_s:6.1f} s = {a:9.0f} rows/s")
    print(f"(b) rate source       -> Delta : {rate_rows:>9} rows in {rate_s:6.1f} s = {b:9.0f} rows/s")
    print(f"(c) pulsarwire source -> noop  : {noop_rows:>9} rows in {noop_s:6.1f} s = {c:9.0f} rows/s")
    print(f"ratio (a)/(b) = {a / b:.2f}; goal (a) >= 300000 rows/s: {'met' if a >= 300_000 else 'NOT met'}")


if __name__ == "__main__":
    main()
