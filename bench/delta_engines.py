"""Spark + delta-spark beside delta-rs (deltalake): the same rows written and merged by both, one run.

One ``local[2]`` session with the Delta jars Maven fetched (tests/helpers/peers.py; ``make
peers``) and Delta's session extension. For each engine, on a fresh table under a temp dir:

* append — ``--batches`` idempotent appends of ``--rows`` rows (``pipelines.state.delta.
  write_idempotent`` with an app id and version, the sink's exactly-once write): delta-spark gets
  the Spark DataFrame, deltalake the same rows as Arrow (``toArrow()`` counted in its time);
* merge — the offset store's commit (``OffsetStore.commit``: a MERGE of one row per partition)
  ``--commits`` times, DeltaSparkEngine against DeltaRsEngine.

Printed: seconds and rows/s per engine and the ratio delta-spark / deltalake (above 1: delta-spark
is slower). The first write of each engine is a warm-up and not counted.

Spark's own Kafka source and sink (``format("kafka")``, spark-sql-kafka) beside ``format("kafkawire")``
waits for the kafkawire source (a later issue); the Kafka jars are in the peers' cache then.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from local_spark import local_spark

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.state.delta import write_idempotent  # noqa: E402
from pipelines.state.offsets import DeltaRsEngine, DeltaSparkEngine, OffsetStore  # noqa: E402
from pipelines.state.positions import Offsets, Position  # noqa: E402
from tests.helpers import peers  # noqa: E402


def frame(spark: Any, rows: int, batch: int) -> Any:
    return spark.range(rows).selectExpr(
        "id",
        f"CAST({batch} AS INT) AS batch",
        "concat('order-', CAST(id AS STRING)) AS item",
        "id * 0.5 AS price",
    )


def appends(spark: Any, engine: str, root: Path, rows: int, batches: int) -> float:
    """Seconds for ``batches`` idempotent appends (after one warm-up write) on ``engine``."""
    target = str(root / f"append-{engine}")
    started = 0.0
    for version in range(batches + 1):
        if version == 1:
            started = time.perf_counter()
        df = frame(spark, rows, version)
        data = df if engine == "delta-spark" else df.toArrow()
        assert write_idempotent(
            data, target, "bench", version, spark=spark if engine == "delta-spark" else None
        )
    return time.perf_counter() - started


def merges(spark: Any, engine: str, root: Path, commits: int, partitions: int) -> float:
    """Seconds for ``commits`` offset-store commits (after one warm-up) on ``engine``."""
    path = str(root / f"offsets-{engine}")
    store = OffsetStore(
        path, engine=DeltaSparkEngine(spark, path) if engine == "delta-spark" else DeltaRsEngine(path)
    )
    topic = "persistent://public/default/orders-partition-{}"
    started = 0.0
    for batch in range(commits + 1):
        if batch == 1:
            started = time.perf_counter()
        offsets = Offsets({topic.format(p): Position.parse(f"7:{batch}:-1") for p in range(partitions)})
        store.commit("bench", offsets, batch_id=batch)
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rows", type=int, default=200_000, help="rows per append")
    p.add_argument("--batches", type=int, default=5, help="appends counted per engine")
    p.add_argument("--commits", type=int, default=10, help="offset-store commits counted per engine")
    p.add_argument("--partitions", type=int, default=8, help="rows per offset-store commit")
    args = p.parse_args()
    conf = {
        **peers.delta_spark_conf(),
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
    }
    spark = local_spark(conf)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seconds = {e: appends(spark, e, root, args.rows, args.batches) for e in ("delta-spark", "deltalake")}
        total = args.rows * args.batches
        print(f"append: {args.batches} x {args.rows} rows (idempotent, app id + version)")
        for engine, s in seconds.items():
            print(f"  {engine:<12} {s:7.2f} s  {total / s:12,.0f} rows/s")
        print(f"  delta-spark / deltalake: {seconds['delta-spark'] / seconds['deltalake']:.2f}x")
        commit = {
            e: merges(spark, e, root, args.commits, args.partitions) for e in ("delta-spark", "deltalake")
        }
        print(f"offset store: {args.commits} commits of {args.partitions} rows (MERGE)")
        for engine, s in commit.items():
            print(f"  {engine:<12} {s:7.2f} s  {s / args.commits * 1000:8.0f} ms/commit")
        print(f"  delta-spark / deltalake: {commit['delta-spark'] / commit['deltalake']:.2f}x")
    print("Spark's Kafka source/sink beside format('kafkawire'): waits for the kafkawire source")
    spark.stop()


if __name__ == "__main__":
    main()
