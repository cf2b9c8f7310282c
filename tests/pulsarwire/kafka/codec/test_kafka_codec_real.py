"""Apache Kafka itself (``real_kafka``, marker ``real``) judges our codec: requests encoded by
us go over a real socket to the broker and its responses decode with our codec, every byte
consumed — ApiVersions, Metadata, CreateTopics, Produce (a v2 batch we built, every codec),
ListOffsets, Fetch (the batches come back with our CRCs intact), FindCoordinator, DeleteTopics.
Responses also re-encode byte for byte. With ``PULSARWIRE_KAFKA_SAVE_RESPONSES=DIR`` the first
response of each API and version is written to DIR: that is how
``tests/pulsarwire/kafka/golden/responses`` (checked, without Kafka, by test_kafka_golden.py) was
made."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pulsarwire.kafka.codec import compression, messages, records
from pulsarwire.kafka.codec.frames import Correlator, FrameSplitter
from tests.helpers.real_kafka import USERS, RealKafka

pytestmark = pytest.mark.real
SAVE_RESPONSES = os.environ.get("PULSARWIRE_KAFKA_SAVE_RESPONSES")


class Conn:
    """A blocking socket speaking our codec (test-only IO around the sans-IO pieces)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.corr = Correlator("pulsarwire-codec-test")
        self.split = FrameSplitter()
        self.versions: dict[int, tuple[int, int]] = {}

    def call(self, api: str, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        key = messages.API_KEYS[api]
        if version is None:
            ours = messages.versions(key)
            theirs = self.versions[key]
            version = min(ours[1], theirs[1])
        self.sock.sendall(self.corr.request(key, version, body))
        while (frame := self.split.next_frame()) is None:
            data = self.sock.recv(1 << 20)
            assert data, "Kafka closed the connection"
            self.split.feed(data)
        resp = self.corr.response(frame)
        if SAVE_RESPONSES:  # refresh the checked-in response frames (see the module docstring)
            path = Path(SAVE_RESPONSES) / f"kafka-{api}Response-v{version}.bin"
            if not path.exists():
                path.write_bytes(frame)
        again = messages.encode_response(key, version, resp.correlation_id, resp.body)
        assert again == frame, f"{api} v{version} response does not re-encode byte for byte"
        return resp.body

    def negotiate(self) -> None:
        av = self.call(
            "ApiVersions", {"client_software_name": "pulsarwire", "client_software_version": "0"}, 3
        )
        assert av["error_code"] == 0
        self.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in av["api_keys"]}

    def shared(self, api: str) -> tuple[int, int]:
        """The lowest and highest versions of ``api`` both we and Kafka define."""
        lo, hi = messages.versions(messages.API_KEYS[api])
        theirs = self.versions[messages.API_KEYS[api]]
        return max(lo, theirs[0]), min(hi, theirs[1])

    def retry(self, api: str, body: dict[str, Any], ok: Any, version: int | None = None) -> dict[str, Any]:
        """Call until ``ok(response)`` (a coordinator still loading answers a retriable error)."""
        for _ in range(100):
            out = self.call(api, body, version)
            if ok(out):
                return out
            time.sleep(0.2)
        raise AssertionError(f"{api}: {out}")

    def close(self) -> None:
        self.sock.close()


