"""Hostile input against ``python -m pulsarwire.kafka.broker`` in its own process, raw sockets
from this one, and a bystander connection timed after each: a request frame declaring more than
``--max-request-bytes`` (checked before a byte of it is read), garbage, an unknown API key, a
version no one serves, a truncated body -- each closes its own connection, as Kafka does, and
the broker keeps answering everyone else. Sizes inside a request (array counts, record counts,
decompressed sizes) are the codec's business and tested there (tests/pulsarwire/kafka/codec).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest

from pulsarwire.kafka.codec import API_KEYS, encode_request
from pulsarwire.kafka.errors import ERROR_CODES as E
from pulsarwire.testing.process import kafka_broker_subprocess
from tests.helpers.kafka_raw import KafkaRaw, batch, bystander, is_closed, produce

LIMIT = 1 << 20


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    with kafka_broker_subprocess("--max-request-bytes", str(LIMIT)) as (bootstrap, proc):
        yield bootstrap
        assert proc.poll() is None, "the broker died"


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


HOSTILE = {
    # 2 GiB declared: refused on the size alone (nothing more is sent)
    "huge size": struct.pack(">i", 0x7FFFFFF0),
    "negative size": struct.pack(">i", -5),
    "one byte over the limit": struct.pack(">i", LIMIT + 1) + b"\0" * 1024,
    "garbage": frame(b"\xff" * 64),
    "unknown api key": frame(struct.pack(">hhi", 999, 0, 7) + b"\0\0"),
    "Produce v2 (not served)": frame(
        encode_request(0, 2, 1, "x", {"acks": 1, "timeout_ms": 1, "topic_data": []})
    ),
    "truncated Metadata": frame(encode_request(API_KEYS["Metadata"], 12, 1, "x", {"topics": None})[:-3]),
    "array count past the frame": frame(
        encode_request(API_KEYS["Metadata"], 4, 1, "x", {"topics": []})[:-5]
        + struct.pack(">i", 1 << 30)
        + b"\0"
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_request_closes_its_connection_and_others_are_served(address: str, name: str) -> None:
    with KafkaRaw(address) as conn:
        conn.send_raw(HOSTILE[name])
        assert is_closed(conn)
    assert bystander(address)["error_code"] == 0


def test_a_frame_at_the_limit_is_read_and_answered(address: str) -> None:
    """The limit is the largest request served, not one byte less: a Produce just under it works."""
    with KafkaRaw(address) as conn:
        conn.request(
            "CreateTopics",
            7,
            {
                "topics": [{"name": "big-ok", "num_partitions": 1, "replication_factor": 1}],
                "timeout_ms": 1000,
            },
        )
        answer = produce(conn, "big-ok", 0, batch([b"x" * (LIMIT - 4096)]))
        assert (answer["error_code"], answer["base_offset"]) == (0, 0)


def test_a_slow_sender_does_not_hold_up_others(address: str) -> None:
    """Half a frame sent and nothing more: the broker waits on that socket only."""
    with KafkaRaw(address) as conn:
        conn.send_raw(struct.pack(">i", 1000) + b"\0" * 10)
        for _ in range(3):
            assert bystander(address)["error_code"] == 0
        assert not is_closed(conn, timeout=0.3)


def test_connections_beyond_the_limit_are_closed_and_a_freed_slot_is_used() -> None:
    with kafka_broker_subprocess("--max-connections", "2") as (address, _proc):
        first, second = KafkaRaw(address), KafkaRaw(address)
        try:
            for conn in (first, second):
                assert conn.request("ApiVersions", 3, {"client_software_name": "t"})["error_code"] == 0
            with KafkaRaw(address) as third:
                assert is_closed(third)
            first.close()
            deadline = time.monotonic() + 10
            while True:  # the broker learns of the close when it reads the socket's end
                try:
                    assert bystander(address)["error_code"] == 0
                    break
                except ConnectionError:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
        finally:
            first.close()
            second.close()


def test_partitions_beyond_the_brokers_limit_are_refused() -> None:
    """A CreateTopics asking for a million partitions (a few bytes of request) must not make the
    broker allocate for them: the broker's --max-partitions refuses it with POLICY_VIOLATION."""
    with kafka_broker_subprocess("--max-partitions", "10") as (address, _proc), KafkaRaw(address) as conn:

        def create(*topics: tuple[str, int]) -> list[int]:
            body = {"topics": [{"name": n, "num_partitions": p, "replication_factor": 1} for n, p in topics]}
            return [t["error_code"] for t in conn.request("CreateTopics", 7, body)["topics"]]

        assert create(("a", 8), ("b", 3), ("c", 2)) == [0, E["POLICY_VIOLATION"], 0]
        assert create(("many", 10_001)) == [E["INVALID_PARTITIONS"]]  # over a topic's own limit
        grow = conn.request(
            "CreatePartitions", 3, {"topics": [{"name": "a", "count": 9, "assignments": None}]}
        )
        assert grow["results"][0]["error_code"] == E["POLICY_VIOLATION"]
        auto = conn.request("Metadata", 12, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True})
        assert auto["topics"][0]["error_code"] == E["POLICY_VIOLATION"]
        assert bystander(address)["error_code"] == 0
