"""Crash tests: a Pulsar → Delta job killed between its steps still ends with every message once.

Each run is its own process (its own Spark driver) that dies with ``os._exit`` at the
chosen point, as a killed driver would: after the Delta write but before the offset row,
after the offset row but before the broker ack, after the ack; and a restart whose
checkpoint was deleted resumes from the offset store (repaired from the target's commit
metadata). The subscription's backlog ends at 0: everything committed was released.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from pipelines.connectors.delta import committed_in_target
from pipelines.state.checkpoint import batch_offsets
from pipelines.state.offsets import OffsetStore
from pulsarwire.broker import Broker
from tests.helpers import ingest_job
from tests.helpers.ingest_job import CRASH_EXIT

ROOT = Path(__file__).resolve().parents[3]


def run_job(cfg: dict[str, Any], fault: str) -> int:
    """The job in a process of its own that dies at ``fault`` (``os._exit``, a killed driver)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.ingest_job", json.dumps({**cfg, "fault": fault})],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if proc.returncode not in (0, CRASH_EXIT):
        raise AssertionError(f"job failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.returncode


@pytest.mark.long  # ~85 s: make test-long (CI's second step)
@pytest.mark.spark_process
@pytest.mark.timeout(900)
def test_crashes_at_every_step_and_a_lost_checkpoint(
    spark: Any, pulsar_broker_factory: Callable[..., Broker], tmp_path: Path, produce: Any
) -> None:
    broker = pulsar_broker_factory(deduplication=False)
    topic = "persistent://public/default/orders-eo"
    broker.create_partitioned_topic(topic, 2)
    n = 600
    produce(
        broker.service_url,
        topic,
        [f"order-{i}".encode() for i in range(n)],
        keys=[f"k{i % 13}" for i in range(n)],
    )
    cfg = {
        "url": broker.service_url,
        "topic": topic,
        "job": "orders",
        "checkpoint": str(tmp_path / "ck1"),
        "target": str(tmp_path / "orders"),
        "offsets": str(tmp_path / "offsets"),
        "max": 100,
    }
    # batch 1 lands in Delta, the driver dies before its offset row
    assert run_job(cfg, "after_write@1") == CRASH_EXIT
    stored = OffsetStore(cfg["offsets"]).load("orders")
    assert stored == batch_offsets(cfg["checkpoint"], 0)
    # batch 1 landed but was neither acknowledged nor stored: the broker still holds it
    held = sum(broker.stats(f"{topic}-partition-{p}")["subscriptions"]["orders"]["backlog"] for p in (0, 1))
    assert held >= n - 100, held
    # replay of batch 1 is skipped by the Delta app transaction; batch 2 dies after the ack,
    # before its offset row: the subscription is acknowledged ahead of the store, never behind it
    assert run_job(cfg, "after_ack@2") == CRASH_EXIT
    assert OffsetStore(cfg["offsets"]).load("orders") == batch_offsets(cfg["checkpoint"], 1)
    held = sum(broker.stats(f"{topic}-partition-{p}")["subscriptions"]["orders"]["backlog"] for p in (0, 1))
    assert held >= n - 300, held  # nothing past what the target holds (whole entries only)
    # batch 3 written, then the driver dies and the checkpoint is lost with it
    assert run_job(cfg, "after_write@3") == CRASH_EXIT
    written = batch_offsets(cfg["checkpoint"], 3)
    assert committed_in_target(cfg["target"], "orders") == (written, 0)
    shutil.rmtree(cfg["checkpoint"])
    cfg["checkpoint"] = str(tmp_path / "ck2")
    # a new checkpoint: recovery finds batch 3 in the target, the source resumes after it
    assert run_job(cfg, "after_offsets@0") == CRASH_EXIT
    ingest_job.run(spark, cfg)  # the last run ends normally: the suite's session will do

    rows = DeltaTable(cfg["target"]).to_pyarrow_table().to_pylist()
    values = sorted(r["value"] for r in rows)
    assert len(values) == n, f"{len(values)} rows for {n} messages"
    assert values == sorted(f"order-{i}" for i in range(n))
    positions = {(r["topic"], r["ledgerId"], r["entryId"], r["batchIndex"]) for r in rows}
    assert len(positions) == n
    stats = broker.stats(f"{topic}-partition-0"), broker.stats(f"{topic}-partition-1")
    assert [s["subscriptions"]["orders"]["backlog"] for s in stats] == [0, 0]
