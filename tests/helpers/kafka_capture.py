"""Capture golden Kafka request frames from confluent-kafka, kafka-python and aiokafka.

``python -m tests.helpers.kafka_capture tests/pulsarwire/kafka/golden`` starts a small TCP
listener on 127.0.0.1 that speaks just enough Kafka (our own codec, answering ApiVersions,
Metadata, Produce, FindCoordinator, JoinGroup, SyncGroup, ListOffsets, InitProducerId, and an
all-defaults answer to anything else) for each client to send its requests: producers with
every compression codec, an idempotent producer, a consumer group member. The first request
frame of each (client, scenario, API, version) is written as ``CLIENT-SCENARIO-API-vN.bin``
(the payload after the 4-byte size). The frames are checked in; tests decode and re-encode them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pulsarwire.kafka.codec import messages as m
from pulsarwire.kafka.codec.frames import FrameSplitter, join

TOPIC = "golden"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


class Listener:
    """A one-node fake Kafka that records the first frame of every kind it receives."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.label = "none"
        self.seen: set[str] = set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        splitter = FrameSplitter()
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                splitter.feed(data)
                for frame in splitter.frames():
                    req = m.decode_request(frame)
                    client = self.label.split("-")[0]
                    # one frame per client, API and version (per codec for Produce)
                    scope = self.label if req.api_name == "Produce" else client
                    key = f"{scope}-{req.api_name}-v{req.api_version}"
                    if key not in self.seen:
                        self.seen.add(key)
                        (self.out / f"{self.label}-{req.api_name}-v{req.api_version}.bin").write_bytes(frame)
                    body = self.answer(req)
                    if body is None:
                        continue
                    conn.sendall(
                        join(m.encode_response(req.api_key, req.api_version, req.correlation_id, body))
                    )

    def answer(self, req: m.Request) -> dict[str, Any] | None:
        b = req.body
        name = req.api_name
        if name == "ApiVersions":
            keys = [
                {"api_key": k, "min_version": m.versions(k)[0], "max_version": m.versions(k)[1]}
                for k in sorted(m.API_NAMES)
            ]
            return {"error_code": 0, "api_keys": keys}
        if name == "Metadata":
            topics = [t["name"] for t in (b.get("topics") or [])] or [TOPIC]
            return {
                "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
                "cluster_id": "golden-capture",
                "controller_id": 0,
                "topics": [
                    {
                        "name": t,
                        "topic_id": b"\x01" * 16,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "leader_id": 0,
                                "leader_epoch": 0,
                                "replica_nodes": [0],
                                "isr_nodes": [0],
                            }
                        ],
                    }
                    for t in topics
                ],
            }
        if name == "Produce":
            if b["acks"] == 0:
                return None
            return {
                "responses": [
                    {
                        "name": t["name"],
                        "partition_responses": [
                            {
                                "index": p["index"],
                                "base_offset": 0,
                                "log_append_time_ms": -1,
                                "log_start_offset": 0,
                            }
                            for p in t["partition_data"]
                        ],
                    }
                    for t in b["topic_data"]
                ]
            }
        if name == "FindCoordinator":
            keys = b.get("coordinator_keys") or [b.get("key", "")]
            return {
                "node_id": 0,
                "host": "127.0.0.1",
                "port": self.port,
                "coordinators": [
                    {"key": k, "node_id": 0, "host": "127.0.0.1", "port": self.port} for k in keys
                ],
            }
        if name == "InitProducerId":
            return {"producer_id": 1000, "producer_epoch": 0}
        if name == "JoinGroup":
            proto = b["protocols"][0]
            member = b["member_id"] or "member-1"
            return {
                "generation_id": 1,
                "protocol_type": "consumer",
                "protocol_name": proto["name"],
                "leader": member,
                "member_id": member,
                "members": [{"member_id": member, "metadata": proto["metadata"]}],
            }
        if name == "SyncGroup":
            topic = TOPIC.encode()
            assignment = struct.pack(f">hih{len(topic)}siii", 0, 1, len(topic), topic, 1, 0, -1)
            return {
                "protocol_type": "consumer",
                "protocol_name": b.get("protocol_name"),
                "assignment": assignment,
            }
        if name == "ListOffsets":
            return {
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p["partition_index"], "offset": 0, "old_style_offsets": [0]}
                            for p in t["partitions"]
                        ],
                    }
                    for t in b["topics"]
                ]
            }
        if name == "OffsetFetch":

            def parts(topics: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
                return [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": i, "committed_offset": -1, "metadata": ""}
                            for i in t["partition_indexes"]
                        ],
                    }
                    for t in topics or [{"name": TOPIC, "partition_indexes": [0]}]
                ]

            if b.get("groups"):
                return {
                    "groups": [{"group_id": g["group_id"], "topics": parts(g["topics"])} for g in b["groups"]]
                }
            return {"topics": parts(b.get("topics"))}
        if name == "Fetch":
            time.sleep(0.1)
            return {
                "responses": [
                    {
                        "topic": t["topic"],
                        "topic_id": t["topic_id"],
                        "partitions": [
                            {
                                "partition_index": p["partition"],
                                "high_watermark": 0,
                                "last_stable_offset": 0,
                                "log_start_offset": 0,
                                "records": b"",
                            }
                            for p in t["partitions"]
                        ],
                    }
                    for t in b["topics"]
                ]
            }
        if name == "SaslHandshake":
            return {"mechanisms": ["PLAIN"]}
        if name == "SaslAuthenticate":
            return {"auth_bytes": b""}
        if name == "CreateTopics":
            return {
                "topics": [
                    {
                        "name": t["name"],
                        "topic_id": b"\x02" * 16,
                        "num_partitions": t["num_partitions"],
                        "replication_factor": t["replication_factor"],
                    }
                    for t in b["topics"]
                ]
            }
        if name == "DeleteTopics":
            names = b.get("topic_names") or [t["name"] for t in b.get("topics") or []]
            return {"responses": [{"name": n} for n in names]}
        if name == "CreatePartitions":
            return {"results": [{"name": t["name"]} for t in b["topics"]]}
        if name == "DescribeConfigs":
            return {
                "results": [
                    {
                        "resource_type": r["resource_type"],
                        "resource_name": r["resource_name"],
                        "configs": [{"name": "cleanup.policy", "value": "delete", "read_only": False}],
                    }
                    for r in b["resources"]
                ]
            }
        if name == "DescribeGroups":
            return {
                "groups": [
                    {"group_id": g, "group_state": "Empty", "protocol_type": "consumer"} for g in b["groups"]
                ]
            }
        if name == "AddPartitionsToTxn":

            def results(topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
                return [
                    {
                        "name": t["name"],
                        "results_by_partition": [{"partition_index": p} for p in t["partitions"]],
                    }
                    for t in topics
                ]

            if b.get("transactions"):
                return {
                    "results_by_transaction": [
                        {"transactional_id": t["transactional_id"], "topic_results": results(t["topics"])}
                        for t in b["transactions"]
                    ]
                }
            return {"results_by_topic_v3_and_below": results(b["v3_and_below_topics"])}
        if name == "TxnOffsetCommit":
            return {
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [{"partition_index": p["partition_index"]} for p in t["partitions"]],
                    }
                    for t in b["topics"]
                ]
            }
        if name == "OffsetCommit":
            return {
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [{"partition_index": p["partition_index"]} for p in t["partitions"]],
                    }
                    for t in b["topics"]
                ]
            }
        return {}


