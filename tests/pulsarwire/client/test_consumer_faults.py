"""pulsarwire consumers through broker faults: nothing lost, nothing acknowledged received twice.

The official producer publishes while a pulsarwire consumer receives and
acknowledges continuously; three times during the stream the broker's fault
API cuts the consumer off (connections dropped, CLOSE_CONSUMER, topic unload,
a restart from its data dir). At-least-once allows a message to come again
only while it is not acknowledged, so the test acknowledges with a lag (each
message once five later ones were received) and checks every receipt against
what was acknowledged before it.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client, ConsumerType, InitialPosition
from pulsarwire.client.message import Message
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import OperationTimeoutError
from tests.helpers.judge import payloads, read_n
from tests.helpers.pw_client import (
    backlog,
    on_client_loop,
    pw_assert_silent,
    pw_receive_n,
)

N = 600
ACK_LAG = 5

FAULTS: dict[str, Callable[[Broker, str], object]] = {
    "drop_connections": lambda b, topic: b.drop_connections(),
    "close_consumers": lambda b, topic: b.close_consumers(topic),
    "unload_topic": lambda b, topic: b.unload_topic(topic),
    "restart": lambda b, topic: b.restart(),
}


def publish_slowly(producer: pulsar.Producer, values: list[bytes], errors: list[object]) -> None:
    """Send in small bursts so the stream is still flowing while the faults hit."""

    def done(res: pulsar.Result, _mid: pulsar.MessageId) -> None:
        if res != pulsar.Result.Ok:
            errors.append(res)

    for i in range(0, len(values), 20):
        for v in values[i : i + 20]:
            producer.send_async(v, done)
        producer.flush()


CASES = [(fault, True) for fault in sorted(FAULTS)] + [("drop_connections", False)]


@pytest.mark.parametrize(
    ("fault", "batching"), CASES, ids=[f"{f}-{'batched' if b else 'single'}" for f, b in CASES]
)
def test_reconnects_mid_stream_lose_nothing_and_redeliver_nothing_acked(
    start_broker: Callable[..., Broker],
    make_client: Callable[[Broker], pulsar.Client],
    make_pw: Callable[[Broker], Client],
    topic: str,
    tmp_path: Path,
    fault: str,
    batching: bool,
) -> None:
    b = start_broker(data_dir=tmp_path, deduplication=True)
    official, pw = make_client(b), make_pw(b)
    consumer = pw.subscribe(
        topic, "sub", consumer_type=ConsumerType.Exclusive, initial_position=InitialPosition.Earliest
    )
    producer = official.create_producer(
        topic,
        producer_name="source",
        batching_enabled=batching,
        batching_max_messages=8,
        send_timeout_millis=20_000,
    )
    values = payloads(N)
    errors: list[object] = []
    publisher = threading.Thread(target=publish_slowly, args=(producer, values, errors), daemon=True)
    publisher.start()

    received: list[bytes] = []
    acked: set[bytes] = set()
    acked_then_received: list[bytes] = []
    window: deque[Message] = deque()
    fault_at = {N // 4, N // 2, 3 * N // 4}
    while not set(values) <= set(received):
        try:
            msg = consumer.receive(15_000)
        except OperationTimeoutError:
            missing = sorted(set(values) - set(received))
            raise AssertionError(f"stalled: {len(missing)} never received, e.g. {missing[:5]}") from None
        data = msg.data()
        if data in acked:
            acked_then_received.append(data)
        received.append(data)
        window.append(msg)
        if len(window) > ACK_LAG:
            m = window.popleft()
            consumer.acknowledge(m)
            acked.add(m.data())
        if len(received) in fault_at:
            FAULTS[fault](b, topic)
    publisher.join(30)
    assert not errors, f"the producer failed: {errors}"
    for m in window:
        consumer.acknowledge(m)
        acked.add(m.data())
    pw_assert_silent(consumer)  # no late duplicate either
    consumer.close()

    assert not acked_then_received, f"acknowledged, then received again: {acked_then_received[:10]}"
    assert set(received) == set(values) == acked
    duplicates = {v: c for v, c in Counter(received).items() if c > 1}
    assert set(duplicates) <= set(values)  # only unacknowledged-at-the-time ones (checked above)
    # The topic holds every message once (so the consumer, not the producer, is what was tested).
    reader = official.create_reader(topic, pulsar.MessageId.earliest)
    assert sorted(m.data() for m in read_n(reader, N)) == values
    assert not reader.has_message_available()
    # Everything acknowledged reached the broker: nothing left, nothing comes back.
    assert backlog(b, topic, "sub") == 0
    again = pw.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    pw_assert_silent(again)


@pytest.mark.parametrize("fault", ["close_consumers", "drop_connections"])
def test_an_ack_in_flight_when_the_broker_cuts_the_consumer_off_is_sent_again(
    start_broker: Callable[..., Broker],
    make_client: Callable[[Broker], pulsar.Client],
    make_pw: Callable[[Broker], Client],
    topic: str,
    fault: str,
) -> None:
    b = start_broker()
    official, pw = make_client(b), make_pw(b)
    consumer = pw.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = official.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    values = payloads(40)
    for v in values:
        producer.send_async(v, None)
    producer.flush()
    got = [consumer.receive(5000) for _ in range(40)]
    acked = got[:25]  # two whole batches and half of the third

    def ack_after_the_cut() -> None:
        # On the client's loop: the broker has cut the consumer off, the client has not noticed yet,
        # so this ACK goes to a consumer (or a connection) the broker no longer has.
        FAULTS[fault](b, topic)
        for m in acked:
            consumer._core.acknowledge(m)
        for part in consumer._core.parts:
            part.flush_acks()

    on_client_loop(pw, ack_after_the_cut)
    again = [consumer.receive(5000) for _ in range(15)]
    assert [m.data() for m in again] == values[25:]
    pw_assert_silent(consumer)
    assert backlog(b, topic, "sub") == 15


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_reader_resumes_after_the_last_message_it_handed_out(
    start_broker: Callable[..., Broker],
    make_client: Callable[[Broker], pulsar.Client],
    make_pw: Callable[[Broker], Client],
    topic: str,
    tmp_path: Path,
    fault: str,
) -> None:
    b = start_broker(data_dir=tmp_path)
    official, pw = make_client(b), make_pw(b)
    producer = official.create_producer(topic, batching_enabled=True, batching_max_messages=7)
    values = payloads(300)
    for v in values:
        producer.send_async(v, None)
    producer.flush()
    # A small queue: at each fault some messages are queued, some on the wire, some not sent yet.
    reader = pw.create_reader(topic, MessageId.EARLIEST, receiver_queue_size=20)
    got = []
    for i in range(300):
        got.extend(m.data() for m in pw_receive_n(reader, 1, timeout_ms=10_000))
        if i in (49, 150, 221):  # in the middle of batches
            FAULTS[fault](b, topic)
    assert got == values  # in order, nothing twice (a reader does not ack: none may come again)
    pw_assert_silent(reader)
