"""Fault scenarios (TESTING.md) against a real Pulsar → Delta pipeline on our broker.

Each scenario produces keyed messages under a fault (the broker's fault API or the frame-aware
``FaultProxy``), runs the exactly-once ingest (``write_delta_exactly_once`` in foreachBatch)
and compares the Delta table with what producers were told: the checker must report 0
missing, 0 duplicated, 0 out of order. The report line is printed (``pytest -s`` shows it).
Crash scenarios of the driver (after the Delta write, after the offset row, checkpoint lost)
are in tests/pipelines/state/test_exactly_once.py; data loss by retention in spark/test_source.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from pipelines.connectors.pulsar_delta import ExactlyOnceJob, close_clients, write_delta_exactly_once
from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.errors import PulsarWireError
from pulsarwire.testing.checker import Ledger, Report, check
from pulsarwire.testing.proxy import FaultProxy

TOPIC = "persistent://public/default/faults"


def produce(url: str, ledger: Ledger, count: int, first: int = 0, *, name: str = "faulty", **kw: Any) -> None:
    """Send ``count`` keyed messages; the ledger records each send and each receipt."""
    client = Client(url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(TOPIC, producer_name=name, block_if_queue_full=True, **kw)
        for i in range(first, first + count):
            msg_id = f"m-{i}"
            ledger.send(msg_id, key=f"k{i % 5}")

            def done(err: BaseException | None, _mid: Any, msg_id: str = msg_id) -> None:
                if err is None:
                    ledger.ack(msg_id)

            producer.send_async(msg_id.encode(), done, partition_key=f"k{i % 5}")
        producer.flush()
        producer.close()
    finally:
        client.close()


class Ingest:
    """The Pulsar → Delta job of these scenarios, in the test's Spark session."""

    def __init__(self, spark: Any, url: str, tmp: Path, name: str = "faults") -> None:
        self.spark = spark
        self.target = str(tmp / "table")
        source = {"service.url": url, "topic": TOPIC, "subscriptionName": name, "pollTimeoutMs": "20000"}
        self.job = ExactlyOnceJob(name, str(tmp / "ck"), str(tmp / "offsets"), source)

    def start(self, **trigger: Any) -> Any:
        reader = self.spark.readStream.format("pulsarwire")
        for k, v in {
            **self.job.source_options,
            **self.job.stream_options(),
            "startingOffsets": "earliest",
        }.items():
            reader = reader.option(k, v)
        df = reader.load().selectExpr("CAST(value AS STRING) AS id", "ledgerId", "entryId", "batchIndex")
        return (
            df.writeStream.foreachBatch(lambda b, i: write_delta_exactly_once(b, i, self.target, self.job))
            .option("checkpointLocation", self.job.checkpoint)
            .trigger(**(trigger or {"availableNow": True}))
            .start()
        )

    def run(self) -> None:
        query = self.start()
        query.awaitTermination(300)
        close_clients()

    def arrived(self) -> list[str]:
        if not Path(self.target).exists():
            return []
        rows = DeltaTable(self.target).to_pyarrow_table().to_pylist()
        rows.sort(key=lambda r: (r["ledgerId"], r["entryId"], r["batchIndex"]))
        return [r["id"] for r in rows]


def verdict(ledger: Ledger, ingest: Ingest, scenario: str) -> Report:
    report = check(ledger, ingest.arrived())
    print(f"\n{scenario}: {report.line()}")
    assert report.clean, report.line()
    assert report.missing == 0 and report.duplicates == 0
    return report


@pytest.fixture
def data_broker(tmp_path: Path) -> Iterator[Broker]:
    with Broker(deduplication=True, data_dir=tmp_path / "broker") as b:
        yield b


def test_broker_restart_mid_send_with_dedup(spark: Any, data_broker: Broker, tmp_path: Path) -> None:
    ledger = Ledger()
    restarter = threading.Timer(0.3, data_broker.restart)
    restarter.start()
    produce(data_broker.service_url, ledger, 3000, batching_max_publish_delay_ms=2)
    restarter.join()
    ingest = Ingest(spark, data_broker.service_url, tmp_path)
    ingest.run()
    report = verdict(ledger, ingest, "broker restart mid-send")
    assert report.acked == 3000 and report.present == 3000