def _confluent(port: int, listener: Listener) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    base = {"bootstrap.servers": f"127.0.0.1:{port}", "client.id": "golden"}
    for codec in CODECS:
        listener.label = f"confluent-{codec}"
        p = Producer(
            {**base, "compression.type": codec, "linger.ms": 1, "enable.idempotence": codec == "none"}
        )
        for i in range(3):
            p.produce(
                TOPIC, f"value-{i}".encode() * 4, f"key-{i}".encode(), headers=[("h", b"v"), ("n", None)]
            )
        p.flush(5)
    listener.label = "confluent-txn"
    p = Producer({**base, "transactional.id": "golden-txn", "linger.ms": 1})
    with contextlib.suppress(Exception):
        p.init_transactions(5)
        p.begin_transaction()
        p.produce(TOPIC, b"in-txn", b"key-0", headers=[("h", b"v")])
        p.flush(3)
        meta = Consumer({**base, "group.id": "golden-group"}).consumer_group_metadata()
        p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)], meta, 5)
        p.commit_transaction(5)
    listener.label = "confluent-admin"
    admin = AdminClient(base)
    for future in admin.create_topics([NewTopic("golden-new", 1, 1)], request_timeout=3).values():
        with contextlib.suppress(Exception):
            future.result(5)
    for future in admin.create_partitions([NewPartitions(TOPIC, 2)], request_timeout=3).values():
        with contextlib.suppress(Exception):
            future.result(5)
    for future in admin.describe_configs([ConfigResource("topic", TOPIC)], request_timeout=3).values():
        with contextlib.suppress(Exception):
            future.result(5)
    with contextlib.suppress(Exception):
        admin.list_consumer_groups(request_timeout=3).result(5)
    for future in admin.describe_consumer_groups(["golden-group"], request_timeout=3).values():
        with contextlib.suppress(Exception):
            future.result(5)
    for future in admin.delete_topics(["golden-new"], request_timeout=3).values():
        with contextlib.suppress(Exception):
            future.result(5)
    listener.label = "confluent-sasl"
    p = Producer(
        {
            **base,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "golden",
            "sasl.password": "golden-secret",
        }
    )
    p.produce(TOPIC, b"value-0", b"key-0")
    p.flush(5)
    listener.label = "confluent-group"
    c = Consumer(
        {**base, "group.id": "golden-group", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    c.subscribe([TOPIC])
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        c.poll(0.2)
    with contextlib.suppress(Exception):
        c.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    with contextlib.suppress(Exception):
        c.close()


def _kafka_python(port: int, listener: Listener) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.structs import OffsetAndMetadata

    for codec in CODECS:
        listener.label = f"kafkapython-{codec}"
        p = KafkaProducer(
            bootstrap_servers=f"127.0.0.1:{port}",
            client_id="golden",
            compression_type=None if codec == "none" else codec,
            linger_ms=1,
        )
        for i in range(3):
            p.send(TOPIC, f"value-{i}".encode() * 4, f"key-{i}".encode(), headers=[("h", b"v")])
        p.flush(5)
        p.close(2)
    listener.label = "kafkapython-txn"
    with contextlib.suppress(Exception):
        p = KafkaProducer(
            bootstrap_servers=f"127.0.0.1:{port}", client_id="golden", transactional_id="golden-txn"
        )
        p.init_transactions()
        p.begin_transaction()
        p.send(TOPIC, b"in-txn", b"key-0")
        p.send_offsets_to_transaction(
            {KafkaTopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1)}, "golden-group"
        )
        p.commit_transaction()
        p.close(2)
    listener.label = "kafkapython-admin"
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic

    admin = KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{port}", client_id="golden", request_timeout_ms=3000
    )
    for call in (
        lambda: admin.create_topics([NewTopic("golden-new", 1, 1)]),
        lambda: admin.create_partitions({TOPIC: NewPartitions(2)}),
        lambda: admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)]),
        lambda: admin.list_consumer_groups(),
        lambda: admin.describe_consumer_groups(["golden-group"]),
        lambda: admin.delete_topics(["golden-new"]),
    ):
        with contextlib.suppress(Exception):
            call()
    admin.close()
    listener.label = "kafkapython-sasl"
    p = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{port}",
        client_id="golden",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="golden",
        sasl_plain_password="golden-secret",
    )
    p.send(TOPIC, b"value-0", b"key-0")
    p.flush(5)
    p.close(2)
    listener.label = "kafkapython-group"
    c = KafkaConsumer(
        TOPIC,
        bootstrap_servers=f"127.0.0.1:{port}",
        group_id="golden-group",
        client_id="golden",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        c.poll(200)
    with contextlib.suppress(Exception):
        c.commit({KafkaTopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1)})
    with contextlib.suppress(Exception):
        c.close()


