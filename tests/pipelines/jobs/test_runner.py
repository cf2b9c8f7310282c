"""End to end: the example jobs of ``jobs/`` run by the runner on our broker (one Spark session).

Each test points the ``local`` profile at a fresh broker (``PULSAR_URL``) and a fresh data
directory (``PIPELINES_DATA_DIR``) and checks the exact contents of the Delta tables and
topics the jobs write.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from jobs.demo import produce
from pipelines.jobs.cli import main as cli
from pipelines.jobs.testing import backfill, run_job
from pulsarwire.broker import Broker
from tests.helpers.pw_client import read_topic

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def env(spark: Any, pulsar_broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Broker:
    monkeypatch.setenv("PULSAR_URL", pulsar_broker.service_url)
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(ROOT)
    return pulsar_broker


def order_ids(tmp_path: Path) -> list[int]:
    table = DeltaTable(str(tmp_path / "tables" / "orders_raw")).to_pyarrow_table()
    return sorted(table.column("order_id").to_pylist())


def test_ingest_is_exactly_once_across_reruns(env: Broker, tmp_path: Path) -> None:
    produce(env.service_url, "orders", 500)
    assert run_job("jobs/orders_ingest.yaml").exit_code == 0
    assert order_ids(tmp_path) == list(range(500))
    produce(env.service_url, "orders", 200, first=500)
    run_job("jobs/orders_ingest.yaml", source__pulsar__max_messages_per_trigger=150)
    assert order_ids(tmp_path) == list(range(700))
    run_job("jobs/orders_ingest.yaml")  # nothing new: nothing written
    assert order_ids(tmp_path) == list(range(700))
    stats = env.stats("persistent://public/default/orders")
    assert stats["subscriptions"]["orders_ingest"]["backlog"] == 0


def test_publish_follows_the_table_exactly_once(env: Broker, tmp_path: Path) -> None:
    produce(env.service_url, "orders", 300)
    run_job("jobs/orders_ingest.yaml")
    run_job("jobs/orders_publish.yaml")
    published = read_topic(env.service_url, "orders-enriched")
    assert sorted(json.loads(m.data())["id"] for m in published) == list(range(300))
    assert all(m.properties()["source"] == "orders_publish" for m in published)
    run_job("jobs/orders_publish.yaml")  # no new table version: nothing published
    assert len(read_topic(env.service_url, "orders-enriched")) == 300
    produce(env.service_url, "orders", 100, first=300)
    run_job("jobs/orders_ingest.yaml")
    run_job("jobs/orders_publish.yaml")
    again = read_topic(env.service_url, "orders-enriched")
    assert sorted(json.loads(m.data())["id"] for m in again) == list(range(400))


def test_backfill_of_a_window_is_that_window_and_safe_to_rerun(env: Broker, tmp_path: Path) -> None:
    produce(env.service_url, "orders", 100)
    time.sleep(0.05)
    t1 = int(time.time() * 1000)
    time.sleep(0.05)
    produce(env.service_url, "orders", 150, first=100)
    time.sleep(0.05)
    t2 = int(time.time() * 1000)
    time.sleep(0.05)
    produce(env.service_url, "orders", 50, first=250)
    backfill("jobs/orders_backfill.yaml", start=str(t1), end=str(t2))
    assert order_ids(tmp_path) == list(range(100, 250))
    backfill("jobs/orders_backfill.yaml", start=str(t1), end=str(t2))
    assert order_ids(tmp_path) == list(range(100, 250))


def test_offsets_show_and_reset(env: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    produce(env.service_url, "orders", 80)
    run_job("jobs/orders_ingest.yaml")
    capsys.readouterr()
    assert cli(["offsets", "show", "jobs/orders_ingest.yaml"]) == 0
    shown = capsys.readouterr().out
    assert "persistent://public/default/orders" in shown and "batch 0" in shown
    assert cli(["offsets", "reset", "jobs/orders_ingest.yaml", "--to", "latest"]) == 2  # needs --yes
    produce(env.service_url, "orders", 40, first=80)  # these are skipped by the reset
    assert cli(["offsets", "reset", "jobs/orders_ingest.yaml", "--to", "latest", "--yes"]) == 0
    assert "checkpoint moved to" in capsys.readouterr().out
    produce(env.service_url, "orders", 30, first=120)
    run_job("jobs/orders_ingest.yaml")
    assert order_ids(tmp_path) == list(range(80)) + list(range(120, 150))


def test_progress_lines_count_what_spark_read_without_a_job_of_their_own(
    env: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each batch's line names the messages its source read (Spark's numInputRows): the runner
    neither caches nor counts the batch (that cost one more Spark job per batch)."""
    from pyspark.sql.classic.dataframe import DataFrame

    def refused(*_: object, **__: object) -> None:
        raise AssertionError("the runner counted a batch")

    monkeypatch.setattr(DataFrame, "count", refused)
    monkeypatch.setattr(DataFrame, "persist", refused)
    produce(env.service_url, "orders", 700)
    assert run_job("jobs/orders_ingest.yaml", source__pulsar__max_messages_per_trigger=300).exit_code == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "] batch " in line]
    counted = [int(line.split(": ", 1)[1].split(" rows", 1)[0]) for line in lines]
    assert counted == [300, 300, 100], lines
    assert order_ids(tmp_path) == list(range(700))
