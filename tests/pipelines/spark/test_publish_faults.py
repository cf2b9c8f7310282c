"""Fault scenarios (TESTING.md) against a real Delta → Pulsar publish, run by the runner.

Each scenario appends versions to a Delta table, runs a generated publish job file through
``pipelines.jobs.testing.run_job`` (the runner's ``_publish``: every table version after the last
published one, written by the exactly-once sink with producer ``{prefix}-{sparkPartition}`` and
sequence id ``version·2³² + row``) while a fault hits the broker or the TCP path, then reads
the target topic back completely and compares it with the table:

* the checker (``pulsarwire.testing.checker``) gets the table's rows in table order; a row
  counts as acknowledged when the runner recorded its version as published. It must report 0
  missing, 0 duplicated, 0 out of order — ordering is what the sink promises, per producer
  (each Spark partition's rows in table order, versions one after the other);
* the topic holds exactly the table's (value, key) pairs, all from the job's producers, and no
  version's rows come after a later version's.

The topic is read back by the official client (``pulsar-client``), the independent judge.

The report line is printed (``pytest -s`` shows it). Pulsar → Delta faults are in
test_faults.py; replays without faults in test_sink.py and test_runner.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pipelines.errors import SinkError
from pipelines.jobs.testing import run_job
from pulsarwire.broker import Broker
from pulsarwire.proto import pb
from pulsarwire.testing.checker import Ledger, Report, check
from pulsarwire.testing.proxy import FaultProxy

TOPIC = "persistent://public/default/published"
JOB = "publish_faults"


@dataclass(frozen=True)
class Published:
    value: str
    key: str
    producer: str


class Table:
    """The Delta source table: each ``append`` is one version of ``rows`` keyed rows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[tuple[str, str]] = []  # (id, key) in table order
        self.versions: list[int] = []  # the version of each row
        self.version = -1

    def append(self, rows: int) -> None:
        self.version += 1
        ids = [f"v{self.version}-r{i}" for i in range(rows)]
        keys = [f"k{i % 7}" for i in range(rows)]
        write_deltalake(str(self.path), pa.table({"id": ids, "k": keys}), mode="append")
        self.rows += zip(ids, keys, strict=True)
        self.versions += [self.version] * rows


class Publish:
    """A generated publish job file over ``table`` into ``TOPIC`` at ``url``."""

    def __init__(self, tmp: Path, table: Table, url: str, **sink: Any) -> None:
        self.table = table
        self.checkpoint = tmp / "checkpoint"
        self.file = tmp / f"{JOB}.yaml"
        pulsar = {
            "service_url": url,
            "topic": TOPIC,
            "batching_max_messages": 25,
            "batching_max_publish_delay_ms": 1,
            "client": {"operation_timeout_ms": 60000},
            **sink,
        }
        job = {
            "name": JOB,
            "source": {"delta": {"path": str(table.path)}},
            "transform": {"sql": "SELECT id AS value, k AS key FROM source"},
            "sink": {"pulsar": pulsar},
            "trigger": "availableNow",
            "checkpoint": str(self.checkpoint),
        }
        self.file.write_text(json.dumps(job))  # JSON is YAML

    def run(self) -> int:
        return run_job(self.file).exit_code

    def published_version(self) -> int:
        """The last version the runner recorded as published (-1: none)."""
        marker = self.checkpoint / "published.json"
        return int(json.loads(marker.read_text())["version"]) if marker.exists() else -1


def read_topic(url: str) -> list[Published]:
    """Every message of ``TOPIC``, from the earliest, in topic order — read by the official client."""
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            m = reader.read_next(10_000)
            out.append(Published(m.data().decode(), m.partition_key(), m.producer_name()))
        return out
    finally:
        client.close()


