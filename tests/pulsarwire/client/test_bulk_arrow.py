"""The bulk Arrow path: ranges of a topic-partition as RecordBatches, judged against the official consumer.

Batch entries wholly inside the range are decoded straight into columns; the in-memory tests at
the end feed the same entries to that path and to the consumer's per-message path and require
the same rows, the same permits and the same errors.
"""

from __future__ import annotations

import itertools
from typing import Any, cast

import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.client.bulk import _ColumnReader
from pulsarwire.client.consumer import PartitionConsumer
from pulsarwire.client.consumer_config import ConsumerConfig
from pulsarwire.client.message import Delivery, Message
from pulsarwire.codec import MessageId, compress, encode_batch
from pulsarwire.codec.batch import U32
from pulsarwire.codec.frames import Payload
from pulsarwire.errors import CorruptMessageError
from pulsarwire.proto import pb
from pulsarwire.protocol.connection import MessageReceived
from tests.helpers.examples import examples
from tests.helpers.judge import make_client, new_topic, receive_n


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
    assert [row["sequence_id"] for row in rows] == list(range(len(rows)))  # one fresh producer
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
        assert row["producer_name"] == msg.producer_name()
        assert row["message_id"] == mid.serialize()


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


def test_fixed_size_batches_and_ranges_ending_inside_them(shared_broker: Broker) -> None:
    # Same-size messages: whole batches take the one-shape fast path of the batch decoder.
    topic = new_topic("bulk")
    official = make_client(shared_broker.service_url)
    try:
        consumer = official.subscribe(topic, "judge", initial_position=pulsar.InitialPosition.Earliest)
        producer = official.create_producer(
            topic, batching_max_messages=100, compression_type=pulsar.CompressionType.LZ4
        )
        for i in range(1000):
            producer.send_async(f"{i:08d}".encode(), None)
        producer.flush()
        expected = receive_n(consumer, 1000, ack=True)
    finally:
        official.close()
    ids = [m.message_id() for m in expected]
    cuts = [MessageId.EARLIEST] + [
        MessageId(ids[k].ledger_id(), ids[k].entry_id(), -1, ids[k].batch_index()) for k in (349, 350, 999)
    ]
    client = Client(shared_broker.service_url)
    try:
        rows = [row for a, b in itertools.pairwise(cuts) for row in rows_of(client, topic, a, b)]
    finally:
        client.close()
    assert [row["value"] for row in rows] == [m.data() for m in expected]
    assert [row["message_id"] for row in rows] == [mid.serialize() for mid in ids]
    assert [row["batch_index"] for row in rows] == [mid.batch_index() for mid in ids]
    assert [row["sequence_id"] for row in rows] == list(range(1000))


# ---------------------------------------------------------------------------
# in memory: the column path against the consumer's per-message path
# ---------------------------------------------------------------------------

TOPIC = "persistent://public/default/in-memory"


def column_reader(end: MessageId, start: MessageId = MessageId.EARLIEST) -> _ColumnReader:
    cfg = ConsumerConfig(
        subscription_name="bulk",
        durable=False,
        start_message_id=start,
        receiver_queue_size=1_000_000,  # no FLOW: the test counts permits itself
    )
    return _ColumnReader(cast(Any, None), TOPIC, 3, cfg, end)


def message(entry_id: int, md: pb.MessageMetadata, payload: bytes) -> MessageReceived:
    return MessageReceived(0, MessageId(7, entry_id), 0, (), Payload(md, payload))


