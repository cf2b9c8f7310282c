"""The batch decoder's fast paths give exactly what decoding one entry at a time gives.

``split_batch`` guesses runs of same-shape entries and parses their metadata in one call;
``split_batch_raw`` checks the same way and keeps each entry's metadata bytes;
``split_batch_columns`` also reads fields column by column from one parse of the concatenated
metadata. The judge is the same decoder with guessing switched off (every entry decoded on
its own, the decoder before the fast paths) and, for columns, a plain per-entry reading of
its metadata. Batches are made of runs of one shape with varying values (sequence ids
crossing varint size boundaries, keys, properties, event times), mixed shapes, runs longer
than one ``struct`` chunk, and metadata bytes no protobuf encoder writes (duplicated fields,
unknown fields, varint fields written length-delimited, deep nesting). Bad input gives the
same typed error on every path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarwire.codec import batch
from pulsarwire.codec.batch import BatchColumns, key_bytes, split_batch, split_batch_columns, split_batch_raw
from pulsarwire.errors import BatchEntryError, PulsarWireError
from pulsarwire.proto import pb
from tests.helpers.examples import examples

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
U32 = struct.Struct(">I")

# ---------------------------------------------------------------------------
# the judge
# ---------------------------------------------------------------------------


@contextmanager
def one_by_one() -> Iterator[None]:
    """Switch the guessing off: every entry is decoded on its own."""
    with mock.patch.object(batch, "_same_shape_run", lambda *args: 0):
        yield


def reference_columns(metas: list[pb.SingleMessageMetadata], payloads: list[bytes]) -> BatchColumns:
    """What split_batch_columns must give, read entry by entry from the parsed metadata."""
    keys = [key_bytes(m.partition_key) if m.HasField("partition_key") else None for m in metas]
    events = [m.event_time if m.HasField("event_time") else None for m in metas]
    seqs = [m.sequence_id if m.HasField("sequence_id") else None for m in metas]
    counts = [len(m.properties) for m in metas]
    return BatchColumns(
        payloads,
        keys if any(k is not None for k in keys) else None,
        events if any(e is not None for e in events) else None,
        seqs if any(s is not None for s in seqs) else None,
        counts if any(counts) else None,
        [kv.key for m in metas for kv in m.properties],
        [kv.value for m in metas for kv in m.properties],
    )


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except PulsarWireError as exc:
        return type(exc).__name__, str(exc)


def assert_same_as_one_by_one(data: bytes, count: int) -> None:
    """Every path gives the one-by-one result: same values, or the same typed error."""
    with one_by_one():
        judged = outcome(lambda: split_batch(data, count))
    fast = outcome(lambda: split_batch(data, count))
    columns = outcome(lambda: split_batch_columns(data, count))
    raw = outcome(lambda: split_batch_raw(data, count))
    if judged[0] != "ok":
        assert fast == judged
        assert columns == judged
        assert raw == judged
        return
    metas, payloads = judged[1]
    assert fast[0] == "ok"
    fast_metas, fast_payloads = fast[1]
    assert fast_payloads == payloads
    assert fast_metas == metas
    # Same bytes too: unknown fields and presence survive the one-call parse.
    assert [m.SerializePartialToString() for m in fast_metas] == [m.SerializePartialToString() for m in metas]
    assert columns == ("ok", reference_columns(metas, payloads))
    assert raw[0] == "ok"
    raw_metas, raw_payloads = raw[1]
    assert raw_payloads == payloads
    parsed = [pb.SingleMessageMetadata.FromString(m) for m in raw_metas]
    assert [m.SerializePartialToString() for m in parsed] == [m.SerializePartialToString() for m in metas]


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------

# Metadata bytes appended to an entry's own, as other encoders (or attackers) could write them.
EXTRAS = [
    b"",
    b"\x78\x01",  # unknown field 15 (varint)
    b"\x40\x07",  # sequence_id again: the last one counts
    b"\x28\x00",  # event_time 0 written explicitly
    b"\x12\x01k",  # partition_key again
    b"\x0a\x06\x0a\x01a\x12\x01b",  # one more property
    b"\x42\x01\x05",  # sequence_id written length-delimited: an unknown field
    b"\x2a\x02\x01\x02",  # event_time written length-delimited: an unknown field
    b"\x1a\x01\x05",  # payload_size written length-delimited: an unknown field
    b"\x12\x02\xff\xfe",  # a partition key that is not UTF-8
    b"\x45\x01\x00\x00\x00",  # sequence_id with the wrong wire type (fixed32): unknown
]
SEQUENCE_STARTS = [0, 100, 16_300, 2**21 - 40, 2**28 - 10, 2**63 - 5, 2**64 - 200]


@st.composite
def runs(draw: st.DrawFn) -> list[tuple[bytes, bytes]]:
    """Entries (metadata bytes, payload) of one run: same fields, values that may change size."""
    length = draw(st.sampled_from([1, 2, 3, 15, 16, 17, 40, 127, 128, 129, 150]))
    size = draw(st.integers(0, 24))
    seq = draw(st.sampled_from([None, *SEQUENCE_STARTS]))
    key = draw(st.sampled_from([None, "k", "varying"]))
    event = draw(st.sampled_from([None, 0, 1_700_000_000_000, "varying"]))
    props = draw(st.sampled_from([0, 1, 2, "varying"]))
    extra = draw(st.sampled_from(EXTRAS))
    extra_every = draw(st.sampled_from([1, 7, length + 1]))  # on every entry, some, or none
    entries = []
    for i in range(length):
        smm = pb.SingleMessageMetadata(payload_size=size)
        if seq is not None:
            smm.sequence_id = (seq + i) % 2**64
        if key is not None:
            smm.partition_key = key if key == "k" else f"k{i}"
        if event is not None:
            smm.event_time = 1000 + i if event == "varying" else event
        for j in range(i % 3 if props == "varying" else props):
            smm.properties.add(key=f"p{j}", value=str(i))
        md = smm.SerializeToString()
        if i % extra_every == 0:
            md += extra
        entries.append((md, bytes([i % 251]) * size))
    return entries


def assemble(entries: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(U32.pack(len(md)) + md + payload for md, payload in entries)


batches = st.lists(runs(), min_size=1, max_size=4).map(lambda rs: [e for r in rs for e in r])


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------


@SETTINGS
@given(entries=batches)
def test_fast_paths_give_what_one_by_one_gives(entries: list[tuple[bytes, bytes]]) -> None:
    assert_same_as_one_by_one(assemble(entries), len(entries))


@SETTINGS
@given(
    entries=batches,
    count_delta=st.sampled_from([-1, 0, 0, 0, 1]),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=3),
    cut=st.sampled_from([0, 0, 1, 5]),
)
def test_bad_batches_fail_alike_on_every_path(
    entries: list[tuple[bytes, bytes]], count_delta: int, edits: list[tuple[float, int]], cut: int
) -> None:
    data = bytearray(assemble(entries))
    for where, value in edits:
        data[int(where * len(data))] = value
    raw = bytes(data[: len(data) - cut])
    assert_same_as_one_by_one(raw, len(entries) + count_delta)


# ---------------------------------------------------------------------------
# cases the guessing must not get wrong
# ---------------------------------------------------------------------------


def entry(md: bytes, payload: bytes) -> tuple[bytes, bytes]:
    return md, payload


def smm_bytes(**fields: Any) -> bytes:
    return pb.SingleMessageMetadata(**fields).SerializeToString()


def same_shape(n: int, size: int = 10, **fields: Any) -> list[tuple[bytes, bytes]]:
    return [
        entry(smm_bytes(payload_size=size, sequence_id=1000 + i, **fields), b"x" * size) for i in range(n)
    ]


def test_a_uniform_batch_decodes_like_one_by_one() -> None:
    entries = same_shape(1000, partition_key="key", event_time=5)
    assert_same_as_one_by_one(assemble(entries), 1000)
    cols = split_batch_columns(assemble(entries), 1000)
    assert cols.sequence_ids == list(range(1000, 2000))
    assert cols.partition_keys == [b"key"] * 1000
    assert cols.event_times == [5] * 1000
    assert cols.property_counts is None


def test_sequence_ids_crossing_a_varint_size_boundary() -> None:
    # 16383 -> 16384 makes the metadata one byte longer: two runs of different shapes.
    entries = [entry(smm_bytes(payload_size=3, sequence_id=16_300 + i), b"abc") for i in range(200)]
    assert_same_as_one_by_one(assemble(entries), 200)
    assert split_batch_columns(assemble(entries), 200).sequence_ids == list(range(16_300, 16_500))


def test_payload_size_changing_inside_a_run_of_equal_metadata_sizes() -> None:
    entries = same_shape(40, size=10) + same_shape(40, size=11)
    assert_same_as_one_by_one(assemble(entries), 80)


def test_packed_payload_size_cannot_stand_in_for_a_missing_one() -> None:
    # All metadata are 8 bytes and canonical. One entry carries an extra payload_size written
    # length-delimited (an unknown field for SingleMessageMetadata), a later one has none.
    # Counting payload_size values over the concatenated metadata would find one per entry;
    # the decoder must still reject the entry without payload_size.
    good = b"\x18\x01" + b"\x78\x01" * 3
    tricky = b"\x18\x01" + b"\x1a\x01\x01" + b"\x78\x81\x01"
    missing = b"\x78\x01" * 4
    assert len(good) == len(tricky) == len(missing)
    entries = [entry(good, b"a")] * 20 + [entry(tricky, b"a")] + [entry(good, b"a")] * 20
    entries += [entry(missing, b"a")] + [entry(good, b"a")] * 20
    data = assemble(entries)
    with pytest.raises(BatchEntryError, match="entry 41: SingleMessageMetadata without payload_size"):
        split_batch_columns(data, len(entries))
    assert_same_as_one_by_one(data, len(entries))


def test_duplicated_fields_keep_the_last_value_in_columns() -> None:
    # sequence_id written twice in every other entry: per entry the last one counts.
    entries = []
    for i in range(60):
        md = smm_bytes(payload_size=2, sequence_id=i)
        entries.append(entry(md + (b"\x40\x07" if i % 2 else b"\x78\x00"), b"ab"))
    assert_same_as_one_by_one(assemble(entries), 60)
    assert split_batch_columns(assemble(entries), 60).sequence_ids == [7 if i % 2 else i for i in range(60)]


def test_a_field_twice_in_one_entry_and_missing_in_another() -> None:
    # One sequence_id per entry on average: only the entries themselves say which has which.
    size = b"\x18\x02"
    twice = size + b"\x40\x05\x40\x06"
    none = size + b"\x78\x01\x78\x01"
    entries = [entry(size + bytes([0x40, i, 0x78, 0x01]), b"ab") for i in range(20)]
    entries[5] = entry(twice, b"ab")
    entries[12] = entry(none, b"ab")
    assert_same_as_one_by_one(assemble(entries), 20)
    seqs = split_batch_columns(assemble(entries), 20).sequence_ids
    assert seqs is not None and (seqs[5], seqs[12], seqs[13]) == (6, None, 13)


def test_a_key_that_is_not_utf8_is_read_as_its_bytes() -> None:
    entries = [entry(b"\x12\x02\xff\xfe" + smm_bytes(payload_size=1), b"z")] * 30
    assert_same_as_one_by_one(assemble(entries), 30)
    assert split_batch_columns(assemble(entries), 30).partition_keys == [b"\xff\xfe"] * 30


def test_metadata_nested_to_the_parser_limit() -> None:
    # Unknown groups nested deep: fine on its own, one level too deep inside the wrapper the
    # fast path parses. The decoder must fall back, not fail.
    depth = 98
    nested = b"\x7b" * depth + b"\x7c" * depth  # start/end group, field 15
    md = smm_bytes(payload_size=1) + nested
    entries = [entry(md, b"q")] * 40
    assert_same_as_one_by_one(assemble(entries), 40)


def test_empty_payloads_need_payload_size_written() -> None:
    entries = [entry(smm_bytes(payload_size=0), b"")] * 30
    assert_same_as_one_by_one(assemble(entries), 30)
    missing = [entry(b"\x78\x00", b"")] * 30  # same metadata size, payload_size absent
    data = assemble(entries[:10] + missing[:1] + entries[:19])
    with pytest.raises(BatchEntryError, match="entry 10: SingleMessageMetadata without payload_size"):
        split_batch(data, 30)
    assert_same_as_one_by_one(data, 30)


def test_columns_of_a_batch_with_some_fields_in_some_entries_only() -> None:
    entries = same_shape(20) + same_shape(20, partition_key="k") + same_shape(20, event_time=9)
    entries += [entry(smm_bytes(payload_size=10, properties=[pb.KeyValue(key="a", value="b")]), b"y" * 10)]
    assert_same_as_one_by_one(assemble(entries), len(entries))
    cols = split_batch_columns(assemble(entries), len(entries))
    assert cols.partition_keys == [None] * 20 + [b"k"] * 20 + [None] * 21
    assert cols.property_counts == [0] * 60 + [1]
    assert (cols.property_keys, cols.property_values) == (["a"], ["b"])
