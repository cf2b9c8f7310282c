"""Both entry layouts, with and without broker entry metadata: golden bytes, the official client, fuzzing.

An entry is ``(0x0e01 checksum)? metadata_size metadata payload``, optionally behind
``0x0e02 size broker_entry_metadata``. Brokers that are not Apache Pulsar (pulsar-lite) send
MESSAGE frames without the checksum section, and Pulsar's own clients read those unverified
(Java ``Commands.hasChecksum`` / ``skipChecksumIfPresent``). Here:

* golden bytes written out by hand (``struct`` and the crc32c library, not our encoder) for the
  four layouts decode to the same command, metadata and payload, and our encoder writes exactly
  those bytes back;
* the official consumer reads entries of all four layouts that our encoder framed (the
  :class:`~tests.helpers.recorder.Recorder` fake broker stores them and sends MESSAGE frames);
* hypothesis: any metadata and payload round-trip through every layout, and random or mutated
  checksum-less sections only ever raise PulsarWireError subclasses.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from collections.abc import Iterator

import crc32c as crc32c_lib
import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarwire.codec import (
    FrameDecoder,
    MessageId,
    compress,
    decode_frames,
    encode_batch,
    encode_payload_command,
    new_command,
    open_entry,
)
from pulsarwire.codec.frames import encode_payload_section, entry_layout
from pulsarwire.errors import PulsarWireError
from pulsarwire.proto import pb
from tests.helpers.examples import examples
from tests.helpers.recorder import Recorder

T = pb.BaseCommand
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
TOPIC = "persistent://public/default/layouts"
LOG = logging.getLogger("pulsar.official")
LAYOUTS = [
    pytest.param(True, False, id="checksum"),
    pytest.param(False, False, id="no-checksum"),
    pytest.param(True, True, id="bem+checksum"),
    pytest.param(False, True, id="bem+no-checksum"),
]
FUZZ = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _metadata() -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="layouts",
        sequence_id=7,
        publish_time=1_700_000_000_000,
        partition_key="k",
        properties=[pb.KeyValue(key="a", value="b")],
    )


def _bem() -> pb.BrokerEntryMetadata:
    return pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_123, index=42)


def _message_command(ledger: int = 5, entry: int = 9) -> pb.BaseCommand:
    cmd, sub = new_command(T.MESSAGE)
    sub.consumer_id = 3
    sub.message_id.ledgerId = ledger
    sub.message_id.entryId = entry
    return cmd


def _by_hand(cmd: pb.BaseCommand, md: bytes, payload: bytes, checksum: bool, bem: bytes | None) -> bytes:
    """The frame, written from the grammar with struct and the crc32c library only."""
    body = U32.pack(len(md)) + md + payload
    section = body
    if checksum:
        section = U16.pack(0x0E01) + U32.pack(crc32c_lib.crc32c(body)) + body
    if bem is not None:
        section = U16.pack(0x0E02) + U32.pack(len(bem)) + bem + section
    command = cmd.SerializeToString()
    return U32.pack(4 + len(command) + len(section)) + U32.pack(len(command)) + command + section


@pytest.mark.parametrize(("checksum", "with_bem"), LAYOUTS)
def test_golden_bytes_of_each_layout_decode_and_encode_identically(checksum: bool, with_bem: bool) -> None:
    md, payload = _metadata(), b"payload bytes \x00\x01\x02"
    bem = _bem() if with_bem else None
    cmd = _message_command()
    bem_bytes = bem.SerializeToString() if bem else None
    golden = _by_hand(cmd, md.SerializeToString(), payload, checksum, bem_bytes)

    (frame,) = decode_frames(golden)
    assert frame.command == cmd
    assert frame.payload is not None
    assert frame.payload.metadata == md
    assert frame.payload.payload == payload
    assert frame.payload.broker_entry_metadata == bem
    # The entry is what follows the broker entry metadata, in the layout it came in.
    entry = frame.payload.entry
    assert entry.startswith(b"\x0e\x01") is checksum
    body_start, md_start, md_size = entry_layout(entry)
    md_len = len(md.SerializeToString())
    assert (body_start, md_start - body_start, md_size) == (6 if checksum else 0, 4, md_len)

    assert encode_payload_command(cmd, md, payload, bem, checksum=checksum) == golden


def test_no_checksum_layout_is_the_checksum_layout_minus_its_six_bytes() -> None:
    md, payload = _metadata(), b"x" * 100
    with_crc = encode_payload_section(md, payload)
    without = encode_payload_section(md, payload, checksum=False)
    assert with_crc[:2] == b"\x0e\x01"
    assert with_crc[6:] == without


def test_without_checksum_a_corrupt_payload_is_not_detected_by_the_frame_layer() -> None:
    """Nothing to verify: as in Pulsar, the bytes are delivered as they are (a codec may still object)."""
    md, payload = _metadata(), b"original payload"
    data = bytearray(encode_payload_command(_message_command(), md, payload, checksum=False))
    data[-1] ^= 0xFF
    (frame,) = decode_frames(bytes(data))
    assert frame.payload is not None
    assert frame.payload.payload == b"original payloa" + bytes([ord("d") ^ 0xFF])


# ---------------------------------------------------------------------------
# The official consumer reads every layout
# ---------------------------------------------------------------------------


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as rec:
        yield rec
    assert not rec.errors, f"the recorder failed while serving: {rec.errors!r}"


@pytest.fixture
def official(recorder: Recorder) -> Iterator[pulsar.Client]:
    c = pulsar.Client(recorder.url, operation_timeout_seconds=10, logger=LOG)
    try:
        yield c
    finally:
        c.close()
        del c


def test_official_consumer_reads_entries_of_every_layout(recorder: Recorder, official: pulsar.Client) -> None:
    """Single and batched (LZ4) entries in the four layouts, in one topic: all read, in order."""
    sent: list[tuple[bytes, MessageId]] = []
    raw = encode_batch(
        (pb.SingleMessageMetadata(partition_key=f"b{i}", sequence_id=i), f"batched {i}".encode())
        for i in range(3)
    )
    for n, (checksum, with_bem) in enumerate([p.values for p in LAYOUTS]):
        bem = _bem() if with_bem else None
        single = _metadata()
        single.sequence_id = n
        mid = recorder.store(TOPIC, single, f"single {n}".encode(), bem, checksum=checksum)
        sent.append((f"single {n}".encode(), mid))
        batch = pb.MessageMetadata(
            producer_name="layouts",
            sequence_id=100 + n,
            publish_time=1_700_000_000_000,
            num_messages_in_batch=3,
            compression=pb.LZ4,
            uncompressed_size=len(raw),
        )
        mid = recorder.store(TOPIC, batch, compress(pb.LZ4, raw), bem, checksum=checksum)
        sent += [(f"batched {i}".encode(), MessageId(mid.ledger_id, mid.entry_id, -1, i)) for i in range(3)]
    assert [e.section.startswith(b"\x0e\x01") for e in recorder.entries(TOPIC)][:2] == [True, True]
    consumer = official.subscribe(TOPIC, "layouts", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(10_000) for _ in sent]
    assert [m.data() for m in got] == [data for data, _ in sent]
    assert [(m.message_id().entry_id(), m.message_id().batch_index()) for m in got] == [
        (mid.entry_id, mid.batch_index) for _, mid in sent
    ]
    consumer.close()


# ---------------------------------------------------------------------------
# Hypothesis
# ---------------------------------------------------------------------------

texts = st.text(max_size=20)
metadata = st.builds(
    lambda name, seq, key, props: pb.MessageMetadata(
        producer_name=name,
        sequence_id=seq,
        publish_time=1_700_000_000_000,
        partition_key=key,
        properties=[pb.KeyValue(key=k, value=v) for k, v in props],
    ),
    texts,
    st.integers(0, 2**63 - 1),
    texts,
    st.lists(st.tuples(texts, texts), max_size=4),
)


@FUZZ
@given(md=metadata, payload=st.binary(max_size=300), checksum=st.booleans(), with_bem=st.booleans())
def test_any_entry_round_trips_through_every_layout(
    md: pb.MessageMetadata, payload: bytes, checksum: bool, with_bem: bool
) -> None:
    bem = _bem() if with_bem else None
    data = encode_payload_command(_message_command(), md, payload, bem, checksum=checksum)
    (frame,) = decode_frames(data)
    assert frame.payload is not None
    assert (frame.payload.metadata, frame.payload.payload, frame.payload.broker_entry_metadata) == (
        md,
        payload,
        bem,
    )
    assert open_entry(frame.payload.metadata, frame.payload.payload)[0].payload == payload


@FUZZ
@given(
    md=metadata,
    payload=st.binary(max_size=200),
    with_bem=st.booleans(),
    flips=st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 7)), min_size=1, max_size=4),
    cut=st.integers(0, 2**16),
)
def test_mutated_checksum_less_sections_raise_only_typed_errors(
    md: pb.MessageMetadata,
    payload: bytes,
    with_bem: bool,
    flips: list[tuple[int, int]],
    cut: int,
) -> None:
    """Without a checksum the metadata parser and the sizes are all that stand between bad bytes and
    the consumer: mutations (bit flips anywhere after the command, a truncated section) decode or
    raise a PulsarWireError, never anything else, and the decoder always consumes the frame."""
    cmd = _message_command()
    command = cmd.SerializeToString()
    section = bytearray(encode_payload_section(md, payload, _bem() if with_bem else None, checksum=False))
    for pos, bit in flips:
        section[pos % len(section)] ^= 1 << bit
    del section[max(1, cut % (len(section) + 1)) :]
    frame = U32.pack(4 + len(command) + len(section)) + U32.pack(len(command)) + command + bytes(section)
    dec = FrameDecoder()
    dec.feed(frame)
    try:
        decoded = dec.next_frame()
    except PulsarWireError:
        assert dec.buffered == 0, "a bad section must consume its frame"
        return
    assert decoded is not None and decoded.payload is not None
    with contextlib.suppress(PulsarWireError):  # a codec or batch error is fine, anything else is not
        open_entry(decoded.payload.metadata, decoded.payload.payload)
