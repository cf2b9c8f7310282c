"""Helpers for the pulsarwire consumer/reader suites: pulsarwire clients, exact receives, positions.

The official client is the source (producer) and the judge (a consumer on
another subscription); the helpers here are the pulsarwire twins of
``tests.helpers.judge``: receive a known number of messages
(failing loudly on a timeout), prove that nothing more arrives, and reduce
messages of either client to comparable records.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client, Consumer, ConsumerType, InitialPosition, Reader
from pulsarwire.client.message import Message
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import OperationTimeoutError
from tests.helpers.judge import SILENCE_MS

Position = tuple[int, int, int]


@pytest.fixture
def make_pw() -> Iterator[Callable[[Broker], Client]]:
    """pulsarwire clients, closed at teardown (before brokers from ``start_broker`` stop)."""
    clients: list[Client] = []

    def make(b: Broker) -> Client:
        c = Client(b.service_url, operation_timeout_seconds=10)
        clients.append(c)
        return c

    yield make
    for c in clients:
        with contextlib.suppress(Exception):
            c.close()


@pytest.fixture
def pw(shared_broker: Broker, make_pw: Callable[[Broker], Client]) -> Client:
    return make_pw(shared_broker)


def pw_receive_n(
    source: Consumer | Reader, n: int, *, ack: bool = False, timeout_ms: int = 5000
) -> list[Message]:
    """Receive exactly ``n`` messages (each within ``timeout_ms``), acknowledging them if asked."""
    out = []
    for i in range(n):
        try:
            msg = source.read_next(timeout_ms) if isinstance(source, Reader) else source.receive(timeout_ms)
        except OperationTimeoutError:
            raise AssertionError(f"received {i} of {n} messages, then nothing for {timeout_ms} ms") from None
        if ack:
            assert isinstance(source, Consumer)
            source.acknowledge(msg)
        out.append(msg)
    return out


def pw_assert_silent(source: Consumer | Reader, wait_ms: int = SILENCE_MS) -> None:
    """Nothing more arrives within ``wait_ms``."""
    try:
        msg = source.read_next(wait_ms) if isinstance(source, Reader) else source.receive(wait_ms)
    except OperationTimeoutError:
        return
    raise AssertionError(f"unexpected extra message {msg.data()!r} at {msg.message_id()}")


def pw_drain(consumer: Consumer, *, ack: bool = True, wait_ms: int = SILENCE_MS) -> list[Message]:
    """Receive until nothing arrives for ``wait_ms`` (for consumers whose share is not known up front)."""
    out = []
    while True:
        try:
            msg = consumer.receive(wait_ms)
        except OperationTimeoutError:
            return out
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)


def position(mid: MessageId | pulsar.MessageId) -> Position:
    """(ledger_id, entry_id, batch_index) of an id of either client."""
    if isinstance(mid, MessageId):
        return (mid.ledger_id, mid.entry_id, mid.batch_index)
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


def to_pw_id(mid: pulsar.MessageId) -> MessageId:
    """The official client's id as a pulsarwire MessageId (through the shared serialized form)."""
    return MessageId.deserialize(mid.serialize())


def record(msg: Message | pulsar.Message) -> dict[str, Any]:
    """Everything both clients expose about a received message, in comparable types."""
    ordering = msg.ordering_key()
    return {
        "data": msg.data(),
        "position": position(msg.message_id()),
        "partition_key": msg.partition_key() or "",
        "ordering_key": ordering.encode() if isinstance(ordering, str) else (ordering or b""),
        "properties": dict(msg.properties()),
        "event_timestamp": msg.event_timestamp(),
        "publish_timestamp": msg.publish_timestamp(),
        "producer_name": msg.producer_name(),
        "redelivery_count": msg.redelivery_count(),
        "topic": msg.topic_name(),
    }


def read_topic(url: str, topic: str) -> list[Message]:
    """Every message of one (non-partitioned) topic or partition, in order."""
    client = Client(url)
    try:
        reader = client.create_reader(topic, MessageId.EARLIEST)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000))
        reader.close()
        return out
    finally:
        client.close()


def on_client_loop(client: Client, fn: Callable[[], None]) -> None:
    """Run ``fn`` on the client's event loop, nothing else running meanwhile (white-box fault tests)."""

    async def go() -> None:
        fn()

    client._run(go())


def backlog(b: Broker, topic: str, subscription: str) -> int:
    return int(b.stats(topic)["subscriptions"][subscription]["backlog"])


def judge_and_pw(
    official: pulsar.Client, pw: Client, topic: str, shared: bool = False
) -> tuple[pulsar.Consumer, Consumer]:
    """An official consumer (subscription ``judge``) and a pulsarwire one (``pw``) on ``topic``,
    both from the earliest message; Exclusive subscriptions, or Shared with ``shared``."""
    judge = official.subscribe(
        topic,
        "judge",
        consumer_type=pulsar.ConsumerType.Shared if shared else pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    mine = pw.subscribe(
        topic,
        "pw",
        consumer_type=ConsumerType.Shared if shared else ConsumerType.Exclusive,
        initial_position=InitialPosition.Earliest,
    )
    return judge, mine


COMPRESSIONS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


def varied_messages(n: int) -> list[tuple[bytes, dict[str, Any]]]:
    """Payloads of several sizes (compressible and not), with and without keys, properties, event times."""
    out: list[tuple[bytes, dict[str, Any]]] = []
    for i in range(n):
        body = f"m-{i:05d}|".encode() + (b"abc" * (i * 37 % 400)) + os.urandom(i % 5)
        kwargs: dict[str, Any] = {}
        if i % 3:
            kwargs["partition_key"] = f"key-{i % 4}"
        if i % 4 == 1:
            kwargs["ordering_key"] = f"order-{i % 2}"
        if i % 2:
            kwargs["properties"] = {"i": str(i), "kind": "odd", "empty": ""}
        if i % 5:
            kwargs["event_timestamp"] = 1_700_000_000_000 + i
        out.append((body, kwargs))
    return out


def assert_same_records(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        diff = {k: (g[k], e[k]) for k in e if g[k] != e[k] and k != "data"}
        assert not diff and g["data"] == e["data"], f"message {i} differs (pulsarwire, official): {diff}"