def verdict(url: str, job: Publish, scenario: str) -> Report:
    """Read the topic back and hold it against the table; returns the checker's report."""
    table = job.table
    published = read_topic(url)
    producer_of = {}
    for m in published:
        producer_of.setdefault(m.value, m.producer)
    done = job.published_version()
    ledger = Ledger()
    for (row_id, _key), version in zip(table.rows, table.versions, strict=True):
        ledger.send(row_id, key=producer_of.get(row_id, ""))  # order is promised per producer
        if version <= done:
            ledger.ack(row_id)
    report = check(ledger, [m.value for m in published])
    print(f"\n{scenario}: {report.line()} published_through=v{done}")
    assert report.clean, report.line()
    # exact contents: every acknowledged row once, with its key; nothing that is not a table row
    contents = sorted((m.value, m.key) for m in published)
    acked = sorted(r for r, v in zip(table.rows, table.versions, strict=True) if v <= done)
    if done == table.version:
        assert contents == acked
    else:  # a failed run: rows of the failed version may be there already (a rerun skips them)
        assert set(acked) <= set(contents) <= set(table.rows)
        assert report.duplicates == 0
    # every message comes from one of the job's producers, and a version never follows a later one
    assert all(m.producer.startswith(f"{JOB}-") for m in published)
    versions = [int(m.value[1:].split("-")[0]) for m in published]
    assert versions == sorted(versions)
    return report


class When(threading.Thread):
    """Runs ``fault()`` once ``ready()`` is true (polled), at most once; records whether it fired."""

    def __init__(self, ready: Callable[[], bool], fault: Callable[[], Any], timeout: float = 120) -> None:
        super().__init__(daemon=True)
        self.ready = ready
        self.fault = fault
        self.timeout = timeout
        self.fired = 0
        self.error: BaseException | None = None
        self._done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self._done.is_set() and time.monotonic() < deadline:
            try:
                if self.ready():
                    self.fault()
                    self.fired += 1
                    return
            except BaseException as exc:
                self.error = exc
                return
            time.sleep(0.005)

    def stop(self) -> None:
        self._done.set()
        self.join(60)
        assert self.error is None, self.error


def stored(broker: Broker) -> int:
    """Messages the broker has taken on ``TOPIC`` so far."""
    return int(broker.stats(TOPIC).get("msg_in", 0))


@pytest.fixture
def data_broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(deduplication=True, data_dir=tmp_path / "broker") as b:
        yield b


@pytest.fixture
def table(tmp_path: Path) -> Table:
    t = Table(tmp_path / "table")
    for _ in range(3):
        t.append(1500)
    return t


def test_broker_restart_mid_publish(spark: Any, data_broker: Broker, tmp_path: Path, table: Table) -> None:
    job = Publish(tmp_path, table, data_broker.service_url)
    restart = When(lambda: stored(data_broker) >= 2000, data_broker.restart)
    restart.start()
    assert job.run() == 0
    restart.stop()
    assert restart.fired == 1
    report = verdict(data_broker.service_url, job, "broker restart mid-publish")
    assert report.present == report.acked == 4500


def test_tcp_cut_between_sends_mid_publish(
    spark: Any, dedup_broker: Broker, tmp_path: Path, table: Table
) -> None:
    with FaultProxy(dedup_broker.service_url) as proxy:
        job = Publish(tmp_path, table, proxy.service_url)
        cuts = [17, 40, 90]  # the n-th SEND after the previous cut
        proxy.cut_after("SEND", "to_broker", count=cuts.pop(0))

        def next_cut() -> bool:
            if proxy.pending_rules() == 0 and cuts:
                proxy.cut_after("SEND", "to_broker", count=cuts.pop(0))
            return not cuts and proxy.pending_rules() == 0

        watcher = When(next_cut, lambda: None)
        watcher.start()
        assert job.run() == 0
        watcher.stop()
        assert watcher.fired == 1  # all three cuts happened
    report = verdict(dedup_broker.service_url, job, "TCP cut between SENDs mid-publish")
    assert report.present == 4500


