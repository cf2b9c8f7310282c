"""Sans-IO tests of ClientProtocol: bytes in, events and bytes out, with a clock we pass in.

The "broker" here is nothing but pulsarwire.codec: tests build the frames a broker would send
with ``new_command`` / ``encode_command`` / ``encode_payload_section`` and feed them to
``receive_data``; whatever the protocol queues in ``data_to_send`` is decoded back with
FrameDecoder and checked. Nothing touches a socket or a real clock (``now`` is a float the test
chooses), so every keepalive case is exact.

Covered: the handshake (and its refusals), request-id correlation for every response type,
keepalive, every broker-initiated event, the send-size limit, frame-level garbage, and split
input (one byte at a time, and random splits of random frame sequences under hypothesis).

The tests in the "Bugs" section at the end fail against the current connection.py; each says
what is wrong and what the fix is.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsarwire.codec import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
    FrameDecoder,
    MessageId,
    encode_command,
    encode_payload_command,
    encode_payload_section,
    encode_with_stored_entry,
    new_command,
    sub_command,
)
from pulsarwire.errors import (
    SERVER_ERRORS,
    AuthenticationError,
    BadMagicError,
    ChecksumMismatchError,
    CommandSizeError,
    FrameTooLargeError,
    FrameTooShortError,
    LocalProtocolError,
    MalformedCommandError,
    MalformedMetadataError,
    MissingSubCommandError,
    PulsarWireError,
    RemoteProtocolError,
    ServerError,
    ServiceNotReady,
    TopicTerminatedError,
    TruncatedFrameError,
    UnknownCommandTypeError,
    UnknownError,
)
from pulsarwire.proto import PROTOCOL_VERSION, pb
from pulsarwire.protocol.connection import (
    _RESPONSES,
    MAX_NEGOTIABLE_MESSAGE_SIZE,
    MIN_NEGOTIABLE_MESSAGE_SIZE,
    ActiveConsumerChange,
    AuthChallenge,
    ClientProtocol,
    Connected,
    ConnectionClosed,
    ConsumerClosedByBroker,
    CorruptMessage,
    EndOfTopic,
    MessageReceived,
    ProducerClosedByBroker,
    Response,
    SendError,
    SendReceipt,
    TopicListUpdate,
)
from pulsarwire.protocol.state import ConnectionState
from tests.helpers.examples import examples
from tests.helpers.protocol import (
    KEEPALIVE,
    U64_MAX,
    closed_event,
    command,
    connected_frame,
    events,
    feed,
    frame,
    message_frame,
    metadata,
    new_client,
    one_event,
    raw_frame,
    ready_client,
    sent_frames,
)

T = pb.BaseCommand

# ---------------------------------------------------------------------------
# Handshake
# ---------------------------------------------------------------------------


def test_connect_emits_exactly_one_connect_with_version_and_feature_flags() -> None:
    proto = ClientProtocol(client_version="tests/1.2")
    assert proto.state is ConnectionState.CONNECTING
    assert proto.data_to_send() == b""  # nothing before connect()
    proto.connect(0.0)
    (f,) = sent_frames(proto)
    assert f.type == T.CONNECT
    assert f.payload is None
    c = f.command.connect
    assert c.protocol_version == PROTOCOL_VERSION == 21
    assert c.client_version == "tests/1.2"
    assert c.feature_flags.supports_auth_refresh
    assert c.feature_flags.supports_broker_entry_metadata
    assert c.feature_flags.supports_topic_watchers
    assert not c.HasField("auth_method_name")
    assert not c.HasField("auth_data")
    assert not c.HasField("proxy_to_broker_url")
    assert proto.data_to_send() == b""  # drained
    assert events(proto) == []
    assert proto.state is ConnectionState.CONNECTING


def test_connect_carries_auth_method_and_data_when_given() -> None:
    proto = ClientProtocol(
        auth_method="token", auth_data=b"eyJ.secret", proxy_to_broker_url="pulsar://b:6650"
    )
    proto.connect(0.0)
    (f,) = sent_frames(proto)
    c = f.command.connect
    assert c.auth_method_name == "token"
    assert c.auth_data == b"eyJ.secret"
    assert c.proxy_to_broker_url == "pulsar://b:6650"


def test_connect_with_empty_auth_data_still_sends_the_field() -> None:
    proto = ClientProtocol(auth_method="token", auth_data=b"")
    proto.connect(0.0)
    (f,) = sent_frames(proto)
    assert f.command.connect.HasField("auth_data")
    assert f.command.connect.auth_data == b""


def test_connect_twice_raises_and_queues_nothing_more() -> None:
    proto = ClientProtocol()
    proto.connect(0.0)
    proto.data_to_send()
    with pytest.raises(LocalProtocolError):
        proto.connect(1.0)
    assert proto.data_to_send() == b""
    # Still after the handshake.
    proto.receive_data(connected_frame(), 1.0)
    events(proto)
    with pytest.raises(LocalProtocolError):
        proto.connect(2.0)


def test_connected_moves_to_ready_with_negotiated_values() -> None:
    proto = new_client()
    flags = pb.FeatureFlags(supports_auth_refresh=True, supports_topic_watchers=True)
    proto.receive_data(
        connected_frame(server_version="Pulsar Server 4.0", max_message_size=1 << 20, feature_flags=flags),
        1.0,
    )
    ev = one_event(proto)
    assert ev == Connected("Pulsar Server 4.0", 21, 1 << 20, flags)
    assert proto.state is ConnectionState.READY
    assert proto.server_version == "Pulsar Server 4.0"
    assert proto.protocol_version == 21
    assert proto.max_message_size == 1 << 20
    assert proto.decoder.max_frame_size == (1 << 20) + FRAME_PADDING
    assert proto.data_to_send() == b""


@pytest.mark.parametrize(("server", "negotiated"), [(0, 0), (6, 6), (15, 15), (21, 21), (22, 21), (99, 21)])
def test_protocol_version_is_min_of_server_and_ours(server: int, negotiated: int) -> None:
    proto = new_client()
    proto.receive_data(connected_frame(protocol_version=server), 1.0)
    ev = one_event(proto)
    assert ev.protocol_version == negotiated == proto.protocol_version


def test_connected_without_max_message_size_keeps_the_default() -> None:
    proto = new_client()
    proto.receive_data(frame(T.CONNECTED, server_version="old"), 1.0)
    ev = one_event(proto)
    assert ev.max_message_size == DEFAULT_MAX_MESSAGE_SIZE == proto.max_message_size
    assert proto.decoder.max_frame_size == DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING
    assert ev.protocol_version == 0  # proto default when the broker does not say


@pytest.mark.parametrize("size", [MIN_NEGOTIABLE_MESSAGE_SIZE, 64 * 1024, MAX_NEGOTIABLE_MESSAGE_SIZE])
def test_sane_max_message_size_edges_are_accepted(size: int) -> None:
    proto = new_client()
    proto.receive_data(connected_frame(max_message_size=size), 1.0)
    assert one_event(proto).max_message_size == size
    assert proto.decoder.max_frame_size == size + FRAME_PADDING


def test_decoder_limit_follows_max_message_size() -> None:
    size = 4096
    proto = new_client()
    proto.receive_data(connected_frame(max_message_size=size), 1.0)
    events(proto)
    limit = size + FRAME_PADDING
    base = len(message_frame(payload=b"")) - 4
    at_limit = message_frame(payload=b"a" * (limit - base))
    assert len(at_limit) - 4 == limit
    proto.receive_data(at_limit, 2.0)
    assert isinstance(one_event(proto), MessageReceived)
    over = message_frame(payload=b"a" * (limit - base + 1))
    proto.receive_data(over[:4], 3.0)  # rejected from the size field alone, before buffering the body
    ev = closed_event(proto)
    assert type(ev.error) is FrameTooLargeError


def test_decoder_limit_before_connected_is_the_default() -> None:
    proto = new_client()
    proto.receive_data(struct.pack(">I", DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING + 1), 1.0)
    assert type(closed_event(proto).error) is FrameTooLargeError


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(
            lambda p: p.send_command(command(T.FLOW, consumer_id=1, messagePermits=10)), id="command"
        ),
        pytest.param(lambda p: p.send_request(command(T.LOOKUP, topic="t")), id="request"),
        pytest.param(
            lambda p: p.send_message(command(T.SEND, producer_id=1), metadata(), b"x"), id="message"
        ),
    ],
)
def test_sending_before_ready_raises(send: Any) -> None:
    proto = ClientProtocol()
    with pytest.raises(LocalProtocolError, match="connecting"):
        send(proto)  # before connect()
    proto.connect(0.0)
    proto.data_to_send()
    with pytest.raises(LocalProtocolError, match="connecting"):
        send(proto)  # CONNECT sent, no CONNECTED yet
    assert proto.data_to_send() == b""
    assert proto.pending_requests == set()
    proto.receive_data(connected_frame(), 1.0)
    send(proto)  # fine once READY
    assert len(sent_frames(proto)) == 1
    proto.close()
    with pytest.raises(LocalProtocolError, match="closed"):
        send(proto)
    assert proto.data_to_send() == b""


# ---------------------------------------------------------------------------
# Handshake refused, authentication
# ---------------------------------------------------------------------------


def test_error_before_connected_closes_with_the_server_error() -> None:
    proto = new_client(auth_method="token", auth_data=b"bad")
    proto.receive_data(frame(T.ERROR, request_id=0, error=pb.AuthenticationError, message="bad token"), 1.0)
    ev = closed_event(proto)
    assert type(ev.error) is AuthenticationError
    assert ev.error.server_message == "bad token"
    assert not ev.error.retriable
    assert proto.data_to_send() == b""


@pytest.mark.parametrize("code", sorted(SERVER_ERRORS))
def test_error_before_connected_maps_every_code(code: int) -> None:
    proto = new_client()
    proto.receive_data(frame(T.ERROR, request_id=U64_MAX, error=code, message="no"), 1.0)
    ev = closed_event(proto)
    assert type(ev.error) is SERVER_ERRORS[code]
    assert ev.error.code == code


def test_connection_level_error_after_ready_closes() -> None:
    proto = ready_client()
    rid = proto.send_request(command(T.LOOKUP, topic="t"))
    proto.receive_data(
        frame(T.ERROR, request_id=U64_MAX, error=pb.ServiceNotReady, message="going away"), 1.0
    )
    ev = closed_event(proto)  # not a Response: the whole connection is refused
    assert type(ev.error) is ServiceNotReady
    assert ev.error.server_message == "going away"
    assert rid in proto.pending_requests  # the I/O layer fails these on ConnectionClosed


def test_frames_after_a_closing_frame_in_the_same_chunk_are_ignored() -> None:
    proto = new_client()
    data = (
        frame(T.ERROR, request_id=0, error=pb.AuthenticationError, message="x")
        + connected_frame()
        + frame(T.PING)
    )
    proto.receive_data(data, 1.0)
    closed_event(proto)
    assert proto.data_to_send() == b""  # no PONG for the PING after the refusal


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(frame(T.SUCCESS, request_id=1), id="SUCCESS"),
        pytest.param(frame(T.SEND_RECEIPT, producer_id=1, sequence_id=0), id="SEND_RECEIPT"),
        pytest.param(frame(T.CLOSE_PRODUCER, producer_id=1, request_id=1), id="CLOSE_PRODUCER"),
        pytest.param(frame(T.REACHED_END_OF_TOPIC, consumer_id=1), id="REACHED_END_OF_TOPIC"),
        pytest.param(message_frame(), id="MESSAGE"),
        pytest.param(frame(T.CONNECT, client_version="x"), id="CONNECT"),
        pytest.param(frame(T.PRODUCER, topic="t", producer_id=1, request_id=1), id="PRODUCER"),
    ],
)
def test_other_command_before_connected_closes_with_an_error(data: bytes) -> None:
    proto = new_client()
    proto.receive_data(data, 1.0)
    ev = closed_event(proto)
    assert isinstance(ev.error, RemoteProtocolError)
    assert "before CONNECTED" in ev.reason


def test_auth_challenge_during_handshake() -> None:
    proto = new_client(auth_method="token", auth_data=b"t0")
    challenge = {"auth_method_name": "token", "auth_data": b"refresh"}
    proto.receive_data(
        frame(T.AUTH_CHALLENGE, server_version="b", challenge=challenge, protocol_version=21), 1.0
    )
    assert one_event(proto) == AuthChallenge("token", b"refresh")
    assert proto.state is ConnectionState.CONNECTING
    proto.answer_auth_challenge("token", b"t1")
    (f,) = sent_frames(proto)
    assert f.type == T.AUTH_RESPONSE
    r = f.command.authResponse
    assert r.response.auth_method_name == "token"
    assert r.response.auth_data == b"t1"
    assert r.protocol_version == PROTOCOL_VERSION
    assert r.client_version == proto.client_version
    proto.receive_data(connected_frame(), 2.0)
    assert isinstance(one_event(proto), Connected)
    assert proto.state is ConnectionState.READY


def test_auth_challenge_after_ready_refreshes_without_disconnect() -> None:
    proto = ready_client()
    challenge = {"auth_method_name": "token", "auth_data": b"expired"}
    proto.receive_data(frame(T.AUTH_CHALLENGE, challenge=challenge), 5.0)
    assert one_event(proto) == AuthChallenge("token", b"expired")
    assert proto.state is ConnectionState.READY
    proto.answer_auth_challenge("token", b"fresh")
    (f,) = sent_frames(proto)
    assert f.type == T.AUTH_RESPONSE
    assert f.command.authResponse.response.auth_data == b"fresh"


def test_pong_during_handshake_is_ignored() -> None:
    proto = new_client()
    proto.receive_data(frame(T.PONG), 1.0)
    assert events(proto) == []
    assert proto.state is ConnectionState.CONNECTING
    assert proto.data_to_send() == b""


# ---------------------------------------------------------------------------
# Absurd max_message_size
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size",
    [0, -1, -(2**31), 1, MIN_NEGOTIABLE_MESSAGE_SIZE - 1, MAX_NEGOTIABLE_MESSAGE_SIZE + 1, 2**31 - 1],
)
def test_absurd_max_message_size_closes_and_nothing_else(size: int) -> None:
    proto = new_client()
    # A PING right behind CONNECTED must not be answered: nothing after the refusal counts.
    proto.receive_data(connected_frame(max_message_size=size) + frame(T.PING), 1.0)
    ev = closed_event(proto)  # exactly one event: no Connected before the close
    assert isinstance(ev.error, RemoteProtocolError)
    assert str(size) in ev.reason
    assert proto.data_to_send() == b""
    assert proto.max_message_size == DEFAULT_MAX_MESSAGE_SIZE
    assert proto.decoder.max_frame_size == DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING
    assert proto.protocol_version == 0


# ---------------------------------------------------------------------------
# Requests and responses
# ---------------------------------------------------------------------------


def test_send_request_assigns_increasing_ids_and_puts_them_on_the_wire() -> None:
    proto = ready_client()
    rids = [
        proto.send_request(command(T.LOOKUP, topic="a")),
        proto.send_request(command(T.PARTITIONED_METADATA, topic="b")),
        proto.send_request(command(T.PRODUCER, topic="c", producer_id=proto.new_producer_id())),
    ]
    assert rids == sorted(rids) and len(set(rids)) == 3
    assert proto.pending_requests == set(rids)
    frames = sent_frames(proto)
    assert [f.type for f in frames] == [T.LOOKUP, T.PARTITIONED_METADATA, T.PRODUCER]
    assert [f.sub.request_id for f in frames] == rids
    # The id given by the caller is overwritten.
    rid = proto.send_request(command(T.LOOKUP, topic="d", request_id=424242))
    assert rid > rids[-1]
    assert sent_frames(proto)[0].sub.request_id == rid


def test_send_command_does_not_track_a_request() -> None:
    proto = ready_client()
    proto.send_command(command(T.FLOW, consumer_id=7, messagePermits=100))
    (f,) = sent_frames(proto)
    assert f.type == T.FLOW and f.command.flow.messagePermits == 100
    assert proto.pending_requests == set()


def test_ids_are_independent_counters() -> None:
    proto = ClientProtocol()
    assert [proto.new_producer_id(), proto.new_producer_id()] == [1, 2]
    assert [proto.new_consumer_id(), proto.new_consumer_id()] == [1, 2]
    assert [proto.new_request_id(), proto.new_request_id()] == [1, 2]


def test_response_table_covers_every_answer_a_client_request_gets() -> None:
    assert set(_RESPONSES) == {
        T.SUCCESS,
        T.ERROR,
        T.PRODUCER_SUCCESS,
        T.LOOKUP_RESPONSE,
        T.PARTITIONED_METADATA_RESPONSE,
        T.GET_LAST_MESSAGE_ID_RESPONSE,
        T.CONSUMER_STATS_RESPONSE,
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        T.GET_SCHEMA_RESPONSE,
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
        T.ACK_RESPONSE,
        T.WATCH_TOPIC_LIST_SUCCESS,
    }
    for t, field in _RESPONSES.items():
        cmd, _ = new_command(t)
        assert sub_command(cmd) is getattr(cmd, field)
        assert "request_id" in type(sub_command(cmd)).DESCRIPTOR.fields_by_name


RESPONSE_TYPES = [pytest.param(t, id=T.Type.Name(t)) for t in _RESPONSES]


@pytest.mark.parametrize("type_", RESPONSE_TYPES)
def test_every_response_type_is_correlated(type_: int) -> None:
    proto = ready_client()
    r1 = proto.send_request(command(T.LOOKUP, topic="one"))
    r2 = proto.send_request(command(T.LOOKUP, topic="two"))
    proto.data_to_send()
    # Answered out of order.
    answer2, answer1 = command(type_, request_id=r2), command(type_, request_id=r1)
    proto.receive_data(encode_command(answer2) + encode_command(answer1), 1.0)
    evs = events(proto)
    assert evs == [Response(r2, answer2), Response(r1, answer1)]
    assert all(e.command.type == type_ for e in evs)
    assert evs[0].is_error is (type_ == T.ERROR)
    assert proto.pending_requests == set()
    assert proto.state is ConnectionState.READY
    assert proto.data_to_send() == b""


@pytest.mark.parametrize("type_", RESPONSE_TYPES)
def test_responses_for_unknown_cancelled_or_answered_ids_are_ignored(type_: int) -> None:
    proto = ready_client()
    cancelled = proto.send_request(command(T.LOOKUP, topic="slow"))
    answered = proto.send_request(command(T.LOOKUP, topic="fast"))
    proto.data_to_send()
    proto.cancel_request(cancelled)
    assert proto.pending_requests == {answered}
    proto.receive_data(frame(type_, request_id=answered), 1.0)
    assert [e.request_id for e in events(proto)] == [answered]
    for rid in (cancelled, answered, 9999):  # late, duplicate, never sent
        proto.receive_data(frame(type_, request_id=rid), 2.0)
        assert events(proto) == []
    assert proto.state is ConnectionState.READY
    assert proto.data_to_send() == b""


def test_cancel_unknown_request_is_harmless() -> None:
    proto = ready_client()
    proto.cancel_request(12345)
    rid = proto.send_request(command(T.LOOKUP, topic="t"))
    proto.cancel_request(rid)
    proto.cancel_request(rid)
    assert proto.pending_requests == set()


@pytest.mark.parametrize("code", sorted(SERVER_ERRORS))
def test_error_response_exposes_the_server_error_subclass(code: int) -> None:
    proto = ready_client()
    rid = proto.send_request(command(T.PRODUCER, topic="t", producer_id=1))
    proto.receive_data(frame(T.ERROR, request_id=rid, error=code, message="why"), 1.0)
    ev = one_event(proto)
    assert isinstance(ev, Response) and ev.is_error
    err = ev.error()
    assert type(err) is SERVER_ERRORS[code]
    assert isinstance(err, ServerError) and isinstance(err, PulsarWireError)
    assert err.server_message == "why"
    assert proto.state is ConnectionState.READY


def _with_error_code(type_: int, code: int, **fields: Any) -> bytes:
    """An ERROR or SEND_ERROR frame whose ServerError field holds ``code``, which may be newer
    than our schema (the field's varint borrowed from an integer field of the same number)."""
    cmd = command(type_, **fields)
    sub = cmd.error if type_ == T.ERROR else cmd.send_error
    sub.ClearField("error")  # field 2 of CommandError, 3 of CommandSendError
    same_number = (
        pb.CommandSendError(sequence_id=code) if type_ == T.ERROR else pb.CommandSend(num_messages=code)
    )
    sub_bytes = sub.SerializePartialToString() + same_number.SerializePartialToString()
    assert len(sub_bytes) < 128  # its length is a one-byte varint
    head = pb.BaseCommand()
    head.type = type_  # type: ignore[assignment]
    tag = (pb.BaseCommand.DESCRIPTOR.fields_by_number[type_].number << 3) | 2
    body = head.SerializeToString() + bytes([tag, len(sub_bytes)]) + sub_bytes
    return struct.pack(">II", 4 + len(body), len(body)) + body


@pytest.mark.parametrize("code", [sorted(SERVER_ERRORS)[-1] + 1, 99, 2**31 - 1])
def test_error_with_a_code_newer_than_our_schema_is_unknown_error_not_malformed(code: int) -> None:
    """Pulsar adds error codes; an old client must not drop the connection over one (the field is
    required, and a closed proto2 enum would leave it unset)."""
    proto = ready_client()
    rid = proto.send_request(command(T.PRODUCER, topic="t", producer_id=1))
    proto.receive_data(_with_error_code(T.ERROR, code, request_id=rid, message="why"), 1.0)
    ev = one_event(proto)
    assert isinstance(ev, Response) and ev.is_error
    err = ev.error()
    assert type(err) is UnknownError
    assert err.server_message == f"why (server error code {code} unknown to this client)"
    proto.receive_data(_with_error_code(T.SEND_ERROR, code, producer_id=5, sequence_id=9), 1.0)
    ev = one_event(proto)
    assert isinstance(ev, SendError) and (ev.producer_id, ev.sequence_id) == (5, 9)
    assert type(ev.error) is UnknownError
    assert proto.state is ConnectionState.READY


# ---------------------------------------------------------------------------
# Keepalive
# ---------------------------------------------------------------------------


def test_ping_from_broker_is_answered_with_pong_immediately() -> None:
    proto = ready_client()
    proto.receive_data(frame(T.PING) + frame(T.PING), 1.0)
    assert [f.type for f in sent_frames(proto)] == [T.PONG, T.PONG]
    assert events(proto) == []


def test_ping_is_answered_before_ready() -> None:
    proto = new_client()
    proto.receive_data(frame(T.PING), 0.5)
    assert [f.type for f in sent_frames(proto)] == [T.PONG]
    assert proto.state is ConnectionState.CONNECTING


def test_ping_without_its_sub_message_is_answered() -> None:
    proto = ready_client()
    proto.receive_data(encode_command(pb.BaseCommand(type=T.PING)), 1.0)
    assert [f.type for f in sent_frames(proto)] == [T.PONG]


def test_tick_pings_after_idle_interval_and_closes_after_another() -> None:
    proto = ready_client(now=100.0)
    proto.tick(100.0)
    proto.tick(100.0 + KEEPALIVE - 0.001)
    assert proto.data_to_send() == b""
    proto.tick(100.0 + KEEPALIVE)
    assert [f.type for f in sent_frames(proto)] == [T.PING]
    proto.tick(100.0 + KEEPALIVE + 10)  # one PING per interval, not one per tick
    proto.tick(100.0 + 2 * KEEPALIVE - 0.001)
    assert proto.data_to_send() == b""
    assert events(proto) == []
    assert proto.state is ConnectionState.READY
    proto.tick(100.0 + 2 * KEEPALIVE)
    ev = closed_event(proto)
    assert "PONG" in ev.reason
    proto.tick(1000.0)
    assert proto.data_to_send() == b""
    assert events(proto) == []


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(frame(T.PONG), id="PONG"),
        pytest.param(frame(T.SEND_RECEIPT, producer_id=1, sequence_id=0), id="SEND_RECEIPT"),
        pytest.param(message_frame(), id="MESSAGE"),
        pytest.param(frame(T.SUCCESS, request_id=777), id="ignored-response"),
    ],
)
def test_any_received_frame_resets_keepalive(data: bytes) -> None:
    proto = ready_client(now=0.0)
    proto.tick(30.0)
    assert [f.type for f in sent_frames(proto)] == [T.PING]
    proto.receive_data(data, 45.0)
    events(proto)
    proto.tick(60.0)  # would have closed without the frame at 45
    proto.tick(74.9)
    assert proto.state is ConnectionState.READY
    assert proto.data_to_send() == b""
    proto.tick(75.0)  # idle again for a whole interval since 45
    assert [f.type for f in sent_frames(proto)] == [T.PING]
    assert events(proto) == []


