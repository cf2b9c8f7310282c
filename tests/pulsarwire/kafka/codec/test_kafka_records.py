"""Record batches v2 and legacy message sets: hypothesis round trips over every codec, the CRC
range, control and transactional batches, and hostile input (truncated, bad lengths, bad
varints, CRC mismatch, decompression bombs) each ending in a typed error."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsarwire.kafka.codec import compression, records
from pulsarwire.kafka.codec.records import Record, RecordBatch
from pulsarwire.kafka.errors import (
    KafkaCompressionError,
    KafkaCrcMismatchError,
    KafkaDecompressedSizeError,
    KafkaEncodeError,
    KafkaLengthError,
    KafkaProtocolError,
    KafkaRecordError,
    KafkaTrailingBytesError,
    KafkaTruncatedError,
    KafkaVarintError,
)

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]

nullable_bytes = st.none() | st.binary(max_size=40)
record = st.builds(
    Record,
    offset_delta=st.integers(0, 2**31 - 1),
    timestamp_delta=st.integers(-(2**63), 2**63 - 1),
    key=nullable_bytes,
    value=nullable_bytes,
    headers=st.lists(st.tuples(st.text(max_size=6), nullable_bytes), max_size=3).map(tuple),
)
batch = st.builds(
    RecordBatch,
    base_offset=st.integers(0, 2**62),
    records=st.lists(record, max_size=5).map(tuple),
    base_timestamp=st.integers(0, 2**62),
    max_timestamp=st.integers(0, 2**62),
    last_offset_delta=st.integers(-1, 2**31 - 1),
    compression=st.sampled_from(CODECS),
    attributes=st.sampled_from([0, records.TRANSACTIONAL, records.TIMESTAMP_LOG_APPEND]),
    partition_leader_epoch=st.integers(-1, 2**31 - 1),
    producer_id=st.integers(-1, 2**62),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
)


@settings(max_examples=150, deadline=None)
@given(batch)
def test_batches_round_trip(b: RecordBatch) -> None:
    data = records.encode_batch(b)
    assert records.decode_batch(data) == b
    if b.compression == compression.NONE:
        assert records.encode_batch(records.decode_batch(data)) == data


def sample(codec: int = compression.NONE) -> bytes:
    b = records.make_batch(
        100,
        [(b"k1", b"v1" * 50, (("h", b"x"),)), (None, b"v2", ()), (b"k3", None, (("n", None),))],
        timestamp=1_700_000_000_000,
        compression_codec=codec,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
    )
    return records.encode_batch(b)


def test_layout_and_crc_range() -> None:
    data = sample()
    base_offset, length, _, magic, crc = struct.unpack_from(">qiibI", data)
    assert (base_offset, length, magic) == (100, len(data) - 12, 2)
    assert crc == crc32c.crc32c(data[21:])
    # the leader epoch is outside the CRC: changing it keeps the batch valid
    moved = data[:12] + struct.pack(">i", 5) + data[16:]
    assert records.decode_batch(moved).partition_leader_epoch == 5
    b = records.decode_batch(data)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_offset) == (42, 3, 7, 102)
    assert b.records[2].headers == (("n", None),) and b.records[1].key is None


def test_control_and_transactional_batches() -> None:
    cb = records.control_batch(
        9, commit=False, coordinator_epoch=4, producer_id=7, producer_epoch=1, timestamp=5
    )
    decoded = records.decode_batch(records.encode_batch(cb))
    assert decoded.is_control and decoded.is_transactional
    assert records.control_type(decoded.records[0]) == (False, 4)
    with pytest.raises(KafkaRecordError):
        records.control_type(Record(0, 0, b"\x00\x00\x00\x05", b"\x00\x00\x00\x00\x00\x01"))


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_and_several_batches(codec: int) -> None:
    data = sample(codec) + sample(compression.NONE)
    batches = records.decode_batches(data)
    assert [b.compression for b in batches] == [codec, compression.NONE]
    assert batches[0].records == batches[1].records
    # a fetch answer cut in the middle of the last batch
    assert len(records.decode_batches(data[:-3], partial_tail=True)) == 1
    with pytest.raises(KafkaTruncatedError):
        records.decode_batches(data[:-3])


def test_raw_snappy_is_read_too() -> None:
    import cramjam

    raw = bytes(cramjam.snappy.compress_raw(b"abc" * 100))
    assert compression.decompress(compression.SNAPPY, raw, 1000) == b"abc" * 100


def test_crc_mismatch() -> None:
    data = bytearray(sample())
    data[-1] ^= 0xFF
    with pytest.raises(KafkaCrcMismatchError) as err:
        records.decode_batch(bytes(data))
    assert err.value.expected != err.value.actual


def test_truncated_and_trailing() -> None:
    data = sample()
    for cut in (0, 10, 60, len(data) - 1):
        with pytest.raises(KafkaTruncatedError):
            records.decode_batch(data[:cut])
    with pytest.raises(KafkaTrailingBytesError):
        records.decode_batch(data + b"\x00")


def _with_section(section: bytes, count: int, attributes: int = 0) -> bytes:
    head = bytearray(
        records.BATCH_HEADER.pack(
            0, records.BATCH_HEADER.size - 12 + len(section), -1, 2, 0, attributes, 0, 0, 0, -1, -1, -1, count
        )
    )
    head += section
    struct.pack_into(">I", head, 17, crc32c.crc32c(bytes(head[21:])))
    return bytes(head)


def test_hostile_record_fields() -> None:
    # a record count over the bytes there are
    with pytest.raises(KafkaLengthError):
        records.decode_batch(_with_section(b"\x00", 2**31 - 1))
    # a record whose length varint never ends
    with pytest.raises(KafkaVarintError):
        records.decode_batch(_with_section(b"\xff" * 12, 1))
    # a record length over the bytes left
    with pytest.raises(KafkaTruncatedError):
        records.decode_batch(_with_section(b"\x7e\x00", 1))
    # a key length below -1 (zigzag 5 -> -3)
    with pytest.raises(KafkaLengthError):
        records.decode_batch(_with_section(b"\x0a\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00", 1))
    # a record with bytes left over after its headers
    rec = bytearray()
    records._encode_record(rec, Record(0, 0, b"k", b"v"))
    grown = bytes([rec[0] + 2]) + bytes(rec[1:]) + b"\x00"
    with pytest.raises(KafkaTrailingBytesError):
        records.decode_batch(_with_section(grown, 1))
    # batch length below the header, wrong magic
    bad = bytearray(sample())
    struct.pack_into(">i", bad, 8, 3)
    with pytest.raises(KafkaLengthError):
        records.decode_batch(bytes(bad))
    bad = bytearray(sample())
    bad[16] = 7
    with pytest.raises(KafkaRecordError):
        records.decode_batch(bytes(bad))


@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompression_bombs_are_bounded(codec: int) -> None:
    bomb = compression.compress(codec, b"\x00" * 4_000_000)
    with pytest.raises(KafkaDecompressedSizeError):
        records.decode_batch(_with_section(bomb, 1, codec), max_decompressed=1_000_000)
    with pytest.raises(KafkaCompressionError):
        records.decode_batch(_with_section(b"garbage-not-compressed", 1, codec))


def test_unknown_codec() -> None:
    with pytest.raises(KafkaCompressionError):
        records.decode_batch(_with_section(b"\x00", 0, 6))


def test_legacy_message_sets() -> None:
    data = records.encode_message(3, 1, b"k", b"v", timestamp=5) + records.encode_message(4, 0, None, b"w")
    msgs = records.decode_message_set(data)
    assert [(x.offset, x.magic, x.timestamp, x.key, x.value) for x in msgs] == [
        (3, 1, 5, b"k", b"v"),
        (4, 0, None, None, b"w"),
    ]
    # a magic 1 gzip wrapper: inner offsets relative, the wrapper carries the last absolute offset
    inner = records.encode_message(0, 1, None, b"a") + records.encode_message(1, 1, None, b"b")
    wrapper = records.encode_message(11, 1, None, compression.compress(compression.GZIP, inner), attributes=1)
    assert [(x.offset, x.value) for x in records.decode_message_set(wrapper)] == [(10, b"a"), (11, b"b")]
    assert records.magic_of(wrapper) == 1
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(KafkaCrcMismatchError):
        records.decode_message_set(bytes(bad))
    with pytest.raises(KafkaProtocolError):
        records.decode_message_set(data[:-2])
    with pytest.raises(KafkaLengthError):
        records.decode_message_set(struct.pack(">qi", 0, 2**31 - 1) + b"\x00" * 20)
    nested = records.encode_message(0, 1, None, compression.compress(compression.GZIP, wrapper), attributes=1)
    with pytest.raises(KafkaRecordError):
        records.decode_message_set(nested)
    assert zlib.crc32(b"") == 0  # zlib is the CRC32 of legacy messages


@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**32 - 1))
def test_varints_round_trip(i32: int, i64: int, u32: int) -> None:
    from pulsarwire.kafka.codec import primitives as p

    out = bytearray()
    p.write_varint(out, i32)
    p.write_varlong(out, i64)
    p.write_uvarint(out, u32)
    head = bytearray()
    p.write_varint(head, i32)
    assert len(head) == p.varint_size(i32) <= 5
    r = p.Reader(bytes(out))
    assert (r.varint(), r.varlong(), r.uvarint()) == (i32, i64, u32)
    r.done("varints")
    with pytest.raises(KafkaEncodeError):
        p.write_varint(bytearray(), 2**31)
    with pytest.raises(KafkaEncodeError):
        p.write_uvarint(bytearray(), -1)


def _producer_shaped(b: RecordBatch) -> RecordBatch:
    """``b`` as a producer sends it: offset deltas 0, 1, 2... and the last delta to match."""
    recs = tuple(Record(i, r.timestamp_delta, r.key, r.value, r.headers) for i, r in enumerate(b.records))
    return RecordBatch(
        b.base_offset, recs, b.base_timestamp, b.max_timestamp, len(recs) - 1, b.compression, b.attributes,
        b.partition_leader_epoch, b.producer_id, b.producer_epoch, b.base_sequence,
    )  # fmt: skip


def _outcome(fn: object, data: bytes) -> type[BaseException] | RecordBatch:
    try:
        result = fn(data)  # type: ignore[operator]
    except KafkaProtocolError as exc:
        return type(exc)
    assert isinstance(result, RecordBatch)
    return result


@settings(max_examples=150, deadline=None)
@given(
    batch, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4), st.integers(0, 64)
)
def test_check_batch_agrees_with_decode_batch(b: RecordBatch, flips: list[tuple[int, int]], cut: int) -> None:
    """The broker's cheap validation accepts exactly what decoding accepts for a producer-shaped
    batch, intact or with bytes changed (CRC recomputed, so the records' own structure is what is
    tested) or cut, and refuses with the same error class -- or with KafkaRecordError when a
    record's offset delta is wrong before the bytes that break decoding."""
    good = records.encode_batch(_producer_shaped(b))
    checked = records.check_batch(good)
    assert checked.records == () and checked == RecordBatch(
        **{**_fields(records.decode_batch(good)), "records": ()}
    )
    mutated = bytearray(good)
    for at, value in flips:
        if records.CRC_FROM <= at < len(mutated):
            mutated[at] = value
    struct.pack_into(">I", mutated, 17, crc32c.crc32c(bytes(mutated[records.CRC_FROM :])))
    for data in (bytes(mutated), good[: max(0, len(good) - cut)]):
        decoded, walked = _outcome(records.decode_batch, data), _outcome(records.check_batch, data)
        if isinstance(decoded, RecordBatch):
            ordered = [r.offset_delta for r in decoded.records] == list(range(len(decoded.records)))
            if ordered and decoded.last_offset_delta == len(decoded.records) - 1:
                assert walked == RecordBatch(**{**_fields(decoded), "records": ()})
            else:
                assert walked is KafkaRecordError  # decodable, but not as a producer must send it
        else:
            assert not isinstance(walked, RecordBatch)  # refused too
            if walked is not KafkaRecordError:  # unless the offset-delta rule caught it first:
                assert walked is decoded  # the same error


def _fields(b: RecordBatch) -> dict[str, object]:
    return {name: getattr(b, name) for name in RecordBatch.__dataclass_fields__}


def test_check_batch_refuses_offset_deltas_out_of_order() -> None:
    b = records.make_batch(0, [(None, b"a", ()), (None, b"b", ())], timestamp=0)
    swapped = RecordBatch(0, (Record(1, 0, None, b"a"), Record(0, 0, None, b"b")), 0, 0, 1)
    records.check_batch(records.encode_batch(b))
    with pytest.raises(KafkaRecordError, match="offset delta"):
        records.check_batch(records.encode_batch(swapped))
    short = RecordBatch(0, b.records, 0, 0, 5)  # last offset delta says six records
    with pytest.raises(KafkaRecordError):
        records.check_batch(records.encode_batch(short))
