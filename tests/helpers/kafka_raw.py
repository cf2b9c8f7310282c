"""A raw Kafka connection for broker tests: our codec over a plain socket, no client logic.

:class:`KafkaRaw` sends requests the judges would never send (corrupt batches, chosen producer
ids and sequences, oversized frames, garbage) and reads the answers; :func:`is_closed` tells
whether the broker hung up; :func:`bystander` opens a fresh connection and asks ApiVersions
(the broker serves everyone from one event loop, so a stuck loop shows there).
"""

from __future__ import annotations

import socket
import time
from typing import Any

from pulsarwire.kafka.codec import API_KEYS, Correlator, FrameSplitter, records

Body = dict[str, Any]
#: seconds a bystander may wait for its answer (an idle broker answers in about a millisecond)
BYSTANDER_LIMIT = 10.0


class KafkaRaw:
    def __init__(self, address: str, timeout: float = 20.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlator = Correlator("raw-test")
        self.splitter = FrameSplitter()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaRaw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api: str, version: int, body: Body, *, expect_response: bool = True) -> None:
        self.sock.sendall(
            self.correlator.request(API_KEYS[api], version, body, expect_response=expect_response)
        )

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> bytes:
        """The next response payload; raises ConnectionError when the broker closed the socket."""
        while (payload := self.splitter.next_frame()) is None:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self.splitter.feed(chunk)
        return payload

    def receive(self) -> tuple[int, Body]:
        response = self.correlator.response(self.frame())
        return response.correlation_id, response.body

    def request(self, api: str, version: int, body: Body) -> Body:
        self.send(api, version, body)
        return self.receive()[1]


def is_closed(conn: KafkaRaw, timeout: float = 10.0) -> bool:
    """Whether the broker closes ``conn`` within ``timeout`` seconds (reads until EOF)."""
    conn.sock.settimeout(timeout)
    try:
        while conn.sock.recv(1 << 16):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


def bystander(address: str) -> Body:
    """ApiVersions on a new connection (raises when not answered within BYSTANDER_LIMIT)."""
    with KafkaRaw(address, timeout=BYSTANDER_LIMIT) as conn:
        return conn.request(
            "ApiVersions", 3, {"client_software_name": "bystander", "client_software_version": "1"}
        )


def batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    timestamp: int | None = None,
    codec: int = records.compression.NONE,
    transactional: bool = False,
) -> bytes:
    """The bytes of one v2 batch of ``values`` (keys None, no headers)."""
    b = records.make_batch(
        0,
        [(None, v, ()) for v in values],
        timestamp=int(time.time() * 1000) if timestamp is None else timestamp,
        compression_codec=codec,
        attributes=records.TRANSACTIONAL if transactional else 0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    return records.encode_batch(b)


def produce(
    conn: KafkaRaw,
    topic: str,
    partition: int,
    data: bytes,
    *,
    acks: int = -1,
    version: int = 9,
    transactional_id: str | None = None,
) -> Body:
    """One Produce of ``data`` (a records field) to ``topic``/``partition``; returns its partition answer."""
    body = {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}],
    }
    answer = conn.request("Produce", version, body)
    result: Body = answer["responses"][0]["partition_responses"][0]
    return result


def fetch(
    conn: KafkaRaw,
    topic: str,
    partitions: list[tuple[int, int]],
    *,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int = 1 << 20,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    version: int = 12,
    isolation_level: int = 0,
) -> list[Body]:
    """Fetch (partition, offset) pairs of ``topic`` (v12: by name); returns the partition answers."""
    body = {
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": partition_max_bytes}
                    for p, o in partitions
                ],
            }
        ],
    }
    answer = conn.request("Fetch", version, body)
    parts: list[Body] = answer["responses"][0]["partitions"]
    return parts
