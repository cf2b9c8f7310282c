"""Apache Kafka 4.3.1 itself as the second opinion (marker ``real``): the same raw requests to
it and to ``python -m pulsarwire.kafka.broker``, and the answers compared field by field where
they must agree -- error codes and offsets (ids the brokers choose, producer ids and topic ids,
are left out).

The requests are the ones the judge clients never send: admin refusals (a topic again, an
illegal name, a replication factor over the brokers, no partitions, an unknown config or a bad
value, fewer partitions, unknown topics), Produce's validation (a broken CRC, two batches in one
partition's records, acks 2, an unknown partition), an idempotent producer's duplicate, gap and
older epoch, Fetch out of range, ListOffsets by timestamp, DescribeConfigs of an unknown topic.
And a transaction's steps: a transactional batch before its partition is added, partitions
added (one unknown), abort, the abort again, a commit after it, commit, the last stable offset
and the aborted transactions a read_committed Fetch sees, a second InitProducerId fencing the
first producer's EndTxn, AddPartitionsToTxn and Produce. And Fetch's limits (per partition,
per response, KIP-74's first batch, a fetch from inside a batch, a wait with nothing new).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from pulsarwire.kafka.codec import records
from pulsarwire.kafka.errors import ERROR_CODES as E
from pulsarwire.testing.process import kafka_broker_process
from tests.helpers.kafka_raw import KafkaRaw, batch, fetch, produce
from tests.helpers.real_kafka import RealKafka

pytestmark = pytest.mark.real


def answers(address: str, topic: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with KafkaRaw(address) as c:

        def create(name: str, partitions: int = 2, factor: int = 1, **configs: str) -> int:
            entry = {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": factor,
                "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()],
            }
            code: int = c.request("CreateTopics", 7, {"topics": [entry], "timeout_ms": 10_000})["topics"][0][
                "error_code"
            ]
            return code

        out["create"] = create(topic)
        out["create again"] = create(topic)
        out["illegal name"] = create("no/slash")
        out["replication 3"] = create(f"{topic}-r", factor=3)
        out["no partitions"] = create(f"{topic}-z", partitions=0)
        out["unknown config"] = create(f"{topic}-c", no_such_thing="1")
        out["bad config value"] = create(f"{topic}-v", message_timestamp_type="Sometimes")
        deadline = time.monotonic() + 30  # Kafka learns of its new topic from its controller
        while produce(c, topic, 0, batch([b"probe"]))["error_code"] and time.monotonic() < deadline:
            time.sleep(0.1)

        good = batch([b"a", b"b"], timestamp=1_000_000)
        out["produce"] = [produce(c, topic, 0, good)["base_offset"] for _ in range(2)]
        broken = bytearray(good)
        broken[-1] ^= 0xFF
        out["broken crc"] = produce(c, topic, 0, bytes(broken))["error_code"]
        out["two batches"] = produce(c, topic, 0, good + good)["error_code"]
        out["acks 2"] = produce(c, topic, 0, good, acks=2)["error_code"]
        out["unknown partition"] = produce(c, topic, 9, good)["error_code"]

        deadline = time.monotonic() + 30
        while True:  # a Kafka just started answers COORDINATOR_LOAD_IN_PROGRESS for a while
            init = c.request(
                "InitProducerId", 4, {"transactional_id": None, "transaction_timeout_ms": 60_000}
            )
            if init["error_code"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out["init producer id"] = init["error_code"]
        pid = init["producer_id"]
        first = batch([b"i0", b"i1"], producer_id=pid, epoch=0, sequence=0)
        idem = [produce(c, topic, 1, first), produce(c, topic, 1, first)]
        idem.append(produce(c, topic, 1, batch([b"gap"], producer_id=pid, epoch=0, sequence=7)))
        idem.append(produce(c, topic, 1, batch([b"e1"], producer_id=pid, epoch=1, sequence=0)))
        idem.append(produce(c, topic, 1, batch([b"e0"], producer_id=pid, epoch=0, sequence=2)))
        out["idempotent"] = [(r["error_code"], r["base_offset"]) for r in idem]

        part = fetch(c, topic, [(0, 99)])[0]
        out["fetch out of range"] = part["error_code"]
        part = fetch(c, topic, [(0, 1)])[0]
        out["fetch"] = (part["error_code"], part["high_watermark"], part["log_start_offset"])

        def list_offsets(*timestamps: int) -> list[tuple[int, int]]:
            body = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [{"partition_index": 0, "timestamp": t} for t in timestamps],
                    }
                ],
            }
            parts = c.request("ListOffsets", 7, body)["topics"][0]["partitions"]
            return [(p["error_code"], p["offset"]) for p in parts]

        out["list offsets"] = [list_offsets(t) for t in (-2, -1, 1_000_000, 9_000_000)]
        out["list offsets twice"] = list_offsets(-2, -1)

        def partitions(name: str, count: int) -> int:
            body = {"topics": [{"name": name, "count": count, "assignments": None}], "timeout_ms": 10_000}
            code: int = c.request("CreatePartitions", 3, body)["results"][0]["error_code"]
            return code

        out["fewer partitions"] = partitions(topic, 1)
        out["grow unknown"] = partitions(f"{topic}-none", 3)
        described = c.request(
            "DescribeConfigs",
            4,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": f"{topic}-none", "configuration_keys": None}
                ]
            },
        )
        out["describe unknown"] = described["results"][0]["error_code"]
        deleted = c.request("DeleteTopics", 6, {"topics": [{"name": f"{topic}-none"}], "timeout_ms": 10_000})
        out["delete unknown"] = deleted["responses"][0]["error_code"]
        deleted = c.request("DeleteTopics", 6, {"topics": [{"name": topic}], "timeout_ms": 10_000})
        out["delete"] = deleted["responses"][0]["error_code"]
    return out


def test_our_broker_answers_as_apache_kafka(real_kafka: RealKafka) -> None:
    topic = f"vs-{uuid.uuid4().hex[:8]}"
    theirs = answers(real_kafka.bootstrap, topic)
    with kafka_broker_process() as address:
        ours = answers(address, topic)
    assert theirs["create"] == 0 and theirs["produce"] == [1, 3]  # after the probe record at 0
    assert ours == theirs


def transaction_answers(address: str, topic: str) -> dict[str, Any]:
    """A transaction's steps and refusals, raw; (producer ids aside) what each answers."""
    out: dict[str, Any] = {}
    txn_id = f"{topic}-tx"
    with KafkaRaw(address) as c:
        body = {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 10_000,
        }
        out["create"] = c.request("CreateTopics", 7, body)["topics"][0]["error_code"]
        deadline = time.monotonic() + 30
        while produce(c, topic, 0, batch([b"probe"]))["error_code"] and time.monotonic() < deadline:
            time.sleep(0.1)

        def init() -> dict[str, Any]:
            deadline = time.monotonic() + 60
            while True:  # Kafka makes its transaction log when first asked for the coordinator
                c.request("FindCoordinator", 4, {"key_type": 1, "coordinator_keys": [txn_id]})
                got: dict[str, Any] = c.request(
                    "InitProducerId", 4, {"transactional_id": txn_id, "transaction_timeout_ms": 60_000}
                )
                if got["error_code"] == 0 or time.monotonic() > deadline:
                    return got
                time.sleep(0.2)

        first = init()
        pid, epoch = first["producer_id"], first["producer_epoch"]
        out["init"] = (first["error_code"], epoch)

        def add(*parts: int) -> dict[int, int]:
            answer = c.request(
                "AddPartitionsToTxn",
                3,
                {
                    "v3_and_below_transactional_id": txn_id,
                    "v3_and_below_producer_id": pid,
                    "v3_and_below_producer_epoch": epoch,
                    "v3_and_below_topics": [{"name": topic, "partitions": list(parts)}],
                },
            )
            results = answer["results_by_topic_v3_and_below"][0]["results_by_partition"]
            return {r["partition_index"]: r["partition_error_code"] for r in results}

        def until_settled(ask: Any) -> Any:
            """``ask()`` again while it says CONCURRENT_TRANSACTIONS, as clients do: Kafka ends
            a transaction after answering EndTxn, ours before."""
            deadline = time.monotonic() + 30
            while (answer := ask()) in (E["CONCURRENT_TRANSACTIONS"], {0: E["CONCURRENT_TRANSACTIONS"]}):
                assert time.monotonic() < deadline, "still CONCURRENT_TRANSACTIONS after 30 s"
                time.sleep(0.05)
            return answer

        def end(commit: bool) -> int:
            body = {
                "transactional_id": txn_id,
                "producer_id": pid,
                "producer_epoch": epoch,
                "committed": commit,
            }
            code: int = until_settled(lambda: c.request("EndTxn", 3, body)["error_code"])
            deadline = time.monotonic() + 30
            while code == 0 and (seen := view())[1] != seen[2]:  # Kafka writes the markers after
                assert time.monotonic() < deadline, "the markers were not written within 30 s"
                time.sleep(0.05)
            return code

        def send(value: bytes, seq: int) -> tuple[int, int]:
            data = batch([value], producer_id=pid, epoch=epoch, sequence=seq, transactional=True)
            r = produce(c, topic, 0, data, transactional_id=txn_id)
            return r["error_code"], r["base_offset"]

        def view() -> tuple[int, int, int, list[int]]:
            part = fetch(c, topic, [(0, 0)], isolation_level=1)[0]
            aborted = [a["first_offset"] for a in part["aborted_transactions"] or []]
            return part["error_code"], part["high_watermark"], part["last_stable_offset"], aborted

        out["produce before add"] = send(b"early", 0)[0]
        out["add"] = until_settled(lambda: add(0))
        out["add with unknown"] = add(0, 7)
        out["produce"] = send(b"t1", 0)
        out["open"] = view()
        out["abort"] = end(False)
        out["abort again"] = end(False)  # once the abort is through: the same answer again
        out["commit after abort"] = end(True)
        out["aborted"] = view()
        out["add again"] = until_settled(lambda: add(0))
        out["produce again"] = send(b"t2", 1)
        out["commit"] = end(True)
        out["committed"] = view()
        second = init()
        out["init again"] = (second["error_code"], second["producer_epoch"] - epoch)
        out["end, old epoch"] = end(True)
        out["add, old epoch"] = add(0)
        out["produce, old epoch"] = send(b"zombie", 2)[0]
    return out