def test_frame_before_the_first_ping_postpones_it() -> None:
    proto = ready_client(now=0.0)
    proto.receive_data(frame(T.PONG), 20.0)
    proto.tick(30.0)
    assert proto.data_to_send() == b""
    proto.tick(50.0)
    assert [f.type for f in sent_frames(proto)] == [T.PING]


def test_keepalive_interval_is_configurable() -> None:
    proto = ready_client(now=0.0, keepalive_interval=5.0)
    proto.tick(4.9)
    assert proto.data_to_send() == b""
    proto.tick(5.0)
    assert [f.type for f in sent_frames(proto)] == [T.PING]
    proto.tick(10.0)
    closed_event(proto)


def test_tick_does_nothing_before_ready() -> None:
    proto = new_client()
    proto.tick(10 * KEEPALIVE)
    assert proto.data_to_send() == b""
    assert events(proto) == []
    assert proto.state is ConnectionState.CONNECTING


# ---------------------------------------------------------------------------
# Broker-initiated events
# ---------------------------------------------------------------------------


def test_send_receipt() -> None:
    proto = ready_client()
    mid = {"ledgerId": 12, "entryId": 34, "partition": 2}
    proto.receive_data(
        frame(T.SEND_RECEIPT, producer_id=5, sequence_id=9, highest_sequence_id=11, message_id=mid), 1.0
    )
    assert one_event(proto) == SendReceipt(5, 9, 11, MessageId(12, 34, 2))


