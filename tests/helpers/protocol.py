"""A broker made of the codec, for the sans-IO ClientProtocol tests: frames in, events out.

The protocol suites (tests/pulsarwire/protocol) build what a broker would send with
``new_command`` / ``encode_command`` / ``encode_payload_section`` (:func:`frame`,
:func:`connected_frame`, :func:`message_frame`), feed it to ``ClientProtocol.receive_data``
and decode what the protocol queued back with ``FrameDecoder`` (:func:`sent_frames`,
:func:`events`). Nothing touches a socket or a real clock.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable
from typing import Any

from google.protobuf.message import Message

from pulsarwire.codec import (
    Frame,
    FrameDecoder,
    encode_command,
    encode_payload_section,
    encode_with_stored_entry,
    new_command,
)
from pulsarwire.proto import PROTOCOL_VERSION, pb
from pulsarwire.protocol.connection import ClientProtocol, Connected, ConnectionClosed
from pulsarwire.protocol.state import ConnectionState

T = pb.BaseCommand
U64_MAX = 2**64 - 1
KEEPALIVE = 30.0


def fill_required(msg: Message) -> Message:
    """Give every unset required field of ``msg`` (recursively) a harmless value."""
    for f in msg.DESCRIPTOR.fields:
        if not f.is_required or msg.HasField(f.name):
            continue
        if f.message_type is not None:
            sub = getattr(msg, f.name)
            sub.SetInParent()
            fill_required(sub)
        elif f.enum_type is not None:
            setattr(msg, f.name, f.enum_type.values[0].number)
        elif f.type == f.TYPE_STRING:
            setattr(msg, f.name, "x")
        elif f.type == f.TYPE_BYTES:
            setattr(msg, f.name, b"x")
        elif f.type == f.TYPE_BOOL:
            setattr(msg, f.name, False)
        else:
            setattr(msg, f.name, 0)
    return msg


def command(type_: int, **fields: Any) -> pb.BaseCommand:
    """A BaseCommand of ``type_`` whose sub-message has ``fields`` (nested messages as dicts)."""
    cmd, sub = new_command(type_)
    sub.MergeFrom(type(sub)(**fields))
    fill_required(sub)
    return cmd


def frame(type_: int, **fields: Any) -> bytes:
    return encode_command(command(type_, **fields))


def connected_frame(**fields: Any) -> bytes:
    fields.setdefault("server_version", "pulsarwire-broker/0.1")
    fields.setdefault("protocol_version", PROTOCOL_VERSION)
    return frame(T.CONNECTED, **fields)


def metadata(sequence_id: int = 0, **fields: Any) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="prod-1", sequence_id=sequence_id, publish_time=1_700_000_000_000, **fields
    )


def message_frame(
    consumer_id: int = 1,
    ledger: int = 3,
    entry: int = 4,
    payload: bytes = b"hello",
    *,
    md: pb.MessageMetadata | None = None,
    ack_set: Iterable[int] = (),
    redelivery_count: int = 0,
    partition: int | None = None,
    batch_index: int | None = None,
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
    corrupt: bool = False,
) -> bytes:
    mid: dict[str, int] = {"ledgerId": ledger % 2**64, "entryId": entry % 2**64}
    if partition is not None:
        mid["partition"] = partition
    if batch_index is not None:
        mid["batch_index"] = batch_index
    cmd = command(
        T.MESSAGE,
        consumer_id=consumer_id,
        message_id=mid,
        ack_set=list(ack_set),
        redelivery_count=redelivery_count,
    )
    section = bytearray(encode_payload_section(md or metadata(), payload, broker_entry_metadata))
    if corrupt:
        section[-1] ^= 0xFF  # payload byte: the CRC32C no longer matches
    return encode_with_stored_entry(cmd, bytes(section))


def sent_frames(proto: ClientProtocol) -> list[Frame]:
    """Decode (and drain) everything the protocol queued for the broker."""
    dec = FrameDecoder()
    dec.feed(proto.data_to_send())
    frames = list(dec)
    dec.eof()
    return frames


def events(proto: ClientProtocol) -> list[Any]:
    out = []
    while (ev := proto.next_event()) is not None:
        out.append(ev)
    return out


def one_event(proto: ClientProtocol) -> Any:
    evs = events(proto)
    assert len(evs) == 1, evs
    return evs[0]


def closed_event(proto: ClientProtocol) -> ConnectionClosed:
    evs = events(proto)
    assert len(evs) == 1 and isinstance(evs[0], ConnectionClosed), evs
    assert proto.state is ConnectionState.CLOSED
    assert proto.closed
    return evs[0]


def new_client(**kw: Any) -> ClientProtocol:
    kw.setdefault("keepalive_interval", KEEPALIVE)
    proto = ClientProtocol(**kw)
    proto.connect(0.0)
    proto.data_to_send()
    return proto


def ready_client(now: float = 0.0, **kw: Any) -> ClientProtocol:
    """A client that has completed the handshake at ``now`` (default max_message_size)."""
    proto = new_client(**kw)
    proto.receive_data(connected_frame(), now)
    assert isinstance(one_event(proto), Connected)
    assert proto.data_to_send() == b""
    return proto


def norm(ev: Any) -> tuple[Any, ...]:
    """A comparable form of an event (exceptions compare by identity, so compare type and text)."""
    values: list[Any] = []
    for f in dataclasses.fields(ev):
        v = getattr(ev, f.name)
        if isinstance(v, BaseException):
            v = (type(v), str(v))
        values.append(v)
    return (type(ev), *values)


def feed(proto: ClientProtocol, chunks: Iterable[bytes], now: float = 1.0) -> list[tuple[Any, ...]]:
    for chunk in chunks:
        proto.receive_data(chunk, now)
    return [norm(e) for e in events(proto)]


def raw_frame(total: int, cmd_size: int, body: bytes = b"") -> bytes:
    return struct.pack(">II", total, cmd_size) + body
