"""A hostile fake Kafka broker in a process of its own, for the client's hardening tests.

``python -m tests.helpers.kafka_fake_broker MODE`` listens on a free loopback port, prints it,
and serves one topic ``t`` with one partition led by itself. ApiVersions, Metadata, ListOffsets
(offset 0) and InitProducerId are answered honestly; what Fetch and Produce get depends on MODE:

* ``oversize``: every answer after ApiVersions declares a 1 GiB frame and sends nothing more;
* ``badcrc``: Fetch returns a batch (offsets 0-2) with one byte of its records flipped;
* ``bomb``: Fetch returns a gzip batch whose records inflate to 256 MiB;
* ``liecount``: Fetch returns a batch whose header claims 1000 records and holds 2;
* ``dropack``: the first Produce is stored, then the connection is cut before the answer; later
  Produces are stored unless their producer id and sequence were seen (then the first offset is
  answered, as Kafka's duplicate detection does);
* ``notleader``: the first Produce is answered NOT_LEADER_OR_FOLLOWER and not stored.

Each stored Produce batch is printed as ``stored <producer_id> <base_sequence> <count>``; each
duplicate as ``duplicate <producer_id> <base_sequence>`` (stdout, line-buffered).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import crc32c

from pulsarwire.kafka.codec import FrameSplitter, compression, decode_request, encode_response, join
from pulsarwire.kafka.codec import records as rec
from pulsarwire.kafka.codec.records import decode_batches

TOPIC = "t"


def batch(base: int, values: list[bytes], codec: int = compression.NONE) -> bytes:
    return rec.encode_batch(
        rec.make_batch(
            base, [(None, v, ()) for v in values], timestamp=1_700_000_000_000, compression_codec=codec
        )
    )


def fetch_records(mode: str) -> bytes:
    if mode == "badcrc":
        data = bytearray(batch(0, [b"a", b"b", b"c"]))
        data[-1] ^= 0xFF
        return bytes(data)
    if mode == "bomb":
        body = bytearray()
        rec._encode_record(body, rec.Record(0, 0, None, b"\0" * (256 << 20)))
        c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        section = c.compress(bytes(body)) + c.flush()
        head = rec.BATCH_HEADER.pack(
            0,
            rec.BATCH_HEADER.size - 12 + len(section),
            -1,
            2,
            0,
            compression.GZIP,
            0,
            0,
            0,
            -1,
            -1,
            -1,
            1,
        )
        out = bytearray(head) + section
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[rec.CRC_FROM :])))
        return bytes(out)
    if mode == "liecount":
        data = bytearray(batch(0, [b"a", b"b"]))
        struct.pack_into(">i", data, rec.BATCH_HEADER.size - 4, 1000)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[rec.CRC_FROM :])))
        return bytes(data)
    return batch(0, [b"a", b"b", b"c"])


@dataclass
class Running:
    """A running fake broker: its address, and (after it stopped) what it printed."""

    bootstrap: str
    lines: list[str] = field(default_factory=list)


@contextlib.contextmanager
def fake_broker(mode: str) -> Iterator[Running]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.kafka_fake_broker", mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    running = Running(f"127.0.0.1:{proc.stdout.readline().strip()}")
    try:
        yield running
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        running.lines.extend(proc.stdout.read().splitlines())
        proc.stdout.close()


class Broker:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.port = 0
        self.log: list[tuple[int, int, int]] = []  # producer id, base sequence, count
        self.produces = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        splitter = FrameSplitter(1 << 24)
        try:
            while data := await reader.read(65536):
                splitter.feed(data)
                for payload in splitter.frames():
                    req = decode_request(payload)
                    answer = self.answer(req.api_key, req.api_version, req.body)
                    if answer == "cut":
                        writer.transport.abort()
                        return
                    if self.mode == "oversize" and req.api_key != 18:
                        writer.write(struct.pack(">i", 1 << 30) + struct.pack(">i", req.correlation_id))
                        await writer.drain()
                        continue
                    assert isinstance(answer, dict)
                    writer.write(
                        join(encode_response(req.api_key, req.api_version, req.correlation_id, answer))
                    )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def answer(self, key: int, version: int, body: dict) -> dict | str:  # type: ignore[type-arg]
        if key == 18:
            from pulsarwire.kafka.codec import versions

            keys = [
                {"api_key": k, "min_version": versions(k)[0], "max_version": versions(k)[1]}
                for k in (0, 1, 2, 3, 18, 22)
            ]
            return {"error_code": 0, "api_keys": keys}
        if key == 3:
            return {
                "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port, "rack": None}],
                "cluster_id": "fake",
                "controller_id": 0,
                "topics": [
                    {
                        "error_code": 0,
                        "name": TOPIC,
                        "is_internal": False,
                        "partitions": [
                            {
                                "error_code": 0,
                                "partition_index": 0,
                                "leader_id": 0,
                                "leader_epoch": 0,
                                "replica_nodes": [0],
                                "isr_nodes": [0],
                                "offline_replicas": [],
                            }
                        ],
                    }
                ],
            }
        if key == 2:
            return {
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {
                                "partition_index": p["partition_index"],
                                "error_code": 0,
                                "timestamp": -1,
                                "offset": 0,
                            }
                            for p in t["partitions"]
                        ],
                    }
                    for t in body["topics"]
                ]
            }
        if key == 22:
            return {"error_code": 0, "producer_id": 4242, "producer_epoch": 0}
        if key == 1:
            return {
                "responses": [
                    {
                        "topic": TOPIC,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "error_code": 0,
                                "high_watermark": 3,
                                "last_stable_offset": 3,
                                "log_start_offset": 0,
                                "aborted_transactions": None,
                                "records": fetch_records(self.mode),
                            }
                        ],
                    }
                ]
            }
        if key == 0:
            return self.produce(body)
        raise AssertionError(f"api {key}")

    def produce(self, body: dict) -> dict | str:  # type: ignore[type-arg]
        self.produces += 1
        part = body["topic_data"][0]["partition_data"][0]
        (b,) = decode_batches(part["records"])
        answer: dict[str, Any] = {
            "responses": [
                {
                    "name": TOPIC,
                    "partition_responses": [
                        {
                            "index": 0,
                            "error_code": 0,
                            "base_offset": 0,
                            "log_append_time_ms": -1,
                            "log_start_offset": 0,
                        }
                    ],
                }
            ]
        }
        pr: dict[str, Any] = answer["responses"][0]["partition_responses"][0]
        if self.mode == "notleader" and self.produces == 1:
            pr["error_code"] = 6
            return answer
        seen = [
            i for i, (pid, seq, _) in enumerate(self.log) if (pid, seq) == (b.producer_id, b.base_sequence)
        ]
        if seen:
            print(f"duplicate {b.producer_id} {b.base_sequence}", flush=True)
            pr["base_offset"] = sum(n for _, _, n in self.log[: seen[0]])
            return answer
        pr["base_offset"] = sum(n for _, _, n in self.log)
        self.log.append((b.producer_id, b.base_sequence, len(b.records)))
        print(f"stored {b.producer_id} {b.base_sequence} {len(b.records)}", flush=True)
        if self.mode == "dropack" and self.produces == 1:
            return "cut"
        return answer


async def main(mode: str) -> None:
    broker = Broker(mode)
    server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    broker.port = server.sockets[0].getsockname()[1]
    print(broker.port, flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