@st.composite
def batch_entries(draw: st.DrawFn) -> tuple[pb.MessageMetadata, bytes, int]:
    """A batch entry (metadata, payload as stored) and its message count."""
    n = draw(st.integers(1, 60))
    fixed = draw(st.booleans())
    fields = draw(st.sets(st.sampled_from(["key", "event", "seq", "props"])))
    first_seq = draw(st.sampled_from([0, 120, 16_370]))
    singles = []
    for i in range(n):
        smm = pb.SingleMessageMetadata()
        if "key" in fields:
            smm.partition_key = f"k{i % 3}"
        if "event" in fields:
            smm.event_time = i % 4  # 0 reads as no event time
        if "seq" in fields and i % 5:
            smm.sequence_id = first_seq + i
        if "props" in fields:
            for j in range(i % 3):
                smm.properties.add(key=f"p{j}", value=str(i))
        payload = b"v" * (8 if fixed else 1 + i % 9)
        singles.append((smm, payload))
    raw = encode_batch(singles)
    codec = draw(st.sampled_from([pb.NONE, pb.LZ4, pb.ZSTD]))
    md = pb.MessageMetadata(
        producer_name="p",
        sequence_id=first_seq,
        publish_time=1_700_000_000_000,
        num_messages_in_batch=n,
        compression=codec,
        uncompressed_size=len(raw),
    )
    return md, compress(codec, raw), n


def read_both(
    entries: list[tuple[pb.MessageMetadata, bytes, int]],
    end: MessageId,
    start: MessageId = MessageId.EARLIEST,
) -> tuple[_ColumnReader, _ColumnReader]:
    """The same entries through the column path and through the consumer's path."""
    columns, messages = column_reader(end, start), column_reader(end, start)
    for entry_id, (md, payload, _) in enumerate(entries):
        ev = message(entry_id, md, payload)
        columns._on_message(ev)
        PartitionConsumer._on_message(messages, ev)
    return columns, messages


def assert_same_reads(a: _ColumnReader, b: _ColumnReader) -> None:
    assert a.rows.count == b.rows.count
    if a.rows.count:
        assert a.rows.to_batch(TOPIC, 3).equals(b.rows.to_batch(TOPIC, 3))
    assert (a.finished, a.last_dequeued, a.permits.consumed, a.first_entry) == (
        b.finished,
        b.last_dequeued,
        b.permits.consumed,
        b.first_entry,
    )
    assert [str(e) for e in a.queue.errors] == [str(e) for e in b.queue.errors]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(batch_entries(), min_size=1, max_size=4),
    end_at=st.floats(0, 1),
    whole_end=st.booleans(),
    start_at=st.sampled_from([None, 0.0, 0.3]),
)
def test_column_path_reads_what_the_message_path_reads(
    entries: list[tuple[pb.MessageMetadata, bytes, int]],
    end_at: float,
    whole_end: bool,
    start_at: float | None,
) -> None:
    def position(at: float, whole: bool) -> MessageId:
        entry_id = min(int(at * len(entries)), len(entries) - 1)
        index = -1 if whole else int(at * 1000) % entries[entry_id][2]
        return MessageId(7, entry_id, -1, index)

    end = position(end_at, whole_end)
    start = MessageId.EARLIEST if start_at is None else position(start_at, False)
    if not (end.entry_id, end.batch_index) > (start.entry_id, start.batch_index):
        return
    columns, messages = read_both(entries, end, start)
    assert_same_reads(columns, messages)


def test_a_corrupt_batch_is_reported_and_its_permits_returned() -> None:
    raw = encode_batch((pb.SingleMessageMetadata(sequence_id=i), b"x" * 5) for i in range(10))
    bad = pb.MessageMetadata(producer_name="p", publish_time=1, num_messages_in_batch=11)  # one missing
    good = pb.MessageMetadata(producer_name="p", publish_time=1, num_messages_in_batch=10)
    entries = [(good, raw, 10), (bad, raw, 11), (good, raw, 10)]
    columns, messages = read_both(entries, MessageId(7, 5, -1, -1))
    assert_same_reads(columns, messages)
    assert columns.rows.count == 20 and columns.permits.consumed == 11
    (error,) = columns.queue.errors
    assert isinstance(error, CorruptMessageError)
    assert (error.message_id.ledger_id, error.message_id.entry_id) == (7, 1)


