"""Soak: minutes of faults, one after another, while producing and while a Pulsar → Delta job streams.

Opt-in (marker ``soak``, deselected by default): ``make soak``, or
``pytest -m soak -s tests/pipelines/test_soak.py``. ``PULSARWIRE_SOAK_SECONDS`` sets how long
faults are injected (default 180), ``PULSARWIRE_SOAK_FAULT_EVERY`` the seconds between two
faults (default 4).

The set-up: our broker with deduplication and a data directory (so it can restart), a
``FaultProxy`` in front of it, a producer thread sending keyed messages through the proxy under
one producer name (deduplication resends), and the ``jobs``-style ingest (a generated job file
run by the runner: a ``processing_time`` trigger, the exactly-once Delta sink and the offset
store) reading through the proxy. The runner runs in the test's thread; when its query fails it
is started again from its checkpoint, as a scheduler would, and the restart is counted. A
fault thread cycles through broker restart, TCP cuts (now, and after the n-th SEND or MESSAGE),
half-open connections, topic unload, CloseConsumer, CloseProducer and delayed receipts and
messages. At the end production stops, the job drains, and the checker must report 0 missing,
0 duplicated, 0 out of order. The per-fault counts and the report are printed.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from pipelines.jobs.testing import run_job
from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.testing.checker import Ledger, check
from pulsarwire.testing.proxy import FaultProxy

SECONDS = float(os.environ.get("PULSARWIRE_SOAK_SECONDS", "180"))
FAULT_EVERY = float(os.environ.get("PULSARWIRE_SOAK_FAULT_EVERY", "4"))
TOPIC = "persistent://public/default/soak"
JOB = "soak_ingest"
#: messages per second the producer aims at (the stream must keep up on 2 shared cores)
RATE = 400

pytestmark = [pytest.mark.soak, pytest.mark.timeout(SECONDS + 900)]


class Producer(threading.Thread):
    """Sends ``m-<i>`` with key ``k<i % 5>`` at about RATE/s until stopped; the ledger records all.

    One producer name throughout. Like a careful application it replaces its producer (same
    name: the broker's deduplication state carries the sequence ids on) when a send failed or
    the producer cannot be created; ``recreated`` counts the replacements and ``errors`` the
    failures by cause.
    """

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True, name="soak-producer")
        self.url = url
        self.ledger = Ledger()
        self.failed_sends = 0
        self.errors: Counter[str] = Counter()
        self.recreated = 0
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._broken = threading.Event()
        self._lock = threading.Lock()

    def _ack(self, msg_id: str) -> Callable[[BaseException | None, Any], None]:
        def done(err: BaseException | None, _mid: Any) -> None:
            with self._lock:
                if err is None:
                    self.ledger.ack(msg_id)
                else:
                    self.failed_sends += 1
                    self.errors[f"{type(err).__name__}: {str(err)[:120]}"] += 1
                    self._broken.set()

        return done

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc

    def _run(self) -> None:
        i = 0
        started = time.monotonic()
        first = True
        while not self._done.is_set():
            client = Client(self.url, operation_timeout_seconds=60)
            try:
                producer = client.create_producer(
                    TOPIC, producer_name="soak", block_if_queue_full=True, batching_max_publish_delay_ms=5
                )
                self.recreated += 0 if first else 1
                first = False
                self._broken.clear()
                while not self._done.is_set() and not self._broken.is_set():
                    for _ in range(20):
                        msg_id = f"m-{i}"
                        key = f"k{i % 5}"
                        with self._lock:
                            self.ledger.send(msg_id, key=key)
                        i += 1
                        producer.send_async(msg_id.encode(), self._ack(msg_id), partition_key=key)
                    ahead = i / RATE - (time.monotonic() - started)
                    if ahead > 0:
                        self._done.wait(ahead)
                producer.flush()
                producer.close()
            except Exception as exc:  # creating (or closing) the producer failed: try again
                with self._lock:
                    self.errors[f"creating the producer: {type(exc).__name__}: {str(exc)[:120]}"] += 1
                self._done.wait(0.5)
            finally:
                client.close()

    def stop(self) -> Ledger:
        self._done.set()
        self.join(180)
        assert not self.is_alive() and self.error is None, self.error
        with self._lock:
            return self.ledger


class Faults(threading.Thread):
    """Injects the next fault of the cycle every FAULT_EVERY seconds until SECONDS have passed."""

    def __init__(self, broker: Broker, proxy: FaultProxy, seed: int = 8) -> None:
        super().__init__(daemon=True, name="soak-faults")
        self.broker = broker
        self.proxy = proxy
        self.random = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.error: BaseException | None = None
        self.cycle: list[tuple[str, Callable[[], Any]]] = [
            ("broker restart", broker.restart),
            ("proxy cut after n-th SEND", lambda: proxy.cut_after("SEND", "to_broker", self._n())),
            ("unload", lambda: broker.unload_topic(TOPIC)),
            ("proxy cut after n-th MESSAGE", lambda: proxy.cut_after("MESSAGE", "to_client", self._n())),
            ("CloseConsumer", lambda: broker.close_consumers(TOPIC)),
            ("receipts delayed 1 s", lambda: broker.inject(delay_receipts=self._n(), receipt_delay=1.0)),
            ("proxy cut now", proxy.cut),
            ("CloseProducer", lambda: broker.close_producers(TOPIC)),
            ("MESSAGE frames delayed 2 s", lambda: proxy.delay("MESSAGE", "to_client", 2.0, self._n(3))),
            ("half-open connections (3 s)", lambda: proxy.half_open(3.0)),
        ]

    def _n(self, most: int = 40) -> int:
        return self.random.randint(1, most)

    def run(self) -> None:
        end = time.monotonic() + SECONDS
        step = 0
        try:
            while time.monotonic() + FAULT_EVERY < end:
                time.sleep(FAULT_EVERY)
                name, fault = self.cycle[step % len(self.cycle)]
                fault()
                self.counts[name] += 1
                step += 1
        except BaseException as exc:
            self.error = exc


def write_job(tmp: Path, url: str) -> Path:
    job = {
        "name": JOB,
        "source": {
            "pulsar": {
                "service_url": url,
                "topic": TOPIC,
                "starting_offsets": "earliest",
                "poll_timeout_ms": 20000,
                "client": {"operation_timeout_ms": 60000},
            }
        },
        "transform": {"sql": "SELECT CAST(value AS STRING) AS id, ledgerId, entryId, batchIndex FROM source"},
        "sink": {"delta": {"path": str(tmp / "table")}},
        "trigger": {"processing_time": "1s"},
        "checkpoint": str(tmp / "checkpoint"),
        "offsets": str(tmp / "offsets"),
    }
    path = tmp / f"{JOB}.yaml"
    path.write_text(json.dumps(job))  # JSON is YAML
    return path


def arrived(tmp: Path) -> list[str]:
    """The ids in the Delta table, in topic order."""
    if not (tmp / "table").exists():
        return []
    rows = DeltaTable(str(tmp / "table")).to_pyarrow_table().to_pylist()
    rows.sort(key=lambda r: (r["ledgerId"], r["entryId"], r["batchIndex"]))
    return [r["id"] for r in rows]


def stop_query(spark: Any) -> None:
    for query in spark.streams.active:
        if query.name == JOB:
            query.stop()


def test_soak_faults_while_producing_and_streaming(spark: Any, tmp_path: Path) -> None:
    broker = Broker(deduplication=True, data_dir=tmp_path / "broker").start()
    proxy = FaultProxy(broker.service_url).start()
    job = write_job(tmp_path, proxy.service_url)
    producer = Producer(proxy.service_url)
    faults = Faults(broker, proxy)
    stream_failures: list[str] = []
    done = threading.Event()
    exited = threading.Event()
    ledger = Ledger()
    drained = 0.0

    def finish() -> None:
        """After the faults: stop producing, wait until every confirmed message is in Delta, stop."""
        nonlocal ledger, drained
        faults.join()
        ledger = producer.stop()
        t = time.monotonic()
        deadline = t + 300
        while time.monotonic() < deadline and not ledger.acked <= set(arrived(tmp_path)):
            time.sleep(1)
        drained = time.monotonic() - t
        done.set()
        while not exited.wait(1):  # a query the runner was just starting again is stopped too
            stop_query(spark)

    started = time.monotonic()
    try:
        producer.start()
        faults.start()
        threading.Thread(target=finish, daemon=True, name="soak-finish").start()
        while not done.is_set():
            try:
                run_job(job)
            except Exception as exc:  # the query failed: a scheduler would start it again
                if done.is_set():
                    break
                stream_failures.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}")
                print(f"soak: the stream failed ({stream_failures[-1]}); starting it again", flush=True)
    finally:
        done.set()
        exited.set()
        stop_query(spark)
        if producer.is_alive():
            producer.stop()
        proxy.stop()
        broker.stop()
    took = time.monotonic() - started
    assert faults.error is None, faults.error
    report = check(ledger, arrived(tmp_path))
    print(f"\nsoak: {took:.0f} s, a fault every {FAULT_EVERY:.0f} s for {SECONDS:.0f} s")
    print(f"  drained in {drained:.0f} s after production stopped")
    for name, count in sorted(faults.counts.items()):
        print(f"  {count:4d} x {name}")
    print(
        f"  producer: {producer.failed_sends} sends failed, created again {producer.recreated} times; "
        f"proxy connections {proxy.connections}, broker connections {broker.connections_accepted}; "
        f"stream restarts {len(stream_failures)}"
    )
    for error, count in producer.errors.most_common(5):
        print(f"    {count} x {error}")
    for failure in stream_failures:
        print(f"    stream failure: {failure}")
    print(f"soak: {report.line()}")
    assert sum(faults.counts.values()) >= min(len(faults.cycle), int(SECONDS / FAULT_EVERY) - 1)
    assert not stream_failures, stream_failures  # the stream rides through every fault
    assert report.acked > 0 and report.present >= report.acked
    assert report.missing == 0 and report.duplicates == 0 and report.out_of_order == 0, report.line()