def test_our_transactions_answer_as_apache_kafkas(real_kafka: RealKafka) -> None:
    topic = f"vs-txn-{uuid.uuid4().hex[:8]}"
    theirs = transaction_answers(real_kafka.bootstrap, topic)
    with kafka_broker_process() as address:
        ours = transaction_answers(address, topic)
    assert theirs["init"] == (0, 0) and theirs["committed"][0] == 0
    assert ours == theirs


def fetch_answers(address: str, topic: str) -> dict[str, Any]:
    """Fetch's limits, raw: per partition (index, error, high watermark, the offsets of the
    records that came whole) -- Kafka also sends the start of the next batch when a limit cuts
    it, we send whole batches only, so the bytes may differ while the records do not."""
    out: dict[str, Any] = {}
    with KafkaRaw(address) as c:
        body = {
            "topics": [{"name": topic, "num_partitions": 2, "replication_factor": 1}],
            "timeout_ms": 10_000,
        }
        out["create"] = c.request("CreateTopics", 7, body)["topics"][0]["error_code"]
        deadline = time.monotonic() + 30
        while (
            produce(c, topic, 0, batch([b"probe"], timestamp=1))["error_code"] and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        produce(c, topic, 0, batch([b"B" * 10_000], timestamp=1))
        for i in range(5):
            produce(c, topic, 0, batch([b"s%d" % i], timestamp=1))
        produce(c, topic, 1, batch([b"p1"], timestamp=1))

        def got(parts: list[dict[str, Any]]) -> list[tuple[int, int, int, list[int]]]:
            return [
                (
                    p["partition_index"],
                    p["error_code"],
                    p["high_watermark"],
                    [
                        b.base_offset + r.offset_delta
                        for b in records.decode_batches(p["records"], partial_tail=True)
                        for r in b.records
                    ],
                )
                for p in parts
            ]

        out["first batch over both limits"] = got(
            fetch(c, topic, [(0, 1), (1, 0)], max_bytes=100, partition_max_bytes=100)
        )
        out["the other partition first"] = got(
            fetch(c, topic, [(1, 0), (0, 1)], max_bytes=100, partition_max_bytes=100)
        )
        out["partition limit"] = got(fetch(c, topic, [(0, 2), (1, 0)], partition_max_bytes=150))
        out["response limit"] = got(fetch(c, topic, [(0, 2), (1, 0)], max_bytes=150))
        out["everything"] = got(fetch(c, topic, [(0, 0), (1, 0)]))
        out["from inside"] = got(fetch(c, topic, [(0, 3)]))
        out["nothing within the wait"] = got(fetch(c, topic, [(1, 1)], max_wait_ms=200, min_bytes=1))
    return out


def test_our_fetch_limits_are_apache_kafkas(real_kafka: RealKafka) -> None:
    topic = f"vs-fetch-{uuid.uuid4().hex[:8]}"
    theirs = fetch_answers(real_kafka.bootstrap, topic)
    with kafka_broker_process() as address:
        ours = fetch_answers(address, topic)
    assert theirs["first batch over both limits"][0][3] == [1]  # KIP-74
    assert ours == theirs
