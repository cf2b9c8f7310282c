"""Fuzzing the Kafka decoders: mutated golden frames (all three clients), mutated record batches
under every codec and legacy message sets may only ever raise KafkaWireError subclasses, fed
whole or through the frame splitter in pieces."""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarwire.kafka.codec import compression, messages, records
from pulsarwire.kafka.codec.frames import FrameSplitter, join
from pulsarwire.kafka.errors import KafkaWireError

GOLDEN = sorted((Path(__file__).parent.parent / "golden").glob("*.bin"))
FRAMES = [p.read_bytes() for p in GOLDEN]
BATCHES = [
    records.encode_batch(
        records.make_batch(
            7,
            [(b"k", b"value" * 20, (("h", b"v"), ("n", None))), (None, None, ())],
            timestamp=123,
            compression_codec=codec,
            producer_id=5,
            producer_epoch=1,
            base_sequence=3,
        )
    )
    for codec in (0, 1, 2, 3, 4)
] + [
    records.encode_batch(
        records.control_batch(
            1, commit=True, coordinator_epoch=2, producer_id=3, producer_epoch=4, timestamp=5
        )
    )
]
LEGACY = [
    records.encode_message(0, 1, b"k", b"v", timestamp=1),
    records.encode_message(
        5, 1, None, compression.compress(1, records.encode_message(0, 1, None, b"a")), attributes=1
    ),
]


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete", "size"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif at + 4 <= len(data):
            struct.pack_into(">i", data, at, draw(st.sampled_from([-2, -1, 0, 1, 0x7FFF, 2**31 - 1])))
    return bytes(data)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(mutated(FRAMES), st.integers(0, 64))
def test_mutated_request_frames(data: bytes, split: int) -> None:
    try:
        req = messages.decode_request(data)
    except KafkaWireError:
        pass
    else:  # whatever decodes re-encodes to a frame that decodes to the same request
        again = messages.encode_request(
            req.api_key, req.api_version, req.correlation_id, req.client_id, req.body, req.header_tags
        )
        assert messages.decode_request(again) == req
    splitter = FrameSplitter(max_frame_size=1 << 16)
    wire = join(data)
    try:
        for piece in (wire[:split], wire[split:]):
            splitter.feed(piece)
            for frame in splitter.frames():
                assert frame == data
    except KafkaWireError:
        pass


@SETTINGS
@given(mutated(BATCHES + LEGACY))
def test_mutated_batches_and_message_sets(data: bytes) -> None:
    for decode in (
        lambda: records.decode_batches(data, max_decompressed=1 << 16),
        lambda: records.decode_batches(data, max_decompressed=1 << 16, partial_tail=True),
        lambda: records.decode_message_set(data, max_decompressed=1 << 16),
    ):
        with contextlib.suppress(KafkaWireError):
            decode()


@SETTINGS
@given(st.sampled_from(sorted(messages.MESSAGES)), st.binary(max_size=64))
def test_random_bytes_into_every_message(name: str, data: bytes) -> None:
    _, lo, hi, _, _ = messages.MESSAGES[name]
    for version in {lo, hi}:
        with contextlib.suppress(KafkaWireError):
            messages.decode_body(name, version, data)