def test_send_receipt_for_minus_one_is_reported_as_minus_one() -> None:
    # A deduplicated send: the broker answers -1:-1 (as uint64), never a real position.
    proto = ready_client()
    mid = {"ledgerId": U64_MAX, "entryId": U64_MAX}
    proto.receive_data(frame(T.SEND_RECEIPT, producer_id=5, sequence_id=9, message_id=mid), 1.0)
    ev = one_event(proto)
    assert isinstance(ev, SendReceipt)
    assert ev.message_id.ledger_id == -1
    assert ev.message_id.entry_id == -1
    assert ev.message_id == MessageId(-1, -1)


def test_send_error() -> None:
    proto = ready_client()
    proto.receive_data(
        frame(T.SEND_ERROR, producer_id=5, sequence_id=9, error=pb.TopicTerminatedError, message="done"), 1.0
    )
    ev = one_event(proto)
    assert isinstance(ev, SendError)
    assert (ev.producer_id, ev.sequence_id) == (5, 9)
    assert type(ev.error) is TopicTerminatedError
    assert ev.error.server_message == "done"
    assert proto.state is ConnectionState.READY


def test_message_received_with_payload_metadata_and_ack_set() -> None:
    proto = ready_client()
    md = metadata(sequence_id=17, partition_key="k", properties=[pb.KeyValue(key="a", value="b")])
    bem = pb.BrokerEntryMetadata(broker_timestamp=1234, index=99)
    data = message_frame(
        consumer_id=8,
        ledger=3,
        entry=4,
        payload=b"payload bytes",
        md=md,
        ack_set=[0b1010, -1],
        redelivery_count=2,
        partition=1,
        broker_entry_metadata=bem,
    )
    proto.receive_data(data, 1.0)
    ev = one_event(proto)
    assert isinstance(ev, MessageReceived)
    assert ev.consumer_id == 8
    assert ev.message_id == MessageId(3, 4, 1)
    assert ev.redelivery_count == 2
    assert ev.ack_set == (0b1010, -1)
    assert ev.payload.metadata == md
    assert ev.payload.payload == b"payload bytes"
    assert ev.payload.broker_entry_metadata == bem
    assert ev.payload.entry == encode_payload_section(md, b"payload bytes")