def test_close_producer_and_unload_mid_publish(
    spark: Any, pulsar_broker: Broker, tmp_path: Path, table: Table
) -> None:
    job = Publish(tmp_path, table, pulsar_broker.service_url)
    faults = [
        When(lambda: stored(pulsar_broker) >= 700, lambda: pulsar_broker.close_producers(TOPIC)),
        When(lambda: stored(pulsar_broker) >= 2300, lambda: pulsar_broker.unload_topic(TOPIC)),
        When(lambda: stored(pulsar_broker) >= 3800, lambda: pulsar_broker.close_producers(TOPIC)),
    ]
    for f in faults:
        f.start()
    assert job.run() == 0
    for f in faults:
        f.stop()
    assert [f.fired for f in faults] == [1, 1, 1]
    report = verdict(pulsar_broker.service_url, job, "CloseProducer / unload mid-publish")
    assert report.present == 4500


def test_send_timeout_fails_the_task_and_a_rerun_completes(
    spark: Any, pulsar_broker: Broker, tmp_path: Path, table: Table
) -> None:
    job = Publish(tmp_path, table, pulsar_broker.service_url, send_timeout_ms=1000)
    # receipts held back for 3 s (the broker has stored the messages): the sends time out
    slow = When(
        lambda: stored(pulsar_broker) >= 2000,
        lambda: pulsar_broker.inject(delay_receipts=5, receipt_delay=3.0),
    )
    slow.start()
    with pytest.raises(SinkError) as info:
        job.run()
    slow.stop()
    failed = job.published_version() + 1  # the version being written when the receipts stalled
    text = str(info.value)
    assert text.startswith(f"[{JOB}] version {failed} of {table.path} was not published: SinkError: "), text
    assert "SendTimeoutError" in text and "rerun the job" in text, text
    verdict(pulsar_broker.service_url, job, "send timeout, before the rerun")
    assert job.run() == 0
    report = verdict(pulsar_broker.service_url, job, "send timeout, after the rerun")
    assert report.present == 4500


def test_topic_terminated_fails_fast_and_a_rerun_fails_the_same_way(
    spark: Any, pulsar_broker: Broker, tmp_path: Path, table: Table
) -> None:
    job = Publish(tmp_path, table, pulsar_broker.service_url)
    assert job.run() == 0
    pulsar_broker.terminate_topic(TOPIC)
    table.append(500)
    for attempt in range(2):
        with pytest.raises(SinkError) as info:
            job.run()
        text = str(info.value)
        # refused by the broker, not after the send or operation timeout (60 s here)
        assert text.startswith(f"[{JOB}] version 3 of {table.path} was not published: SinkError: "), text
        assert "TopicTerminatedError" in text and TOPIC in text and "another topic" in text, text
        assert job.published_version() == 2  # the new version is not recorded as published
        report = verdict(pulsar_broker.service_url, job, f"topic terminated, run {attempt + 2}")
        assert report.present == report.acked == 4500 and report.unconfirmed_absent == 500


def test_a_refused_send_is_republished_by_the_rerun(pulsar_broker: Broker) -> None:
    """The same failure and rerun as above, on one sink task without Spark (fast, deterministic)."""
    from pyspark.sql.types import StringType, StructField, StructType

    from pipelines.spark.sink import _write_task, sink_settings

    schema = StructType([StructField("value", StringType()), StructField("key", StringType())])
    options = {
        "service.url": pulsar_broker.service_url,
        "topic": TOPIC,
        "producerNamePrefix": JOB,
        "batchId": "0",
        "batchingMaxMessages": "25",
    }
    settings = sink_settings(options, schema, streaming=False)
    rows = [(f"v0-r{i}", f"k{i % 7}") for i in range(500)]
    data = pa.record_batch({"value": [v for v, _ in rows], "key": [k for _, k in rows]})
    pulsar_broker.inject(fail_receipts=1, fail_code=pb.NotAllowedError)  # the first SEND is refused
    with pytest.raises(SinkError, match="NotAllowedError"):
        _write_task(settings, [data], 0, 0)
    _write_task(settings, [data], 0, 0)  # the rerun of the task
    published = read_topic(pulsar_broker.service_url)
    assert sorted((m.value, m.key) for m in published) == sorted(rows)