def _aiokafka(port: int, listener: Listener) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def run() -> None:
        for codec in CODECS:
            listener.label = f"aiokafka-{codec}"
            p = AIOKafkaProducer(
                bootstrap_servers=f"127.0.0.1:{port}",
                client_id="golden",
                compression_type=None if codec == "none" else codec,
                linger_ms=1,
            )
            await p.start()
            try:
                for i in range(3):
                    await asyncio.wait_for(
                        p.send_and_wait(
                            TOPIC, f"value-{i}".encode() * 4, f"key-{i}".encode(), headers=[("h", b"v")]
                        ),
                        5,
                    )
            finally:
                await p.stop()
        listener.label = "aiokafka-txn"
        p = AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{port}",
            client_id="golden",
            transactional_id="golden-txn",
            request_timeout_ms=3000,
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(p.start(), 5)
            async with p.transaction():
                await asyncio.wait_for(p.send_and_wait(TOPIC, b"in-txn", b"key-0"), 5)
                await asyncio.wait_for(
                    p.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 1}, "golden-group"), 5
                )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(p.stop(), 5)
        listener.label = "aiokafka-admin"
        admin = AIOKafkaAdminClient(
            bootstrap_servers=f"127.0.0.1:{port}", client_id="golden", request_timeout_ms=3000
        )
        await admin.start()
        for call in (
            lambda: admin.create_topics([NewTopic("golden-new", 1, 1)]),
            lambda: admin.create_partitions({TOPIC: NewPartitions(2)}),
            lambda: admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)]),
            lambda: admin.list_consumer_groups(),
            lambda: admin.describe_consumer_groups(["golden-group"]),
            lambda: admin.delete_topics(["golden-new"]),
        ):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(call(), 5)
        await admin.close()
        listener.label = "aiokafka-sasl"
        p = AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{port}",
            client_id="golden",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="golden",
            sasl_plain_password="golden-secret",
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(p.start(), 5)
            await asyncio.wait_for(p.send_and_wait(TOPIC, b"value-0", b"key-0"), 5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(p.stop(), 5)
        listener.label = "aiokafka-group"
        c = AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=f"127.0.0.1:{port}",
            group_id="golden-group",
            client_id="golden",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(c.getmany(timeout_ms=3000), 4)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(c.commit({TopicPartition(TOPIC, 0): 1}), 4)
        finally:
            await c.stop()

    asyncio.run(run())


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    listener = Listener(out)
    for client in argv[1:] or ["confluent", "kafkapython", "aiokafka"]:
        fn = {"confluent": _confluent, "kafkapython": _kafka_python, "aiokafka": _aiokafka}[client]
        try:
            fn(listener.port, listener)
        except Exception as exc:  # a client that cannot finish still leaves its frames
            print(f"{client}: {type(exc).__name__}: {exc}", file=sys.stderr)
    listener.closed = True
    listener.sock.close()
    print(f"{len(listener.seen)} frames in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
