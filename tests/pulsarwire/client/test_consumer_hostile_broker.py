"""The pulsarwire consumer against a scripted fake broker: what real brokers send, and poison.

The fake broker (``fake_broker.ScriptedBroker``) writes MESSAGE frames itself over a real socket,
so the consumer sees exactly the bytes a test chose:

* entries without the optional 0x0e01 checksum section, with and without broker entry metadata
  (pulsar-lite delivers them so): read like any other, keys, properties and ids intact;
* a compressed entry as large as a 16 MiB broker allows: decompression follows CONNECTED's
  ``max_message_size`` (plus the frame padding), not a fixed 5 MiB;
* poison: batch counts of 0, below 0 or above what the bytes hold, charged in permits as the
  broker reads them. Each is reported once as CorruptMessageError, permits are not lost, no
  FlowControlError closes the connection, the good messages around them all arrive, and the
  redelivery after a reconnect is not reported again;
* chunked messages given up by the reassembler: expired ones are acknowledged, ones evicted to
  make room redelivered (and then read whole), and the reassembler's record is drained;
* ``read_arrow`` (the Spark source's path) raises, skips or makes rows of corrupt entries, and
  only of those inside its range.
"""

from __future__ import annotations

import pytest

from pulsarwire.client.blocking import Client, Consumer, ConsumerType, InitialPosition
from pulsarwire.client.message import Message
from pulsarwire.codec import MessageId, compress, encode_batch
from pulsarwire.codec.frames import encode_payload_section
from pulsarwire.errors import CorruptMessageError, OperationTimeoutError
from pulsarwire.proto import pb
from tests.helpers.fake_broker import ScriptedBroker

T = pb.BaseCommand
TOPIC = "persistent://public/default/hostile"
MiB = 1024 * 1024


def single(seq: int, payload: bytes, **kw: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="fake", sequence_id=seq, publish_time=1_700_000_000_000 + seq, **kw
    )


def batch_entry(seq: int, payloads: list[bytes], codec: int = pb.NONE, count: int | None = None) -> bytes:
    """A batch entry (no checksum section); ``count`` overrides the declared message count."""
    raw = encode_batch(
        (pb.SingleMessageMetadata(partition_key=f"k{seq}-{i}", sequence_id=seq + i), p)
        for i, p in enumerate(payloads)
    )
    md = single(seq, b"", num_messages_in_batch=len(payloads) if count is None else count)
    if codec != pb.NONE:
        md.compression = codec  # type: ignore[assignment]
        md.uncompressed_size = len(raw)
    return encode_payload_section(md, compress(codec, raw), checksum=False)


def subscribe(fake_pw: Client, **kw: object) -> Consumer:
    options: dict[str, object] = {
        "consumer_type": ConsumerType.Shared,
        "initial_position": InitialPosition.Earliest,
    }
    options.update(kw)
    return fake_pw.subscribe(TOPIC, "sub", **options)


def receive_good(
    consumer: Consumer, n: int, timeout_ms: int = 10_000
) -> tuple[list[Message], list[CorruptMessageError]]:
    """Receive ``n`` messages (acknowledging them), collecting the corrupt-entry reports on the way."""
    good: list[Message] = []
    bad: list[CorruptMessageError] = []
    while len(good) < n:
        try:
            msg = consumer.receive(timeout_ms)
        except CorruptMessageError as exc:
            bad.append(exc)
            continue
        except OperationTimeoutError:
            raise AssertionError(f"received {len(good)} of {n} messages, then nothing") from None
        consumer.acknowledge(msg)
        good.append(msg)
    return good, bad


def assert_quiet(consumer: Consumer, wait_ms: int = 500) -> None:
    try:
        msg = consumer.receive(wait_ms)
    except OperationTimeoutError:
        return
    raise AssertionError(f"unexpected extra message {msg.data()!r} at {msg.message_id()}")


# -- what real brokers send ------------------------------------------------------------------


