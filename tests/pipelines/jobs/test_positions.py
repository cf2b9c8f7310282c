"""Positions that cannot lie (issue 28, points 1-4), through the ``pipelines`` command.

Each test drives the command as a user does — ``offsets reset`` and failing runs as their own
process (exit code and output checked), runs that need Spark on the suite's session — and
counts the rows in the Delta table with deltalake: nothing may exit 0 after skipping rows.

* an ``offsets reset`` is where the next run starts, even though the sink's commit metadata
  holds later positions of the run before (recovery applies only commits after the reset);
* a broker that lost its data (a new broker on the same address) and grew past the stored
  position, and a topic deleted and created again, are found by the job's subscription: it is
  acknowledged up to every stored position, and a new one is acknowledged up to nothing;
* with ``fail_on_data_loss: false`` the run reads those partitions again and the store moves
  with it (no "PAST THE END" afterwards, no second skip after a lost checkpoint).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipelines.state.offsets import OffsetStore
from pulsarwire.broker import Broker
from tests.helpers.cli import pipelines
from tests.helpers.orders_job import (
    INGEST,
    ORDERS,
    in_process,
    order_ids,
    send_orders,
)

RESET = f"pipelines offsets reset {INGEST} --to earliest --yes"


def run_with(url: str, repo_data: Path, *args: str) -> Any:
    return pipelines(*args, PULSAR_URL=url, PIPELINES_DATA_DIR=str(repo_data))


@pytest.mark.spark
def test_offsets_reset_is_where_the_next_run_starts(
    spark: Any, pulsar_broker: Broker, repo_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pulsar_broker.service_url
    monkeypatch.setenv("PULSAR_URL", url)
    send_orders(url, 0, 300)
    assert in_process("run", INGEST).code == 0
    send_orders(url, 300, 200)
    ran = run_with(url, repo_data, "offsets", "reset", INGEST, "--to", "earliest", "--yes")
    assert ran.code == 0, ran
    assert "checkpoint moved to" in ran.out and "reset epoch 1" in ran.out
    # the target's commit metadata says "read up to order 299": it predates the reset
    ran = in_process("run", INGEST)
    assert ran.code == 0, ran
    counts = Counter(order_ids(repo_data))
    assert {i for i, n in counts.items() if n == 2} == set(range(300))  # read again, as asked
    assert {i for i, n in counts.items() if n == 1} == set(range(300, 500))
    assert sum(counts.values()) == 800


@pytest.mark.spark
def test_a_broker_that_lost_its_data_and_grew_past_the_position_is_data_loss(
    spark: Any, pulsar_broker: Broker, repo_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PULSAR_URL", pulsar_broker.service_url)
    send_orders(pulsar_broker.service_url, 0, 300)
    assert in_process("run", INGEST).code == 0
    with Broker(deduplication=True) as fresh:  # the data was lost: a new broker, more orders than before
        send_orders(fresh.service_url, 1000, 500)
        ran = run_with(fresh.service_url, repo_data, "run", INGEST)
        assert ran.code == 1 and ran.out == "" and ran.seconds < 30, ran
        (line,) = ran.err_lines
        assert line.startswith(f"{INGEST}: checkpoint: {ORDERS}: the job's subscription 'orders_ingest' ")
        assert "created again (the broker lost its data" in line and RESET in line
        assert order_ids(repo_data) == list(range(300))  # nothing read, nothing skipped
        # without the checkpoint the offset store says the same
        ran = run_with(fresh.service_url, repo_data, "run", INGEST, "--set", f"checkpoint={repo_data}/ck2")
        assert ran.code == 1 and f"{INGEST}: offsets: {ORDERS}: the job's subscription" in ran.err, ran
        # the advice works, once: the reset is not undone by the sink's older commits
        ran = run_with(fresh.service_url, repo_data, "offsets", "reset", INGEST, "--to", "earliest", "--yes")
        assert ran.code == 0, ran
        monkeypatch.setenv("PULSAR_URL", fresh.service_url)
        ran = in_process("run", INGEST)
        assert ran.code == 0, ran
        assert order_ids(repo_data) == list(range(300)) + list(range(1000, 1500))
        assert in_process("run", INGEST).code == 0  # and the next run is a normal one
        assert order_ids(repo_data) == list(range(300)) + list(range(1000, 1500))


@pytest.mark.spark
def test_lost_data_with_fail_on_data_loss_false_is_read_again_and_the_store_follows(
    spark: Any, pulsar_broker: Broker, repo_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PULSAR_URL", pulsar_broker.service_url)
    send_orders(pulsar_broker.service_url, 0, 300)
    assert in_process("run", INGEST).code == 0
    lenient = ("--set", "source.pulsar.fail_on_data_loss=false")
    with Broker(deduplication=True) as fresh:
        send_orders(fresh.service_url, 1000, 100)  # a shorter topic: the position is past its end
        monkeypatch.setenv("PULSAR_URL", fresh.service_url)
        ran = in_process("run", INGEST, *lenient)
        assert ran.code == 0, ran
        assert "is past the topic's end" in ran.err and "reads it again from its earliest" in ran.err
        assert order_ids(repo_data) == list(range(300)) + list(range(1000, 1100))
        ran = run_with(fresh.service_url, repo_data, "offsets", "show", INGEST)
        assert ran.code == 0 and "PAST THE END" not in ran.out and "backlog 0 messages" in ran.out, ran
        # a lost checkpoint later resumes from the moved store: no second re-read, no skip
        send_orders(fresh.service_url, 1100, 50)
        ran = in_process("run", INGEST, *lenient, "--set", f"checkpoint={repo_data}/ck2")
        assert ran.code == 0 and "past the topic's end" not in ran.err, ran
        assert order_ids(repo_data) == list(range(300)) + list(range(1000, 1150))


@pytest.mark.spark
def test_a_topic_deleted_and_created_again_is_data_loss(
    spark: Any, pulsar_broker: Broker, repo_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pulsar_broker.service_url
    monkeypatch.setenv("PULSAR_URL", url)
    send_orders(url, 0, 200)
    assert in_process("run", INGEST).code == 0
    pulsar_broker.delete_topic(ORDERS)
    send_orders(url, 500, 400)
    ran = run_with(url, repo_data, "run", INGEST)
    assert ran.code == 1 and "the job's subscription 'orders_ingest'" in ran.err and RESET in ran.err, ran
    assert order_ids(repo_data) == list(range(200))
    stored = OffsetStore(str(repo_data / "tables" / "pipeline_offsets")).load("orders_ingest")
    assert ran.err.count("\n") == 1 and str(stored[ORDERS]) in ran.err


@pytest.mark.spark
def test_reset_moves_a_remote_checkpoint_aside_through_spark(
    spark: Any, pulsar_broker: Broker, repo_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint given as a URI is moved by Spark's Hadoop FileSystem (``file://`` here, the
    same calls as for ``s3a://`` or ``abfss://``), so the run after the reset starts from it."""
    url = pulsar_broker.service_url
    monkeypatch.setenv("PULSAR_URL", url)
    checkpoint = ("--set", f"checkpoint=file://{repo_data}/remote-ck")
    send_orders(url, 0, 120)
    assert in_process("run", INGEST, *checkpoint).code == 0
    ran = in_process("offsets", "reset", INGEST, "--to", "earliest", "--yes", *checkpoint)
    assert ran.code == 0 and f"checkpoint moved to file://{repo_data}/remote-ck.before-reset-" in ran.out, ran
    assert not (repo_data / "remote-ck").exists()
    assert in_process("run", INGEST, *checkpoint).code == 0
    assert order_ids(repo_data) == sorted(list(range(120)) * 2)