def test_message_with_empty_ack_set_and_empty_payload() -> None:
    proto = ready_client()
    proto.receive_data(message_frame(payload=b""), 1.0)
    ev = one_event(proto)
    assert ev.ack_set == ()
    assert ev.payload.payload == b""
    assert ev.payload.broker_entry_metadata is None


def test_corrupt_message_names_the_id_and_the_stream_continues() -> None:
    proto = ready_client()
    bad = message_frame(consumer_id=2, ledger=7, entry=8, corrupt=True)
    good = message_frame(consumer_id=2, ledger=7, entry=9, payload=b"next")
    proto.receive_data(bad + good + frame(T.PING), 1.0)
    corrupt, received = events(proto)
    assert isinstance(corrupt, CorruptMessage)
    assert corrupt.consumer_id == 2
    assert corrupt.message_id == MessageId(7, 8)
    assert type(corrupt.error) is ChecksumMismatchError
    assert corrupt.error.message_id == MessageId(7, 8)
    assert "7:8" in str(corrupt.error)
    assert isinstance(received, MessageReceived)
    assert received.message_id == MessageId(7, 9)
    assert received.payload.payload == b"next"
    assert [f.type for f in sent_frames(proto)] == [T.PONG]
    assert proto.state is ConnectionState.READY


@pytest.mark.parametrize(
    ("section", "error"),
    [
        pytest.param(b"\x0e\x09" + b"\x00" * 20, BadMagicError, id="bad-magic"),
        pytest.param(encode_payload_section(b"\xff\xff", b"x"), MalformedMetadataError, id="bad-metadata"),
        pytest.param(encode_payload_section(b"", b"x"), MalformedMetadataError, id="metadata-missing-fields"),
    ],
)
def test_message_with_bad_payload_section_is_corrupt_not_fatal(
    section: bytes, error: type[Exception]
) -> None:
    proto = ready_client()
    cmd = command(T.MESSAGE, consumer_id=3, message_id={"ledgerId": 1, "entryId": 2})
    proto.receive_data(encode_with_stored_entry(cmd, section) + message_frame(), 1.0)
    corrupt, received = events(proto)
    assert isinstance(corrupt, CorruptMessage)
    assert type(corrupt.error) is error
    assert corrupt.message_id == MessageId(1, 2)
    assert isinstance(received, MessageReceived)