@pytest.mark.parametrize("with_bem", [False, True], ids=["plain", "broker-entry-metadata"])
def test_entries_without_checksum_section_are_delivered(
    fake: ScriptedBroker, fake_pw: Client, with_bem: bool
) -> None:
    bem = pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_999, index=7) if with_bem else None
    ids = []
    for i, codec in enumerate([pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]):
        payload = f"single {i} ".encode() * 30
        md = single(
            i,
            payload,
            partition_key=f"key-{i}",
            properties=[pb.KeyValue(key="i", value=str(i))],
            compression=codec,
        )
        md.uncompressed_size = len(payload)
        ids.append(fake.store(TOPIC, md, compress(codec, payload), bem, checksum=False))
        section = batch_entry(100 * (i + 1), [f"b{i}-{j}".encode() for j in range(4)], codec)
        if bem is not None:
            head = b"\x0e\x02" + len(bem.SerializeToString()).to_bytes(4, "big") + bem.SerializeToString()
            section = head + section
        ids.append(fake.store_section(TOPIC, section, 4))
    assert not any(e.section.startswith(b"\x0e\x01") for e in fake.entries(TOPIC))
    consumer = subscribe(fake_pw)
    got, bad = receive_good(consumer, 5 * 5)
    assert bad == []
    expected = []
    for i in range(5):
        expected.append((f"single {i} ".encode() * 30, f"key-{i}", {"i": str(i)}, (ids[2 * i].entry_id, -1)))
        entry = ids[2 * i + 1].entry_id
        expected += [(f"b{i}-{j}".encode(), f"k{100 * (i + 1)}-{j}", {}, (entry, j)) for j in range(4)]
    assert [
        (m.data(), m.partition_key(), m.properties(), (m.message_id().entry_id, m.message_id().batch_index))
        for m in got
    ] == expected
    assert_quiet(consumer)


