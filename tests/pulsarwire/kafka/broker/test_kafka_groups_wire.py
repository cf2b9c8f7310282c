"""The group APIs over a raw socket, at their lowest and highest versions, and hostile input.

Requests are encoded by our codec (tests.helpers.kafka_raw) and sent to the broker in process
(the ``kafka_broker_factory`` fixture); each answer is what Apache Kafka's classic coordinator
gives for the same request (GroupMetadataManager / OffsetMetadataManager / KafkaApis).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pulsarwire.kafka.codec import API_KEYS
from pulsarwire.kafka.errors import ERROR_CODES as E
from tests.helpers.kafka_raw import KafkaRaw, bystander, is_closed

FAST = {"group_min_session_timeout_ms": 100, "group_initial_rebalance_delay_ms": 0}
PROTOCOLS = [{"name": "range", "metadata": struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)}]


def join(conn: KafkaRaw, version: int, member_id: str = "", group: str = "g", **extra: Any) -> dict[str, Any]:
    body = {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": PROTOCOLS,
        **extra,
    }
    return conn.request("JoinGroup", version, body)


def commit(conn: KafkaRaw, version: int, group: str, offset: int, **extra: Any) -> dict[str, Any]:
    parts = [{"partition_index": 0, "committed_offset": offset, "committed_metadata": "m"}]
    body = {"group_id": group, "topics": [{"name": "t", "partitions": parts}], **extra}
    return conn.request("OffsetCommit", version, body)


def test_a_group_at_the_lowest_versions(kafka_broker_factory: Callable[..., Any]) -> None:
    broker = kafka_broker_factory(**FAST)
    broker.create_topic("t", 1)
    with KafkaRaw(broker.bootstrap_servers) as conn:
        found = conn.request("FindCoordinator", 0, {"key": "g"})
        assert (found["error_code"], found["port"]) == (0, int(broker.bootstrap_servers.rsplit(":", 1)[1]))
        joined = join(conn, 0)  # v0: no KIP-394, the member id comes with the answer
        assert (
            joined["error_code"] == 0 and joined["generation_id"] == 1 and joined["protocol_name"] == "range"
        )
        me = joined["member_id"]
        sync = conn.request(
            "SyncGroup",
            0,
            {
                "group_id": "g",
                "generation_id": 1,
                "member_id": me,
                "assignments": [{"member_id": me, "assignment": b"A"}],
            },
        )
        assert (sync["error_code"], sync["assignment"]) == (0, b"A")
        assert (
            conn.request("Heartbeat", 0, {"group_id": "g", "generation_id": 1, "member_id": me})["error_code"]
            == 0
        )
        got = commit(conn, 2, "g", 5, generation_id_or_member_epoch=1, member_id=me)
        assert got["topics"][0]["partitions"][0]["error_code"] == 0
        fetched = conn.request(
            "OffsetFetch", 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}
        )
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5
        assert commit(conn, 0, "g", 6)["topics"][0]["partitions"][0]["error_code"] == E["UNKNOWN_MEMBER_ID"]
        listed = conn.request("ListGroups", 0, {})
        assert [(x["group_id"], x["protocol_type"]) for x in listed["groups"]] == [("g", "consumer")]
        assert conn.request("LeaveGroup", 0, {"group_id": "g", "member_id": me})["error_code"] == 0
        assert (
            conn.request("LeaveGroup", 0, {"group_id": "g", "member_id": me})["error_code"]
            == E["UNKNOWN_MEMBER_ID"]
        )
        described = conn.request("DescribeGroups", 0, {"groups": ["g", "never"]})["groups"]
        assert [(d["group_state"], d["error_code"]) for d in described] == [("Empty", 0), ("Dead", 0)]


def test_a_group_at_the_highest_versions(kafka_broker_factory: Callable[..., Any]) -> None:
    broker = kafka_broker_factory(**FAST)
    broker.create_topic("t", 1)
    with KafkaRaw(broker.bootstrap_servers) as conn:
        found = conn.request("FindCoordinator", 6, {"key_type": 0, "coordinator_keys": ["g", "h"]})
        assert [c["key"] for c in found["coordinators"]] == ["g", "h"]
        first = join(conn, 9, reason="start")
        assert first["error_code"] == E["MEMBER_ID_REQUIRED"]
        joined = join(conn, 9, first["member_id"])
        me = joined["member_id"]
        assert joined["error_code"] == 0 and joined["protocol_type"] == "consumer" and joined["leader"] == me
        sync = conn.request(
            "SyncGroup",
            5,
            {
                "group_id": "g",
                "generation_id": 1,
                "member_id": me,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": me, "assignment": b"A"}],
            },
        )
        assert (sync["error_code"], sync["protocol_name"], sync["assignment"]) == (0, "range", b"A")
        assert (
            commit(conn, 9, "absent", 1, generation_id_or_member_epoch=3, member_id="x")["topics"][0][
                "partitions"
            ][0]["error_code"]
            == E["GROUP_ID_NOT_FOUND"]
        )
        got = commit(conn, 9, "g", 7, generation_id_or_member_epoch=1, member_id=me)
        assert got["topics"][0]["partitions"][0]["error_code"] == 0
        too_big = conn.request(
            "OffsetCommit",
            9,
            {
                "group_id": "g",
                "generation_id_or_member_epoch": 1,
                "member_id": me,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 8, "committed_metadata": "x" * 5000},
                            {"partition_index": 9, "committed_offset": 8},
                        ],
                    }
                ],
            },
        )
        errors = [p["error_code"] for p in too_big["topics"][0]["partitions"]]
        assert errors == [E["OFFSET_METADATA_TOO_LARGE"], E["UNKNOWN_TOPIC_OR_PARTITION"]]
        fetched = conn.request(
            "OffsetFetch",
            9,
            {"groups": [{"group_id": "g", "topics": None}, {"group_id": "none", "topics": None}]},
        )
        g, none = fetched["groups"]
        assert g["topics"][0]["partitions"][0]["committed_offset"] == 7 and none["topics"] == []
        listed = conn.request("ListGroups", 5, {"states_filter": ["stable"], "types_filter": ["classic"]})
        assert [(x["group_id"], x["group_state"], x["group_type"]) for x in listed["groups"]] == [
            ("g", "Stable", "classic")
        ]
        described = conn.request(
            "DescribeGroups", 5, {"groups": ["g"], "include_authorized_operations": True}
        )
        d = described["groups"][0]
        assert (d["group_state"], d["protocol_data"], d["members"][0]["member_assignment"]) == (
            "Stable",
            "range",
            b"A",
        )
        assert d["authorized_operations"] == (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE
        deleted = conn.request(
            "OffsetDelete",
            0,
            {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
        )
        assert deleted["topics"][0]["partitions"][0]["error_code"] == E["GROUP_SUBSCRIBED_TO_TOPIC"]
        assert (
            conn.request("DeleteGroups", 2, {"groups_names": ["g"]})["results"][0]["error_code"]
            == E["NON_EMPTY_GROUP"]
        )
        left = conn.request(
            "LeaveGroup",
            5,
            {"group_id": "g", "members": [{"member_id": me, "reason": "done"}, {"member_id": "ghost"}]},
        )
        assert [m["error_code"] for m in left["members"]] == [0, E["UNKNOWN_MEMBER_ID"]]
        deleted = conn.request(
            "OffsetDelete",
            0,
            {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
        )
        assert deleted["topics"][0]["partitions"][0]["error_code"] == 0
        results = conn.request("DeleteGroups", 2, {"groups_names": ["g", "g"]})["results"]
        assert [r["error_code"] for r in results] == [0, E["GROUP_ID_NOT_FOUND"]]


def test_hostile_group_requests_never_size_an_allocation(kafka_broker_factory: Callable[..., Any]) -> None:
    broker = kafka_broker_factory(**FAST)
    address = broker.bootstrap_servers
    # JoinGroup v5 declaring 2**31-1 protocols in a 60-byte frame: refused before anything is made
    header = struct.pack(">hhih", API_KEYS["JoinGroup"], 5, 7, 3) + b"bad"
    body = struct.pack(">h", 1) + b"g" + struct.pack(">ii", 10_000, 10_000) + struct.pack(">h", 0)
    body += struct.pack(">h", -1) + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 0x7FFFFFFF)
    with KafkaRaw(address) as conn:
        conn.send_raw(struct.pack(">i", len(header + body)) + header + body)
        assert is_closed(conn)
    assert bystander(address)["error_code"] == 0
    with KafkaRaw(address) as conn:
        me = join(conn, 5, join(conn, 5)["member_id"])["member_id"]
        # the leader hands out assignments for 20,000 members that do not exist: ignored, bounded
        fake = [{"member_id": f"m{i}", "assignment": b"x" * 16} for i in range(20_000)]
        sync = conn.request(
            "SyncGroup", 3, {"group_id": "g", "generation_id": 1, "member_id": me, "assignments": fake}
        )
        assert (sync["error_code"], sync["assignment"]) == (0, b"")
        # 1 MiB of protocol metadata from a member: kept as sent, handed to the leader once
        big = [{"name": "range", "metadata": b"\0" * (1 << 20)}]
        again = join(conn, 5, me, protocols=big)
        assert again["error_code"] == 0 and len(again["members"][0]["metadata"]) == 1 << 20
    assert bystander(address)["error_code"] == 0


def test_group_max_size_and_session_bounds(kafka_broker_factory: Callable[..., Any]) -> None:
    broker = kafka_broker_factory(
        group_max_size=1, group_min_session_timeout_ms=5000, group_initial_rebalance_delay_ms=0
    )
    with KafkaRaw(broker.bootstrap_servers) as conn:
        assert join(conn, 5, session_timeout_ms=1000)["error_code"] == E["INVALID_SESSION_TIMEOUT"]
        join(conn, 5, join(conn, 5)["member_id"])
        assert join(conn, 5)["error_code"] == E["GROUP_MAX_SIZE_REACHED"]


def test_committed_offsets_survive_a_restart(
    tmp_path: Path, kafka_broker_factory: Callable[..., Any]
) -> None:
    broker = kafka_broker_factory(data_dir=tmp_path, **FAST)
    broker.create_topic("t", 1)
    with KafkaRaw(broker.bootstrap_servers) as conn:  # an assign() consumer: generation -1
        assert commit(conn, 8, "simple", 41)["topics"][0]["partitions"][0]["error_code"] == 0
    broker.restart()
    with KafkaRaw(broker.bootstrap_servers) as conn:
        fetched = conn.request("OffsetFetch", 7, {"group_id": "simple", "topics": None})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 41
        assert fetched["topics"][0]["partitions"][0]["metadata"] == "m"


def test_offsets_waiting_in_a_transaction_are_unstable(kafka_broker_factory: Callable[..., Any]) -> None:
    broker = kafka_broker_factory(**FAST)
    broker.create_topic("t", 1)
    with KafkaRaw(broker.bootstrap_servers) as conn:
        init = conn.request(
            "InitProducerId",
            4,
            {
                "transactional_id": "tx",
                "transaction_timeout_ms": 60_000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        txn = {
            "transactional_id": "tx",
            "producer_id": init["producer_id"],
            "producer_epoch": init["producer_epoch"],
        }
        assert conn.request("AddOffsetsToTxn", 3, {**txn, "group_id": "g"})["error_code"] == 0
        parts = [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]
        sent = conn.request(
            "TxnOffsetCommit",
            3,
            {
                **txn,
                "group_id": "g",
                "generation_id": -1,
                "member_id": "",
                "topics": [{"name": "t", "partitions": parts}],
            },
        )
        assert sent["topics"][0]["partitions"][0]["error_code"] == 0

        def fetch(stable: bool) -> dict[str, Any]:
            got = conn.request(
                "OffsetFetch",
                7,
                {
                    "group_id": "g",
                    "require_stable": stable,
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                },
            )
            partition: dict[str, Any] = got["topics"][0]["partitions"][0]
            return partition

        assert fetch(True)["error_code"] == E["UNSTABLE_OFFSET_COMMIT"]  # a read_committed consumer waits
        assert (fetch(False)["error_code"], fetch(False)["committed_offset"]) == (0, -1)
        assert conn.request("EndTxn", 3, {**txn, "committed": True})["error_code"] == 0
        assert (fetch(True)["error_code"], fetch(True)["committed_offset"]) == (0, 5)
