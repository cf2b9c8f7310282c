"""Sans-IO client side of one Pulsar connection.

:class:`ClientProtocol` turns bytes from the broker into events and commands
into bytes for the broker. It owns the handshake, request-id allocation and
correlation, producer/consumer ids, keepalive (PING/PONG with a caller-given
clock) and the limits negotiated in CONNECTED. It never touches a socket, a
thread or a clock: the I/O layer calls :meth:`receive_data`, drains
:meth:`next_event` and :meth:`data_to_send`, and calls :meth:`tick` with the
current time.

Usage (the shape of every test and of the asyncio driver)::

    proto = ClientProtocol(client_version="pulsarwire/0.1")
    proto.connect(now)                    # queues CONNECT
    sock.send(proto.data_to_send())
    proto.receive_data(sock.recv())
    while (event := proto.next_event()) is not None: ...
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from google.protobuf.message import EncodeError

from pulsarwire.codec.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    Frame,
    FrameDecoder,
    Payload,
    encode_command,
    encode_payload_command,
    new_command,
    sub_command,
)
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    LocalProtocolError,
    PayloadError,
    RemoteProtocolError,
    TruncatedFrameError,
    server_error,
)
from pulsarwire.proto import PROTOCOL_VERSION, pb

from .state import CONNECTION_TRANSITIONS, ConnectionState, transition

T = pb.BaseCommand

#: Largest max_message_size we accept from a broker (Pulsar frames are at most 2 GiB - 1 anyway).
MAX_NEGOTIABLE_MESSAGE_SIZE = 1 << 30
MIN_NEGOTIABLE_MESSAGE_SIZE = 1024

# Responses that answer a request, and where their request id lives.
_RESPONSES: dict[int, str] = {
    T.SUCCESS: "success",
    T.ERROR: "error",
    T.PRODUCER_SUCCESS: "producer_success",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
    T.ACK_RESPONSE: "ackResponse",
    T.WATCH_TOPIC_LIST_SUCCESS: "watchTopicListSuccess",
}


# ---------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connected:
    server_version: str
    protocol_version: int
    max_message_size: int
    feature_flags: pb.FeatureFlags


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to a request: ``command`` is the whole response (SUCCESS, ERROR, LOOKUP_RESPONSE...)."""

    request_id: int
    command: pb.BaseCommand

    @property
    def is_error(self) -> bool:
        return self.command.type == T.ERROR

    def error(self) -> Exception:
        """The ServerError subclass for an ERROR response."""
        e = self.command.error
        return server_error(int(e.error), e.message)


@dataclass(frozen=True, slots=True)
class SendReceipt:
    producer_id: int
    sequence_id: int
    highest_sequence_id: int
    message_id: MessageId


@dataclass(frozen=True, slots=True)
class SendError:
    producer_id: int
    sequence_id: int
    error: Exception


@dataclass(frozen=True, slots=True)
class ProducerClosedByBroker:
    producer_id: int
    assigned_broker_url: str | None


@dataclass(frozen=True, slots=True)
class ConsumerClosedByBroker:
    consumer_id: int
    assigned_broker_url: str | None


@dataclass(frozen=True, slots=True)
class MessageReceived:
    consumer_id: int
    message_id: MessageId
    redelivery_count: int
    ack_set: tuple[int, ...]
    payload: Payload


@dataclass(frozen=True, slots=True)
class CorruptMessage:
    """A MESSAGE that failed validation (checksum, metadata): never delivered, never acked silently."""

    consumer_id: int
    message_id: MessageId
    error: RemoteProtocolError
    #: the payload section as received (for a quarantine), None when the frame had none
    raw: bytes | None = None


@dataclass(frozen=True, slots=True)
class ActiveConsumerChange:
    consumer_id: int
    is_active: bool


@dataclass(frozen=True, slots=True)
class EndOfTopic:
    consumer_id: int


@dataclass(frozen=True, slots=True)
class AuthChallenge:
    method: str
    data: bytes