def test_our_codec_against_real_kafka(real_kafka: RealKafka) -> None:
    conn = Conn(real_kafka.bootstrap)
    try:
        av = conn.call(
            "ApiVersions", {"client_software_name": "pulsarwire", "client_software_version": "0"}, version=3
        )
        assert av["error_code"] == 0
        conn.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in av["api_keys"]}
        for api, key in messages.API_KEYS.items():  # every API we define overlaps what Kafka serves
            lo, hi = messages.versions(key)
            theirs = conn.versions.get(key)
            assert theirs and theirs[0] <= hi and lo <= theirs[1], api

        topic = f"codec-{uuid.uuid4().hex[:8]}"
        created = conn.call(
            "CreateTopics",
            {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 30000},
        )
        assert created["topics"][0]["error_code"] == 0
        # the broker learns of the new topic from the controller a moment later: ask until it knows
        meta = conn.retry(
            "Metadata",
            {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
            lambda r: r["topics"][0]["error_code"] == 0 and r["topics"][0]["partitions"],
        )
        assert meta["topics"][0]["name"] == topic
        topic_id = meta["topics"][0]["topic_id"]

        sent = []
        for i, codec in enumerate([0, 1, 2, 3, 4]):
            batch = records.make_batch(
                0,
                [(f"k{i}".encode(), f"v{i}".encode() * 20, (("codec", compression.NAMES[codec].encode()),))],
                timestamp=1_700_000_000_000 + i,
                compression_codec=codec,
            )
            sent.append(batch.records[0])
            produced = conn.retry(  # a refused batch is not appended, so a retry keeps the offsets
                "Produce",
                {
                    "acks": -1,
                    "timeout_ms": 30000,
                    "topic_data": [
                        {
                            "name": topic,
                            "partition_data": [{"index": 0, "records": records.encode_batch(batch)}],
                        }
                    ],
                },
                lambda r: r["responses"][0]["partition_responses"][0]["error_code"] == 0,
            )
            part = produced["responses"][0]["partition_responses"][0]
            assert (part["error_code"], part["base_offset"]) == (0, i)

        offsets = conn.call(
            "ListOffsets",
            {
                "replica_id": -1,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
            },
        )
        assert offsets["topics"][0]["partitions"][0]["offset"] == 5

        fetch_topic = {"topic": topic, "topic_id": topic_id}
        fetched = conn.call(
            "Fetch",
            {
                "max_wait_ms": 100,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "topics": [
                    {
                        **fetch_topic,
                        "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
                    }
                ],
            },
        )
        part = fetched["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and part["high_watermark"] == 5
        batches = records.decode_batches(part["records"], partial_tail=True)
        assert [b.compression for b in batches] == [0, 1, 2, 3, 4]
        assert [b.records[0] for b in batches] == sent
        assert [b.base_offset for b in batches] == [0, 1, 2, 3, 4]

        coordinator = conn.call(
            "FindCoordinator", {"key": "codec-group", "key_type": 0, "coordinator_keys": ["codec-group"]}
        )
        assert coordinator.get("coordinators") or coordinator.get("node_id") is not None

        deleted = conn.call(
            "DeleteTopics", {"topic_names": [topic], "topics": [{"name": topic}], "timeout_ms": 30000}
        )
        assert deleted["responses"][0]["error_code"] == 0
    finally:
        conn.close()


def test_groups_transactions_admin_and_sasl_against_real_kafka(real_kafka: RealKafka) -> None:
    """The other judged APIs, each at the lowest and the highest version Kafka and we share."""
    conn = Conn(real_kafka.bootstrap)
    try:
        conn.negotiate()
        topic = f"codec-{uuid.uuid4().hex[:8]}"
        conn.call(
            "CreateTopics",
            {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 30000},
        )
        for version in sorted(set(conn.shared("CreatePartitions"))):
            out = conn.call(
                "CreatePartitions",
                {"topics": [{"name": topic, "count": 2 + version, "assignments": None}], "timeout_ms": 30000},
                version,
            )
            assert out["results"][0]["error_code"] == 0
        for version in sorted(set(conn.shared("DescribeConfigs"))):
            out = conn.retry(  # the broker (not the controller) answers: it may not know the topic yet
                "DescribeConfigs",
                {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}]},
                lambda r: r["results"][0]["error_code"] == 0 and r["results"][0]["configs"],
                version,
            )
            names = {c["name"] for c in out["results"][0]["configs"]}
            assert "cleanup.policy" in names

        # a consumer group through its whole life, at both ends of the shared versions
        for low in (True, False):

            def v(api: str) -> int:
                return conn.shared(api)[0 if low else 1]  # noqa: B023

            group = f"g-{uuid.uuid4().hex[:6]}"
            conn.retry(
                "FindCoordinator",
                {"key": group, "coordinator_keys": [group]},
                lambda r: (r.get("coordinators") or [r])[0]["error_code"] == 0,
                v("FindCoordinator"),
            )
            join = {
                "group_id": group,
                "session_timeout_ms": 10000,
                "rebalance_timeout_ms": 10000,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}],
            }
            joined = conn.call("JoinGroup", join, v("JoinGroup"))
            if joined["error_code"] == 79:  # MEMBER_ID_REQUIRED (v4+): join again with the id given
                joined = conn.call("JoinGroup", {**join, "member_id": joined["member_id"]}, v("JoinGroup"))
            assert joined["error_code"] == 0, joined
            member, generation = joined["member_id"], joined["generation_id"]
            assert joined["leader"] == member
            synced = conn.call(
                "SyncGroup",
                {
                    "group_id": group,
                    "generation_id": generation,
                    "member_id": member,
                    "protocol_type": "consumer",
                    "protocol_name": "range",
                    "assignments": [{"member_id": member, "assignment": b"x"}],
                },
                v("SyncGroup"),
            )
            assert synced["error_code"] == 0 and synced["assignment"] == b"x"
            beat = conn.call(
                "Heartbeat",
                {"group_id": group, "generation_id": generation, "member_id": member},
                v("Heartbeat"),
            )
            assert beat["error_code"] == 0
            committed = conn.call(
                "OffsetCommit",
                {
                    "group_id": group,
                    "generation_id_or_member_epoch": generation,
                    "member_id": member,
                    "retention_time_ms": -1,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {"partition_index": 0, "committed_offset": 3, "committed_metadata": "m"}
                            ],
                        }
                    ],
                },
                v("OffsetCommit"),
            )
            assert committed["topics"][0]["partitions"][0]["error_code"] == 0
            fetch = {
                "group_id": group,
                "topics": [{"name": topic, "partition_indexes": [0]}],
                "groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}],
            }
            got = conn.call("OffsetFetch", fetch, v("OffsetFetch"))
            topics = got["groups"][0]["topics"] if got.get("groups") else got["topics"]
            assert topics[0]["partitions"][0]["committed_offset"] == 3
            described = conn.call("DescribeGroups", {"groups": [group]}, v("DescribeGroups"))
            assert described["groups"][0]["group_state"] == "Stable"
            listed = conn.call("ListGroups", {}, v("ListGroups"))
            assert group in {g["group_id"] for g in listed["groups"]}
            left = conn.call(
                "LeaveGroup",
                {"group_id": group, "member_id": member, "members": [{"member_id": member}]},
                v("LeaveGroup"),
            )
            assert left["error_code"] == 0

        # a transaction: produce in it, add offsets, commit
        for low in (True, False):

            def tv(api: str) -> int:
                return conn.shared(api)[0 if low else 1]  # noqa: B023

            txn = f"tx-{uuid.uuid4().hex[:6]}"
            conn.retry(
                "FindCoordinator",
                {"key": txn, "key_type": 1, "coordinator_keys": [txn]},
                lambda r: (r.get("coordinators") or [r])[0]["error_code"] == 0,
                max(tv("FindCoordinator"), 1),
            )  # v0 has no key type
            init = conn.retry(
                "InitProducerId",
                {
                    "transactional_id": txn,
                    "transaction_timeout_ms": 60000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
                lambda r: r["error_code"] == 0,
                tv("InitProducerId"),
            )
            pid, epoch = init["producer_id"], init["producer_epoch"]
            parts = [{"name": topic, "partitions": [0]}]
            added = conn.call(
                "AddPartitionsToTxn",
                {
                    "v3_and_below_transactional_id": txn,
                    "v3_and_below_producer_id": pid,
                    "v3_and_below_producer_epoch": epoch,
                    "v3_and_below_topics": parts,
                    "transactions": [
                        {
                            "transactional_id": txn,
                            "producer_id": pid,
                            "producer_epoch": epoch,
                            "topics": parts,
                        }
                    ],
                },
                min(tv("AddPartitionsToTxn"), 3),
            )
            results = (
                added["results_by_topic_v3_and_below"] or added["results_by_transaction"][0]["topic_results"]
            )
            assert results[0]["results_by_partition"][0]["partition_error_code"] == 0
            batch = records.make_batch(
                0,
                [(b"k", b"in-txn", ())],
                timestamp=1,
                attributes=records.TRANSACTIONAL,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=0,
            )
            produced = conn.call(
                "Produce",
                {
                    "transactional_id": txn,
                    "acks": -1,
                    "timeout_ms": 30000,
                    "topic_data": [
                        {
                            "name": topic,
                            "partition_data": [{"index": 0, "records": records.encode_batch(batch)}],
                        }
                    ],
                },
            )
            assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0
            group = f"txg-{uuid.uuid4().hex[:6]}"
            offsets_added = conn.retry(
                "AddOffsetsToTxn",
                {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "group_id": group},
                lambda r: r["error_code"] == 0,
                tv("AddOffsetsToTxn"),
            )
            assert offsets_added["error_code"] == 0
            conn.retry(
                "FindCoordinator",
                {"key": group, "coordinator_keys": [group]},
                lambda r: (r.get("coordinators") or [r])[0]["error_code"] == 0,
                tv("FindCoordinator"),
            )
            tc = conn.retry(
                "TxnOffsetCommit",
                {
                    "transactional_id": txn,
                    "group_id": group,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "generation_id": -1,
                    "member_id": "",
                    "topics": [
                        {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}
                    ],
                },
                lambda r: r["topics"][0]["partitions"][0]["error_code"] == 0,
                tv("TxnOffsetCommit"),
            )
            assert tc["topics"][0]["name"] == topic
            ended = conn.retry(
                "EndTxn",
                {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": True},
                lambda r: r["error_code"] == 0,
                tv("EndTxn"),
            )
            assert ended["error_code"] == 0
    finally:
        conn.close()

    sasl = Conn(real_kafka.sasl_bootstrap)
    try:
        hs = sasl.call("SaslHandshake", {"mechanism": "PLAIN"}, 1)
        assert hs["error_code"] == 0 and "PLAIN" in hs["mechanisms"]
        auth = sasl.call("SaslAuthenticate", {"auth_bytes": f"\0alice\0{USERS['alice']}".encode()}, 2)
        assert auth["error_code"] == 0
        sasl.negotiate()
        assert messages.API_KEYS["Produce"] in sasl.versions
    finally:
        sasl.close()
