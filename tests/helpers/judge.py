"""Helpers for the broker conformance suite: the official client is the judge.

Every test asserts *exact* message sets, so the helpers here receive a known
number of messages (failing loudly on a timeout), prove that nothing more
arrives, and compare payload multisets (nothing missing, nothing duplicated).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pulsar

QUIET = pulsar.LoggerLevel.Error
#: how long "nothing more arrives" waits; the broker is in-process, deliveries take microseconds
SILENCE_MS = 300


def new_topic(prefix: str = "t") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:12]}"


def make_client(service_url: str) -> pulsar.Client:
    return pulsar.Client(
        service_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(QUIET),
    )


def payloads(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def send_all(producer: pulsar.Producer, values: Iterable[bytes], **kwargs: object) -> list[pulsar.MessageId]:
    """Send asynchronously (so batching applies), flush, return the receipts in send order."""
    return send_each(producer, [(v, dict(kwargs)) for v in values])


def send_each(
    producer: pulsar.Producer, messages: list[tuple[bytes, dict[str, Any]]]
) -> list[pulsar.MessageId]:
    """Send ``(payload, send_async kwargs)`` pairs asynchronously (batching applies), flush, return ids."""
    ids: list[pulsar.MessageId | None] = [None] * len(messages)
    errors: list[object] = []

    def callback_for(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(res: pulsar.Result, mid: pulsar.MessageId) -> None:
            if res != pulsar.Result.Ok:
                errors.append(res)
            ids[i] = mid

        return done

    for i, (payload, kwargs) in enumerate(messages):
        producer.send_async(payload, callback_for(i), **kwargs)
    producer.flush()
    deadline = time.monotonic() + 10
    while any(x is None for x in ids) and not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not errors, f"send failed: {errors}"
    assert all(x is not None for x in ids), "send receipts missing"
    return [x for x in ids if x is not None]


def receive_n(
    consumer: pulsar.Consumer, n: int, *, ack: bool = False, timeout_ms: int = 5000
) -> list[pulsar.Message]:
    """Receive exactly ``n`` messages (each within ``timeout_ms``), acknowledging them if asked."""
    out = []
    for i in range(n):
        try:
            msg = consumer.receive(timeout_ms)
        except pulsar.Timeout:
            raise AssertionError(f"received {i} of {n} messages, then nothing for {timeout_ms} ms") from None
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)
    return out


def read_n(reader: pulsar.Reader, n: int, *, timeout_ms: int = 5000) -> list[pulsar.Message]:
    out = []
    for i in range(n):
        try:
            out.append(reader.read_next(timeout_ms))
        except pulsar.Timeout:
            raise AssertionError(f"read {i} of {n} messages, then nothing for {timeout_ms} ms") from None
    return out


def read_all(service_url: str, topic: str, n: int) -> list[bytes]:
    official = make_client(service_url)
    try:
        reader = official.create_reader(topic, pulsar.MessageId.earliest)
        got = [m.data() for m in read_n(reader, n, timeout_ms=10_000)]
        assert not reader.has_message_available(), "more messages on the topic than were sent"
        return got
    finally:
        official.close()


def assert_silent(source: pulsar.Consumer | pulsar.Reader, wait_ms: int = SILENCE_MS) -> None:
    """Nothing more arrives within ``wait_ms``."""
    try:
        msg = source.read_next(wait_ms) if isinstance(source, pulsar.Reader) else source.receive(wait_ms)
    except pulsar.Timeout:
        return
    raise AssertionError(f"unexpected extra message {msg.data()!r} at {msg.message_id()}")


#: how long ``drain`` may keep receiving: a broker or client that redelivers in a loop fails the test
DRAIN_LIMIT_S = 60.0


def drain(consumer: pulsar.Consumer, *, ack: bool = True, wait_ms: int = SILENCE_MS) -> list[pulsar.Message]:
    """Receive until nothing arrives for ``wait_ms`` (for consumers whose share is not known up front)."""
    out = []
    deadline = time.monotonic() + DRAIN_LIMIT_S
    while True:
        if time.monotonic() > deadline:
            distinct = len({m.data() for m in out})
            raise AssertionError(
                f"still receiving after {DRAIN_LIMIT_S:.0f} s: {len(out)} messages, {distinct} distinct"
            )
        try:
            msg = consumer.receive(wait_ms)
        except pulsar.Timeout:
            return out
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)


def assert_exactly(messages: Iterable[pulsar.Message] | Iterable[bytes], expected: Iterable[bytes]) -> None:
    """The payload multiset equals ``expected``: nothing missing, nothing duplicated, nothing extra."""
    got = Counter(m if isinstance(m, bytes) else m.data() for m in messages)
    want = Counter(expected)
    missing = want - got
    extra = got - want
    dups = {k: v for k, v in got.items() if v > 1}
    assert not missing and not extra and not dups, (
        f"missing={sorted(missing)[:10]} ({len(missing)}), extra={sorted(extra)[:10]} ({len(extra)}), "
        f"duplicated={sorted(dups)[:10]} ({len(dups)})"
    )


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)


def position(mid: pulsar.MessageId) -> tuple[int, int, int]:
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())