def test_message_without_payload_closes() -> None:
    proto = ready_client()
    proto.receive_data(frame(T.MESSAGE, consumer_id=1, message_id={"ledgerId": 1, "entryId": 1}), 1.0)
    ev = closed_event(proto)
    assert type(ev.error) is RemoteProtocolError
    assert "payload" in ev.reason


@pytest.mark.parametrize("url", [None, "pulsar://other-broker:6650"])
def test_close_producer_by_broker(url: str | None) -> None:
    proto = ready_client()
    extra = {"assignedBrokerServiceUrl": url} if url else {}
    proto.receive_data(frame(T.CLOSE_PRODUCER, producer_id=4, request_id=0, **extra), 1.0)
    assert one_event(proto) == ProducerClosedByBroker(4, url)
    assert proto.state is ConnectionState.READY


@pytest.mark.parametrize("url", [None, "pulsar://other-broker:6650"])
def test_close_consumer_by_broker(url: str | None) -> None:
    proto = ready_client()
    extra = {"assignedBrokerServiceUrl": url} if url else {}
    proto.receive_data(frame(T.CLOSE_CONSUMER, consumer_id=6, request_id=0, **extra), 1.0)
    assert one_event(proto) == ConsumerClosedByBroker(6, url)
    assert proto.state is ConnectionState.READY


