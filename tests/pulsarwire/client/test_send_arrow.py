"""``Producer.send_arrow``: batch entries encoded straight from Arrow columns.

The encoder's bytes equal :func:`encode_batch` for the same messages (hypothesis); rows sent
through our broker read back by the official client with their keys, properties, event times
and values, in order; explicit sequence ids give exactly-once through a dropped connection and
on a rerun; ``send`` and ``send_arrow`` keep their order; bad columns fail before anything is sent.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pulsar
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pulsarwire
import pulsarwire.asyncio
from pulsarwire import ArrowColumnError, ArrowValueError, InvalidConfigurationError
from pulsarwire.broker import Broker
from pulsarwire.client.arrow_send import rows_from_arrow
from pulsarwire.client.blocking import Client
from pulsarwire.client.routing import partition_for_key
from pulsarwire.codec.batch import encode_batch
from pulsarwire.proto import pb
from tests.helpers.judge import make_client, new_topic, payloads, read_all, read_n

PROPS = pa.map_(pa.string(), pa.string())
text = st.text(max_size=12)
row = st.tuples(
    st.binary(max_size=300),
    st.none() | text,
    st.none() | st.dictionaries(text, text, max_size=3),
    st.none() | st.integers(0, 2**62),
)


def expected_batch(
    rows: list[tuple[bytes, str | None, dict[str, str] | None, int | None]], ids: list[int]
) -> bytes:
    """The batch payload ``send`` makes of these messages (as PartitionProducer.flush_batch builds it)."""
    entries = []
    for (value, key, props, event_time), seq in zip(rows, ids, strict=True):
        smm = pb.SingleMessageMetadata(sequence_id=seq)
        for k, v in (props or {}).items():
            smm.properties.add(key=k, value=v)
        if key is not None:
            smm.partition_key = key
        if event_time:
            smm.event_time = event_time
        entries.append((smm, value))
    return encode_batch(entries)


def arrow_batch(rows: list[tuple[bytes, str | None, dict[str, str] | None, int | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "value": pa.array([r[0] for r in rows], pa.binary()),
            "key": pa.array([r[1] for r in rows], pa.string()),
            "properties": pa.array([None if r[2] is None else list(r[2].items()) for r in rows], PROPS),
            "event_time": pa.array([r[3] for r in rows], pa.int64()),
        }
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row, min_size=1, max_size=40), st.integers(0, 2**62), st.data())
def test_entries_equal_encode_batch_byte_for_byte(
    rows: list[Any], first_id: int, data: st.DataObject
) -> None:
    steps = data.draw(st.lists(st.integers(1, 2**20), min_size=len(rows), max_size=len(rows)))
    ids = [first_id + sum(steps[: i + 1]) for i in range(len(rows))]
    encoded = rows_from_arrow(arrow_batch(rows))
    assert encoded.encode(0, len(rows), ids) == expected_batch(rows, ids)
    cut = data.draw(st.integers(0, len(rows)))  # a slice of the rows, as an entry in the middle of a batch
    assert encoded.encode(cut, len(rows), ids[cut:]) == expected_batch(rows[cut:], ids[cut:])


def test_columns_of_other_names_large_types_and_timestamps() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "v": pa.array(["a", "bb"], pa.large_string()),
            "k": pa.array(["x", None], pa.large_string()),
            "t": pa.array([1_700_000_000_123_000, None], pa.timestamp("us", tz="UTC")),
        }
    ).slice(0, 2)
    encoded = rows_from_arrow(batch, value="v", key="k", event_time="t")
    assert encoded.encode(0, 2, [3, 4]) == expected_batch(
        [(b"a", "x", None, 1_700_000_000_123), (b"bb", None, None, None)], [3, 4]
    )


@pytest.mark.parametrize(
    ("columns", "error"),
    [
        ({"payload": pa.array([b"a"])}, ArrowColumnError),  # no value column
        ({"value": pa.array([1])}, ArrowColumnError),
        ({"value": pa.array([b"a"]), "key": pa.array([1])}, ArrowColumnError),
        ({"value": pa.array([b"a"]), "properties": pa.array([["a"]])}, ArrowColumnError),
        ({"value": pa.array([b"a"]), "event_time": pa.array(["now"])}, ArrowColumnError),
        ({"value": pa.array([b"a"]), "sequence_id": pa.array([1.5])}, ArrowColumnError),
        ({"value": pa.array([b"a", None])}, ArrowValueError),
        ({"value": pa.array([b"a", b"b"]), "sequence_id": pa.array([2, 2])}, ArrowValueError),
        ({"value": pa.array([b"a"]), "sequence_id": pa.array([-1])}, ArrowValueError),
        ({"value": pa.array([b"a"]), "event_time": pa.array([-5])}, ArrowValueError),
        ({"value": pa.array([b"a"]), "properties": pa.array([[("a", None)]], PROPS)}, ArrowValueError),
    ],
)
def test_bad_columns_fail_before_anything_is_sent(
    broker: Broker, columns: dict[str, pa.Array], error: type[Exception]
) -> None:
    assert issubclass(ArrowColumnError, TypeError) and issubclass(ArrowValueError, ValueError)
    topic = new_topic()
    with Client(broker.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=True)
        with pytest.raises(error):
            producer.send_arrow(pa.RecordBatch.from_pydict(columns))
        with pytest.raises(ArrowColumnError):
            producer.send_arrow([b"not arrow"])
        with pytest.raises(InvalidConfigurationError):  # ids as a column and as a start: which?
            producer.send_arrow(pa.table({"value": [b"a"], "sequence_id": [1]}), first_sequence_id=5)
        producer.send(b"after")  # the first message: nothing was sent before it
        assert producer.last_sequence_id() == 0
    assert read_all(broker.service_url, topic, 1) == [b"after"]


def test_round_trip_read_by_the_official_client(broker: Broker) -> None:
    n = 500
    values = [f"v{i}".encode() * (i % 7) for i in range(n)]
    values[100] = b"x" * 200_000  # larger than a batch: an entry of its own, in order
    keys = [None if i % 5 == 0 else f"k{i % 13}" for i in range(n)]
    props = [None if i % 3 == 0 else {"i": str(i), "p": "q" * (i % 4)} for i in range(n)]
    times = [None if i % 4 == 0 else 1_700_000_000_000 + i for i in range(n)]
    batch = arrow_batch(list(zip(values, keys, props, times, strict=True)))
    topic = new_topic()
    with Client(broker.service_url) as client:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=37,
            batching_max_allowed_size_in_bytes=4000,
            compression_type=pulsarwire.CompressionType.LZ4,
        )
        result = producer.send_arrow(pa.Table.from_batches([batch.slice(0, 250), batch.slice(250)]))
        assert result.count == n
        assert result.first is not None and result.last is not None and result.first < result.last
        assert producer.last_sequence_id() == n - 1
    official = make_client(broker.service_url)
    try:
        reader = official.create_reader(topic, pulsar.MessageId.earliest)
        got = read_n(reader, n)
        assert not reader.has_message_available()
    finally:
        official.close()
    assert [m.data() for m in got] == values
    assert [m.partition_key() or None for m in got] == keys
    assert [m.properties() or None for m in got] == props
    assert [m.event_timestamp() or None for m in got] == times
    last = got[-1].message_id()
    assert result.last is not None
    assert (result.last.ledger_id, result.last.entry_id, result.last.batch_index) == (
        last.ledger_id(),
        last.entry_id(),
        last.batch_index(),
    )


def test_exactly_once_with_explicit_ids_through_a_dropped_connection(
    start_broker: Callable[..., Broker],
) -> None:
    b = start_broker(deduplication=True)
    topic = new_topic()
    n = 20_000
    values = payloads(n)
    batch = pa.table({"value": values, "sequence_id": pa.array(range(1000, 1000 + n), pa.int64())})
    with Client(b.service_url, operation_timeout_seconds=20) as client:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=100)
        b.inject(delay_receipts=50, receipt_delay=0.05)  # receipts held back: entries are pending

        def cut() -> None:
            time.sleep(0.15)
            b.drop_connections()

        cutter = threading.Thread(target=cut)
        cutter.start()
        result = producer.send_arrow(batch)
        cutter.join()
        assert result.count == n
        assert producer._core.partitions[0].epoch >= 1, "the connection was not cut mid-send"
        assert producer.last_sequence_id() == 1000 + n - 1
        # a rerun of the same rows stores nothing new (deduplication)
        again = producer.send_arrow(batch)
        assert again.count == n
    assert read_all(b.service_url, topic, n) == values


def test_send_and_send_arrow_keep_their_order(broker: Broker) -> None:
    topic = new_topic()
    with Client(broker.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=True, max_pending_messages=10)
        for i in range(3):
            producer.send_async(f"a{i}".encode(), None)
        producer.send_arrow(pa.record_batch({"value": [f"b{i}" for i in range(50)]}))
        producer.send(b"c")
        assert producer.send_arrow(pa.record_batch({"value": pa.array([], pa.binary())})).count == 0
        producer.send_async(b"d", None)
        producer.send_arrow(pa.record_batch({"value": [b"e0", b"e1"]}))
        producer.flush()
        assert producer.last_sequence_id() == 3 + 50 + 1 + 1 + 2 - 1
    expected = [f"a{i}".encode() for i in range(3)] + [f"b{i}".encode() for i in range(50)]
    expected += [b"c", b"d", b"e0", b"e1"]
    assert read_all(broker.service_url, topic, len(expected)) == expected


def test_empty_batch_sends_nothing(broker: Broker) -> None:
    with Client(broker.service_url) as client:
        producer = client.create_producer(new_topic())
        result = producer.send_arrow(pa.table({"value": pa.array([], pa.binary())}))
        assert (result.first, result.last, result.count) == (None, None, 0)
        assert producer.last_sequence_id() == -1


def test_asyncio_send_arrow_from_a_first_sequence_id(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(deduplication=True)
    topic = new_topic()
    values = payloads(300)

    async def main() -> None:
        async with pulsarwire.asyncio.Client(b.service_url) as client:
            producer = await client.create_producer(topic, batching_enabled=False)
            result = await producer.send_arrow(pa.table({"value": values}), first_sequence_id=10)
            assert result.count == 300
            assert result.first is not None and result.first.batch_index == -1  # single messages
            assert producer.last_sequence_id() == 309
            await producer.send_arrow(pa.table({"value": values}), first_sequence_id=10)  # deduplicated

    asyncio.run(main())
    assert read_all(b.service_url, topic, 300) == values


def test_a_partitioned_topic_gets_each_row_where_send_would_send_it(
    start_broker: Callable[..., Broker],
) -> None:
    b = start_broker(deduplication=True)
    topic = new_topic()
    b.create_partitioned_topic(topic, 3)
    n = 600
    keys = [f"k{i % 17}" for i in range(n)]
    values = [f"{keys[i]}:{i:04d}".encode() for i in range(n)]
    batch = pa.table({"value": values, "key": keys, "sequence_id": pa.array(range(n), pa.int64())})
    with Client(b.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=50)
        expected = {
            p: [v for v, k in zip(values, keys, strict=True) if partition_for_key(k, 3) == p]
            for p in range(3)
        }
        result = producer.send_arrow(batch)
        assert (result.first, result.last, result.count) == (None, None, n)
        assert [r.count for r in result.partitions] == [len(expected[p]) for p in range(3) if expected[p]]
        assert all(
            r.first is not None and r.first.partition == r.last.partition for r in result.partitions if r.last
        )
        producer.send_arrow(batch)  # a rerun: every partition deduplicates its rows
        with pytest.raises(InvalidConfigurationError):  # one start for three partitions' ids?
            producer.send_arrow(pa.table({"value": [b"a"]}), first_sequence_id=5)
    for p in range(3):
        assert read_all(b.service_url, f"{topic}-partition-{p}", len(expected[p])) == expected[p]


def test_a_refused_entry_fails_the_rest_and_a_rerun_fills_the_hole(
    start_broker: Callable[..., Broker],
) -> None:
    b = start_broker(deduplication=True)
    topic = new_topic()
    n = 2000
    values = payloads(n)
    batch = pa.table({"value": values, "sequence_id": pa.array(range(n), pa.int64())})
    with Client(b.service_url, operation_timeout_seconds=20) as client:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=100, max_pending_messages=300
        )
        producer.send_arrow(batch.slice(0, 500))
        b.inject(fail_receipts=1, fail_code=pb.NotAllowedError)  # the next entry is refused for good
        with pytest.raises(pulsarwire.NotAllowedError):
            producer.send_arrow(batch.slice(500))
        with pytest.raises(pulsarwire.SendRefusedError):  # not past the refused id
            producer.send_arrow(batch.slice(1000))
        result = producer.send_arrow(batch.slice(500))  # the caller resends from the refused row
        assert result.count == n - 500
        assert producer.last_sequence_id() == n - 1
    assert read_all(b.service_url, topic, n) == values


def test_a_row_too_big_stops_the_call_and_a_resend_leaves_no_gap(start_broker: Callable[..., Broker]) -> None:
    """A row refused before it is sent (too big, no chunking) ends the call there: no later row
    is stored past it, so a resend of the rows from it (made small enough) fills it in order."""
    b = start_broker(deduplication=True, max_message_size=64 * 1024)
    topic = new_topic()
    values = [b"v%d" % i for i in range(30)]
    values[12] = b"x" * 100_000
    batch = pa.table({"value": values, "sequence_id": pa.array(range(30), pa.int64())})
    with Client(b.service_url) as client:
        for batching in (False, True):
            producer = client.create_producer(
                f"{topic}-{batching}", batching_enabled=batching, batching_max_messages=5
            )
            with pytest.raises(pulsarwire.MessageTooBigError):
                producer.send_arrow(batch)
            assert producer.last_sequence_id() == 11
            fixed = batch.set_column(0, "value", pa.array([*values[:12], b"small", *values[13:]]))
            assert producer.send_arrow(fixed).count == 30  # the stored 12 dropped by dedup, counted
            stored = read_all(b.service_url, f"{topic}-{batching}", 30)
            assert stored == [*values[:12], b"small", *values[13:]]


def test_a_small_pending_queue_paces_the_entries(broker: Broker) -> None:
    topic = new_topic()
    values = payloads(1000)
    with Client(broker.service_url) as client:  # block_if_queue_full off: a bulk call waits anyway
        producer = client.create_producer(topic, batching_enabled=True, max_pending_messages=10)
        assert producer.send_arrow(pa.table({"value": values})).count == 1000
    assert read_all(broker.service_url, topic, 1000) == values


def test_entries_without_a_receipt_time_out(broker: Broker) -> None:
    with Client(broker.service_url) as client:
        producer = client.create_producer(new_topic(), batching_enabled=True, send_timeout_millis=300)
        broker.inject(delay_receipts=100, receipt_delay=3.0)
        with pytest.raises(pulsarwire.SendTimeoutError):
            producer.send_arrow(pa.table({"value": payloads(50)}))
