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
                    name = f"{self.label}-{req.api_name}-v{req.api_version}.bin"
                    if name not in self.seen:
                        self.seen.add(name)
                        (self.out / name).write_bytes(frame)
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
        if name == "Fetch":
            time.sleep(0.05)
        return {}


def _confluent(port: int, listener: Listener) -> None:
    from confluent_kafka import Consumer, Producer

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
    listener.label = "confluent-group"
    c = Consumer(
        {**base, "group.id": "golden-group", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    c.subscribe([TOPIC])
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        c.poll(0.2)
    with contextlib.suppress(Exception):
        c.close()


def _kafka_python(port: int, listener: Listener) -> None:
    from kafka import KafkaConsumer, KafkaProducer

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
        c.close()


def _aiokafka(port: int, listener: Listener) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

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