@pytest.mark.parametrize(
    ("resource_type", "expected"),
    [
        (pb.CommandTopicMigrated.Producer, ProducerClosedByBroker(11, "pulsar://green:6650")),
        (pb.CommandTopicMigrated.Consumer, ConsumerClosedByBroker(11, "pulsar://green:6650")),
    ],
)
def test_topic_migrated(resource_type: int, expected: Any) -> None:
    proto = ready_client()
    proto.receive_data(
        frame(
            T.TOPIC_MIGRATED,
            resource_id=11,
            resource_type=resource_type,
            brokerServiceUrl="pulsar://green:6650",
        ),
        1.0,
    )
    assert one_event(proto) == expected


def test_topic_migrated_without_url() -> None:
    proto = ready_client()
    proto.receive_data(
        frame(T.TOPIC_MIGRATED, resource_id=1, resource_type=pb.CommandTopicMigrated.Consumer), 1.0
    )
    assert one_event(proto) == ConsumerClosedByBroker(1, None)


@pytest.mark.parametrize("active", [True, False])
def test_active_consumer_change(active: bool) -> None:
    proto = ready_client()
    proto.receive_data(frame(T.ACTIVE_CONSUMER_CHANGE, consumer_id=3, is_active=active), 1.0)
    assert one_event(proto) == ActiveConsumerChange(3, active)


def test_reached_end_of_topic() -> None:
    proto = ready_client()
    proto.receive_data(frame(T.REACHED_END_OF_TOPIC, consumer_id=3), 1.0)
    assert one_event(proto) == EndOfTopic(3)


def test_watch_topic_update() -> None:
    proto = ready_client()
    proto.receive_data(
        frame(
            T.WATCH_TOPIC_UPDATE,
            watcher_id=2,
            new_topics=["persistent://t/n/a", "persistent://t/n/b"],
            deleted_topics=["persistent://t/n/c"],
            topics_hash="abc",
        ),
        1.0,
    )
    assert one_event(proto) == TopicListUpdate(
        2, ("persistent://t/n/a", "persistent://t/n/b"), ("persistent://t/n/c",), "abc"
    )


HANDLED = {
    *_RESPONSES,
    T.CONNECTED,  # handled only during the handshake
    T.PING,
    T.PONG,
    T.SEND_RECEIPT,
    T.SEND_ERROR,
    T.MESSAGE,
    T.CLOSE_PRODUCER,
    T.CLOSE_CONSUMER,
    T.ACTIVE_CONSUMER_CHANGE,
    T.REACHED_END_OF_TOPIC,
    T.AUTH_CHALLENGE,
    T.WATCH_TOPIC_UPDATE,
    T.TOPIC_MIGRATED,
}
UNEXPECTED = [
    pytest.param(t, id=T.Type.Name(t)) for t in sorted(T.Type.values()) if t not in HANDLED - {T.CONNECTED}
]


@pytest.mark.parametrize("type_", UNEXPECTED)
def test_unexpected_command_from_broker_closes(type_: int) -> None:
    proto = ready_client()
    proto.receive_data(frame(type_) + frame(T.PING), 1.0)
    ev = closed_event(proto)
    assert type(ev.error) is RemoteProtocolError
    assert T.Type.Name(type_) in ev.reason
    assert proto.data_to_send() == b""  # the PING behind it was not processed


def test_unexpected_send_with_payload_closes() -> None:
    proto = ready_client()
    proto.receive_data(
        encode_payload_command(command(T.SEND, producer_id=1, sequence_id=1), metadata(), b"x"), 1.0
    )
    assert type(closed_event(proto).error) is RemoteProtocolError


# ---------------------------------------------------------------------------
# Sending messages
# ---------------------------------------------------------------------------


def test_send_message_queues_the_frame_and_returns_its_size() -> None:
    proto = ready_client()
    n = proto.send_message(command(T.SEND, producer_id=1, sequence_id=3), metadata(3), b"body")
    data = proto.data_to_send()
    assert n == len(data)
    dec = FrameDecoder()
    dec.feed(data)
    (f,) = list(dec)
    assert f.type == T.SEND
    assert f.command.send.sequence_id == 3
    assert f.payload is not None and f.payload.payload == b"body"


def test_send_message_refuses_frames_over_max_message_size_plus_padding() -> None:
    size = MIN_NEGOTIABLE_MESSAGE_SIZE * 2
    proto = new_client()
    proto.receive_data(connected_frame(max_message_size=size), 1.0)
    events(proto)
    cmd, md = command(T.SEND, producer_id=1, sequence_id=1), metadata(1)
    base = len(encode_payload_command(cmd, md, b"")) - 4
    limit = size + 10 * 1024
    ok = proto.send_message(cmd, md, b"a" * (limit - base))
    assert ok - 4 == limit
    assert len(proto.data_to_send()) == ok
    with pytest.raises(LocalProtocolError, match="max_message_size"):
        proto.send_message(cmd, md, b"a" * (limit - base + 1))
    assert proto.data_to_send() == b""
    with pytest.raises(LocalProtocolError):
        proto.send_message(cmd, md, b"a" * (10 * size))
    assert proto.data_to_send() == b""
    assert proto.state is ConnectionState.READY


