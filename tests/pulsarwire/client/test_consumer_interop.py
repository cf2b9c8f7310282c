"""The official producer is the source: pulsarwire's consumer sees exactly what an official consumer sees.

Every test subscribes an official consumer (subscription ``judge``) and a
pulsarwire consumer (``pw``) to the same topic of our broker and compares the
whole received sequence message by message: payload, keys, properties, event
and publish times, producer name and the message id (ledger, entry, batch index).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client, ConsumerType, InitialPosition
from tests.helpers.judge import receive_n, send_each
from tests.helpers.pw_client import (
    COMPRESSIONS,
    assert_same_records,
    backlog,
    judge_and_pw,
    pw_assert_silent,
    pw_receive_n,
    record,
    varied_messages,
)


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c.name)
@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_same_messages_as_the_official_consumer(
    client: pulsar.Client, pw: Client, topic: str, batching: bool, compression: pulsar.CompressionType
) -> None:
    producer = client.create_producer(
        topic,
        producer_name=f"src-{topic[-12:]}",
        batching_enabled=batching,
        batching_max_messages=9,
        compression_type=compression,
    )
    messages = varied_messages(60)
    ids = send_each(producer, messages)
    judge, mine = judge_and_pw(client, pw, topic)
    expected = [record(m) for m in receive_n(judge, len(messages))]
    got = [record(m) for m in pw_receive_n(mine, len(messages), ack=True)]
    assert_same_records(got, expected)
    assert [r["data"] for r in got] == [payload for payload, _ in messages]
    assert [r["position"] for r in got] == [(i.ledger_id(), i.entry_id(), i.batch_index()) for i in ids]
    if batching:
        assert any(r["position"][2] > 0 for r in got), "the producer did not batch"
    pw_assert_silent(mine)


def test_chunked_message_is_reassembled_and_fully_acknowledged(
    start_broker: Callable[..., Broker],
    make_client: Callable[[Broker], pulsar.Client],
    make_pw: Callable[[Broker], Client],
    topic: str,
) -> None:
    b = start_broker(max_message_size=1024 * 1024)
    client, pw = make_client(b), make_pw(b)
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = os.urandom(6 * 1024 * 1024)
    messages: list[tuple[bytes, dict[str, Any]]] = [
        (b"before", {}),
        (big, {"properties": {"big": "yes"}, "partition_key": "chunky", "event_timestamp": 42}),
        (b"after", {}),
    ]
    send_each(producer, messages)
    assert b.stats(topic)["entries"] >= 2 + 6, "the 6 MB message was not chunked"
    judge, mine = judge_and_pw(client, pw, topic)
    expected = [record(m) for m in receive_n(judge, 3, timeout_ms=10_000)]
    got = [record(m) for m in pw_receive_n(mine, 3, ack=True, timeout_ms=10_000)]
    assert_same_records(got, expected)
    assert got[1]["data"] == big
    pw_assert_silent(mine)
    mine.close()
    # Every chunk was acknowledged, not only the last one.
    assert backlog(b, topic, "pw") == 0
    again = pw.subscribe(topic, "pw", consumer_type=ConsumerType.Exclusive)
    pw_assert_silent(again)


def test_batched_message_without_ordering_key_has_none(client: pulsar.Client, pw: Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=2)
    send_each(producer, [(b"keyed", {"ordering_key": "k"}), (b"plain", {})])
    judge, mine = judge_and_pw(client, pw, topic)
    expected = [record(m) for m in receive_n(judge, 2)]
    got = [record(m) for m in pw_receive_n(mine, 2)]
    assert got[1]["position"][2] == 1, "the producer did not batch"
    assert [r["ordering_key"] for r in expected] == [b"k", b""]
    assert [r["ordering_key"] for r in got] == [b"k", b""]


def test_chunked_message_negative_ack_redelivers_all_its_chunks(
    start_broker: Callable[..., Broker],
    make_client: Callable[[Broker], pulsar.Client],
    make_pw: Callable[[Broker], Client],
    topic: str,
) -> None:
    b = start_broker(max_message_size=64 * 1024)
    client, pw = make_client(b), make_pw(b)
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = os.urandom(300 * 1024)
    send_each(producer, [(big, {}), (b"small", {})])
    consumer = pw.subscribe(
        topic,
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=100,
    )
    first, small = pw_receive_n(consumer, 2)
    assert (first.data(), small.data()) == (big, b"small")
    consumer.negative_acknowledge(first)
    consumer.acknowledge(small)
    again = pw_receive_n(consumer, 1)[0]
    assert again.data() == big
    assert again.message_id() == first.message_id()
    consumer.acknowledge(again)
    pw_assert_silent(consumer)
    consumer.close()
    assert backlog(b, topic, "sub") == 0