def test_entries_past_the_end_are_dropped_unopened_with_their_permits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A range ending mid-topic (a minPartitions sub-range) gets the prefetch past its end: those
    entries return their permits without being decompressed, and a corrupt one is not this range's."""
    import pulsarwire.client.bulk as bulk
    import pulsarwire.client.consumer as consumer

    raw = encode_batch((pb.SingleMessageMetadata(sequence_id=i), b"x" * 5) for i in range(10))
    bad = pb.MessageMetadata(producer_name="p", publish_time=1, num_messages_in_batch=11)  # one missing
    good = pb.MessageMetadata(producer_name="p", publish_time=1, num_messages_in_batch=10)
    entries = [(good, raw, 10), (good, raw, 10), (bad, raw, 11), (good, raw, 10)]
    end = MessageId(7, 1, -1, -1)
    assert_same_reads(*read_both(entries, end))

    opened: list[int] = []  # the entries either path decompresses, by message count
    for module, name in ((bulk, "uncompressed_payload"), (consumer, "unpack_entry")):
        real = getattr(module, name)

        def counting(md: pb.MessageMetadata, *args: Any, _real: Any = real) -> Any:
            opened.append(md.num_messages_in_batch)
            return _real(md, *args)

        monkeypatch.setattr(module, name, counting)
    columns = column_reader(end, MessageId.EARLIEST)
    for entry_id, (md, payload, _) in enumerate(entries):
        columns._on_message(message(entry_id, md, payload))
    assert opened == [10, 10]  # entries 0 and 1; 2 and 3 lie past the end
    assert columns.rows.count == 20 and columns.finished and not columns.queue.errors
    assert columns.permits.consumed == 11 + 10


def test_a_property_that_is_not_utf8_reads_with_replacement_characters_on_both_paths() -> None:
    """Pulsar's properties are strings, but nothing stops a producer writing other bytes: the row
    (and Message.properties()) carries them decoded with U+FFFD, as the Java client shows them."""
    singles = []
    for i in range(4):
        smm = pb.SingleMessageMetadata(sequence_id=i)
        smm.properties.add(key="p", value="VALUE")
        singles.append((smm, b"x" * 5))
    raw = encode_batch(singles).replace(b"VALUE", b"\xffALUE")  # same length: sizes stay right
    md = pb.MessageMetadata(producer_name="p", publish_time=1, num_messages_in_batch=4)
    columns, messages = read_both([(md, raw, 4)], MessageId(7, 0, -1, -1))
    assert_same_reads(columns, messages)
    rows = columns.rows.to_batch(TOPIC, 3).to_pylist()
    assert [r["properties"] for r in rows] == [[("p", "\ufffdALUE")]] * 4
    single = raw[4 : 4 + U32.unpack_from(raw)[0]]
    msg = Message(b"x" * 5, single, 0, Delivery((7, 0), -1, 4, TOPIC, md, 0))
    assert msg.properties() == {"p": "\ufffdALUE"}


def test_a_producer_name_that_is_not_utf8_reads_with_replacement_characters_on_both_paths() -> None:
    raw = encode_batch((pb.SingleMessageMetadata(sequence_id=i), b"x" * 5) for i in range(3))
    named = pb.MessageMetadata(producer_name="PROD", sequence_id=0, publish_time=1, num_messages_in_batch=3)
    md = pb.MessageMetadata.FromString(named.SerializeToString().replace(b"PROD", b"\xffROD"))
    columns, messages = read_both([(md, raw, 3)], MessageId(7, 0, -1, -1))
    assert_same_reads(columns, messages)
    rows = columns.rows.to_batch(TOPIC, 3).to_pylist()
    assert [r["producer_name"] for r in rows] == ["\ufffdROD"] * 3
    assert Message(b"x", None, -1, Delivery((7, 0), -1, 0, TOPIC, md, 0)).producer_name() == "\ufffdROD"