# ---------------------------------------------------------------------------
# Frame-level garbage and end of stream
# ---------------------------------------------------------------------------


GARBAGE = [
    pytest.param(
        struct.pack(">I", DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING + 1), FrameTooLargeError, id="over-max"
    ),
    pytest.param(struct.pack(">I", 2**31), FrameTooLargeError, id="2^31"),
    pytest.param(struct.pack(">I", 0xFFFFFFFF), FrameTooLargeError, id="u32-max"),
    pytest.param(struct.pack(">I", 3), FrameTooShortError, id="total<4"),
    pytest.param(raw_frame(4, 0), CommandSizeError, id="command-size-0"),
    pytest.param(raw_frame(10, 7, b"\x08\x12" * 3), CommandSizeError, id="command-size-past-frame"),
    pytest.param(raw_frame(8, 4, b"\xff\xff\xff\xff"), MalformedCommandError, id="bad-protobuf"),
    pytest.param(raw_frame(7, 3, b"\x08\xe7\x07"), UnknownCommandTypeError, id="unknown-type"),
    pytest.param(raw_frame(6, 2, b"\x08\x06"), MissingSubCommandError, id="missing-sub"),  # SEND_RECEIPT
    pytest.param(raw_frame(6, 2, b"\x10\x01"), MalformedCommandError, id="no-type"),
]


@pytest.mark.parametrize(("data", "error"), GARBAGE)
def test_frame_level_garbage_closes_with_the_typed_error(data: bytes, error: type[Exception]) -> None:
    proto = ready_client()
    good = frame(T.REACHED_END_OF_TOPIC, consumer_id=1)
    proto.receive_data(good + data + frame(T.PING), 1.0)
    first, closed = events(proto)
    assert first == EndOfTopic(1)  # what came before the garbage is delivered
    assert isinstance(closed, ConnectionClosed)
    assert type(closed.error) is error
    assert proto.state is ConnectionState.CLOSED
    assert proto.data_to_send() == b""


@pytest.mark.parametrize(("data", "error"), GARBAGE)
def test_frame_level_garbage_during_handshake(data: bytes, error: type[Exception]) -> None:
    proto = new_client()
    proto.receive_data(data, 1.0)
    assert type(closed_event(proto).error) is error


def test_empty_read_means_the_broker_closed() -> None:
    proto = ready_client()
    proto.receive_data(b"", 5.0)
    ev = closed_event(proto)
    assert "closed" in ev.reason


def test_local_close() -> None:
    proto = ready_client()
    proto.close()
    assert closed_event(proto).reason == "closed locally"
    proto.close()  # idempotent: one ConnectionClosed only
    assert events(proto) == []


@pytest.mark.parametrize(
    "close",
    [
        pytest.param(lambda p: p.close(), id="local"),
        pytest.param(lambda p: p.receive_data(b"", 1.0), id="eof"),
        pytest.param(lambda p: p.receive_data(raw_frame(4, 0), 1.0), id="garbage"),
        pytest.param(lambda p: p.tick(1000.0) or p.tick(2000.0), id="keepalive"),
    ],
)
def test_input_after_close_is_ignored(close: Any) -> None:
    proto = ready_client()
    close(proto)
    events(proto)
    proto.data_to_send()
    proto.receive_data(frame(T.PING) + message_frame() + connected_frame() + raw_frame(4, 0), 2000.0)
    proto.receive_data(b"", 2001.0)
    proto.tick(5000.0)
    assert events(proto) == []
    assert proto.data_to_send() == b""
    assert proto.state is ConnectionState.CLOSED


# ---------------------------------------------------------------------------
# Split input
# ---------------------------------------------------------------------------


HANDSHAKE = connected_frame(max_message_size=1 << 20)


def transcript() -> list[bytes]:
    """A broker's side of a session after CONNECTED, once the client sent two requests (ids 1, 2)."""
    return [
        frame(T.PING),
        frame(T.SUCCESS, request_id=1),
        frame(T.SEND_RECEIPT, producer_id=1, sequence_id=0, message_id={"ledgerId": 5, "entryId": 0}),
        message_frame(ledger=5, entry=0, ack_set=[3]),
        message_frame(ledger=5, entry=1, corrupt=True),
        message_frame(ledger=5, entry=2, payload=b"x" * 3000),
        frame(T.ERROR, request_id=2, error=pb.TopicNotFound, message="nope"),
        frame(T.SEND_ERROR, producer_id=1, sequence_id=1, error=pb.ChecksumError, message="crc"),
        frame(T.AUTH_CHALLENGE, challenge={"auth_method_name": "token", "auth_data": b"c"}),
        frame(T.WATCH_TOPIC_UPDATE, watcher_id=1, new_topics=["a"], topics_hash="h"),
        frame(T.CLOSE_CONSUMER, consumer_id=1, request_id=0, assignedBrokerServiceUrl="pulsar://x:1"),
        frame(T.PING),
    ]


@dataclasses.dataclass
class Outcome:
    events: list[tuple[Any, ...]]
    sent: bytes
    state: ConnectionState
    pending: set[int]


def run_session(handshake: list[bytes], rest: list[bytes]) -> Outcome:
    """Handshake fed as ``handshake``; then requests 1 and 2 are sent; then ``rest`` is fed."""
    proto = new_client()
    evs = feed(proto, handshake, now=0.5)
    if proto.state is ConnectionState.READY:
        assert proto.send_request(command(T.LOOKUP, topic="a")) == 1
        assert proto.send_request(command(T.LOOKUP, topic="b")) == 2
        proto.data_to_send()
    evs += feed(proto, rest)
    return Outcome(evs, proto.data_to_send(), proto.state, set(proto.pending_requests))


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def test_one_byte_at_a_time_gives_the_same_events_and_bytes() -> None:
    data = b"".join(transcript())
    whole = run_session([HANDSHAKE], [data])
    split = run_session(bytewise(HANDSHAKE), bytewise(data))
    assert split == whole
    assert [e[0] for e in whole.events] == [
        Connected,
        Response,
        SendReceipt,
        MessageReceived,
        CorruptMessage,
        MessageReceived,
        Response,
        SendError,
        AuthChallenge,
        TopicListUpdate,
        ConsumerClosedByBroker,
    ]
    assert whole.sent == frame(T.PONG) * 2
    assert whole.state is ConnectionState.READY
    assert whole.pending == set()


