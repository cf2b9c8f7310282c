"""The bulk Arrow path: ranges of a topic-partition as RecordBatches, judged against the official consumer."""

from __future__ import annotations

import itertools

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.codec import MessageId
from pulsarwire.errors import CorruptMessageError
from tests.pulsarwire.broker.support import make_client, new_topic, receive_n


def produce(b: Broker, topic: str, n: int, **producer_options: object) -> list[pulsar.Message]:
    """Produce n messages with the official client; return what an official consumer receives."""
    official = make_client(b.service_url)
    try:
        consumer = official.subscribe(topic, "judge", initial_position=pulsar.InitialPosition.Earliest)
        producer = official.create_producer(topic, block_if_queue_full=True, **producer_options)
        for i in range(n):
            producer.send_async(
                f"v-{i}".encode(),
                None,
                properties={"i": str(i)},
                partition_key=f"k{i % 5}",
                event_timestamp=1_000_000 + i,
            )
        producer.flush()
        return receive_n(consumer, n, ack=True)
    finally:
        official.close()


def rows_of(
    client: Client, topic: str, start: MessageId, end: MessageId, **kw: object
) -> list[dict[str, object]]:
    return [row for rb in client.read_arrow(topic, start, end, **kw) for row in rb.to_pylist()]


@pytest.mark.parametrize(
    "options",
    [
        {"batching_enabled": False},
        {
            "batching_enabled": True,
            "batching_max_messages": 50,
            "compression_type": pulsar.CompressionType.LZ4,
        },
        {
            "batching_enabled": True,
            "batching_max_messages": 7,
            "compression_type": pulsar.CompressionType.ZSTD,
        },
    ],
    ids=["single", "batched-lz4", "batched-zstd"],
)
def test_rows_equal_what_the_official_consumer_reads(
    shared_broker: Broker, options: dict[str, object]
) -> None:
    topic = new_topic("bulk")
    expected = produce(shared_broker, topic, 600, **options)
    client = Client(shared_broker.service_url)
    try:
        probe = client.subscribe(topic, "probe")
        last = probe.get_last_message_id()
        rows = rows_of(client, topic, MessageId.EARLIEST, last, batch_rows=128)
    finally:
        client.close()
    assert len(rows) == len(expected)
    for row, msg in zip(rows, expected, strict=True):
        mid = msg.message_id()
        assert (row["ledger_id"], row["entry_id"], row["batch_index"]) == (
            mid.ledger_id(),
            mid.entry_id(),
            mid.batch_index(),
        )
        assert row["value"] == msg.data()
        assert row["key"] == msg.partition_key().encode()
        assert dict(row["properties"]) == msg.properties()
        assert int(row["event_time"].timestamp() * 1000) == msg.event_timestamp()
        assert int(row["publish_time"].timestamp() * 1000) == msg.publish_timestamp()
        assert row["topic"] == topic and row["partition"] == -1


def test_consecutive_ranges_read_everything_once(shared_broker: Broker) -> None:
    topic = new_topic("bulk")
    expected = produce(shared_broker, topic, 500, batching_max_messages=30)
    ids = [m.message_id() for m in expected]
    cuts = [MessageId.EARLIEST] + [
        MessageId(ids[k].ledger_id(), ids[k].entry_id(), -1, ids[k].batch_index())
        for k in (99, 250, 251, 499)
    ]
    client = Client(shared_broker.service_url)
    try:
        seen: list[bytes] = []
        sizes = []
        for start, end in itertools.pairwise(cuts):
            part = [r["value"] for r in rows_of(client, topic, start, end)]
            sizes.append(len(part))
            seen += part
        assert rows_of(client, topic, cuts[-1], cuts[-1]) == []  # an empty range
    finally:
        client.close()
    assert sizes == [100, 151, 1, 248]
    assert seen == [m.data() for m in expected]


def test_corrupt_entry_fails_the_read(shared_broker: Broker) -> None:
    topic = new_topic("bulk")
    expected = produce(shared_broker, topic, 20, batching_enabled=False)
    client = Client(shared_broker.service_url)
    try:
        last = client.subscribe(topic, "probe").get_last_message_id()
        shared_broker.inject(corrupt_dispatches=1)
        with pytest.raises(CorruptMessageError) as err:
            rows_of(client, topic, MessageId.EARLIEST, last)
        first = expected[0].message_id()
        assert (err.value.message_id.ledger_id, err.value.message_id.entry_id) == (
            first.ledger_id(),
            first.entry_id(),
        )
    finally:
        client.close()