def test_tcp_cut_during_a_batch_resends_with_the_same_sequence_ids(
    spark: Any, dedup_broker: Broker, tmp_path: Path
) -> None:
    with FaultProxy(dedup_broker.service_url) as proxy:
        proxy.cut_after("SEND", "to_broker", count=5)
        ledger = Ledger()
        produce(proxy.service_url, ledger, 1500, name="cut", batching_max_messages=50)
        proxy.cut_after("SEND", "to_broker", count=2)
        produce(proxy.service_url, ledger, 1500, first=1500, name="cut", batching_max_messages=50)
        assert proxy.connections >= 3
    ingest = Ingest(spark, dedup_broker.service_url, tmp_path, name="cut-ingest")
    ingest.run()
    report = verdict(ledger, ingest, "TCP cut mid-batch")
    assert report.present == 3000


def test_close_producer_close_consumer_and_unload_during_a_stream(
    spark: Any, pulsar_broker: Broker, tmp_path: Path
) -> None:
    ledger = Ledger()
    ingest = Ingest(spark, pulsar_broker.service_url, tmp_path)
    produce(pulsar_broker.service_url, ledger, 200)
    query = ingest.start(processingTime="500 milliseconds")
    try:
        writer = threading.Thread(
            target=produce, args=(pulsar_broker.service_url, ledger, 2000, 200), kwargs={"name": "busy"}
        )
        writer.start()
        for fault in (
            pulsar_broker.close_producers,
            pulsar_broker.unload_topic,
            pulsar_broker.close_consumers,
        ):
            time.sleep(0.4)
            fault(TOPIC)
        writer.join(120)
        deadline = time.time() + 120
        while len(ingest.arrived()) < 2200 and time.time() < deadline:
            time.sleep(0.5)
    finally:
        query.stop()
        close_clients()
    report = verdict(ledger, ingest, "CloseProducer / unload / CloseConsumer mid-stream")
    assert report.present == 2200


def test_corrupt_entry_fails_the_batch_naming_it_then_recovers(
    spark: Any, pulsar_broker: Broker, tmp_path: Path
) -> None:
    ledger = Ledger()
    produce(pulsar_broker.service_url, ledger, 300, batching_enabled=False)
    with FaultProxy(pulsar_broker.service_url) as proxy:
        ingest = Ingest(spark, proxy.service_url, tmp_path)
        proxy.corrupt("MESSAGE", "to_client", count=1)
        query = ingest.start()
        with pytest.raises(Exception) as info:
            query.awaitTermination(120)
        close_clients()
    text = str(info.value)
    assert "CorruptMessageError" in text and "is corrupt" in text  # names the message id
    assert ingest.arrived() == []  # the failed batch wrote nothing and acked nothing
    held = pulsar_broker.stats(TOPIC)["subscriptions"]["faults"]["backlog"]
    assert held == 300
    ingest = Ingest(spark, pulsar_broker.service_url, tmp_path)
    ingest.run()
    verdict(ledger, ingest, "corrupt entry")


def test_topic_terminated_producer_fails_fast_source_finishes(
    spark: Any, pulsar_broker: Broker, tmp_path: Path
) -> None:
    ledger = Ledger()
    produce(pulsar_broker.service_url, ledger, 500)
    pulsar_broker.terminate_topic(TOPIC)
    client = Client(pulsar_broker.service_url, operation_timeout_seconds=5)
    try:
        t = time.monotonic()
        with pytest.raises(PulsarWireError):
            producer = client.create_producer(TOPIC)
            producer.send(b"late")
        assert time.monotonic() - t < 5  # refused at once, not after a timeout
    finally:
        client.close()
    ingest = Ingest(spark, pulsar_broker.service_url, tmp_path)
    ingest.run()
    report = verdict(ledger, ingest, "topic terminated")
    assert report.present == 500