# Frames a broker may send once the connection is READY (responses for ids 1 and 2 are pending).
_POOL: list[bytes] = [
    *transcript(),
    frame(T.PONG),
    frame(T.SUCCESS, request_id=2),
    frame(T.LOOKUP_RESPONSE, request_id=1, brokerServiceUrl="pulsar://b:6650"),
    frame(T.SUCCESS, request_id=99),  # unknown id: ignored
    frame(T.ACTIVE_CONSUMER_CHANGE, consumer_id=1, is_active=True),
    frame(T.REACHED_END_OF_TOPIC, consumer_id=1),
    frame(T.CLOSE_PRODUCER, producer_id=1, request_id=0),
    frame(T.TOPIC_MIGRATED, resource_id=1, resource_type=pb.CommandTopicMigrated.Producer),
    message_frame(ledger=9, entry=9, broker_entry_metadata=pb.BrokerEntryMetadata(index=1)),
    message_frame(ledger=9, entry=10, md=metadata(1, compression=pb.NONE), payload=b""),
]
# Frames that end the connection; at most one, last (b"" = none).
_ENDINGS: list[bytes] = [
    b"",
    frame(T.SEND, producer_id=1, sequence_id=1),
    frame(T.ERROR, request_id=U64_MAX, error=pb.ServiceNotReady, message="bye"),
    raw_frame(8, 4, b"\xff\xff\xff\xff"),
    struct.pack(">I", (1 << 20) + FRAME_PADDING + 1) + b"\x00" * 8,
    frame(T.MESSAGE, consumer_id=1, message_id={"ledgerId": 1, "entryId": 1}),
]


def _cut(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(data) - 1)), max_size=12)))
    bounds = [0, *(c for c in cuts if c < len(data)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def split_session(draw: st.DrawFn) -> tuple[list[bytes], list[bytes]]:
    picks = draw(st.lists(st.sampled_from(_POOL), max_size=12))
    rest = b"".join(picks) + draw(st.sampled_from(_ENDINGS))
    return _cut(draw, HANDSHAKE), _cut(draw, rest) if rest else []


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split_session())
def test_random_splits_give_the_same_events_as_whole_frames(case: tuple[list[bytes], list[bytes]]) -> None:
    handshake, rest = case
    assert b"".join(handshake) == HANDSHAKE
    data = b"".join(rest)
    whole = run_session([HANDSHAKE], [data] if data else [])
    split = run_session(handshake, rest)
    assert split == whole
    assert whole.events[0][0] is Connected
    assert sum(e[0] is ConnectionClosed for e in whole.events) <= 1


# ---------------------------------------------------------------------------
# Bugs: these fail against the current connection.py
# ---------------------------------------------------------------------------


def test_regression_corrupt_message_before_connected_closes() -> None:
    """A MESSAGE before CONNECTED must close like any other command before CONNECTED.

    receive_data turns a MESSAGE whose payload section fails validation into CorruptMessage
    *before* _handle sees the state, so during the handshake it yields CorruptMessage and stays
    CONNECTING, while a valid MESSAGE closes the connection.
    """
    proto = new_client()
    proto.receive_data(message_frame(corrupt=True), 1.0)
    evs = events(proto)
    assert not any(isinstance(e, CorruptMessage) for e in evs), evs
    assert len(evs) == 1 and isinstance(evs[0], ConnectionClosed)
    assert isinstance(evs[0].error, RemoteProtocolError)
    assert proto.state is ConnectionState.CLOSED


def test_regression_send_receipt_without_message_id_is_minus_one_not_zero() -> None:
    """CommandSendReceipt.message_id is optional; an absent id must not read as the real position 0:0.

    The Java client (ClientCnx.handleSendReceipt) uses -1:-1 when message_id is absent; here
    MessageId.from_proto on the unset sub-message gives ledger 0, entry 0.
    """
    proto = ready_client()
    proto.receive_data(frame(T.SEND_RECEIPT, producer_id=1, sequence_id=4), 1.0)
    ev = one_event(proto)
    assert isinstance(ev, SendReceipt)
    assert (ev.message_id.ledger_id, ev.message_id.entry_id) == (-1, -1)


def test_regression_eof_mid_frame_is_a_typed_error() -> None:
    """EOF mid-frame (TESTING.md bad-input list) must close with TruncatedFrameError, not error=None."""
    proto = ready_client()
    proto.receive_data(frame(T.SUCCESS, request_id=1)[:6], 1.0)
    proto.receive_data(b"", 2.0)
    ev = closed_event(proto)
    assert type(ev.error) is TruncatedFrameError


def test_regression_partial_frame_bytes_do_not_count_as_a_received_frame() -> None:
    """Keepalive is reset by received *frames*; a broker trickling bytes of a frame that never
    completes must still be timed out (the Java client resets on each decoded command).
    """
    proto = ready_client(now=0.0)
    proto.tick(30.0)
    assert [f.type for f in sent_frames(proto)] == [T.PING]
    pong = frame(T.PONG)
    proto.receive_data(pong[:3], 40.0)  # no complete frame
    proto.tick(60.0)
    assert type(one_event(proto)) is ConnectionClosed


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(lambda p: p.send_request(new_command(T.PRODUCER)[0]), id="request-missing-required"),
        pytest.param(
            lambda p: p.send_request(command(T.FLOW, consumer_id=1)), id="request-without-request_id"
        ),
        pytest.param(lambda p: p.send_command(new_command(T.FLOW)[0]), id="command-missing-required"),
    ],
)
def test_regression_unsendable_commands_raise_local_protocol_error_and_leave_no_trace(send: Any) -> None:
    """An unsendable command must raise LocalProtocolError (the package's own error tree), queue
    nothing and leave no phantom pending request. Today protobuf's EncodeError / AttributeError
    escapes, and send_request has already added the id to pending_requests.
    """
    proto = ready_client()
    with pytest.raises(LocalProtocolError):
        send(proto)
    assert proto.pending_requests == set()
    assert proto.data_to_send() == b""