@dataclass(frozen=True, slots=True)
class TopicListUpdate:
    watcher_id: int
    new_topics: tuple[str, ...]
    deleted_topics: tuple[str, ...]
    topics_hash: str


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The protocol closed the connection (keepalive timeout, handshake refused, protocol error)."""

    reason: str
    error: Exception | None = None


Event = (
    Connected
    | Response
    | SendReceipt
    | SendError
    | ProducerClosedByBroker
    | ConsumerClosedByBroker
    | MessageReceived
    | CorruptMessage
    | ActiveConsumerChange
    | EndOfTopic
    | AuthChallenge
    | TopicListUpdate
    | ConnectionClosed
)


# ---------------------------------------------------------------------------
# The protocol
# ---------------------------------------------------------------------------


class ClientProtocol:
    def __init__(
        self,
        *,
        client_version: str = "pulsarwire/0.1",
        auth_method: str | None = None,
        auth_data: bytes | None = None,
        keepalive_interval: float = 30.0,
        proxy_to_broker_url: str | None = None,
    ) -> None:
        self.state = ConnectionState.CONNECTING
        self.client_version = client_version
        self.auth_method = auth_method
        self.auth_data = auth_data
        self.keepalive_interval = keepalive_interval
        self.proxy_to_broker_url = proxy_to_broker_url
        self.decoder = FrameDecoder()
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.protocol_version = 0
        self.server_version = ""
        self._out = bytearray()
        self._events: deque[Event] = deque()
        self._request_ids = itertools.count(1)
        self._producer_ids = itertools.count(1)
        self._consumer_ids = itertools.count(1)
        self.pending_requests: set[int] = set()
        self._last_received = 0.0
        self._ping_sent_at: float | None = None
        self._connect_sent = False

    # -- state ---------------------------------------------------------------------
    def _set_state(self, new: ConnectionState) -> None:
        self.state = transition(CONNECTION_TRANSITIONS, self.state, new, "connection")

    def _close(self, reason: str, error: Exception | None = None) -> None:
        if self.state is not ConnectionState.CLOSED:
            self._set_state(ConnectionState.CLOSED)
            self._events.append(ConnectionClosed(reason, error))

    @property
    def closed(self) -> bool:
        return self.state is ConnectionState.CLOSED

    # -- ids -----------------------------------------------------------------------
    def new_request_id(self) -> int:
        return next(self._request_ids)

    def new_producer_id(self) -> int:
        return next(self._producer_ids)

    def new_consumer_id(self) -> int:
        return next(self._consumer_ids)

    # -- output --------------------------------------------------------------------
    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def _require_ready(self) -> None:
        if self.state is not ConnectionState.READY:
            raise LocalProtocolError(f"connection is {self.state.value}, not ready")

    def connect(self, now: float) -> None:
        """Queue CONNECT (the first thing sent on a new connection)."""
        if self._connect_sent:
            raise LocalProtocolError("CONNECT already sent")
        self._connect_sent = True
        cmd, c = new_command(T.CONNECT)
        c.client_version = self.client_version
        c.protocol_version = PROTOCOL_VERSION
        if self.auth_method:
            c.auth_method_name = self.auth_method
        if self.auth_data is not None:
            c.auth_data = self.auth_data
        if self.proxy_to_broker_url:
            c.proxy_to_broker_url = self.proxy_to_broker_url
        c.feature_flags.supports_auth_refresh = True
        c.feature_flags.supports_broker_entry_metadata = True
        c.feature_flags.supports_topic_watchers = True
        self._last_received = now
        self._out += encode_command(cmd)

    def send_command(self, cmd: pb.BaseCommand) -> None:
        """Queue a command that expects no response (FLOW, ACK without receipt, REDELIVER, ...)."""
        self._require_ready()
        try:
            data = encode_command(cmd)
        except EncodeError as exc:
            raise LocalProtocolError(f"cannot send {T.Type.Name(cmd.type)}: {exc}") from None
        self._out += data

    def send_request(self, cmd: pb.BaseCommand) -> int:
        """Queue a request; its request_id is assigned here and returned for correlation."""
        self._require_ready()
        sub = sub_command(cmd)
        if "request_id" not in sub.DESCRIPTOR.fields_by_name:
            raise LocalProtocolError(f"{T.Type.Name(cmd.type)} is not a request (no request_id)")
        rid = self.new_request_id()
        sub.request_id = rid
        try:
            data = encode_command(cmd)
        except EncodeError as exc:
            raise LocalProtocolError(f"cannot send {T.Type.Name(cmd.type)}: {exc}") from None
        self.pending_requests.add(rid)
        self._out += data
        return rid

    def cancel_request(self, request_id: int) -> None:
        """Forget a request (timed out); a late answer is then ignored."""
        self.pending_requests.discard(request_id)

    def send_message(self, cmd: pb.BaseCommand, metadata: pb.MessageMetadata | bytes, payload: bytes) -> int:
        """Queue a SEND; raises LocalProtocolError if the frame would exceed max_message_size."""
        self._require_ready()
        try:
            frame = encode_payload_command(cmd, metadata, payload)
        except EncodeError as exc:
            raise LocalProtocolError(f"cannot send {T.Type.Name(cmd.type)}: {exc}") from None
        if len(frame) - 4 > self.max_message_size + 10 * 1024:
            raise LocalProtocolError(f"frame of {len(frame)} bytes exceeds the broker's max_message_size")
        self._out += frame
        return len(frame)

    def answer_auth_challenge(self, method: str, data: bytes) -> None:
        """Queue AUTH_RESPONSE (also before CONNECTED: the broker may challenge the handshake)."""
        if self.state is ConnectionState.CLOSED:
            raise LocalProtocolError("connection is closed: no AUTH_RESPONSE")
        cmd, r = new_command(T.AUTH_RESPONSE)
        r.client_version = self.client_version
        r.protocol_version = PROTOCOL_VERSION
        r.response.auth_method_name = method
        r.response.auth_data = data
        self._out += encode_command(cmd)

    # -- keepalive -----------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Keepalive: PING after an idle interval; close when a PING went unanswered for another interval."""
        if self.state is not ConnectionState.READY:
            return
        if self._ping_sent_at is not None and now - self._ping_sent_at >= self.keepalive_interval:
            self._close(f"no PONG within {self.keepalive_interval:.0f} s")
            return
        if self._ping_sent_at is None and now - self._last_received >= self.keepalive_interval:
            self._ping_sent_at = now
            self._out += encode_command(new_command(T.PING)[0])

    # -- input ---------------------------------------------------------------------
    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the broker; fatal protocol errors close the connection (ConnectionClosed event)."""
        if self.state is ConnectionState.CLOSED:
            return
        if not data:
            try:
                self.decoder.eof()
            except TruncatedFrameError as exc:
                self._close("connection closed by the broker mid-frame", exc)
                return
            self._close("connection closed by the broker")
            return
        self.decoder.feed(data)
        while not self.closed:
            try:
                frame = self.decoder.next_frame()
            except RemoteProtocolError as exc:
                cmd = getattr(exc, "command", None)
                if cmd is not None:  # a whole frame arrived, even if its payload is bad
                    self._last_received = now
                    self._ping_sent_at = None
                if cmd is not None and cmd.type == T.MESSAGE and self.state is ConnectionState.READY:
                    mid = MessageId.from_proto(cmd.message.message_id)
                    raw = exc.section if isinstance(exc, PayloadError) else None
                    self._events.append(CorruptMessage(cmd.message.consumer_id, mid, exc, raw))
                    continue
                self._close(f"protocol error: {exc}", exc)
                return
            if frame is None:
                return
            self._last_received = now
            self._ping_sent_at = None
            self._handle(frame)

    def _handle(self, frame: Frame) -> None:
        cmd = frame.command
        t = cmd.type
        if self.state is ConnectionState.CONNECTING:
            if t == T.CONNECTED:
                self._on_connected(cmd.connected)
            elif t == T.ERROR:
                self._close("handshake refused", server_error(int(cmd.error.error), cmd.error.message))
            elif t == T.AUTH_CHALLENGE:
                self._events.append(
                    AuthChallenge(
                        cmd.authChallenge.challenge.auth_method_name, cmd.authChallenge.challenge.auth_data
                    )
                )
            elif t in (T.PING, T.PONG):
                if t == T.PING:
                    self._out += encode_command(new_command(T.PONG)[0])
            else:
                self._close(f"{T.Type.Name(t)} before CONNECTED", RemoteProtocolError("unexpected command"))
            return
        if t in _RESPONSES:
            rid = getattr(cmd, _RESPONSES[t]).request_id
            if t == T.ERROR and rid == 2**64 - 1:
                self._close(
                    "connection refused by broker", server_error(int(cmd.error.error), cmd.error.message)
                )
                return
            if rid in self.pending_requests:
                self.pending_requests.discard(rid)
                self._events.append(Response(rid, cmd))
            return  # a late answer to a request we gave up on
        if t == T.PING:
            self._out += encode_command(new_command(T.PONG)[0])
        elif t == T.PONG:
            pass
        elif t == T.SEND_RECEIPT:
            r = cmd.send_receipt
            self._events.append(
                SendReceipt(
                    r.producer_id,
                    r.sequence_id,
                    r.highest_sequence_id,
                    MessageId.from_proto(r.message_id) if r.HasField("message_id") else MessageId(-1, -1),
                )
            )
        elif t == T.SEND_ERROR:
            e = cmd.send_error
            self._events.append(
                SendError(e.producer_id, e.sequence_id, server_error(int(e.error), e.message))
            )
        elif t == T.MESSAGE:
            m = cmd.message
            if frame.payload is None:
                self._close("MESSAGE without payload", RemoteProtocolError("MESSAGE without payload"))
                return
            self._events.append(
                MessageReceived(
                    m.consumer_id,
                    MessageId.from_proto(m.message_id),
                    m.redelivery_count,
                    tuple(m.ack_set),
                    frame.payload,
                )
            )
        elif t == T.CLOSE_PRODUCER:
            c = cmd.close_producer
            self._events.append(ProducerClosedByBroker(c.producer_id, c.assignedBrokerServiceUrl or None))
        elif t == T.CLOSE_CONSUMER:
            cc = cmd.close_consumer
            self._events.append(ConsumerClosedByBroker(cc.consumer_id, cc.assignedBrokerServiceUrl or None))
        elif t == T.ACTIVE_CONSUMER_CHANGE:
            a = cmd.active_consumer_change
            self._events.append(ActiveConsumerChange(a.consumer_id, a.is_active))
        elif t == T.REACHED_END_OF_TOPIC:
            self._events.append(EndOfTopic(cmd.reachedEndOfTopic.consumer_id))
        elif t == T.AUTH_CHALLENGE:
            ch = cmd.authChallenge.challenge
            self._events.append(AuthChallenge(ch.auth_method_name, ch.auth_data))
        elif t == T.WATCH_TOPIC_UPDATE:
            u = cmd.watchTopicUpdate
            self._events.append(
                TopicListUpdate(u.watcher_id, tuple(u.new_topics), tuple(u.deleted_topics), u.topics_hash)
            )
        elif t == T.TOPIC_MIGRATED:
            tm = cmd.topicMigrated
            url = tm.brokerServiceUrl or None
            if tm.resource_type == pb.CommandTopicMigrated.Producer:
                self._events.append(ProducerClosedByBroker(tm.resource_id, url))
            else:
                self._events.append(ConsumerClosedByBroker(tm.resource_id, url))
        else:
            self._close(
                f"unexpected {T.Type.Name(t)} from the broker",
                RemoteProtocolError(f"unexpected {T.Type.Name(t)}"),
            )

    def _on_connected(self, c: pb.CommandConnected) -> None:
        size = c.max_message_size if c.HasField("max_message_size") else DEFAULT_MAX_MESSAGE_SIZE
        if not MIN_NEGOTIABLE_MESSAGE_SIZE <= size <= MAX_NEGOTIABLE_MESSAGE_SIZE:
            self._close(
                f"absurd max_message_size {size} in CONNECTED",
                RemoteProtocolError(f"max_message_size {size} out of range"),
            )
            return
        self.max_message_size = size
        self.decoder.set_max_message_size(size)
        self.protocol_version = min(c.protocol_version, PROTOCOL_VERSION)
        self.server_version = c.server_version
        self._set_state(ConnectionState.READY)
        flags = pb.FeatureFlags()
        flags.CopyFrom(c.feature_flags)
        self._events.append(Connected(c.server_version, self.protocol_version, size, flags))

    def close(self) -> None:
        """Local close: no more input is processed."""
        self._close("closed locally")
