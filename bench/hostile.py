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

from pulsarwire.codec import encode_batch, new_command  # noqa: E402
from pulsarwire.proto import pb  # noqa: E402
from tests.helpers.hostile import (  # noqa: E402
    broker_url,
    bystander_latency,
    connect,
    expect_either,
    producer,
    send_frame,
)
from tests.helpers.raw import RawConnection  # noqa: E402

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


CASES = [
    Case("SEND naming another producer, sequence id 2^40", forged_dedup, ("--dedup",)),
    Case("batch claiming 10^9 messages in 21 bytes", lying_batch_count),
    Case("SEND without the 0x0e01 checksum section", no_checksum),
    Case("topic pattern `(a+)+$` against near-matching names", catastrophic_pattern),
    Case("connections trickling bytes, never a CONNECT", slow_loris),
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
        latencies = []
        while thread.is_alive() or not latencies:
            try:
                latencies.append(bystander_latency(url, timeout=120))
            except AssertionError:
                latencies.append(float("inf"))
        thread.join()
        return result[0], latencies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--repeat", type=int, default=200, help="hostile requests per case")
    args = p.parse_args()
    print("| hostile input | broker answer | bystander latency: median / worst (samples) |")
    print("|---|---|---|")
    for case in CASES:
        answer, latencies = run(case, args.repeat)
        median, worst = statistics.median(latencies), max(latencies)
        print(f"| {case.name} | {answer} | {median * 1000:.1f} / {worst * 1000:.1f} ms ({len(latencies)}) |")


if __name__ == "__main__":
    main()
