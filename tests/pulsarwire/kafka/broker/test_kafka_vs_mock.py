"""A second opinion: the same raw requests to our broker and to librdkafka's mock cluster
(``test.mock.num.brokers``, in a process of its own: ``tests/helpers/kafka_mock.py``), and the
answers compared -- auto-creation by Metadata with the mock's default partition count, Produce
to an unknown topic or partition, the offsets Produce assigns, Fetch in and out of range,
ListOffsets earliest and latest, InitProducerId.

The mock is lenient where Kafka is not -- it stores a batch with a broken CRC and accepts
sequence gaps and duplicates of an idempotent producer -- so those rules are judged in
test_kafka_wire.py against Kafka's documented behaviour instead. It serves no admin APIs, and
its answers to flexible versions carry bytes past their last field, so the requests here use
the last classic (non-flexible) versions.
"""

from __future__ import annotations

from typing import Any

from pulsarwire.kafka.codec import records
from pulsarwire.testing.process import kafka_broker_process
from tests.helpers.kafka_mock import mock_cluster
from tests.helpers.kafka_raw import KafkaRaw, batch, fetch, produce

MOCK_PARTITIONS = 4  # what the mock gives a topic Metadata creates


def answers(address: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with KafkaRaw(address) as c:
        md = c.request("Metadata", 8, {"topics": [{"name": "cmp"}], "allow_auto_topic_creation": True})
        out["created"] = (md["topics"][0]["error_code"], len(md["topics"][0]["partitions"]))
        out["unknown partition"] = produce(c, "cmp", 99, batch([b"x"]), version=7)["error_code"]
        out["unknown topic"] = produce(c, "not-created", 0, batch([b"x"]), version=7)["error_code"]
        offsets = [produce(c, "cmp", 0, batch([b"a", b"b"]), version=7)["base_offset"] for _ in range(2)]
        out["offsets"] = offsets
        out["out of range"] = fetch(c, "cmp", [(0, 9)], version=11)[0]["error_code"]
        part = fetch(c, "cmp", [(0, 2)], version=11)[0]
        values = [
            (b.base_offset + r.offset_delta, r.value)
            for b in records.decode_batches(part["records"])
            for r in b.records
        ]
        out["fetched"] = (part["error_code"], part["high_watermark"], values)
        out["earliest, latest"] = []
        for t in (-2, -1):  # one request each: Kafka refuses a partition asked twice (the mock does not)
            body = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": "cmp", "partitions": [{"partition_index": 0, "timestamp": t}]}],
            }
            (p,) = c.request("ListOffsets", 5, body)["topics"][0]["partitions"]
            out["earliest, latest"].append((p["error_code"], p["offset"]))
        init = c.request("InitProducerId", 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        out["init producer id"] = (init["error_code"], init["producer_id"] >= 0, init["producer_epoch"])
    return out


def test_our_broker_answers_as_librdkafkas_mock_cluster() -> None:
    with mock_cluster() as address:
        mock = answers(address)
    with kafka_broker_process("--num-partitions", str(MOCK_PARTITIONS)) as address:
        ours = answers(address)
    assert mock["created"] == (0, MOCK_PARTITIONS)
    assert ours == mock
