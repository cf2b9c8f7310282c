"""Transactions over raw sockets against ``python -m pulsarwire.kafka.broker`` (the judges need
FindCoordinator, the group coordinator's API, to start a transaction; these requests are the
ones they send after it): InitProducerId with a transactional id, AddPartitionsToTxn, Produce of
transactional batches, EndTxn writing ABORT/COMMIT markers; ``read_committed`` Fetch stops at the
last stable offset and lists aborted transactions; ListOffsets' latest is the LSO; a new
InitProducerId fences the previous epoch and aborts its open transaction; a broker stopped
with a transaction open aborts it when it starts again, and one open past its timeout is aborted.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pulsarwire.kafka.codec import records
from pulsarwire.kafka.errors import ERROR_CODES as E
from pulsarwire.testing.process import kafka_broker_subprocess
from tests.helpers.kafka_raw import KafkaRaw, batch, fetch, produce

READ_COMMITTED = 1


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def broker(data_dir: Path) -> Iterator[tuple[str, Any]]:
    with kafka_broker_subprocess("--data-dir", str(data_dir)) as found:
        yield found


def init(conn: KafkaRaw, txn_id: str, **given: int) -> dict[str, Any]:
    body: dict[str, Any] = {"transactional_id": txn_id, "transaction_timeout_ms": 60_000, **given}
    answer: dict[str, Any] = conn.request("InitProducerId", 4, body)
    return answer


def add_partitions(conn: KafkaRaw, txn_id: str, pid: int, epoch: int, topic: str, *parts: int) -> list[int]:
    answer = conn.request(
        "AddPartitionsToTxn",
        3,
        {
            "v3_and_below_transactional_id": txn_id,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": list(parts)}],
        },
    )
    return [
        p["partition_error_code"]
        for t in answer["results_by_topic_v3_and_below"]
        for p in t["results_by_partition"]
    ]


def end(conn: KafkaRaw, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
    body = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    code: int = conn.request("EndTxn", 3, body)["error_code"]
    return code


def committed_view(
    conn: KafkaRaw, topic: str, offset: int = 0
) -> tuple[list[bytes | None], list[Any], int, int]:
    """What a read_committed consumer gets: (values of non-control records not in aborted
    transactions, aborted list, LSO, high watermark)."""
    part = fetch(conn, topic, [(0, offset)], isolation_level=READ_COMMITTED)[0]
    aborted = [(a["producer_id"], a["first_offset"]) for a in part["aborted_transactions"] or []]
    values = []
    pending = sorted(aborted, key=lambda a: a[1])
    skipping: set[int] = set()  # as consumers do: from an aborted transaction's first offset to its marker
    for b in records.decode_batches(part["records"]):
        while pending and pending[0][1] <= b.base_offset:
            skipping.add(pending.pop(0)[0])
        if b.is_control:
            skipping.discard(b.producer_id)
        elif b.producer_id not in skipping:
            values.extend(r.value for r in b.records)
    return values, aborted, part["last_stable_offset"], part["high_watermark"]


def create(conn: KafkaRaw, topic: str) -> None:
    body = {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 1000}
    assert conn.request("CreateTopics", 7, body)["topics"][0]["error_code"] == 0


def test_abort_commit_lso_and_fencing(broker: tuple[str, Any]) -> None:
    address, _proc = broker
    with KafkaRaw(address) as conn:
        create(conn, "tx")
        first = init(conn, "app-1")
        assert first["error_code"] == 0
        pid, epoch = first["producer_id"], first["producer_epoch"]

        def txn_batch(value: bytes, seq: int, ep: int = epoch) -> bytes:
            return batch([value], producer_id=pid, epoch=ep, sequence=seq, transactional=True)

        # not added to the transaction yet
        early = produce(conn, "tx", 0, txn_batch(b"early", 0), transactional_id="app-1")
        assert early["error_code"] == E["INVALID_TXN_STATE"]
        assert add_partitions(conn, "app-1", pid, epoch, "tx", 0) == [0]
        assert add_partitions(conn, "app-1", pid, epoch, "tx", 5) == [E["UNKNOWN_TOPIC_OR_PARTITION"]]
        assert produce(conn, "tx", 0, txn_batch(b"aborted", 0), transactional_id="app-1")["base_offset"] == 0
        # open: read_committed sees nothing, the LSO holds at the transaction's first offset
        assert committed_view(conn, "tx") == ([], [], 0, 1)
        assert end(conn, "app-1", pid, epoch, commit=False) == 0
        assert committed_view(conn, "tx") == ([], [(pid, 0)], 2, 2)
        assert end(conn, "app-1", pid, epoch, commit=False) == 0  # a retry
        assert end(conn, "app-1", pid, epoch, commit=True) == E["INVALID_TXN_STATE"]

        assert add_partitions(conn, "app-1", pid, epoch, "tx", 0) == [0]
        assert produce(conn, "tx", 0, txn_batch(b"kept", 1), transactional_id="app-1")["base_offset"] == 2
        assert end(conn, "app-1", pid, epoch, commit=True) == 0
        assert committed_view(conn, "tx") == ([b"kept"], [(pid, 0)], 4, 4)
        assert committed_view(conn, "tx", 2)[:2] == ([b"kept"], [])

        # a second producer with the same transactional id: same producer id, next epoch; the
        # open transaction of the first is aborted and the first is fenced
        assert add_partitions(conn, "app-1", pid, epoch, "tx", 0) == [0]
        assert produce(conn, "tx", 0, txn_batch(b"zombie", 2), transactional_id="app-1")["base_offset"] == 4
        second = init(conn, "app-1")
        assert (second["producer_id"], second["producer_epoch"]) == (pid, epoch + 1)
        values, aborted, lso, hw = committed_view(conn, "tx")
        assert (values, aborted, lso, hw) == ([b"kept"], [(pid, 0), (pid, 4)], 6, 6)
        assert end(conn, "app-1", pid, epoch, commit=True) == E["PRODUCER_FENCED"]
        late = produce(conn, "tx", 0, txn_batch(b"late", 3), transactional_id="app-1")
        assert late["error_code"] == E["INVALID_PRODUCER_EPOCH"]
        assert add_partitions(conn, "app-1", pid, epoch, "tx", 0) == [E["PRODUCER_FENCED"]]

        latest = conn.request(
            "ListOffsets",
            7,
            {
                "replica_id": -1,
                "isolation_level": READ_COMMITTED,
                "topics": [{"name": "tx", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
            },
        )
        assert latest["topics"][0]["partitions"][0]["offset"] == 6


def test_a_transaction_open_at_a_restart_is_aborted(data_dir: Path) -> None:
    with kafka_broker_subprocess("--data-dir", str(data_dir)) as (address, proc), KafkaRaw(address) as conn:
        create(conn, "tx")
        got = init(conn, "app-2")
        pid, epoch = got["producer_id"], got["producer_epoch"]
        assert add_partitions(conn, "app-2", pid, epoch, "tx", 0) == [0]
        data = batch([b"in-flight"], producer_id=pid, epoch=epoch, sequence=0, transactional=True)
        assert produce(conn, "tx", 0, data, transactional_id="app-2")["base_offset"] == 0
        assert committed_view(conn, "tx")[2:] == (0, 1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    with kafka_broker_subprocess("--data-dir", str(data_dir)) as (address, _proc), KafkaRaw(address) as conn:
        assert committed_view(conn, "tx") == ([], [(pid, 0)], 2, 2)
        assert end(conn, "app-2", pid, epoch, commit=True) == E["PRODUCER_FENCED"]
        again = init(conn, "app-2")
        assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == (0, pid, epoch + 2)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(broker: tuple[str, Any]) -> None:
    address, _proc = broker
    with KafkaRaw(address) as conn:
        create(conn, "slow")
        got = init(conn, "app-3", transaction_timeout_ms=500)
        pid, epoch = got["producer_id"], got["producer_epoch"]
        assert add_partitions(conn, "app-3", pid, epoch, "slow", 0) == [0]
        data = batch([b"too-late"], producer_id=pid, epoch=epoch, sequence=0, transactional=True)
        assert produce(conn, "slow", 0, data, transactional_id="app-3")["base_offset"] == 0
        deadline = time.monotonic() + 30
        while committed_view(conn, "slow")[2] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert committed_view(conn, "slow") == ([], [(pid, 0)], 2, 2)
        assert end(conn, "app-3", pid, epoch, commit=True) == E["PRODUCER_FENCED"]