def test_decompression_follows_max_message_size_from_connected(fake_pw: Client) -> None:
    """A 12 MiB message (LZ4) from a broker announcing 16 MiB: above the old fixed 5 MiB limit."""
    with ScriptedBroker(max_message_size=16 * MiB) as big:
        client = Client(big.url, operation_timeout_seconds=10)
        try:
            payload = bytes(range(256)) * (12 * MiB // 256)
            md = single(1, payload, compression=pb.LZ4, uncompressed_size=len(payload))
            big.store(TOPIC, md, compress(pb.LZ4, payload), checksum=False)
            consumer = subscribe(client)
            (msg,), bad = receive_good(consumer, 1)
            assert bad == [] and msg.data() == payload
        finally:
            client.close()


def test_decompression_beyond_the_announced_size_is_corrupt(fake: ScriptedBroker, fake_pw: Client) -> None:
    """The same limit refuses more: 5 MiB announced (the default), 6 MiB declared uncompressed."""
    payload = b"z" * (6 * MiB)
    md = single(1, payload, compression=pb.ZLIB, uncompressed_size=len(payload))
    bad_id = fake.store(TOPIC, md, compress(pb.ZLIB, payload))
    fake.store(TOPIC, single(2, b"after"), b"after")
    consumer = subscribe(fake_pw)
    (after,), bad = receive_good(consumer, 1)
    assert after.data() == b"after"
    assert [(e.message_id.entry_id, "over the limit" in e.reason) for e in bad] == [(bad_id.entry_id, True)]


# -- poison ------------------------------------------------------------------------------------

POISON = [
    pytest.param(0, id="count-0"),
    pytest.param(-5, id="count-negative"),
    pytest.param(1_000_000, id="count-above-the-bytes"),
]


@pytest.mark.parametrize("count", POISON)
def test_poison_batch_count_is_reported_once_and_the_rest_flows(
    fake: ScriptedBroker, fake_pw: Client, count: int
) -> None:
    """Poison entries among 300 good messages and a receiver queue of 50: every good message
    arrives on the first connection (no FlowControlError, no reconnect), each poison entry is
    reported once, and after a reconnect its redelivery is not reported again."""
    poison_ids = []
    values = []
    for i in range(100):
        if i % 30 == 7:
            poison_ids.append(
                fake.store_section(TOPIC, batch_entry(10_000 + i, [b"p1", b"p2", b"p3"], count=count), count)
            )
        trio = [f"m{i:03d}-{j}".encode() for j in range(3)]
        values += trio
        fake.store_section(TOPIC, batch_entry(3 * i, trio), 3)
    consumer = subscribe(fake_pw, receiver_queue_size=50)
    got, bad = receive_good(consumer, len(values))
    assert [m.data() for m in got] == values
    assert sorted(e.message_id.entry_id for e in bad) == [p.entry_id for p in poison_ids]
    assert all(isinstance(e.raw, bytes) and e.raw for e in bad), "the entry's bytes come with the report"
    assert len(fake.frames(T.SUBSCRIBE)) == 1 and len(fake.frames(T.CONNECT)) == 1, (
        "the connection was dropped"
    )
    fake.wait_for(lambda r: len(r.acked_entries("sub")) == 100)

    # The poison entries were never acknowledged: a reconnect brings them back, quietly.
    fake.drop_connections()
    fake.wait_for(lambda r: len(r.frames(T.SUBSCRIBE)) == 2)
    assert_quiet(consumer, 1500)
    assert fake.acked_entries("sub").isdisjoint((p.ledger_id, p.entry_id) for p in poison_ids)
    # ... and new messages still flow after them.
    fake.store_section(TOPIC, batch_entry(999, [b"late"]), 1)
    (late,), again = receive_good(consumer, 1)
    assert late.data() == b"late" and again == []
    consumer.close()


def test_poison_count_zero_costs_no_permit_on_a_literal_broker(fake: ScriptedBroker, fake_pw: Client) -> None:
    """With a receiver queue of 10, 10 good single messages behind 10 free poison entries: a broker
    that charges nothing for them may send all 20 on the first 10 permits; that is no flood."""
    for i in range(10):
        fake.store_section(TOPIC, batch_entry(100 + i, [b"x"], count=0), 0)
    for i in range(10):
        fake.store(TOPIC, single(i, b""), f"good {i}".encode())
    consumer = subscribe(fake_pw, receiver_queue_size=10)
    got, bad = receive_good(consumer, 10)
    assert [m.data() for m in got] == [f"good {i}".encode() for i in range(10)]
    assert len(bad) == 10
    assert len(fake.frames(T.CONNECT)) == 1


# -- chunked messages given up ------------------------------------------------------------------


def chunk_section(uuid: str, chunk: int, chunks: int, total: int, data: bytes, seq: int) -> bytes:
    md = single(
        seq,
        data,
        uuid=uuid,
        chunk_id=chunk,
        num_chunks_from_msg=chunks,
        total_chunk_msg_size=total,
    )
    return encode_payload_section(md, data, checksum=False)


def test_expired_incomplete_chunked_message_is_acknowledged(fake: ScriptedBroker, fake_pw: Client) -> None:
    first = fake.store_section(TOPIC, chunk_section("lost", 0, 3, 30, b"a" * 10, 1))
    second = fake.store_section(TOPIC, chunk_section("lost", 1, 3, 30, b"b" * 10, 1))
    consumer = subscribe(fake_pw, expire_time_of_incomplete_chunked_message_ms=200)
    fake.wait_for(
        lambda r: (
            {(first.ledger_id, first.entry_id), (second.ledger_id, second.entry_id)} <= r.acked_entries("sub")
        )
    )
    # The last chunk, arriving late, follows its message: acknowledged, never reported.
    third = fake.store_section(TOPIC, chunk_section("lost", 2, 3, 30, b"c" * 10, 1))
    fake.wait_for(lambda r: (third.ledger_id, third.entry_id) in r.acked_entries("sub"))
    assert_quiet(consumer)
    part = consumer._core.parts[0]
    assert part._chunks.pending == 0 and part._chunks.dropped == []


def test_chunked_message_evicted_to_make_room_is_redelivered_and_read_whole(
    fake: ScriptedBroker, fake_pw: Client
) -> None:
    """Two chunked messages interleaved, room for one: the first is evicted when the second starts,
    redelivered, and both arrive whole; nothing is reported corrupt and the record is drained."""
    a = [b"A" * 8, b"a" * 8]
    b = [b"B" * 8, b"b" * 8]
    fake.store_section(TOPIC, chunk_section("A", 0, 2, 16, a[0], 1))
    fake.store_section(TOPIC, chunk_section("B", 0, 2, 16, b[0], 2))
    fake.store_section(TOPIC, chunk_section("A", 1, 2, 16, a[1], 1))
    fake.store_section(TOPIC, chunk_section("B", 1, 2, 16, b[1], 2))
    consumer = subscribe(fake_pw, max_pending_chunked_message=1, negative_ack_redelivery_delay_ms=100)
    got, bad = receive_good(consumer, 2)
    assert bad == []
    assert sorted(m.data() for m in got) == [b"".join(a), b"".join(b)]
    assert fake.frames(T.REDELIVER_UNACKNOWLEDGED_MESSAGES), "the evicted message was not redelivered"
    fake.wait_for(lambda r: len(r.acked_entries("sub")) == 4)
    part = consumer._core.parts[0]
    assert part._chunks.pending == 0 and part._chunks.dropped == []
    assert_quiet(consumer)


def test_evicted_chunked_message_is_acknowledged_when_asked(fake: ScriptedBroker, fake_pw: Client) -> None:
    fake.store_section(TOPIC, chunk_section("A", 0, 2, 16, b"A" * 8, 1))
    fake.store_section(TOPIC, chunk_section("B", 0, 2, 16, b"B" * 8, 2))
    fake.store_section(TOPIC, chunk_section("A", 1, 2, 16, b"a" * 8, 1))
    fake.store_section(TOPIC, chunk_section("B", 1, 2, 16, b"b" * 8, 2))
    consumer = subscribe(
        fake_pw, max_pending_chunked_message=1, auto_ack_oldest_chunked_message_on_queue_full=True
    )
    (whole,), bad = receive_good(consumer, 1)
    assert whole.data() == b"B" * 8 + b"b" * 8 and bad == []
    fake.wait_for(lambda r: len(r.acked_entries("sub")) == 4)  # A's chunks acknowledged, B acked by us
    assert not fake.frames(T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    assert_quiet(consumer)


def test_a_flood_of_evictions_keeps_the_record_bounded(fake: ScriptedBroker, fake_pw: Client) -> None:
    """200 chunked messages that never complete, room for 2: the reassembler's record is drained
    after every chunk (nothing left, nothing pushed out), each evicted first chunk waits for its
    redelivery like a negatively acknowledged message, and the message behind them arrives."""
    firsts = [fake.store_section(TOPIC, chunk_section(f"u{i}", 0, 2, 16, b"x" * 8, i)) for i in range(200)]
    fake.store(TOPIC, single(1000, b""), b"survivor")
    consumer = subscribe(fake_pw, max_pending_chunked_message=2, receiver_queue_size=50)
    (msg,), bad = receive_good(consumer, 1)
    assert msg.data() == b"survivor" and bad == []
    part = consumer._core.parts[0]
    assert part._chunks.dropped == [] and part._chunks.dropped_overflow == 0
    assert part._chunks.pending == 2
    assert set(part.redelivery.nacks) == {(f.ledger_id, f.entry_id) for f in firsts[:198]}
    assert not fake.frames(T.REDELIVER_UNACKNOWLEDGED_MESSAGES), "redelivered before the nack delay"


# -- read_arrow (the Spark source's path) and corrupt entries -------------------------------------


def _range_with_poison(fake: ScriptedBroker) -> list[MessageId]:
    """e0 batch of 3, e1 count 0, e2 single, e3 LZ4 garbage, e4 single: their entry ids."""
    garbage = single(40, b"", compression=pb.LZ4, uncompressed_size=1000)
    return [
        fake.store_section(TOPIC, batch_entry(0, [b"a0", b"a1", b"a2"]), 3),
        fake.store_section(TOPIC, batch_entry(10, [b"p"], count=0), 0),
        fake.store(TOPIC, single(20, b""), b"b", checksum=False),
        fake.store(TOPIC, garbage, b"\xff" * 40),
        fake.store(TOPIC, single(50, b""), b"c"),
    ]


def _read(fake_pw: Client, start: MessageId, end: MessageId, on_corrupt: str) -> list[dict[str, object]]:
    batches = fake_pw.read_arrow(TOPIC, start, end, idle_timeout=5, on_corrupt=on_corrupt)
    return [row for batch in batches for row in batch.to_pylist()]


def test_read_arrow_raises_on_a_corrupt_entry_by_default(fake: ScriptedBroker, fake_pw: Client) -> None:
    ids = _range_with_poison(fake)
    with pytest.raises(CorruptMessageError) as info:
        _read(fake_pw, MessageId.EARLIEST, ids[-1], "raise")
    assert info.value.message_id.entry_id == ids[1].entry_id


def test_read_arrow_skips_corrupt_entries(fake: ScriptedBroker, fake_pw: Client) -> None:
    ids = _range_with_poison(fake)
    rows = _read(fake_pw, MessageId.EARLIEST, ids[-1], "skip")
    assert [r["value"] for r in rows] == [b"a0", b"a1", b"a2", b"b", b"c"]
    assert "corrupt_reason" not in rows[0]


def test_read_arrow_makes_rows_of_corrupt_entries(fake: ScriptedBroker, fake_pw: Client) -> None:
    ids = _range_with_poison(fake)
    sections = [e.section for e in fake.entries(TOPIC)]
    rows = _read(fake_pw, MessageId.EARLIEST, ids[-1], "rows")
    assert [(r["value"], r["entry_id"], r["batch_index"]) for r in rows] == [
        (b"a0", ids[0].entry_id, 0),
        (b"a1", ids[0].entry_id, 1),
        (b"a2", ids[0].entry_id, 2),
        (sections[1], ids[1].entry_id, -1),
        (b"b", ids[2].entry_id, -1),
        (sections[3], ids[3].entry_id, -1),
        (b"c", ids[4].entry_id, -1),
    ]
    reasons = [r["corrupt_reason"] for r in rows]
    assert [i for i, reason in enumerate(reasons) if reason is not None] == [3, 5]
    assert "num_messages_in_batch" in reasons[3] or "count" in reasons[3]
    assert MessageId.deserialize(rows[3]["message_id"]) == MessageId(ids[1].ledger_id, ids[1].entry_id)
    assert rows[3]["publish_time"] is None and rows[3]["producer_name"] is None


def test_read_arrow_corrupt_entries_at_the_range_edges(fake: ScriptedBroker, fake_pw: Client) -> None:
    """A corrupt start entry was the range before's; a corrupt end entry ends the range at once."""
    ids = _range_with_poison(fake)
    rows = _read(fake_pw, ids[1], ids[3], "rows")
    assert [(r["entry_id"], r["corrupt_reason"] is not None) for r in rows] == [
        (ids[2].entry_id, False),
        (ids[3].entry_id, True),
    ]
