"""The Pulsar → Delta exactly-once streaming job of the crash tests (tests/pipelines/state).

``python -m tests.helpers.ingest_job CONFIG_JSON`` runs it as its own process with its own Spark
driver; with ``fault`` = ``"after_write@1"`` the process dies (``os._exit``, no cleanup) at that
point of that batch, as a killed driver would. A run without a fault needs no process of its
own: :func:`run` is the same job on a SparkSession the caller has (the test suite's).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

import pipelines
from pipelines.connectors.pulsar_delta import ExactlyOnceJob, close_clients, recover, write_delta_exactly_once

CRASH_EXIT = 17


def main() -> int:
    cfg = json.loads(sys.argv[1])
    point, _, batch = (cfg.get("fault") or "@").partition("@")

    def fault(where: str, batch_id: int) -> None:
        if where == point and batch_id == int(batch):
            os._exit(CRASH_EXIT)

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pipelines.register(spark)
    run(spark, cfg, fault)
    spark.stop()
    return 0


def run(spark: Any, cfg: dict[str, Any], fault: Callable[[str, int], None] | None = None) -> None:
    """The job on ``spark`` (``format("pulsarwire")`` registered) until the topic's end is taken."""
    source = {"service.url": cfg["url"], "topic": cfg["topic"], "subscriptionName": cfg["job"]}
    job = ExactlyOnceJob(cfg["job"], cfg["checkpoint"], cfg["offsets"], source, fault=fault)
    if not os.path.exists(os.path.join(cfg["checkpoint"], "metadata")):
        recover(job, cfg["target"])
    reader = spark.readStream.format("pulsarwire")
    for k, v in {
        **source,
        **job.stream_options(),
        "startingOffsets": "earliest",
        "maxMessagesPerTrigger": str(cfg["max"]),
    }.items():
        reader = reader.option(k, v)
    df = reader.load().selectExpr(
        "CAST(value AS STRING) AS value", "topic", "partition", "ledgerId", "entryId", "batchIndex"
    )
    query = (
        df.writeStream.foreachBatch(lambda b, i: write_delta_exactly_once(b, i, cfg["target"], job))
        .option("checkpointLocation", cfg["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    close_clients()


if __name__ == "__main__":
    sys.exit(main())
