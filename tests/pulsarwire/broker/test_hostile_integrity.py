"""Broker hardening, data integrity: what a hostile producer sends must not lose or forge anyone's data.

The broker runs as its own process (``python -m pulsarwire.broker``); the hostile frames come from
this process over a real socket; after each, the hostile connection still answers a PING and a
bystander connection is served promptly (tests/helpers/hostile.py).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pulsar

from pulsarwire.broker.storage import Entry, TopicLog
from pulsarwire.broker.subscription import ConsumerRef, Subscription
from pulsarwire.client.blocking import Client
from pulsarwire.codec import encode_batch, new_command
from pulsarwire.codec.frames import MAGIC_CRC32C, U16, encode_payload_section
from pulsarwire.codec.message_id import MessageId
from pulsarwire.proto import pb
from tests.helpers.hostile import (
    assert_bystander_served,
    broker_url,
    connect,
    expect_either,
    ping,
    producer,
    read_all,
    send_frame,
)
from tests.helpers.judge import QUIET, new_topic

T = pb.BaseCommand


def _md(name: str, seq: int, **fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name=name, sequence_id=seq, publish_time=int(time.time() * 1000), **fields
    )


def _official(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(QUIET))


def _send_and_answer(conn, frame: bytes):  # type: ignore[no-untyped-def]
    conn.sock.sendall(frame)
    return expect_either(conn, T.SEND_RECEIPT, T.SEND_ERROR)


def test_a_producer_cannot_forge_another_producers_dedup_state_not_even_across_a_restart(
    tmp_path: Path,
) -> None:
    topic = new_topic("forge")
    victim_values = [f"victim-{i}".encode() for i in range(10)]
    with broker_url("--dedup", "--data-dir", str(tmp_path)) as url:
        attacker = connect(url)
        assert producer(attacker, topic, 1, name="attacker").type == T.PRODUCER_SUCCESS
        # The forged entry names the victim with a huge sequence id: refused, nothing stored.
        forged = _send_and_answer(attacker, send_frame(1, 2**40, _md("victim", 2**40), b"forged"))
        assert forged.type == T.SEND_ERROR
        assert forged.command.send_error.error == pb.NotAllowedError
        assert "victim" in forged.command.send_error.message
        # Its own huge sequence ids only move its own high-water mark.
        own = _send_and_answer(attacker, send_frame(1, 2**40, _md("attacker", 2**40), b"own"))
        assert own.type == T.SEND_RECEIPT and own.command.send_receipt.message_id.entryId == 0
        ping(attacker)
        client = _official(url)
        try:
            p = client.create_producer(topic, producer_name="victim", batching_enabled=False)
            for v in victim_values[:5]:
                p.send(v)
            p.close()
        finally:
            client.close()
        assert_bystander_served(url)
        attacker.close()
        assert sorted(read_all(url, topic, 6)) == sorted([b"own", *victim_values[:5]])
    # Restart on the same data: the recovered dedup state holds only what each producer stored.
    with broker_url("--dedup", "--data-dir", str(tmp_path)) as url:
        client = _official(url)
        try:
            p = client.create_producer(topic, producer_name="victim", batching_enabled=False)
            for v in victim_values[5:]:
                p.send(v)
        finally:
            client.close()
        assert sorted(read_all(url, topic, 11)) == sorted([b"own", *victim_values])
        assert_bystander_served(url)


def _batch(n: int) -> bytes:
    return encode_batch((pb.SingleMessageMetadata(payload_size=1), b"x") for _ in range(n))


def test_message_counts_that_lie_are_refused_at_publish_and_the_connection_goes_on() -> None:
    topic = new_topic("counts")
    with broker_url() as url:
        conn = connect(url)
        name = producer(conn, topic, 1).command.producer_success.producer_name
        lies = {
            "batch count 0": (_md(name, 0, num_messages_in_batch=0), _batch(3), 0),
            "batch count -5": (_md(name, 1, num_messages_in_batch=-5), _batch(3), -5),
            "batch count 10^9 in 21 bytes": (_md(name, 2, num_messages_in_batch=10**9), _batch(3), 10**9),
            "batch of 3 sent as 5": (_md(name, 3, num_messages_in_batch=3), _batch(3), 5),
            "single message sent as 7": (_md(name, 4), b"single", 7),
            "SEND num_messages 0": (_md(name, 5), b"single", 0),
            "compressed batch of 1 GB": (
                _md(name, 6, num_messages_in_batch=1000, compression=pb.LZ4, uncompressed_size=2**30),
                b"\x00" * 64,
                1000,
            ),
        }
        for seq, (what, (md, payload, count)) in enumerate(lies.items()):
            answer = _send_and_answer(conn, send_frame(1, seq, md, payload, num_messages=count))
            assert answer.type == T.SEND_ERROR, what
            err = answer.command.send_error
            assert (err.sequence_id, err.error) == (seq, pb.NotAllowedError), what
        good = _send_and_answer(
            conn, send_frame(1, 99, _md(name, 99, num_messages_in_batch=3), _batch(3), num_messages=3)
        )
        assert good.type == T.SEND_RECEIPT
        ping(conn)
        assert_bystander_served(url)
        assert read_all(url, topic, 3) == [b"x"] * 3  # only the honest batch was stored
        conn.close()


def test_official_and_pulsarwire_producers_pass_the_publish_checks() -> None:
    """Batched, compressed, chunked and single messages of real clients are all accepted."""
    topic = new_topic("honest")
    with broker_url("--dedup", "--max-message-size", str(64 * 1024)) as url:
        client = _official(url)
        try:
            batched = client.create_producer(
                topic,
                batching_enabled=True,
                batching_max_messages=50,
                compression_type=pulsar.CompressionType.LZ4,
            )
            for i in range(100):
                batched.send_async(f"b-{i}".encode(), None)
            batched.flush()
            chunked = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
            chunked.send(b"c" * 200_000)  # four chunks of 64 KiB at most
            single = client.create_producer(
                topic, batching_enabled=False, compression_type=pulsar.CompressionType.ZSTD
            )
            single.send(b"single")
        finally:
            client.close()
        ours = Client(url)
        try:
            p = ours.create_producer(topic, batching_enabled=True, batching_max_messages=10)
            for i in range(30):
                p.send_async(f"w-{i}".encode(), None)
            p.flush()
        finally:
            ours.close()
        got = read_all(url, topic, 132)
        assert sorted(got) == sorted(
            [
                *(f"b-{i}".encode() for i in range(100)),
                b"c" * 200_000,
                b"single",
                *(f"w-{i}".encode() for i in range(30)),
            ]
        )


def test_a_send_without_the_optional_checksum_is_stored_as_sent_and_a_wrong_checksum_is_refused() -> None:
    topic = new_topic("nocrc")
    with broker_url() as url:
        conn = connect(url)
        name = producer(conn, topic, 1).command.producer_success.producer_name
        md = _md(name, 0)
        receipt = _send_and_answer(conn, send_frame(1, 0, md, b"no checksum", checksum=False))
        assert receipt.type == T.SEND_RECEIPT
        bad = bytearray(send_frame(1, 1, _md(name, 1), b"bad checksum"))
        bad[-1] ^= 0xFF
        refused = _send_and_answer(conn, bytes(bad))
        assert refused.type == T.SEND_ERROR and refused.command.send_error.error == pb.ChecksumError
        ping(conn)
        # A raw consumer gets the entry exactly as it was sent: no checksum section added.
        cmd, sub = new_command(T.SUBSCRIBE)
        sub.topic, sub.subscription, sub.consumer_id, sub.request_id = topic, "raw", 7, 2
        sub.subType = pb.CommandSubscribe.Exclusive
        sub.initialPosition = pb.CommandSubscribe.Earliest
        conn.send(cmd)
        conn.expect(T.SUCCESS)
        flow, f = new_command(T.FLOW)
        f.consumer_id, f.messagePermits = 7, 10
        conn.send(flow)
        message = conn.expect(T.MESSAGE)
        assert message.payload is not None
        assert U16.unpack_from(message.payload.entry)[0] != MAGIC_CRC32C
        assert message.payload.entry == encode_payload_section(md, b"no checksum")[6:]
        assert_bystander_served(url)
        conn.close()
        # The official client and ours read it like any other message.
        assert read_all(url, topic, 1) == [b"no checksum"]
        ours = Client(url)
        try:
            reader = ours.create_reader(topic, MessageId.EARLIEST)
            assert reader.read_next(5000).data() == b"no checksum"
        finally:
            ours.close()


class _Recorder:
    writable = True

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []

    def send_message(
        self, consumer: ConsumerRef, entry: Entry, redelivery_count: int, ack_set: object
    ) -> None:
        assert consumer.permits >= 0
        self.sent.append(entry.position)

    def send_active_change(self, consumer: ConsumerRef, active: bool) -> None:
        pass


def test_stored_entries_with_odd_counts_never_drive_permits_negative_or_around_flow_control() -> None:
    """Entries stored before the publish checks (an old data dir) may carry counts below 1: each
    costs one permit, permits never go below 0, and a consumer gets nothing without permits."""
    log = TopicLog("persistent://public/default/odd")
    for count in (-5, 0, 3, 1000, -1):
        md = _md("old", 0, num_messages_in_batch=count)
        log.append(encode_payload_section(md, b"x"), md)
    recorder = _Recorder()
    sub = Subscription("s", log, pb.CommandSubscribe.Exclusive, durable=False, start=(-1, -1))
    consumer = ConsumerRef(1, "c", 0, recorder)
    sub.add_consumer(consumer)
    sub.dispatch()
    assert recorder.sent == []  # no permits, nothing sent
    sub.flow(consumer, 2)  # the -5 entry and the 0 entry cost one permit each
    assert len(recorder.sent) == 2 and consumer.permits == 0
    sub.flow(consumer, 1)  # the batch of 3 goes on one permit left, permits stop at 0
    assert len(recorder.sent) == 3 and consumer.permits == 0
    sub.flow(consumer, 1)
    assert len(recorder.sent) == 4 and consumer.permits == 0
    sub.flow(consumer, 5)
    assert len(recorder.sent) == 5 and consumer.permits == 4


def test_stored_odd_counts_cost_one_permit_each_in_a_broker_process(tmp_path: Path) -> None:
    """The same from outside: a data dir written by an older version (entries with batch counts
    -5, 0, 1000) served by a broker process to a raw consumer that grants permits one FLOW at a time."""
    topic = "persistent://public/default/old-counts"
    log = TopicLog(topic, data_dir=tmp_path)
    for count in (-5, 0, 1000, -1):
        md = _md("old", 0, num_messages_in_batch=count)
        log.append(encode_payload_section(md, b"x"), md)
    log.close()
    with broker_url("--data-dir", str(tmp_path)) as url:
        conn = connect(url)
        cmd, sub = new_command(T.SUBSCRIBE)
        sub.topic, sub.subscription, sub.consumer_id, sub.request_id = topic, "s", 1, 1
        sub.subType = pb.CommandSubscribe.Exclusive
        sub.initialPosition = pb.CommandSubscribe.Earliest
        conn.send(cmd)
        conn.expect(T.SUCCESS)

        def flow(permits: int) -> None:
            f, req = new_command(T.FLOW)
            req.consumer_id, req.messagePermits = 1, permits
            conn.send(f)

        def received(within: float = 0.5) -> int:
            deadline = time.monotonic() + within
            while time.monotonic() < deadline:
                conn._read(0.05)
            got = [f for f in conn.frames if f.type == T.MESSAGE]
            conn.frames = [f for f in conn.frames if f.type != T.MESSAGE]
            return len(got)

        assert received() == 0
        flow(2)
        assert received() == 2  # -5 and 0: one permit each, no credit gained
        flow(1)
        assert received() == 1  # the batch of 1000 on the one permit left
        stats, req = new_command(T.CONSUMER_STATS)
        req.consumer_id, req.request_id = 1, 9
        conn.send(stats)
        assert conn.expect(T.CONSUMER_STATS_RESPONSE).command.consumerStatsResponse.availablePermits == 0
        assert received() == 0
        flow(1)
        assert received() == 1
        ping(conn)
        assert_bystander_served(url)
        conn.close()


def test_an_unusable_data_dir_refuses_to_start_with_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    data_dir = blocker / "data"
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pulsarwire.broker", "--port", "0", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - start < 30
    assert proc.returncode != 0
    assert "ready" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(data_dir) in lines[0] and "Traceback" not in proc.stderr


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))


def test_a_write_failure_answers_persistence_error_and_loses_nothing_that_got_a_receipt(
    tmp_path: Path,
) -> None:
    """The broker process may write 256 KiB a file: the entry log fills up mid-stream."""
    topic = new_topic("full")
    stderr = tmp_path / "broker.err"
    with (
        stderr.open("w") as err_file,
        broker_url("--data-dir", str(tmp_path / "data"), preexec_fn=_limit_file_size, stderr=err_file) as url,
    ):
        conn = connect(url)
        name = producer(conn, topic, 1).command.producer_success.producer_name
        stored: list[bytes] = []
        refused = None
        for seq in range(400):
            value = f"{seq:05d}".encode() * 200  # 1000 bytes
            answer = _send_and_answer(conn, send_frame(1, seq, _md(name, seq), value))
            if answer.type == T.SEND_ERROR:
                refused = answer.command.send_error
                break
            stored.append(value)
        assert refused is not None, "the file size limit was never reached"
        assert refused.error == pb.PersistenceError
        # Fenced: a later send is refused too (no gap hidden behind it), the connection stays.
        later = _send_and_answer(conn, send_frame(1, 1000, _md(name, 1000), b"later"))
        assert later.type == T.SEND_ERROR and later.command.send_error.error == pb.PersistenceError
        ping(conn)
        assert_bystander_served(url)
        assert read_all(url, topic, len(stored)) == stored
        conn.close()
    log_lines = stderr.read_text()
    assert " ERROR " in log_lines and topic in log_lines
