"""What ``pipelines run`` adds to a Pulsar → Delta stream: the runner against the query it runs.

One topic of ``--messages`` sample orders (``jobs/demo.py``'s producer, batched) in our broker (a
subprocess), one SparkSession (local[2]), jobs/orders_ingest.yaml read in ``--batches``
micro-batches (``max_messages_per_trigger``) from the start, each into its own Delta table:

  (a) the runner (``pipelines.jobs.testing.run_job``): its transform and exactly-once foreachBatch,
      plus what the runner does around each batch: the progress line (the rows come from the
      query's progress report since issue 18; before, a ``persist()`` + ``count()`` per batch),
      the subscription's lag, the summary
  (b) the same query built by hand: the same source options, transform and
      ``write_delta_exactly_once`` body, no progress lines

rows/s = messages / wall seconds of the run (query start to its end, the session already up);
the ratio (a)/(b) is what the runner's own work costs (1.00: nothing). Best of ``--repeat``.
Run: ``python bench/spark_runner.py [--messages 300000] [--batches 10]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from brokers import machine, pulsarwire_broker
from local_spark import local_spark

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # jobs.demo

from jobs.demo import produce  # noqa: E402
from pipelines.connectors.pulsar_delta import ExactlyOnceJob, write_delta_exactly_once  # noqa: E402
from pipelines.jobs import runner  # noqa: E402
from pipelines.jobs.config import load_job  # noqa: E402
from pipelines.jobs.testing import run_job  # noqa: E402

JOB = "jobs/orders_ingest.yaml"


def with_runner(data: Path, per_batch: int) -> float:
    os.environ["PIPELINES_DATA_DIR"] = str(data)
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        assert run_job(JOB, source__pulsar__max_messages_per_trigger=per_batch).exit_code == 0
    return time.perf_counter() - t


def by_hand(spark: Any, data: Path, per_batch: int) -> float:
    os.environ["PIPELINES_DATA_DIR"] = str(data)
    job = load_job(JOB, "local", [f"source.pulsar.max_messages_per_trigger={per_batch}"])
    assert job.sink.delta is not None and job.checkpoint is not None and job.offsets is not None
    source = job.source_options()
    eo = ExactlyOnceJob(
        job.name, job.checkpoint, job.offsets, source, partition_by=job.sink.delta.partition_by
    )
    target = job.sink.delta.path
    t = time.perf_counter()
    reader = spark.readStream.format("pulsarwire").options(**{**source, **eo.stream_options()})
    df = runner.transform(job, spark, reader.load())
    query = (
        df.writeStream.foreachBatch(
            lambda batch, batch_id: write_delta_exactly_once(batch, batch_id, target, eo)
        )
        .option("checkpointLocation", job.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=300_000)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.chdir(ROOT)
    spark = local_spark({"spark.sql.shuffle.partitions": "2"})
    per_batch = max(1, args.messages // args.batches)
    print(machine())
    print(f"{args.messages:,} orders, {args.batches} micro-batches of {per_batch:,}, best of {args.repeat}")
    with pulsarwire_broker() as url, tempfile.TemporaryDirectory(prefix="bench-runner-") as tmp:
        os.environ["PULSAR_URL"] = url
        produce(url, "orders", args.messages)
        by_hand(spark, Path(tmp, "warm-up"), per_batch)  # Python workers and code paths warm
        best = {"runner": float("inf"), "by hand": float("inf")}
        for i in range(args.repeat):  # alternating, each run on fresh tables and checkpoints
            best["by hand"] = min(best["by hand"], by_hand(spark, Path(tmp, f"hand-{i}"), per_batch))
            best["runner"] = min(best["runner"], with_runner(Path(tmp, f"runner-{i}"), per_batch))
        for label, (name, seconds) in zip("ab", best.items(), strict=True):
            print(f"({label}) {name:<8} {args.messages / seconds:>12,.0f} rows/s  ({seconds:.1f} s)")
        print(f"ratio runner / by hand: {best['by hand'] / best['runner']:.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
