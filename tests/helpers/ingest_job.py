"""The Pulsar → Delta exactly-once streaming job of the crash tests (tests/pipelines/state).

``python -m tests.helpers.ingest_job CONFIG_JSON`` runs it as its own process with its own Spark
driver; with ``fault`` = ``"after_write@1"`` the process dies (``os._exit``, no cleanup) at that
point of that batch, as a killed driver would. A run without a fault needs no process of its
own: :func:`run` is the same job on a SparkSession the caller has (the test suite's).

:class:`ExactlyOnceJob` is that job's exactly-once step built from the ``pulsarwire`` source's
options: the Pulsar source and Delta sink connectors (:mod:`pipelines.connectors`) under
:class:`pipelines.state.exactly_once.ExactlyOnce`; :func:`write_delta_exactly_once` is its
foreachBatch body and :func:`close_clients` closes the connectors' clients.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

import pipelines
from pipelines.connectors.base import JobContext
from pipelines.jobs.models import DeltaSink, PulsarSource
from pipelines.state import exactly_once
from pipelines.state.offsets import OffsetStore

CRASH_EXIT = 17

_opened: list[Any] = []  # the connectors whose clients close_clients() closes


@dataclass
class ExactlyOnceJob:
    """A Pulsar → Delta job's exactly-once step from the ``pulsarwire`` source's options."""

    name: str
    checkpoint: str
    offsets: str
    source_options: dict[str, str]
    fault: Callable[[str, int], None] | None = None
    _steps: dict[str, exactly_once.ExactlyOnce] = field(default_factory=dict)

    def stream_options(self) -> dict[str, str]:
        """Options to add to the source so a run without checkpoint resumes from the store."""
        return {"offsetStore": self.offsets, "job": self.name}

    def step(self, target: str) -> exactly_once.ExactlyOnce:
        if target not in self._steps:
            ctx = JobContext(self.name, "<test>", self.checkpoint, self.offsets, None, {})
            fields = {spark: name for name, spark in PulsarSource.spark_names().items()}
            section = PulsarSource.model_validate({fields[k]: v for k, v in self.source_options.items()})
            source, sink = section.open(ctx), DeltaSink(path=target).open(ctx)
            _opened.append(source)
            store = OffsetStore(self.offsets)
            self._steps[target] = exactly_once.ExactlyOnce(
                self.name, self.checkpoint, store, source, sink, store.epoch(self.name), self.fault
            )
        return self._steps[target]


def write_delta_exactly_once(batch_df: Any, batch_id: int, target: str, job: ExactlyOnceJob) -> None:
    exactly_once.commit_batch(batch_df, batch_id, job.step(target))


def recover(job: ExactlyOnceJob, target: str) -> Any:
    return exactly_once.recover(job.step(target))


def close_clients() -> None:
    while _opened:
        _opened.pop().close()


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
