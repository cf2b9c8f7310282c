"""Hostile input against our broker: what it answers, and how long a bystander waits meanwhile.

Each case starts ``python -m pulsarwire.broker`` as its own process, sends one kind of hostile
input from a raw socket (repeated ``--repeat`` times, back to back, from a thread), and while
that runs opens bystander connections (CONNECT + PARTITIONED_METADATA) one after another and
times them. It prints a markdown table: hostile input → the broker's answer → the bystander's
worst and median latency. The same inputs are pinned, with their exact answers, by the
tests/pulsarwire/broker/test_hostile_*.py suites; this script only adds the figures
(docs/reliability.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulsarwire.codec import encode_batch, new_command
from pulsarwire.proto import pb
from tests.helpers.hostile import (
    broker_url,
    bystander_latency,
    connect,
    expect_either,
    producer,
    send_frame,
)
from tests.helpers.raw import RawConnection

T = pb.BaseCommand
Attack = Callable[[str, int], str]


@dataclass(frozen=True)
class Case:
    name: str
    attack: Attack
    broker_args: tuple[str, ...] = ()


def _md(name: str, seq: int, **fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1, **fields)


def _describe(frame: object) -> str:
    cmd = frame.command  # type: ignore[attr-defined]
    if cmd.type == T.SEND_ERROR:
        return f"SEND_ERROR {pb.ServerError.Name(cmd.send_error.error)}"
    if cmd.type == T.ERROR:
        return f"ERROR {pb.ServerError.Name(cmd.error.error)}"
    return str(T.Type.Name(cmd.type))


def forged_dedup(url: str, repeat: int) -> str:
    conn = connect(url)
    producer(conn, "persistent://public/default/forge", 1, name="attacker")
    answer = ""
    for seq in range(repeat):
        conn.sock.sendall(send_frame(1, seq, _md("victim", 2**40), b"forged"))
        answer = _describe(expect_either(conn, T.SEND_RECEIPT, T.SEND_ERROR))
    conn.close()
    return answer


def lying_batch_count(url: str, repeat: int) -> str:
    conn = connect(url)
    name = producer(conn, "persistent://public/default/lies", 1).command.producer_success.producer_name
    batch = encode_batch((pb.SingleMessageMetadata(payload_size=1), b"x") for _ in range(3))
    answer = ""
    for seq in range(repeat):
        frame = send_frame(1, seq, _md(name, seq, num_messages_in_batch=10**9), batch, num_messages=10**9)
        conn.sock.sendall(frame)
        answer = _describe(expect_either(conn, T.SEND_RECEIPT, T.SEND_ERROR))
    conn.close()
    return answer


def no_checksum(url: str, repeat: int) -> str:
    conn = connect(url)
    name = producer(conn, "persistent://public/default/nocrc", 1).command.producer_success.producer_name
    answer = ""
    for seq in range(repeat):
        conn.sock.sendall(send_frame(1, seq, _md(name, seq), b"payload", checksum=False))
        answer = _describe(expect_either(conn, T.SEND_RECEIPT, T.SEND_ERROR))
    conn.close()
    return f"{answer} (stored as sent)"


def catastrophic_pattern(url: str, repeat: int) -> str:
    conn = connect(url)
    for i in range(20):  # names the pattern nearly matches
        producer(conn, "persistent://public/default/" + "a" * (30 + i) + "!", 100 + i)
    answer = ""
    for rid in range(repeat):
        cmd, req = new_command(T.GET_TOPICS_OF_NAMESPACE)
        req.namespace, req.request_id = "public/default", rid
        req.topics_pattern = "persistent://public/default/(a+)+$"
        conn.send(cmd)
        answer = _describe(expect_either(conn, T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.ERROR, timeout=600))
    conn.close()
    return answer


def slow_loris(url: str, repeat: int) -> str:
    conns = [RawConnection.to(url, connect=False) for _ in range(min(repeat, 50))]
    deadline = time.monotonic() + 30
    for c in conns:
        c.sock.sendall(b"\x00")  # one byte of a frame, then nothing
    while time.monotonic() < deadline and not all(c.wait_closed(0.1) for c in conns):
        for c in conns:
            if not c.closed:
                c.sock.sendall(b"\x00")
    closed = sum(c.closed for c in conns)
    for c in conns:
        c.close()
    return f"{closed}/{len(conns)} closed after the CONNECT deadline"


def huge_ack_sets(url: str, repeat: int) -> str:
    conn = connect(url)
    topic = "persistent://public/default/acks"
    name = producer(conn, topic, 1).command.producer_success.producer_name
    conn.sock.sendall(send_frame(1, 0, _md(name, 0), b"one"))
    receipt = expect_either(conn, T.SEND_RECEIPT, T.SEND_ERROR).command.send_receipt.message_id
    cmd, sub = new_command(T.SUBSCRIBE)
    sub.topic, sub.subscription, sub.consumer_id, sub.request_id = topic, "s", 5, 5
    sub.subType = pb.CommandSubscribe.Exclusive
    sub.initialPosition = pb.CommandSubscribe.Earliest
    conn.send(cmd)
    conn.expect(T.SUCCESS)
    answer = ""
    for rid in range(min(repeat, 50)):
        ack, a = new_command(T.ACK)
        a.consumer_id, a.ack_type, a.request_id = 5, pb.CommandAck.Individual, 10 + rid
        mid = a.message_id.add()
        mid.ledgerId, mid.entryId = receipt.ledgerId, receipt.entryId
        mid.ack_set.extend([1] * 600_000)  # ~1.2 MB: under the frame limit
        conn.send(ack)
        answer = _describe(expect_either(conn, T.ACK_RESPONSE, T.ERROR))
    conn.close()
    return f"{answer} (ack_set cut to the entry's 1 message)"


def sticky_ranges(url: str, repeat: int) -> str:
    conn = connect(url)
    answer = ""
    for cid in range(min(repeat, 20)):
        cmd, sub = new_command(T.SUBSCRIBE)
        sub.topic, sub.subscription = "persistent://public/default/sticky", "ks"
        sub.consumer_id, sub.request_id = cid, cid
        sub.subType = pb.CommandSubscribe.Key_Shared
        sub.keySharedMeta.keySharedMode = pb.STICKY
        for i in range(5000):
            r = sub.keySharedMeta.hashRanges.add()
            r.start, r.end = i, i + 1
        conn.send(cmd)
        answer = _describe(expect_either(conn, T.SUCCESS, T.ERROR))
    conn.close()
    return answer


def connection_flood(url: str, repeat: int) -> str:
    conns = []
    refused = 0
    for _ in range(repeat):
        c = RawConnection.to(url, connect=False)
        cmd, connect_ = new_command(T.CONNECT)
        connect_.client_version, connect_.protocol_version = "flood", 21
        c.send(cmd)
        frame = expect_either(c, T.CONNECTED, T.ERROR)
        refused += frame.type == T.ERROR
        conns.append(c)
    for c in conns:
        c.close()
    return f"{refused} of {repeat} refused: ERROR NotAllowedError, closed"


CASES = [
    Case("SEND naming another producer, sequence id 2^40", forged_dedup, ("--dedup",)),
    Case("batch claiming 10^9 messages in 21 bytes", lying_batch_count),
    Case("SEND without the 0x0e01 checksum section", no_checksum),
    Case("topic pattern `(a+)+$` against near-matching names", catastrophic_pattern),
    Case("connections trickling bytes, never a CONNECT", slow_loris, ("--connect-timeout", "2")),
    Case("ACK with a 600,000-word ack_set, 50 times", huge_ack_sets),
    Case("SUBSCRIBE Key_Shared STICKY with 5,000 ranges, 20 times", sticky_ranges),
    Case("connections past --max-connections 100", connection_flood, ("--max-connections", "100")),
]


def run(case: Case, repeat: int) -> tuple[str, list[float]]:
    with broker_url(*case.broker_args) as url:
        result: list[str] = []

        def attack() -> None:
            try:
                result.append(case.attack(url, repeat))
            except Exception as exc:  # a broker that drops the attacker is an answer too
                result.append(f"{type(exc).__name__}: {exc}")

        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        latencies: list[float] = []
        refused = 0
        while thread.is_alive() or not latencies:
            try:
                latencies.append(bystander_latency(url, timeout=120))
            except (AssertionError, OSError):
                refused += 1  # only by design: the connection cap was reached
        thread.join()
        return result[0] + (
            f"; {refused} bystanders refused while the cap was full" if refused else ""
        ), latencies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--repeat", type=int, default=200, help="hostile requests per case")
    args = p.parse_args()
    print("| hostile input | broker answer | bystander latency meanwhile: median / worst (samples) |")
    print("|---|---|---|")
    for case in CASES:
        answer, latencies = run(case, args.repeat)
        median, worst = statistics.median(latencies), max(latencies)
        print(f"| {case.name} | {answer} | {median * 1000:.1f} / {worst * 1000:.1f} ms ({len(latencies)}) |")


if __name__ == "__main__":
    main()
