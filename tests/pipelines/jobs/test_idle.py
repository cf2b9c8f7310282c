"""An ``availableNow`` run with nothing to read ends in a second, without Spark, and says so
(pipelines/jobs/idle.py) — and whenever there is something to read, or a batch to finish,
Spark runs.

From the outside: ``pipelines run`` as its own process with ``JAVA_HOME`` pointing nowhere, so
a run that starts Spark fails ("Java gateway process exited") and one that does not succeeds.
The cases the answer turns on (a position inside a batched entry, a partition the checkpoint
does not know, an uncommitted batch, a position past the end) are asked of
:func:`~pipelines.jobs.idle.nothing_to_read` directly, on checkpoints written as Spark writes
them, against a real broker: no Spark there either.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jobs.demo import produce
from pipelines.jobs.config import load_job
from pipelines.jobs.idle import nothing_to_read
from pipelines.jobs.models import Job
from pipelines.state.positions import Position
from pulsarwire import MessageId
from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from tests.helpers.cli import pipelines
from tests.helpers.orders_job import INGEST, ORDERS, in_process, order_ids

NO_JAVA = "/nonexistent-java-home"  # Spark cannot start: a run that tries fails at once
SPARK_TRIED = "Java gateway process exited"


def idle_line(batch: int) -> str:
    return (
        f"[orders_ingest] nothing to read: batch {batch} of the checkpoint is committed and no message "
        "came after it in 1 topic-partition(s); Spark not started"
    )


def last_batch(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def test_a_run_with_nothing_to_read_ends_without_spark(spark: Any, broker: Broker, repo_data: Path) -> None:
    env = {"PULSAR_URL": broker.service_url, "PIPELINES_DATA_DIR": str(repo_data), "JAVA_HOME": NO_JAVA}
    produce(broker.service_url, "orders", 100)
    assert in_process("run", INGEST).code == 0
    checkpoint = repo_data / "checkpoints" / "orders_ingest"
    batch = last_batch(checkpoint)

    ran = pipelines("run", INGEST, **env)
    assert ran.code == 0, ran
    assert ran.out_lines == [idle_line(batch)] and ran.err == "", ran

    # a batch Spark wrote to the offset log but did not commit (a driver killed in between):
    # Spark must finish it
    for name in (str(batch), f".{batch}.crc"):  # the commit and its checksum, as if never written
        (checkpoint / "commits" / name).unlink()
    ran = pipelines("run", INGEST, **env)
    assert ran.code == 1 and SPARK_TRIED in ran.err, ran
    produce(broker.service_url, "orders", 1, first=100)
    assert in_process("run", INGEST).code == 0  # finishes that batch (exactly once), reads the new one
    assert (checkpoint / "commits" / str(batch)).exists() and order_ids(repo_data) == list(range(101))
    assert pipelines("run", INGEST, **env).out_lines == [idle_line(last_batch(checkpoint))]

    # one new message: Spark runs
    produce(broker.service_url, "orders", 1, first=101)
    ran = pipelines("run", INGEST, **env)
    assert ran.code == 1 and SPARK_TRIED in ran.err, ran


# -- the cases, asked directly ---------------------------------------------------------------------
def send(url: str, topic: str, count: int, *, batched: bool) -> list[MessageId]:
    """``count`` messages to ``topic``; batched: all in one entry."""
    client = Client(url)
    try:
        producer = client.create_producer(
            topic, batching_enabled=batched, batching_max_messages=1000, batching_max_publish_delay_ms=60_000
        )
        ids: list[Any] = [None] * count
        for i in range(count):
            producer.send_async(b"x", lambda err, mid, i=i: ids.__setitem__(i, err or mid))
        producer.flush()
        producer.close()
    finally:
        client.close()
    assert all(isinstance(m, MessageId) for m in ids), ids
    return ids


def checkpoint(job: Job, batch: int, offsets: dict[str, str], *, committed: bool = True) -> None:
    """Batch ``batch`` of the job's checkpoint as Spark writes it: the offset log, the commit log."""
    assert job.checkpoint is not None
    root = Path(job.checkpoint)
    for name in ("offsets", "commits"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offsets)}')
    if committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def job(repo_data: Path, *overrides: str) -> Job:
    return load_job(INGEST, "local", [f"checkpoint={repo_data}/ck", *overrides])


def at(mid: MessageId, batch_index: int | None = None) -> str:
    pos = Position.of(mid)
    return str(Position(pos.ledger_id, pos.entry_id, pos.batch_index if batch_index is None else batch_index))


def test_nothing_to_read_only_when_every_partition_is_read_to_its_end(
    broker: Broker, repo_data: Path
) -> None:
    ids = send(broker.service_url, "orders", 5, batched=True)  # one entry of five messages
    assert len({(m.ledger_id, m.entry_id) for m in ids}) == 1
    ingest = job(repo_data)

    assert nothing_to_read(ingest) is None  # no checkpoint: the first batch records where it starts
    checkpoint(ingest, 0, {ORDERS: at(ids[-1], -1)})  # the whole entry
    assert nothing_to_read(ingest) == (
        "[orders_ingest] nothing to read: batch 0 of the checkpoint is committed and no message came "
        "after it in 1 topic-partition(s); Spark not started"
    )
    # inside the entry: after its last message nothing is left, after its third two are
    checkpoint(ingest, 1, {ORDERS: at(ids[4])})
    assert nothing_to_read(ingest) is not None
    checkpoint(ingest, 2, {ORDERS: at(ids[2])})
    assert nothing_to_read(ingest) is None
    # a batch in the offset log that Spark did not commit must be run
    checkpoint(ingest, 3, {ORDERS: at(ids[-1], -1)}, committed=False)
    assert nothing_to_read(ingest) is None
    checkpoint(ingest, 3, {ORDERS: at(ids[-1], -1)})
    assert nothing_to_read(ingest) is not None
    # past the end (another cluster, a reset broker): the source's failOnDataLoss rule decides
    checkpoint(ingest, 4, {ORDERS: f"{ids[0].ledger_id}:{ids[0].entry_id + 7}:-1"})
    assert nothing_to_read(ingest) is None
    checkpoint(ingest, 5, {ORDERS: at(ids[-1], -1)})

    # a topic-partition the checkpoint does not know is read from its earliest message
    two = job(repo_data, "source.pulsar.topic=null", "source.pulsar.topics=[orders, returns]")
    send(broker.service_url, "returns", 0, batched=False)  # exists, empty
    assert nothing_to_read(two) is not None
    send(broker.service_url, "returns", 1, batched=False)
    assert nothing_to_read(two) is None

    # trigger once ends like availableNow; triggers that wait for data, and topics the job
    # waits for, always run Spark
    assert nothing_to_read(job(repo_data, "trigger=once")) is not None
    assert nothing_to_read(job(repo_data, "trigger={processing_time: 30s}")) is None
    assert nothing_to_read(job(repo_data, "source.pulsar.wait_for_topic=true")) is None
