"""The fault proxy: frames forwarded untouched unless a rule says otherwise, and the client
behaviours it makes testable (half-open connections, cuts mid-batch, corrupt deliveries)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from pulsarwire import MessageId
from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client, ConsumerType, InitialPosition
from pulsarwire.errors import CorruptMessageError
from pulsarwire.testing.proxy import FaultProxy


@pytest.fixture
def proxied(pulsar_broker: Broker) -> Iterator[tuple[Broker, FaultProxy]]:
    with FaultProxy(pulsar_broker.service_url) as proxy:
        yield pulsar_broker, proxy


def test_frames_pass_through_and_are_counted(proxied: tuple[Broker, FaultProxy]) -> None:
    _, proxy = proxied
    client = Client(proxy.service_url)
    try:
        producer = client.create_producer("p-through", batching_enabled=False)
        consumer = client.subscribe("p-through", "s", initial_position=InitialPosition.Earliest)
        for i in range(5):
            producer.send(f"m{i}".encode())
        got = [consumer.receive(5000).data() for _ in range(5)]
    finally:
        client.close()
    assert got == [f"m{i}".encode() for i in range(5)]
    assert proxy.seen[("to_broker", "SEND")] == 5
    assert proxy.seen[("to_client", "SEND_RECEIPT")] == 5
    assert proxy.seen[("to_client", "MESSAGE")] == 5


def test_rules_are_checked() -> None:
    proxy = FaultProxy("pulsar://127.0.0.1:1")
    with pytest.raises(ValueError):
        proxy.drop("NOT_A_COMMAND")
    with pytest.raises(ValueError):
        proxy.drop("SEND", direction="sideways")


def test_cut_mid_batch_resends_with_the_same_sequence_ids(proxied: tuple[Broker, FaultProxy]) -> None:
    """The connection dies after the 3rd SEND: receipts lost, resends deduplicated, all once."""
    _, proxy = proxied
    proxy.cut_after("SEND", "to_broker", count=3)
    client = Client(proxy.service_url)
    try:
        producer = client.create_producer("p-cut", producer_name="cutter", batching_enabled=False)
        errors: list[BaseException] = []
        for i in range(20):
            producer.send_async(f"m{i}".encode(), lambda e, _m: errors.append(e) if e else None)
        producer.flush()
        assert errors == []
        reader = client.create_reader("p-cut", MessageId.EARLIEST)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(5000).data())
    finally:
        client.close()
    assert got == [f"m{i}".encode() for i in range(20)]
    assert proxy.connections >= 2


def test_resubscribe_through_a_half_open_connection(proxied: tuple[Broker, FaultProxy]) -> None:
    """The broker still holds the old Exclusive consumer: ConsumerBusy is retried, then it works."""
    broker, proxy = proxied
    direct = Client(broker.service_url)
    client = Client(proxy.service_url)
    try:
        consumer = client.subscribe(
            "p-half", "only", consumer_type=ConsumerType.Exclusive, initial_position=InitialPosition.Earliest
        )
        producer = direct.create_producer("p-half", batching_enabled=False)
        producer.send(b"before")
        msg = consumer.receive(5000)
        consumer.acknowledge(msg)
        time.sleep(0.3)  # the grouped ack is on the wire
        proxy.half_open(3.0)  # the broker keeps the old consumer for 3 s more
        producer.send(b"after")
        assert consumer.receive(30_000).data() == b"after"
    finally:
        client.close()
        direct.close()
    assert proxy.connections >= 2


def test_corrupt_delivery_is_a_typed_error_and_never_acked(proxied: tuple[Broker, FaultProxy]) -> None:
    broker, proxy = proxied
    direct = Client(broker.service_url)
    client = Client(proxy.service_url)
    try:
        producer = direct.create_producer("p-corrupt", batching_enabled=False)
        first = producer.send(b"one")
        producer.send(b"two")
        proxy.corrupt("MESSAGE", "to_client", count=1)
        consumer = client.subscribe("p-corrupt", "s", initial_position=InitialPosition.Earliest)
        with pytest.raises(CorruptMessageError) as info:
            consumer.receive(5000)
        assert info.value.message_id is not None
        assert (info.value.message_id.ledger_id, info.value.message_id.entry_id) == (
            first.ledger_id,
            first.entry_id,
        )
        second = consumer.receive(5000)
        assert second.data() == b"two"
        consumer.acknowledge(second)
        consumer.close()
        stats = broker.stats("p-corrupt")
        assert stats["subscriptions"]["s"]["backlog"] == 1  # the corrupt one is still there
    finally:
        client.close()
        direct.close()
