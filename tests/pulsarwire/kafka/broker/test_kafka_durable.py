"""Restarts on the same ``--data-dir`` lose nothing acknowledged, ``kill -9`` included.

confluent-kafka produces every codec idempotently (acks=all) to a broker process; the broker is
killed with SIGKILL and started again on the data dir; kafka-python then reads exactly what was
acknowledged. The producer state survives too: a retry of a batch acknowledged before the kill
is answered with its original offset and not appended again, and a gap is still a gap. Then a
SIGTERM (exit status 143), a third start, and aiokafka reads the same records. A torn tail (half
a record at the end of a partition's file, as a crash mid-write leaves) is cut off at start.
A disk that fills up mid-stream answers KAFKA_STORAGE_ERROR and keeps everything acknowledged.
"""

from __future__ import annotations

import resource
import signal
from pathlib import Path
from typing import Any

from pulsarwire.kafka.codec import records
from pulsarwire.kafka.errors import ERROR_CODES as E
from pulsarwire.testing.process import kafka_broker_subprocess
from tests.helpers.kafka_judge import CODECS, PER_CODEC, expected_records, run_judge
from tests.helpers.kafka_raw import KafkaRaw, batch, bystander, fetch, produce

TOPIC = "durable"


def test_kill_9_and_restarts_lose_nothing_acknowledged(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    args = ("--data-dir", data, "--num-partitions", str(len(CODECS)))
    with kafka_broker_subprocess(*args) as (address, proc):
        run_judge("confluent", "produce", address, TOPIC)
        with KafkaRaw(address) as conn:
            pid = conn.request("InitProducerId", 4, {"transactional_id": None, "transaction_timeout_ms": 1})[
                "producer_id"
            ]
            first = batch([b"i0", b"i1"], producer_id=pid, epoch=0, sequence=0)
            assert produce(conn, TOPIC, 4, first)["base_offset"] == PER_CODEC
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    # (key, value, headers, partition, offset) of every acknowledged record; timestamps aside
    expected = sorted(
        [
            *([k, v, h, partition, offset] for partition in range(len(CODECS))
              for offset, (k, v, h, _ts) in enumerate(expected_records(partition))),
            ["late", "after-the-end", [], 3, PER_CODEC],
            [None, "i0", [], 4, PER_CODEC],
            [None, "i1", [], 4, PER_CODEC + 1],
        ],
        key=lambda r: (r[3], r[4]),
    )  # fmt: skip

    def check(result: dict[str, Any]) -> None:
        assert [[*r[:3], *r[4:]] for r in result["records"]] == expected
        assert result["ends"] == [PER_CODEC, PER_CODEC, PER_CODEC, PER_CODEC + 1, PER_CODEC + 2]

    with kafka_broker_subprocess(*args) as (address, proc):
        check(run_judge("kafkapython", "consume", address, TOPIC))
        with KafkaRaw(address) as conn:
            again = produce(conn, TOPIC, 4, first)
            assert (again["error_code"], again["base_offset"]) == (0, PER_CODEC)
            gap = produce(conn, TOPIC, 4, batch([b"i9"], producer_id=pid, epoch=0, sequence=9))
            assert gap["error_code"] == E["OUT_OF_ORDER_SEQUENCE_NUMBER"]
            assert fetch(conn, TOPIC, [(4, 0)])[0]["high_watermark"] == PER_CODEC + 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM

    # a crash mid-write: half a record at the end of partition 0's file
    log = next(Path(data).glob("topics/durable/0/records.log"))
    with open(log, "ab") as f:
        f.write(b"\x00\x00\x01\x00\xde\xad\xbe\xef" + b"torn" * 10)
    with kafka_broker_subprocess(*args) as (address, _proc):
        check(run_judge("aiokafka", "consume", address, TOPIC))
        with KafkaRaw(address) as conn:
            assert produce(conn, TOPIC, 0, batch([b"after"]))["base_offset"] == PER_CODEC


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))


def test_a_full_disk_answers_storage_error_and_keeps_everything_acknowledged(tmp_path: Path) -> None:
    """The broker process may write 256 KiB a file: a partition's log fills up mid-stream."""
    data, stderr = tmp_path / "data", tmp_path / "broker.err"
    stored: list[bytes] = []
    with (
        stderr.open("w") as err,
        kafka_broker_subprocess("--data-dir", str(data), preexec_fn=_limit_file_size, stderr=err) as (
            address,
            _p,
        ),
        KafkaRaw(address) as conn,
    ):
        created = conn.request(
            "CreateTopics", 7, {"topics": [{"name": "full", "num_partitions": 1, "replication_factor": 1}]}
        )
        assert created["topics"][0]["error_code"] == 0
        refused = None
        for i in range(400):
            value = b"%05d" % i * 200  # 1000 bytes
            answer = produce(conn, "full", 0, batch([value]))
            if answer["error_code"]:
                refused = answer
                break
            assert answer["base_offset"] == i
            stored.append(value)
        assert refused is not None, "the file size limit was never reached"
        assert refused["error_code"] == E["KAFKA_STORAGE_ERROR"]
        assert bystander(address)["error_code"] == 0
        assert fetch(conn, "full", [(0, 0)])[0]["high_watermark"] == len(stored)
    assert " ERROR " in stderr.read_text() and "full-0" in stderr.read_text()
    with kafka_broker_subprocess("--data-dir", str(data)) as (address, _p), KafkaRaw(address) as conn:
        got = []
        while len(got) < len(stored):
            part = fetch(conn, "full", [(0, len(got))])[0]
            got.extend(r.value for b in records.decode_batches(part["records"]) for r in b.records)
        assert got == stored
        assert produce(conn, "full", 0, batch([b"after"]))["base_offset"] == len(stored)
