"""The consumer side of the interop on pulsar-lite: official producer → pulsarwire consumer.

pulsar-lite (a Rust broker nobody here wrote) delivers MESSAGE frames without the optional
checksum section; the pulsarwire consumer must read everything the official consumer reads from
it. Each test produces with the official client, then an official consumer (subscription
``judge``) and a pulsarwire consumer (``pw``) read the topic from the earliest message, and the
two sequences are compared message by message — payload, keys, properties, event and publish
times, producer name — and the serialized message ids must be byte-identical.

Only what pulsar-lite does reliably is relied on (gaps: tests/helpers/pulsar_lite.py): Shared subscriptions
(Exclusive/Failover live consumption duplicates), every message acknowledged individually (its
batch-index acks are wrong), consumers subscribed after producing (chunks get lost with a live
consumer). pulsar-lite announces no max_message_size, and the official C++ client's chunk size is
process-wide state set by the last broker that announced one: the chunking test pins it to
100 KiB by connecting to a recording fake broker that announces that, and sets it back to the
5 MiB default afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from pulsarwire.client.blocking import Client, ConsumerType, InitialPosition
from tests.helpers.judge import new_topic, receive_n, send_each
from tests.helpers.pw_client import (
    COMPRESSIONS,
    assert_same_records,
    judge_and_pw,
    pw_assert_silent,
    pw_receive_n,
    record,
    varied_messages,
)
from tests.helpers.recorder import Recorder

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture(scope="module")
def official(lite_url: str) -> Iterator[pulsar.Client]:
    c = pulsar.Client(lite_url, operation_timeout_seconds=10, logger=QUIET)
    yield c
    c.close()


@pytest.fixture(scope="module")
def pw(lite_url: str) -> Iterator[Client]:
    c = Client(lite_url, operation_timeout_seconds=10)
    yield c
    c.close()


def _announce(max_message_size: int) -> None:
    """Make the official client's process-wide max message size ``max_message_size``."""
    with Recorder(max_message_size=max_message_size) as rec:
        c = pulsar.Client(rec.url, operation_timeout_seconds=10, logger=QUIET)
        try:
            c.create_producer("persistent://public/default/announce").close()
        finally:
            c.close()


@pytest.fixture
def chunks_of_100k() -> Iterator[None]:
    _announce(100 * 1024)
    yield
    _announce(5 * 1024 * 1024)


def read_both(official: pulsar.Client, pw: Client, topic: str, n: int) -> tuple[list[Any], list[Any]]:
    """(official messages, pulsarwire messages): ``n`` each, all acknowledged, nothing more after."""
    judge, mine = judge_and_pw(official, pw, topic, shared=True)
    expected = receive_n(judge, n, ack=True, timeout_ms=10_000)
    got = pw_receive_n(mine, n, ack=True, timeout_ms=10_000)
    pw_assert_silent(mine)
    mine.close()
    judge.close()
    return expected, got


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c.name)
@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_pulsarwire_reads_what_the_official_consumer_reads(
    official: pulsar.Client, pw: Client, batching: bool, compression: pulsar.CompressionType
) -> None:
    topic = new_topic("lite-consume")
    producer = official.create_producer(
        topic,
        producer_name=f"src-{topic[-12:]}",
        batching_enabled=batching,
        batching_max_messages=9,
        compression_type=compression,
    )
    messages = varied_messages(60)
    ids = send_each(producer, messages)
    producer.close()
    expected, got = read_both(official, pw, topic, len(messages))
    assert_same_records([record(m) for m in got], [record(m) for m in expected])
    assert [m.data() for m in got] == [payload for payload, _ in messages]
    assert [m.message_id().serialize() for m in got] == [m.message_id().serialize() for m in expected]
    assert [m.message_id().serialize() for m in got] == [i.serialize() for i in ids]
    if batching:
        assert any(m.message_id().batch_index > 0 for m in got), "the producer did not batch"


def test_chunked_message_is_reassembled_with_the_official_id(
    official: pulsar.Client, pw: Client, chunks_of_100k: None
) -> None:
    topic = new_topic("lite-chunks")
    producer = official.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = os.urandom(1024 * 1024)
    messages: list[tuple[bytes, dict[str, Any]]] = [
        (b"before", {}),
        (big, {"properties": {"big": "yes"}, "partition_key": "chunky", "event_timestamp": 42}),
        (b"after", {"properties": {"small": "yes"}}),
    ]
    ids = send_each(producer, messages)
    producer.close()
    assert ids[2].entry_id() - ids[0].entry_id() > 10, "the 1 MiB message was not chunked"
    expected, got = read_both(official, pw, topic, 3)
    assert_same_records([record(m) for m in got], [record(m) for m in expected])
    assert got[1].data() == big
    assert [m.message_id().serialize() for m in got] == [m.message_id().serialize() for m in expected]
    # Every chunk was acknowledged: a new consumer on the subscription gets nothing.
    again = pw.subscribe(
        topic, "pw", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest
    )
    pw_assert_silent(again, 1000)
    again.close()
