"""Hypothesis-driven fuzzing of the decoders: bad bytes may only ever raise PulsarWireError subclasses.

Inputs are random bytes, random bytes behind plausible headers, and *mutated valid frames* (bit
flips, byte sets, truncation, insertion, deletion, size-field rewrites) built with our encoder,
including batches under every compression codec, with and without the optional checksum section.
They go through FrameDecoder (whole or in random pieces, with the checksum checked or not, so
corrupt metadata and payloads reach the deeper decoders) and every decoded payload through
open_entry. Any exception that is not a PulsarWireError fails the test. Errors inside a complete
frame must also consume that frame (the decoder makes progress); outer framing errors end the
stream.

``bench/fuzz_codec.py`` runs the same kind of inputs for millions of iterations; this file keeps
a bounded budget so the suite stays fast.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pulsarwire.codec import (
    ChunkReassembler,
    FrameDecoder,
    InvalidMessageIdError,
    MessageId,
    compress,
    decompress,
    encode_batch,
    encode_command,
    encode_payload_command,
    iter_batch,
    new_command,
    open_entry,
)
from pulsarwire.errors import (
    ChunkError,
    FrameError,
    PulsarWireError,
)
from pulsarwire.proto import pb
from tests.helpers.examples import examples

U32 = struct.Struct(">I")
T = pb.BaseCommand
MAX_MESSAGE = 64 * 1024
MAX_UNCOMPRESSED = 256 * 1024

FUZZ = settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ_SMALL = settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow])

INTERESTING_U32 = [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    16,
    255,
    256,
    MAX_MESSAGE,
    MAX_MESSAGE + 10 * 1024,
    MAX_MESSAGE + 10 * 1024 + 1,
    2**31 - 1,
    2**31,
    2**32 - 1,
]


# ---------------------------------------------------------------------------
# seed corpus: valid frames with the offsets of their u32 size fields
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    data: bytes
    size_fields: tuple[int, ...]  # offsets of big-endian u32 sizes inside ``data``


def _meta(**kw: Any) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="fuzz", sequence_id=7, publish_time=1_700_000_000_000, **kw)


def _message_cmd(ledger: int, entry: int) -> pb.BaseCommand:
    cmd, sub = new_command(T.MESSAGE)
    sub.consumer_id = 1
    sub.message_id.ledgerId = ledger
    sub.message_id.entryId = entry
    return cmd


def _payload_seed(
    cmd: pb.BaseCommand, md: pb.MessageMetadata, payload: bytes, bem: bool, checksum: bool = True
) -> Seed:
    bem_md = pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_123, index=42) if bem else None
    data = encode_payload_command(cmd, md, payload, bem_md, checksum=checksum)
    cmd_size = len(cmd.SerializeToString())
    offsets = [0, 4]
    pos = 8 + cmd_size
    if bem_md is not None:
        offsets.append(pos + 2)
        pos += 6 + len(bem_md.SerializeToString())
    offsets.append(pos + 6 if checksum else pos)  # metadata size
    return Seed(data, tuple(offsets))


def _build_seeds() -> list[Seed]:
    seeds: list[Seed] = []
    for kind in (T.PING, T.PONG):
        seeds.append(Seed(encode_command(new_command(kind)[0]), (0, 4)))
    cmd, sub = new_command(T.FLOW)
    sub.consumer_id, sub.messagePermits = 3, 1000
    seeds.append(Seed(encode_command(cmd), (0, 4)))
    cmd, sub = new_command(T.CONNECT)
    sub.client_version, sub.protocol_version = "fuzz", 21
    seeds.append(Seed(encode_command(cmd), (0, 4)))
    cmd, sub = new_command(T.SEND)
    sub.producer_id, sub.sequence_id = 1, 2
    seeds.append(_payload_seed(cmd, _meta(), b"a single message", bem=False))

    entries = [
        (
            pb.SingleMessageMetadata(partition_key=f"key-{i}", sequence_id=i, event_time=i * 10),
            bytes([i]) * (i * 7),
        )
        for i in range(5)
    ]
    raw = encode_batch(entries)
    for i, codec in enumerate([pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]):
        md = _meta(num_messages_in_batch=len(entries), uncompressed_size=len(raw), compression=codec)
        seeds.append(_payload_seed(_message_cmd(10 + i, i), md, compress(codec, raw), bem=bool(i % 2)))
        # The same entry without the optional checksum section (as pulsar-lite delivers entries).
        seeds.append(
            _payload_seed(_message_cmd(20 + i, i), md, compress(codec, raw), bem=not i % 2, checksum=False)
        )
    # A stream of several frames, so that mutations hit frame boundaries too.
    stream = b"".join(s.data for s in seeds[:3]) + seeds[-1].data
    seeds.append(Seed(stream, (0, 4)))
    return seeds


SEEDS = _build_seeds()


# ---------------------------------------------------------------------------
# mutations
# ---------------------------------------------------------------------------

positions = st.integers(0, 2**16)
mutations = st.one_of(
    st.tuples(st.just("flip"), positions, st.integers(0, 7)),
    st.tuples(st.just("set"), positions, st.integers(0, 255)),
    st.tuples(st.just("truncate"), positions),
    st.tuples(st.just("insert"), positions, st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), positions, st.integers(1, 16)),
    st.tuples(
        st.just("size"), positions, st.one_of(st.sampled_from(INTERESTING_U32), st.integers(0, 2**32 - 1))
    ),
    st.tuples(st.just("size-delta"), positions, st.integers(-8, 8)),
)


def mutate(seed: Seed, ops: list[tuple[Any, ...]]) -> bytes:
    b = bytearray(seed.data)
    for op in ops:
        kind = op[0]
        if kind in ("size", "size-delta"):
            offset = seed.size_fields[op[1] % len(seed.size_fields)]
            if offset + 4 > len(b):
                continue
            value = op[2]
            if kind == "size-delta":
                value = (U32.unpack_from(b, offset)[0] + value) % 2**32
            b[offset : offset + 4] = U32.pack(value)
            continue
        if not b and kind != "insert":
            continue
        pos = op[1] % (len(b) + 1)
        if kind == "flip" and pos < len(b):
            b[pos] ^= 1 << op[2]
        elif kind == "set" and pos < len(b):
            b[pos] = op[2]
        elif kind == "truncate":
            del b[pos:]
        elif kind == "insert":
            b[pos:pos] = op[2]
        elif kind == "delete":
            del b[pos : pos + op[2]]
    return bytes(b)


# ---------------------------------------------------------------------------
# the harness
# ---------------------------------------------------------------------------


@dataclass
class Outcome:
    errors: list[type[PulsarWireError]]
    frame_types: list[int]
    clean_end: bool  # every byte was consumed by whole frames (no fatal error, no truncation)


def drive(data: bytes, cuts: list[int], verify_checksum: bool) -> Outcome:
    """Feed ``data`` in pieces and open every payload, collecting the PulsarWireErrors seen.

    Anything else propagates and fails the calling test.
    """
    dec = FrameDecoder(MAX_MESSAGE, verify_checksum=verify_checksum)
    out = Outcome([], [], clean_end=False)
    prev = 0
    for cut in [*sorted(set(c % (len(data) + 1) for c in cuts)), len(data)]:
        dec.feed(data[prev:cut])
        prev = cut
        while True:
            before = dec.buffered
            try:
                frame = dec.next_frame()
            except FrameError as exc:  # outer framing: fatal to the stream
                out.errors.append(type(exc))
                return out
            except PulsarWireError as exc:  # inside a complete frame: consumed, go on
                out.errors.append(type(exc))
                assert dec.buffered < before, f"{type(exc).__name__} did not consume its frame"
                continue
            if frame is None:
                break
            out.frame_types.append(frame.type)
            if frame.type == T.MESSAGE:
                MessageId.from_proto(frame.sub.message_id)
            if frame.payload is not None:
                try:
                    open_entry(frame.payload.metadata, frame.payload.payload, MAX_UNCOMPRESSED)
                except PulsarWireError as exc:
                    out.errors.append(type(exc))
    try:
        dec.eof()
    except PulsarWireError as exc:
        out.errors.append(type(exc))
    else:
        out.clean_end = True
    return out


cut_lists = st.lists(st.integers(0, 2**16), max_size=6)


@FUZZ
@given(data=st.binary(max_size=3000), cuts=cut_lists, verify=st.booleans())
def test_random_bytes(data: bytes, cuts: list[int], verify: bool) -> None:
    drive(data, cuts, verify)


@FUZZ
@given(
    command=st.binary(min_size=1, max_size=200),
    section=st.binary(max_size=400),
    cuts=cut_lists,
    verify=st.booleans(),
)
def test_random_command_and_section_behind_valid_sizes(
    command: bytes, section: bytes, cuts: list[int], verify: bool
) -> None:
    frame = U32.pack(4 + len(command) + len(section)) + U32.pack(len(command)) + command + section
    drive(frame, cuts, verify)


@FUZZ
@given(
    ledger=st.integers(0, 2**64 - 1),
    section=st.one_of(
        st.binary(max_size=400),
        st.binary(max_size=400).map(lambda b: b"\x0e\x01" + b),
        st.binary(max_size=400).map(lambda b: b"\x0e\x02" + b),
    ),
    verify=st.booleans(),
)
def test_random_payload_section_of_a_valid_message_command(ledger: int, section: bytes, verify: bool) -> None:
    cmd = _message_cmd(ledger, 1).SerializeToString()
    drive(U32.pack(4 + len(cmd) + len(section)) + U32.pack(len(cmd)) + cmd + section, [], verify)


@FUZZ
@given(
    seed=st.sampled_from(SEEDS),
    ops=st.lists(mutations, min_size=1, max_size=5),
    cuts=cut_lists,
    verify=st.booleans(),
)
def test_mutated_valid_frames(seed: Seed, ops: list[tuple[Any, ...]], cuts: list[int], verify: bool) -> None:
    drive(mutate(seed, ops), cuts, verify)


@FUZZ_SMALL
@given(
    seed=st.sampled_from(SEEDS),
    ops=st.lists(mutations, min_size=1, max_size=3),
    good=st.sampled_from(SEEDS),
    cuts=cut_lists,
)
def test_a_mutated_frame_does_not_disturb_the_frames_after_it(
    seed: Seed, ops: list[tuple[Any, ...]], good: Seed, cuts: list[int]
) -> None:
    bad = mutate(seed, ops)
    alone = drive(bad, [], True)
    if not alone.clean_end:
        return  # the stream was already lost inside the bad bytes
    after = drive(bad + good.data, cuts, True)
    assert after.errors == alone.errors
    assert after.frame_types == alone.frame_types + drive(good.data, [], True).frame_types
    assert after.clean_end


# ---------------------------------------------------------------------------
# deeper decoders directly: entries, batches, compression, ids, chunks
# ---------------------------------------------------------------------------

_ENTRIES = [
    (pb.SingleMessageMetadata(partition_key=f"k{i}", sequence_id=i), bytes([65 + i]) * (3 * i))
    for i in range(6)
]
RAW_BATCH = encode_batch(_ENTRIES)
COMPRESSED: dict[int, bytes] = {
    codec: compress(codec, RAW_BATCH) for codec in (pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY)
}
interesting_i32 = st.sampled_from([-(2**31), -1, 0, 1, 2, 5, 6, 7, 100, 2**31 - 1])


@FUZZ
@given(
    codec=st.sampled_from(sorted(COMPRESSED)),
    declared_codec=st.integers(0, 4),
    uncompressed=st.one_of(st.just(len(RAW_BATCH)), st.sampled_from(INTERESTING_U32), st.integers(0, 5000)),
    count=st.one_of(st.none(), st.just(len(_ENTRIES)), interesting_i32, st.integers(-10, 50)),
    ops=st.lists(mutations, max_size=4),
)
def test_mutated_entries_through_open_entry(
    codec: int, declared_codec: int, uncompressed: int, count: int | None, ops: list[tuple[Any, ...]]
) -> None:
    md = _meta(uncompressed_size=uncompressed)
    md.compression = declared_codec  # type: ignore[assignment]
    if count is not None:
        md.num_messages_in_batch = count
    payload = mutate(Seed(COMPRESSED[codec], (0,)), ops)
    try:
        messages = open_entry(md, payload, MAX_UNCOMPRESSED)
    except PulsarWireError:
        return
    if count is not None:
        assert len(messages) == count
        assert [m.batch_index for m in messages] == list(range(count))


@FUZZ
@given(
    count=st.one_of(interesting_i32, st.integers(-3, 40)),
    ops=st.lists(mutations, max_size=5),
)
@example(  # one entry whose metadata writes payload_size twice (found in a clean-clone CI run)
    count=1, ops=[("truncate", 2385), ("insert", 9, b"\x00\x00\x00\x00\x00"), ("delete", 970, 15)]
)
def test_mutated_batches_through_iter_batch(count: int, ops: list[tuple[Any, ...]]) -> None:
    # Every entry's metadata size is a size field worth rewriting.
    offsets, pos = [], 0
    for smm, payload in _ENTRIES:
        offsets.append(pos)
        pos += 4 + len(smm.SerializeToString()) + len(payload)
    data = mutate(Seed(RAW_BATCH, tuple(offsets)), ops)
    try:
        entries = list(iter_batch(data, count))
    except PulsarWireError:
        return
    assert len(entries) == count
    # The entries cover the data exactly, each payload where its size prefix puts it. (Not by
    # re-serializing the metadata: a field written twice is valid protobuf, the last one wins,
    # and re-serializing writes it once.)
    pos = 0
    for smm, payload in entries:
        (md_size,) = U32.unpack_from(data, pos)
        pos += 4 + md_size + smm.payload_size
        assert data[pos - len(payload) : pos] == payload and len(payload) == smm.payload_size
    assert pos == len(data)


@FUZZ
@given(
    codec=st.integers(-2, 8),
    data=st.one_of(st.binary(max_size=300), st.sampled_from(sorted(COMPRESSED.values()))),
    declared=st.one_of(st.integers(0, 5000), st.sampled_from(INTERESTING_U32)),
)
def test_decompress_arbitrary_input(codec: int, data: bytes, declared: int) -> None:
    try:
        out = decompress(codec, data, declared, 4096)
    except PulsarWireError:
        return
    if codec != pb.NONE:
        assert len(out) == declared


@FUZZ
@given(text=st.one_of(st.text(max_size=40), st.text(alphabet="0123456789:- ", max_size=40)))
def test_message_id_parse_arbitrary_text(text: str) -> None:
    try:
        m = MessageId.parse(text)
    except InvalidMessageIdError:
        return
    assert MessageId.parse(str(m)) == m


@FUZZ
@given(data=st.binary(max_size=60))
def test_message_id_deserialize_arbitrary_bytes(data: bytes) -> None:
    try:
        MessageId.deserialize(data)
    except InvalidMessageIdError:
        return


chunk_steps = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),  # uuid
        st.integers(-1, 4),  # chunk_id
        st.sampled_from([0, 1, 2, 3, 4]),  # num_chunks_from_msg
        st.sampled_from([-1, 0, 10, 30, 60, 2**31 - 1]),  # total_chunk_msg_size
        st.integers(0, 40),  # payload length
        st.integers(0, 500),  # time step
    ),
    max_size=40,
)


@FUZZ
@given(steps=chunk_steps, max_pending=st.integers(1, 3), max_bytes=st.sampled_from([20, 50, 1000]))
def test_chunk_reassembler_never_loses_a_chunk_silently(
    steps: list[tuple[str, int, int, int, int, int]], max_pending: int, max_bytes: int
) -> None:
    r: ChunkReassembler[int] = ChunkReassembler(
        max_pending=max_pending, max_buffered_bytes=max_bytes, max_message_size=1000, expire_after_ms=1000
    )
    now = 0
    completed: list[int] = []
    refused: list[int] = []
    duplicates: list[int] = []
    for chunk_no, (uuid, cid, num, total, size, dt) in enumerate(steps):
        now += dt
        md = _meta(uuid=uuid, chunk_id=cid, num_chunks_from_msg=num, total_chunk_msg_size=total)
        dup_before = r.duplicates
        dropped_before = {i for d in r.dropped for i in d.chunk_ids}
        try:
            msg = r.add(md, b"x" * size, chunk_no, now)
        except ChunkError:
            if chunk_no not in {i for d in r.dropped for i in d.chunk_ids} - dropped_before:
                refused.append(chunk_no)
            msg = None
        else:
            if r.duplicates > dup_before:
                duplicates.append(chunk_no)
        if msg is not None:
            assert len(msg.payload) == total
            completed.extend(msg.chunk_ids)
        r.expire(now)
        assert 0 <= r.buffered_bytes <= max_bytes
        assert r.pending <= max_pending
    r.expire(now + 10**9)  # flush what is left
    assert r.pending == 0
    assert r.buffered_bytes == 0
    dropped = [i for d in r.dropped for i in d.chunk_ids]
    accounted = completed + dropped + refused + duplicates
    assert sorted(accounted) == list(range(len(steps))), "a chunk vanished or was counted twice"


def test_seed_corpus_is_valid() -> None:
    for seed in SEEDS:
        outcome = drive(seed.data, [], True)
        assert outcome.errors == []
        assert outcome.clean_end
