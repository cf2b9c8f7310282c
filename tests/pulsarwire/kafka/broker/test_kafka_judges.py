"""The three judge clients against ``python -m pulsarwire.kafka.broker`` (one broker process for
the module, every judge in a process of its own: ``tests/helpers/kafka_judge.py``).

- produce: an idempotent producer of each client writes keyed records with headers and given
  timestamps under every codec (gzip, snappy, lz4, zstd and none); the same client reads them
  all back with ``assign`` + seek to the beginning, from an offset, from the end (only what is
  produced after), and finds offsets by timestamp (none after the last: -1);
- admin: create (the broker's ``--num-partitions`` is 5; these ask for 3), the refusals with
  Kafka's error codes as each client names them, list, grow, describe configs, delete.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pulsarwire.testing.process import kafka_broker_process
from tests.helpers.kafka_judge import CODECS, PER_CODEC, expected_records, run_judge

CLIENTS = ("confluent", "kafkapython", "aiokafka")


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with kafka_broker_process("--num-partitions", str(len(CODECS))) as address:
        yield address


def topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _without_timestamp(rows: list[list[Any]]) -> list[list[Any]]:
    return [[*r[:3], *r[4:]] for r in rows]


@pytest.mark.parametrize("client", CLIENTS)
def test_every_codec_round_trips_and_offsets_are_found(bootstrap: str, client: str) -> None:
    result = run_judge(client, "produce", bootstrap, topic(f"produce-{client}"))
    expected = [
        [*rec, partition, offset]
        for partition in range(len(CODECS))
        for offset, rec in enumerate(expected_records(partition))
    ]
    assert result["earliest"] == expected
    assert result["from_offset"] == expected[5:PER_CODEC]
    # record 7 of partition 1 is stamped BASE_TS + 7 s; nothing in partition 2 is as late as 99 s
    assert result["by_time"] == [[1, 7], [2, -1]]
    # from the end: only the record produced after the consumer took its position
    assert _without_timestamp(result["latest"]) == [["late", "after-the-end", [], 3, PER_CODEC]]


ADMIN_ERRORS = {
    "confluent": {
        "again": "TOPIC_ALREADY_EXISTS",
        "illegal": "TOPIC_EXCEPTION",
        "replicas": "INVALID_REPLICATION_FACTOR",
        "shrink": "INVALID_PARTITIONS",
        "delete_again": "UNKNOWN_TOPIC_OR_PART",
    },
    "kafkapython": {
        "again": "TopicAlreadyExistsError",
        "illegal": "InvalidTopicError",
        "replicas": "InvalidReplicationFactorError",
        "shrink": "InvalidPartitionsError",
        "delete_again": "UnknownTopicOrPartitionError",
    },
    # aiokafka's admin hands back the response: its error codes are Kafka's numbers
    "aiokafka": {
        "again": "code 36",
        "illegal": "code 17",
        "replicas": "code 38",
        "shrink": "InvalidPartitionsError",
        "delete_again": "code 3",
    },
}


@pytest.mark.parametrize("client", CLIENTS)
def test_admin_create_list_grow_describe_delete_with_error_codes(bootstrap: str, client: str) -> None:
    name = topic(f"admin-{client}")
    result = run_judge(client, "admin", bootstrap, name)
    created = result.pop("create")
    assert created in ("NONE", {name: "NONE", f"{name}-gone": "NONE"})
    assert result == {
        **ADMIN_ERRORS[client],
        "listed": [name, f"{name}-gone"],
        "grow": "NONE",
        "configs": {"cleanup.policy": "delete", "retention.ms": "604800000"},
        "partitions": 4,
        "delete": "NONE",
    }
