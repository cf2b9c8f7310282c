"""The binary protocol's connection handler: one :class:`ServerConnection` per TCP connection.

It decodes frames with the codec's FrameDecoder and answers each command the way Apache Pulsar's
``ServerCnx`` does (same responses, same error codes, same ordering where clients depend on it --
e.g. CLOSE_CONSUMER before SUCCESS on seek). What a command may do -- authorization, whether the
namespace and topic exist, partitioned metadata, lookup -- it asks the service layer
(:class:`~pulsarwire.broker.service.BrokerService`), which the web service asks too; this module
owns only the protocol: the handshake and authentication of the connection, keepalive,
producers and consumers registered on it, receipts, and the wire form of every answer.
A refusal raised by the service (BrokerError) becomes that request's own failure answer.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from pulsarwire._version import __version__
from pulsarwire.codec.batch import MIN_ENTRY_SIZE
from pulsarwire.codec.frames import (
    FrameDecoder,
    Payload,
    encode_command,
    encode_with_stored_entry,
    new_command,
)
from pulsarwire.errors import (
    AuthenticationError,
    ChecksumMismatchError,
    InvalidTopicName,
    PayloadError,
    RemoteProtocolError,
    StorageError,
)
from pulsarwire.naming import TopicName
from pulsarwire.proto import PROTOCOL_VERSION, pb

from .auth import REFRESH_AUTH_DATA, TOKEN_METHOD, Identity, PeerCertificate
from .authz import CONSUME, LOOKUP, PRODUCE, Action
from .faults import corrupt
from .schemas import IncompatibleSchemaError
from .service import BrokerError, BrokerService, NotFound
from .storage import Entry
from .subscription import (
    EARLIEST,
    MAX_HASH_RANGES_PER_CONSUMER,
    ConsumerRef,
    Subscription,
    sticky_ranges_refusal,
)
from .topic import ProducerRef, Topic
from .watch import (
    InvalidTopicsPattern,
    PatternTooLong,
    PatternUnsupported,
    Watcher,
    compile_topics_pattern,
    topics_hash,
)

log = logging.getLogger("pulsarwire.broker")

SERVER_VERSION = f"pulsarwire-broker/{__version__}"
#: Outgoing bytes buffered per connection before dispatch to it pauses (see Sender.writable).
WRITE_BUFFER_HIGH = 1024 * 1024
T = pb.BaseCommand
E = pb.ServerError
#: seconds a connection has to answer a liveness PING (Pulsar's connectionLivenessCheckTimeoutMillis)
LIVENESS_TIMEOUT = 5.0
SubType = pb.CommandSubscribe.SubType
Mode = pb.CommandGetTopicsOfNamespace.Mode

#: The C++ client core (under the official Python, Node.js and C++ clients) up to this version has no
#: case for REACHED_END_OF_TOPIC: it logs "Received invalid message from server" and drops the whole
#: connection, then resubscribes and is told again -- a reconnect loop that redelivers everything unacked
#: on that connection. Such clients are not sent the notice (the Python client cannot ask for it anyway).
_CPP_WITHOUT_END_OF_TOPIC = (4, 2)
_CPP_VERSION = re.compile(r"Pulsar-CPP-v(\d+)\.(\d+)")


def understands_end_of_topic(client_version: str) -> bool:
    """Whether a client announcing ``client_version`` in CONNECT handles REACHED_END_OF_TOPIC."""
    m = _CPP_VERSION.match(client_version)
    return m is None or (int(m[1]), int(m[2])) > _CPP_WITHOUT_END_OF_TOPIC


def peer_address(peername: object) -> str:
    """A client's address as Pulsar writes it in stats and logs (Java's InetSocketAddress:
    ``/127.0.0.1:56244``)."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"/{peername[0]}:{peername[1]}"
    return str(peername or "")


class ServerConnection(asyncio.Protocol):
    """One client connection: decode frames, dispatch commands, write responses."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.decoder = FrameDecoder(service.config.max_message_size)
        self.transport: asyncio.Transport | None = None
        self.connected = False
        self.protocol_version = 0
        self.end_of_topic_notices = True
        self.producers: dict[int, ProducerRef] = {}
        self.consumers: dict[int, tuple[ConsumerRef, Topic, Subscription]] = {}
        self.last_seen = time.monotonic()
        self.peer = ""
        #: the certificate a TLS client presented (TLS authentication), None otherwise
        self.peer_cert: PeerCertificate = None
        self.identity: Identity | None = None
        self._ping_outstanding = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._auth_timer: asyncio.TimerHandle | None = None
        self._auth_deadline: asyncio.TimerHandle | None = None
        self._connect_deadline: asyncio.TimerHandle | None = None
        #: receipts held back by a delay fault: (release time, send, ledger, entry), in order
        self._held_receipts: deque[tuple[float, pb.CommandSend, int, int]] = deque()
        #: False while the transport's write buffer is over its high-water mark (Sender.writable)
        self.writable = True
        #: a liveness check in progress (PING sent, PONG awaited): every asker shares it
        self._liveness: asyncio.Future[bool] | None = None
        #: a CONNECT's credential being checked off the loop: frames behind it wait in the decoder
        self._authenticating: asyncio.Future[Identity] | None = None

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = peer_address(transport.get_extra_info("peername"))
        self.peer_cert = transport.get_extra_info("peercert") or None
        cfg = self.service.config
        if cfg.max_connections and len(self.service.connections) >= cfg.max_connections:
            # As Pulsar's brokerMaxConnections: ERROR NotAllowedError (request id -1), then close.
            self.service.connections_refused += 1
            log.warning(
                "refusing %s: reached the maximum number of connections (%d)", self.peer, cfg.max_connections
            )
            self._error(2**64 - 1, E.NotAllowedError, "Reached the maximum number of connections")
            self.close()
            return
        self.service.connections.add(self)
        self.service.connections_accepted += 1
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        self._schedule_keepalive()
        # A fixed deadline from the accept: frames (PING) or trickled bytes do not extend it.
        self._connect_deadline = asyncio.get_running_loop().call_later(
            cfg.connect_timeout, self._connect_timed_out
        )

    def _connect_timed_out(self) -> None:
        self._connect_deadline = None
        if self.transport is not None and not self.connected:
            log.info("closing %s: no CONNECT within %g s", self.peer, self.service.config.connect_timeout)
            self.close()

    def _schedule_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(self.service.config.keepalive_seconds, self._keepalive_check)

    def _keepalive_check(self) -> None:
        """Ping a connection idle for a keepalive interval; close it when the ping went unanswered."""
        if self.transport is None:
            return
        idle = time.monotonic() - self.last_seen
        if idle >= self.service.config.keepalive_seconds:
            if self._ping_outstanding:
                log.info("closing %s: no answer to PING for %.1f s", self.peer, idle)
                self.close()
                return
            self._ping_outstanding = True
            self.send(new_command(T.PING)[0])
        self._schedule_keepalive()

    def connection_lost(self, exc: Exception | None) -> None:
        self.service.connections.discard(self)
        self.service.watchers.remove(self)
        for timer in (self._keepalive, self._auth_timer, self._auth_deadline, self._connect_deadline):
            if timer is not None:
                timer.cancel()
        self._drop_everything()
        self._settle_liveness(False)

    def _settle_liveness(self, alive: bool) -> None:
        if self._liveness is not None and not self._liveness.done():
            self._liveness.set_result(alive)
        self._liveness = None

    async def check_liveness(self) -> bool:
        """Whether the client on this connection still answers (Pulsar's checkConnectionLiveness).

        A PING is sent and a PONG awaited for LIVENESS_TIMEOUT seconds; a connection that does not
        answer in time is closed and its producers and consumers are dropped at once.
        """
        if self.transport is None or self.transport.is_closing():
            self._drop_everything()
            return False
        if self._liveness is None:
            self._liveness = asyncio.get_running_loop().create_future()
            self.send(new_command(T.PING)[0])
        try:
            alive = await asyncio.wait_for(asyncio.shield(self._liveness), LIVENESS_TIMEOUT)
        except TimeoutError:
            alive = False
        if not alive:
            log.info("closing %s: no answer to a liveness check", self.peer)
            self.close()
            self._drop_everything()
        return alive

    def _drop_everything(self) -> None:
        """Forget this connection's producers and consumers now (it is closed or closing)."""
        for p in list(self.producers.values()):
            self._remove_producer(p)
        for cid in list(self.consumers):
            self._remove_consumer(cid)

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        subscriptions = {id(sub): sub for _c, _t, sub in self.consumers.values()}
        for sub in subscriptions.values():
            sub.dispatch()

    def data_received(self, data: bytes) -> None:
        self.last_seen = time.monotonic()
        self._ping_outstanding = False
        self.decoder.feed(data)
        while self.transport is not None and self._authenticating is None:
            try:
                frame = self.decoder.next_frame()
            except PayloadError as exc:
                # A bad SEND payload fails that send only (the frame was consumed); anything else closes.
                cmd = cast(Any, exc.command)
                if cmd is not None and cmd.type == T.SEND:
                    code = E.ChecksumError if isinstance(exc, ChecksumMismatchError) else E.UnknownError
                    self._send_error(cmd.send.producer_id, cmd.send.sequence_id, code, str(exc))
                    continue
                log.warning("closing %s: %s", self.peer, exc)
                self.close()
                return
            except RemoteProtocolError as exc:
                log.warning("closing %s: %s", self.peer, exc)
                self.close()
                return
            except Exception:  # the decoder's state is unknown: nothing more can be read safely
                log.exception("closing %s: unexpected failure decoding a frame", self.peer)
                self.close()
                return
            if frame is None:
                return
            try:
                self.handle(frame.command, frame.payload)
            except BrokerError as exc:
                self._fail_request(frame.command, exc.code, str(exc))
            except InvalidTopicName as exc:
                self._fail_request(frame.command, E.InvalidTopicName, str(exc))
            except StorageError as exc:
                log.error("%s failed: %s", T.Type.Name(frame.command.type), exc)
                self._fail_request(frame.command, E.PersistenceError, str(exc))
            except Exception as exc:
                self._fail_unexpectedly(frame.command, exc)

    def _fail_unexpectedly(self, cmd: pb.BaseCommand, exc: Exception) -> None:
        """A request failed in a way the broker did not foresee: answer that request, keep the connection.

        Logged once at ERROR with the traceback (it is a broker bug or an unforeseen input); the
        client gets the request's failure answer with the closest ServerError code.
        """
        name = T.Type.Name(cmd.type) if cmd.type in T.Type.values() else str(cmd.type)
        log.error("%s from %s failed unexpectedly", name, self.peer, exc_info=exc)
        code, message = _unexpected_failure(exc)
        try:
            self._fail_request(cmd, code, f"{name} failed: {message}")
        except Exception:
            log.exception("closing %s: cannot answer the failed %s", self.peer, name)
            self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def abort(self) -> None:
        """Cut the connection without a goodbye (fault injection)."""
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    def uses_topic(self, name: str) -> bool:
        return any(p.topic.name == name for p in self.producers.values()) or any(
            t.name == name for _c, t, _s in self.consumers.values()
        )

    def close_topic_producers(self, name: str) -> None:
        for ref in [p for p in self.producers.values() if p.topic.name == name]:
            self.close_producer(ref)

    def close_topic_consumers(self, name: str) -> None:
        for cid in [cid for cid, (_c, t, _s) in self.consumers.items() if t.name == name]:
            self.close_consumer(cid)

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def send(self, cmd: pb.BaseCommand) -> None:
        self.write(encode_command(cmd))

    # -- responses -----------------------------------------------------------------
    def _success(self, request_id: int) -> None:
        cmd, sub = new_command(T.SUCCESS)
        sub.request_id = request_id
        self.send(cmd)

    def _error(self, request_id: int, code: int, message: str) -> None:
        cmd, sub = new_command(T.ERROR)
        sub.request_id = request_id
        sub.error = cast(Any, code)
        sub.message = message
        self.send(cmd)

    def _send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        cmd, sub = new_command(T.SEND_ERROR)
        sub.producer_id = producer_id
        sub.sequence_id = sequence_id
        sub.error = cast(Any, code)
        sub.message = message
        self.send(cmd)

    def _fail_request(self, cmd: pb.BaseCommand, code: int, message: str) -> None:
        t = cmd.type
        if t == T.LOOKUP:
            resp, sub = new_command(T.LOOKUP_RESPONSE)
            sub.request_id = cmd.lookupTopic.request_id
            sub.response = pb.CommandLookupTopicResponse.Failed
            sub.error = cast(Any, code)
            sub.message = message
            self.send(resp)
        elif t == T.PARTITIONED_METADATA:
            resp, sub = new_command(T.PARTITIONED_METADATA_RESPONSE)
            sub.request_id = cmd.partitionMetadata.request_id
            sub.response = pb.CommandPartitionedTopicMetadataResponse.Failed
            sub.error = cast(Any, code)
            sub.message = message
            self.send(resp)
        elif t == T.SEND:
            self._send_error(cmd.send.producer_id, cmd.send.sequence_id, code, message)
        elif t == T.ACK and cmd.ack.HasField("request_id"):
            resp, sub = new_command(T.ACK_RESPONSE)
            sub.consumer_id = cmd.ack.consumer_id
            sub.request_id = cmd.ack.request_id
            sub.error = cast(Any, code)
            sub.message = message
            self.send(resp)
        elif t in (T.GET_SCHEMA, T.GET_OR_CREATE_SCHEMA):  # as Pulsar: the schema answer carries the error
            is_get = t == T.GET_SCHEMA
            resp, sub = new_command(T.GET_SCHEMA_RESPONSE if is_get else T.GET_OR_CREATE_SCHEMA_RESPONSE)
            sub.request_id = (cmd.getSchema if is_get else cmd.getOrCreateSchema).request_id
            sub.error_code = cast(Any, code)
            sub.error_message = message
            self.send(resp)
        else:
            from pulsarwire.codec.frames import sub_command

            req = sub_command(cmd)
            if "request_id" in req.DESCRIPTOR.fields_by_name and req.HasField("request_id"):
                self._error(req.request_id, code, message)
            else:  # nothing to answer (FLOW, REDELIVER..., an ACK without receipt)
                log.warning("%s from %s refused: %s", T.Type.Name(t), self.peer, message)

    # -- dispatch ------------------------------------------------------------------
    def handle(self, cmd: pb.BaseCommand, payload: Any) -> None:
        t = cmd.type
        if not self.connected and t not in (T.CONNECT, T.PING, T.PONG):
            log.warning("command %s before CONNECT from %s", T.Type.Name(t), self.peer)
            self.close()
            return
        if self.connected and t == T.CONNECT:
            # Pulsar: handleConnect's checkArgument(state == Start) fails and the connection closes.
            log.warning("closing %s: a second CONNECT on the connection", self.peer)
            self.close()
            return
        handler = self._HANDLERS.get(t)
        if handler is None:
            raise BrokerError(E.NotAllowedError, f"{T.Type.Name(t)} is not supported by this broker")
        handler(self, cmd, payload)

    def on_connect(self, cmd: pb.BaseCommand, _: Any) -> None:
        c = cmd.connect
        self.protocol_version = min(c.protocol_version, PROTOCOL_VERSION)
        self.end_of_topic_notices = understands_end_of_topic(c.client_version)
        if self.service.config.auth is None:
            self._connected()
            return
        self._check_credential(c.auth_method_name, c.auth_data, self._connect_checked)

    def _check_credential(self, method: str, data: bytes, then: Callable[[Identity], None]) -> None:
        """Check a credential in a worker thread (a password hash costs milliseconds): the loop
        serves other connections meanwhile, and this one reads nothing until it is done; then
        ``then(identity)``, or a refusal (ERROR AuthenticationError, request id -1 as Pulsar) and
        the connection closes."""
        auth = self.service.config.auth
        assert auth is not None and self.transport is not None
        self.transport.pause_reading()
        check = partial(auth.authenticate, method, data, time.time(), self.peer_cert)
        self._authenticating = asyncio.get_running_loop().run_in_executor(None, check)
        self._authenticating.add_done_callback(partial(self._credential_checked, then))

    def _credential_checked(self, then: Callable[[Identity], None], done: asyncio.Future[Identity]) -> None:
        self._authenticating = None
        if self.transport is None or done.cancelled():
            return
        exc = done.exception()
        if exc is not None:
            if isinstance(exc, AuthenticationError):
                self.service.auth_failures += 1
                log.info("authentication failed for %s: %s", self.peer, exc)
            else:
                log.error("closing %s: authentication failed unexpectedly", self.peer, exc_info=exc)
            self._error(2**64 - 1, E.AuthenticationError, str(exc) or "authentication failed")
            self.close()
            return
        then(done.result())
        if self.transport is not None:
            self.transport.resume_reading()
            self.data_received(b"")  # the frames that came behind the credential

    def _connect_checked(self, identity: Identity) -> None:
        self._set_identity(identity)
        self._connected()

    def _connected(self) -> None:
        if self._connect_deadline is not None:
            self._connect_deadline.cancel()
            self._connect_deadline = None
        resp, sub = new_command(T.CONNECTED)
        sub.server_version = SERVER_VERSION
        sub.protocol_version = self.protocol_version
        sub.max_message_size = self.service.config.max_message_size
        sub.feature_flags.supports_auth_refresh = True
        sub.feature_flags.supports_broker_entry_metadata = True
        sub.feature_flags.supports_topic_watchers = True
        self.connected = True
        self.send(resp)

    def _set_identity(self, identity: Identity) -> None:
        """Take ``identity`` (CONNECT, or a refresh of the same role); challenge it when it expires."""
        self.identity = identity
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        if self.identity.expires_at is not None:
            delay = max(0.0, self.identity.expires_at - time.time())
            self._auth_timer = asyncio.get_running_loop().call_later(delay, self._challenge)

    def _challenge(self) -> None:
        """The credential expired: ask for a fresh one and close if none comes in time."""
        self._auth_timer = None
        if self.transport is None:
            return
        cmd, s = new_command(T.AUTH_CHALLENGE)
        s.server_version = SERVER_VERSION
        s.protocol_version = self.protocol_version
        s.challenge.auth_method_name = TOKEN_METHOD
        s.challenge.auth_data = REFRESH_AUTH_DATA
        self.send(cmd)
        self._auth_deadline = asyncio.get_running_loop().call_later(
            self.service.config.auth_challenge_timeout, self._auth_timed_out
        )

    def _auth_timed_out(self) -> None:
        log.info("closing %s: no fresh credential after AUTH_CHALLENGE", self.peer)
        self.close()

    def on_auth_response(self, cmd: pb.BaseCommand, _: Any) -> None:
        r = cmd.authResponse.response
        if self._auth_deadline is not None:
            self._auth_deadline.cancel()
            self._auth_deadline = None
        if self.service.config.auth is None:
            log.info("closing %s: AUTH_RESPONSE while authentication is off", self.peer)
            self._error(2**64 - 1, E.AuthenticationError, "authentication is not enabled on this broker")
            self.close()
            return
        self._check_credential(r.auth_method_name or TOKEN_METHOD, r.auth_data, self._refreshed)

    def _refreshed(self, identity: Identity) -> None:
        if self.identity is not None and identity.role != self.identity.role:
            # As Pulsar ("Principal cannot change during an authentication refresh"): close, no answer.
            log.warning(
                "closing %s: the role cannot change on a connection (%r, then %r)",
                self.peer,
                self.identity.role,
                identity.role,
            )
            self.close()
            return
        self._set_identity(identity)
        self.service.auth_refreshes += 1

    @property
    def role(self) -> str | None:
        """The role authenticated on this connection (None: no authentication)."""
        return self.identity.role if self.identity is not None else None

    def _authorize(self, name: str, needs: frozenset[Action]) -> None:
        """Refuse a command on topic ``name`` (AuthorizationError) unless the role holds one of ``needs``."""
        self.service.authorize_topic(self.role, name, needs)

    def _authorize_namespace(self, namespace: str, needs: frozenset[Action]) -> None:
        """Refuse a namespace command (AuthorizationError) unless the role holds one of ``needs``;
        a missing tenant is refused the same way here, as Pulsar's ServerCnx answers any failure
        of a namespace command's authorization (topic commands answer TopicNotFound)."""
        try:
            self.service.authorize(self.role, namespace, needs, namespace)
        except NotFound:
            raise self.service.refusal(self.role, namespace, needs, namespace) from None

    def on_ping(self, cmd: pb.BaseCommand, _: Any) -> None:
        self.send(new_command(T.PONG)[0])

    def on_pong(self, cmd: pb.BaseCommand, _: Any) -> None:
        self._settle_liveness(True)  # last_seen is refreshed for every frame

    def on_partitioned_metadata(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.partitionMetadata
        name = str(TopicName.parse(req.topic))
        n = self.service.partitioned_metadata(name, self.role, auto_create=req.metadata_auto_creation_enabled)
        resp, sub = new_command(T.PARTITIONED_METADATA_RESPONSE)
        sub.request_id = req.request_id
        sub.partitions = n
        sub.response = pb.CommandPartitionedTopicMetadataResponse.Success
        self.send(resp)

    def on_lookup(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.lookupTopic
        name = str(TopicName.parse(req.topic))
        found = self.service.lookup(name, self.role, req.advertised_listener_name or None)
        resp, sub = new_command(T.LOOKUP_RESPONSE)
        sub.request_id = req.request_id
        if found.redirect:
            sub.response = pb.CommandLookupTopicResponse.Redirect
        else:
            sub.response = pb.CommandLookupTopicResponse.Connect
        if found.urls.url is not None:
            sub.brokerServiceUrl = found.urls.url
        if found.urls.url_tls is not None:
            sub.brokerServiceUrlTls = found.urls.url_tls
        sub.authoritative = True
        self.send(resp)

    def _topic_for_use(self, topic: str, needs: frozenset[Action]) -> Topic:
        return self.service.topic_for_use(topic, self.role, needs)

    # -- producers -------------------------------------------------------------------
    def on_producer(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.producer
        if req.producer_id in self.producers:
            existing = self.producers[req.producer_id]
            self._producer_success(req.request_id, existing)
            return
        topic = self._topic_for_use(req.topic, PRODUCE)
        if topic.terminated:
            raise BrokerError(E.TopicTerminatedError, f"topic {topic.name} is terminated")
        name = req.producer_name if req.HasField("producer_name") and req.producer_name else None
        if name is None:
            name = self.service.new_producer_name()
        if name in topic.producers:
            raise BrokerError(E.ProducerBusy, f"producer with name '{name}' is already connected to topic")
        version = self._register_schema(topic, req.schema) if req.HasField("schema") else None
        ref = ProducerRef(
            req.producer_id,
            name,
            topic,
            self,
            access_mode=req.producer_access_mode,
            epoch=req.topic_epoch if req.HasField("topic_epoch") else None,
            request_id=req.request_id,
            schema_version=version,
        )
        refusal = topic.add_producer(ref)
        if refusal is not None:
            raise BrokerError(*refusal)
        self.producers[req.producer_id] = ref
        self._producer_success(req.request_id, ref)

    def _producer_success(self, request_id: int, ref: ProducerRef) -> None:
        """PRODUCER_SUCCESS for ``ref``: with ``producer_ready`` false while it waits for exclusive
        access (as Pulsar, which answers again, ready, when the producer gets the topic)."""
        resp, sub = new_command(T.PRODUCER_SUCCESS)
        sub.request_id = request_id
        sub.producer_name = ref.name
        dedup = self.service.deduplication_enabled(ref.topic.name)
        ready = ref.ready
        sub.last_sequence_id = ref.topic.last_sequence.get(ref.name, -1) if dedup and ready else -1
        schema_version = ref.schema_version
        if schema_version is None:  # no schema of its own: the topic's latest, if any
            latest = self.service.schemas.latest(ref.topic.name)
            schema_version = latest.version if latest is not None else None
        if schema_version is not None:
            sub.schema_version = schema_version.to_bytes(8, "big")
        if ready and ref.topic.topic_epoch is not None:
            sub.topic_epoch = ref.topic.topic_epoch
        sub.producer_ready = ready
        self.send(resp)

    def producer_promoted(self, ref: ProducerRef) -> None:
        """A queued WaitForExclusive producer got the topic: answer its PRODUCER again, ready."""
        self._producer_success(ref.request_id, ref)

    def refuse_waiting_producer(self, ref: ProducerRef, code: int, message: str) -> None:
        """A queued producer will never get the topic (fenced): fail its PRODUCER request."""
        if self.producers.get(ref.producer_id) is ref:
            del self.producers[ref.producer_id]
        self._error(ref.request_id, code, message)

    def on_send(self, cmd: pb.BaseCommand, payload: Any) -> None:
        req = cmd.send
        ref = self.producers.get(req.producer_id)
        if ref is None:
            raise BrokerError(E.UnknownError, f"no producer {req.producer_id}")
        if not ref.ready:
            raise BrokerError(E.ProducerBusy, f"producer {ref.name} is waiting for exclusive access")
        topic = ref.topic
        if topic.terminated:
            raise BrokerError(E.TopicTerminatedError, f"topic {topic.name} is terminated")
        if payload is None:
            raise BrokerError(E.UnknownError, "SEND without payload")
        faults = self.service.faults
        if faults.take("drop_sends"):
            log.info("fault: dropping send %s of %s and the connection", req.sequence_id, ref.name)
            self.abort()
            return
        if ref.fenced:
            self._send_error(
                req.producer_id, req.sequence_id, E.PersistenceError, "producer fenced after a failed write"
            )
            return
        if faults.take("fail_receipts"):
            ref.fenced = True
            self._send_error(req.producer_id, req.sequence_id, faults.fail_code, "injected failure")
            return
        md = payload.metadata
        self._check_send(ref, req, payload)
        if not topic.persistent:
            # As Pulsar's non-persistent topics: nothing is stored, the receipt is 0:0, and a message
            # no connected consumer can take is dropped.
            if topic.publish_transient(payload.entry, md):
                topic.dispatch_all()
            self._receipt(req, 0, 0)
            return
        # As Pulsar does: an entry is a duplicate when its *first* sequence id is not above the
        # highest one stored for the producer name (a batch straddling it is dropped whole).
        # The name is the producer registered on this connection: _check_send refused metadata
        # naming any other, so one producer can never move another's high-water mark.
        first = min(req.sequence_id, md.sequence_id) if md.HasField("sequence_id") else req.sequence_id
        if self.service.deduplication_enabled(topic.name) and first <= topic.last_sequence.get(ref.name, -1):
            self._receipt(req, -1, -1)
            return
        try:
            entry = topic.append(payload.entry, md)
        except StorageError as exc:
            # Nothing was stored. Fence the producer as Pulsar does after a failed write: its later
            # sends are refused until it is re-created, so no gap can hide behind deduplication.
            ref.fenced = True
            self.service.write_failures += 1
            log.error("cannot store a message of %s on %s: %s", ref.name, topic.name, exc)
            self._send_error(
                req.producer_id, req.sequence_id, E.PersistenceError, f"cannot store the message: {exc}"
            )
            return
        self._receipt(req, entry.ledger_id, entry.entry_id)
        topic.dispatch_all()
        self.service.compact_over_threshold(topic)

    def _check_send(self, ref: ProducerRef, req: pb.CommandSend, payload: Payload) -> None:
        """Refuse a SEND an honest producer never makes (raises BrokerError NotAllowedError: the
        clients fail that message only, as for Pulsar's own refusals of a message).

        * The metadata must name the producer registered on this connection: deduplication and
          its recovery after a restart read the producer from there.
        * Message counts: SEND's ``num_messages`` and a batch's ``num_messages_in_batch`` at least
          1 and equal, no more than the batch's bytes can hold (6 bytes an entry at least), and a
          compressed batch no larger uncompressed than the largest message (consumers refuse it).
        """
        md = payload.metadata
        if md.producer_name != ref.name:
            raise BrokerError(
                E.NotAllowedError,
                f"message metadata names producer {md.producer_name!r}, not this producer {ref.name!r}",
            )
        sent = req.num_messages
        if sent < 1:
            raise BrokerError(E.NotAllowedError, f"SEND num_messages {sent} is below 1")
        if not md.HasField("num_messages_in_batch"):
            if sent != 1:
                raise BrokerError(E.NotAllowedError, f"SEND num_messages {sent} for a single message")
            return
        count = md.num_messages_in_batch
        if count != sent:
            raise BrokerError(E.NotAllowedError, f"batch of {count} messages sent as num_messages {sent}")
        if md.compression == pb.NONE:
            size = len(payload.payload)
        else:
            size = md.uncompressed_size
            if size > self.service.config.max_message_size:
                raise BrokerError(
                    E.NotAllowedError,
                    f"batch of {size} bytes uncompressed is over the max message size"
                    f" {self.service.config.max_message_size}",
                )
        if count * MIN_ENTRY_SIZE > size:
            raise BrokerError(
                E.NotAllowedError,
                f"batch claims {count} messages, its {size} bytes hold at most {size // MIN_ENTRY_SIZE}",
            )

    def _receipt(self, req: pb.CommandSend, ledger_id: int, entry_id: int) -> None:
        """Answer a stored SEND. Receipts leave in order even when a fault delays some of them."""
        loop = asyncio.get_running_loop()
        faults = self.service.faults
        delay = faults.receipt_delay if faults.take("delay_receipts") else 0.0
        if not delay and not self._held_receipts:
            self._send_receipt(req, ledger_id, entry_id)
            return
        ready = loop.time() + delay
        if self._held_receipts:
            ready = max(ready, self._held_receipts[-1][0])
        self._held_receipts.append((ready, req, ledger_id, entry_id))
        if len(self._held_receipts) == 1:
            loop.call_at(ready, self._release_receipts)

    def _release_receipts(self) -> None:
        loop = asyncio.get_running_loop()
        while self._held_receipts and self._held_receipts[0][0] <= loop.time():
            _ready, req, ledger_id, entry_id = self._held_receipts.popleft()
            self._send_receipt(req, ledger_id, entry_id)
        if self._held_receipts:
            loop.call_at(self._held_receipts[0][0], self._release_receipts)

    def _send_receipt(self, req: pb.CommandSend, ledger_id: int, entry_id: int) -> None:
        resp, sub = new_command(T.SEND_RECEIPT)
        sub.producer_id = req.producer_id
        sub.sequence_id = req.sequence_id
        sub.highest_sequence_id = req.highest_sequence_id
        sub.message_id.ledgerId = ledger_id % 2**64
        sub.message_id.entryId = entry_id % 2**64
        self.send(resp)

    def on_close_producer(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.close_producer
        ref = self.producers.get(req.producer_id)
        if ref is not None:
            self._remove_producer(ref)
        self._success(req.request_id)

    def _remove_producer(self, ref: ProducerRef) -> None:
        self.producers.pop(ref.producer_id, None)
        ref.topic.remove_producer(ref)

    def close_producer(self, ref: ProducerRef) -> None:
        """Broker-initiated CLOSE_PRODUCER (the client is expected to look up and reconnect)."""
        self._remove_producer(ref)
        cmd, sub = new_command(T.CLOSE_PRODUCER)
        sub.producer_id = ref.producer_id
        sub.request_id = 0
        self.send(cmd)

    # -- schemas -------------------------------------------------------------------
    def _register_schema(self, topic: Topic, schema: pb.Schema) -> int | None:
        try:
            strategy = self.service.schema_compatibility(topic.name)
            return self.service.schemas.register(topic.name, schema, strategy)
        except IncompatibleSchemaError as exc:
            raise BrokerError(E.IncompatibleSchema, f"{topic.name}: {exc}") from None

    def _check_consumer_schema(self, topic: Topic, schema: pb.Schema) -> None:
        """As Pulsar's addSchemaIfIdleOrCheckCompatible: a consumer's schema is added to an idle topic
        (no schema, no producer, no consumer, no entry), else checked against the topic's history
        (BrokerError IncompatibleSchema)."""
        if schema.type in (pb.Schema.Type.Value("None"), pb.Schema.AutoConsume):
            return
        registry = self.service.schemas
        strategy = self.service.schema_compatibility(topic.name)
        idle = (
            registry.latest(topic.name) is None
            and not topic.producers
            and not any(sub.consumers for sub in topic.subscriptions.values())
            and len(topic.log) == 0
        )
        try:
            if idle:
                registry.register(topic.name, schema, strategy)
            else:
                registry.check_consumer(topic.name, schema, strategy)
        except IncompatibleSchemaError as exc:
            raise BrokerError(E.IncompatibleSchema, f"{topic.name}: {exc}") from None

    def on_get_schema(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.getSchema
        resp, sub = new_command(T.GET_SCHEMA_RESPONSE)
        sub.request_id = req.request_id
        name = str(TopicName.parse(req.topic))  # no topic is created by asking for its schema
        self._authorize(name, LOOKUP)
        want = int.from_bytes(req.schema_version, "big") if req.HasField("schema_version") else None
        found = self.service.schemas.get(name, want)
        if found is None:
            sub.error_code = E.TopicNotFound
            sub.error_message = "schema not found"
        else:
            sub.schema.CopyFrom(found.schema)
            sub.schema_version = found.version.to_bytes(8, "big")
        self.send(resp)

    def on_get_or_create_schema(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.getOrCreateSchema
        topic = self._topic_for_use(req.topic, PRODUCE)
        resp, sub = new_command(T.GET_OR_CREATE_SCHEMA_RESPONSE)
        sub.request_id = req.request_id
        try:
            version = self.service.schemas.register(
                topic.name, req.schema, self.service.schema_compatibility(topic.name)
            )
        except IncompatibleSchemaError as exc:
            sub.error_code = E.IncompatibleSchema
            sub.error_message = f"{topic.name}: {exc}"
        else:
            if version is not None:
                sub.schema_version = version.to_bytes(8, "big")
        self.send(resp)

    # -- consumers -------------------------------------------------------------------
    def on_subscribe(self, cmd: pb.BaseCommand, _: Any, *, holder_checked: bool = False) -> None:
        req = cmd.subscribe
        if req.consumer_id in self.consumers:
            self._success(req.request_id)
            return
        name = str(TopicName.parse(req.topic))
        self._authorize(name, CONSUME)  # before anything tells whether the topic exists
        self.service.require_namespace(TopicName.parse(name).namespace_name)
        if not req.force_topic_creation and not self.service.topic_exists(name):
            raise NotFound("topic", f"topic {name} does not exist")
        topic = self._topic_for_use(req.topic, CONSUME)
        if req.read_compacted and req.subType not in (SubType.Exclusive, SubType.Failover):
            only = "readCompacted only allowed on failover or exclusive subscriptions"
            raise BrokerError(E.NotAllowedError, only)
        if req.HasField("schema"):
            self._check_consumer_schema(topic, req.schema)
        sub = topic.subscriptions.get(req.subscription)
        if sub is None:
            sub = self._new_subscription(topic, req)
        elif sub.consumers:
            if sub.sub_type != req.subType:
                raise BrokerError(E.ConsumerBusy, "subscription is of a different type")
            if sub.sub_type == SubType.Exclusive:
                holder = cast(ServerConnection, sub.consumers[0].sender)
                if holder is not self and not holder_checked:
                    # As Pulsar: the consumer may belong to a client that is already gone (its
                    # close not yet seen here); ask its connection before answering ConsumerBusy.
                    task = asyncio.get_running_loop().create_task(self._subscribe_after_liveness(cmd, holder))
                    self.service.keep_task(task)
                    return
                raise BrokerError(E.ConsumerBusy, "Exclusive consumer is already connected")
        else:
            sub.sub_type = req.subType
        consumer = ConsumerRef(
            req.consumer_id,
            req.consumer_name or f"consumer-{req.consumer_id}",
            req.priority_level,
            cast(Any, self),
        )
        meta = req.keySharedMeta
        if (
            req.subType == SubType.Key_Shared
            and req.HasField("keySharedMeta")
            and meta.keySharedMode == pb.STICKY
        ):
            if len(meta.hashRanges) > MAX_HASH_RANGES_PER_CONSUMER:  # refused before reading them
                limit = MAX_HASH_RANGES_PER_CONSUMER
                raise BrokerError(
                    E.ConsumerAssignError, f"{len(meta.hashRanges)} hash ranges: at most {limit} per consumer"
                )
            ranges = sorted((r.start, r.end) for r in meta.hashRanges)
            refusal = sticky_ranges_refusal(ranges)
            if refusal is not None:
                raise BrokerError(E.ConsumerAssignError, refusal)
            consumer.hash_ranges = ranges
        refusal = sub.check_hash_ranges(consumer)
        if refusal is not None:
            raise BrokerError(E.ConsumerAssignError, refusal)
        self.consumers[req.consumer_id] = (consumer, topic, sub)
        self._success(req.request_id)
        if not sub.consumers:  # the cursor reads compacted as its consumers ask
            sub.read_compacted = req.read_compacted and topic.persistent
            sub.view = topic.compacted if sub.read_compacted else None
        sub.add_consumer(consumer)
        self.service.check_end_of_topic(topic, sub)

    async def _subscribe_after_liveness(self, cmd: pb.BaseCommand, holder: ServerConnection) -> None:
        await holder.check_liveness()
        if self.transport is None:
            return
        try:
            self.on_subscribe(cmd, None, holder_checked=True)
        except BrokerError as exc:
            self._fail_request(cmd, exc.code, str(exc))
        except Exception as exc:
            self._fail_unexpectedly(cmd, exc)

    def _new_subscription(self, topic: Topic, req: pb.CommandSubscribe) -> Subscription:
        log_ = topic.log
        # Non-persistent: a subscription lives while it has consumers and sees what comes after.
        durable = req.durable and topic.persistent
        if not topic.persistent:
            start = log_.last_position
        elif not durable and req.HasField("start_message_id"):
            mid = req.start_message_id
            pos = (_signed(mid.ledgerId), _signed(mid.entryId))
            if pos > log_.last_position:
                # Past the end (MessageId.latest is (2^63-1, 2^63-1)): start after the last entry.
                start = log_.last_position
            elif pos[0] >= 0 and pos[1] >= 0:
                # As Pulsar does (it reads every start id as a batch id): deliver the start entry
                # itself; the client drops it, or its earlier batch indexes, unless inclusive.
                start = topic.position_before_index(log_.index_at_or_after(pos))
            elif pos[0] < 0:
                start = EARLIEST
            else:
                start = pos
        elif req.initialPosition == pb.CommandSubscribe.Earliest:
            start = EARLIEST
        else:
            start = log_.last_position
        return self.service.new_subscription(
            topic, req.subscription, req.subType, durable=durable, start=start
        )

    def _consumer(self, consumer_id: int) -> tuple[ConsumerRef, Topic, Subscription]:
        found = self.consumers.get(consumer_id)
        if found is None:
            raise BrokerError(E.ConsumerNotFound, f"consumer {consumer_id} not found")
        return found

    def on_flow(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.flow
        found = self.consumers.get(req.consumer_id)
        if found is None:
            return
        consumer, _topic, sub = found
        sub.flow(consumer, req.messagePermits)

    def on_ack(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.ack
        _consumer, topic, sub = self._consumer(req.consumer_id)
        if req.HasField("validation_error"):
            # As Apache Pulsar: the client discarded a corrupt entry; it is acked (and counted, logged).
            self.service.corrupt_acks += 1
            log.warning(
                "consumer %s on %s discarded corrupt entries %s (%s)",
                req.consumer_id,
                topic.name,
                [f"{m.ledgerId}:{m.entryId}" for m in req.message_id],
                pb.CommandAck.ValidationError.Name(req.validation_error),
            )
        refusal = None
        if req.ack_type == pb.CommandAck.Cumulative:
            if len(req.message_id) != 1:  # as Pulsar: a cumulative ack names exactly one position
                refusal = f"a cumulative ack needs one message id, got {len(req.message_id)}"
            else:
                mid = req.message_id[0]
                pos = (_signed(mid.ledgerId), _signed(mid.entryId))
                refusal = sub.ack_cumulative(pos, mid.ack_set or None)
        else:
            for mid in req.message_id:
                # the ack_set stays a protobuf container: only the words the entry needs are read
                sub.ack_individual((_signed(mid.ledgerId), _signed(mid.entryId)), mid.ack_set or None)
        if refusal is not None:
            log.info("consumer %s on %s: ack refused: %s", req.consumer_id, topic.name, refusal)
        if req.HasField("request_id"):
            resp, s = new_command(T.ACK_RESPONSE)
            s.consumer_id = req.consumer_id
            s.request_id = req.request_id
            if refusal is not None:
                s.error = E.NotAllowedError
                s.message = refusal
            self.send(resp)
        self.service.check_end_of_topic(topic, sub)
        sub.dispatch()

    def on_redeliver(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.redeliverUnacknowledgedMessages
        found = self.consumers.get(req.consumer_id)
        if found is None:
            return
        consumer, _topic, sub = found
        positions = [(_signed(m.ledgerId), _signed(m.entryId)) for m in req.message_ids] or None
        sub.redeliver(consumer, positions)

    def on_unsubscribe(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.unsubscribe
        consumer, topic, sub = self._consumer(req.consumer_id)
        self._authorize(topic.name, CONSUME)
        if any(c is not consumer for c in sub.consumers):
            raise BrokerError(E.ConsumerBusy, "other consumers are connected to the subscription")
        del self.consumers[req.consumer_id]
        sub.remove_consumer(consumer)
        topic.forget_subscription(sub.name)
        self._success(req.request_id)

    def on_close_consumer(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.close_consumer
        if req.consumer_id in self.consumers:
            self._remove_consumer(req.consumer_id)
        self._success(req.request_id)

    def _remove_consumer(self, consumer_id: int) -> None:
        consumer, topic, sub = self.consumers.pop(consumer_id)
        sub.remove_consumer(consumer)
        if not sub.durable and not sub.consumers:
            topic.subscriptions.pop(sub.name, None)
            sub.close()

    def close_consumer(self, consumer_id: int) -> None:
        """Broker-initiated CLOSE_CONSUMER: the client resubscribes."""
        if consumer_id in self.consumers:
            self._remove_consumer(consumer_id)
        cmd, sub = new_command(T.CLOSE_CONSUMER)
        sub.consumer_id = consumer_id
        sub.request_id = 0
        self.send(cmd)

    def on_seek(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.seek
        _consumer, topic, sub = self._consumer(req.consumer_id)
        self._authorize(topic.name, CONSUME)
        if req.HasField("message_publish_time"):
            target = self.service.seek_position(topic, publish_time=req.message_publish_time)
        elif req.HasField("message_id"):
            mid = req.message_id
            target = self.service.seek_position(topic, position=(_signed(mid.ledgerId), _signed(mid.entryId)))
        else:
            raise BrokerError(E.MetadataError, "seek without message id or publish time")
        # As Apache Pulsar does: disconnect the subscription's consumers, reset, then answer.
        for conn_consumer in list(sub.consumers):
            conn = cast(ServerConnection, conn_consumer.sender)
            conn.close_consumer(conn_consumer.consumer_id)
        if not sub.durable:
            topic.subscriptions[sub.name] = sub
        sub.reset(target)
        self._success(req.request_id)

    def on_get_last_message_id(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.getLastMessageId
        _consumer, topic, sub = self._consumer(req.consumer_id)
        self._authorize(topic.name, CONSUME)
        resp, s = new_command(T.GET_LAST_MESSAGE_ID_RESPONSE)
        s.request_id = req.request_id
        last = self.service.last_message_id(topic)
        # As Apache Pulsar's ServerCnx: a topic never written answers -1:-1.
        ledger, entry = (last.ledger_id, last.entry_id) if last.written else (-1, -1)
        s.last_message_id.ledgerId = ledger % 2**64
        s.last_message_id.entryId = entry % 2**64
        if last.partition >= 0:
            s.last_message_id.partition = last.partition
        if last.batch_index >= 0:
            s.last_message_id.batch_index = last.batch_index
        md = sub.mark_delete
        s.consumer_mark_delete_position.ledgerId = md[0] % 2**64
        s.consumer_mark_delete_position.entryId = md[1] % 2**64
        self.send(resp)

    def on_consumer_stats(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.consumerStats
        consumer, _topic, sub = self._consumer(req.consumer_id)
        resp, s = new_command(T.CONSUMER_STATS_RESPONSE)
        s.request_id = req.request_id
        s.consumerName = consumer.name
        s.availablePermits = max(consumer.permits, 0)
        s.unackedMessages = len(consumer.pending)
        s.type = SubType.Name(cast(Any, sub.sub_type))
        s.msgBacklog = sub.backlog()
        s.address = self.peer
        self.send(resp)

    def on_get_topics_of_namespace(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.getTopicsOfNamespace
        self._authorize_namespace(req.namespace, LOOKUP)
        topics = self.broker_topics_in(req.namespace, req.mode)
        resp, s = new_command(T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
        s.request_id = req.request_id
        if req.HasField("topics_pattern"):
            # As Pulsar's TopicList.filterTopics: a full match of the scheme-less pattern against
            # the scheme-less name of the (partitioned) topic, not a prefix match of the full name.
            # A pattern the broker does not evaluate (too long, or beyond RE2) is left to the
            # client: the whole list goes back with filtered=false, as Pulsar answers too long ones.
            try:
                pattern = compile_topics_pattern(req.topics_pattern, self._max_pattern_length)
            except (PatternTooLong, PatternUnsupported) as exc:
                log.info("%s: topics of %s not filtered by the broker: %s", self.peer, req.namespace, exc)
            except InvalidTopicsPattern as exc:
                raise BrokerError(E.MetadataError, f"Invalid topics pattern: {exc}") from None
            else:
                topics = pattern.filter(topics)
                s.filtered = True
        digest = topics_hash(topics)
        s.topics_hash = digest
        if req.HasField("topics_hash") and req.topics_hash == digest:
            s.changed = False
        else:
            s.topics.extend(topics)
        self.send(resp)

    def broker_topics_in(self, namespace: str, mode: int = Mode.PERSISTENT) -> list[str]:
        """The topics of ``namespace`` of the domains ``mode`` asks for (see :meth:`Broker.topics_in`).

        Watchers list persistent topics only, as Pulsar's topic-list watchers.
        """
        return self.service.topics_in(namespace, mode)

    # -- topic list watchers -------------------------------------------------------------
    def on_watch_topic_list(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.watchTopicList
        self._authorize_namespace(req.namespace, LOOKUP)
        watchers = self.service.watchers
        watcher = watchers.get(self, req.watcher_id)
        if watcher is None:  # as Pulsar: a watcher id already registered is answered again
            limit = self.service.config.max_watchers_per_connection
            if watchers.count(self) >= limit:
                raise BrokerError(
                    E.NotAllowedError,
                    f"Unable to create topic list watcher: {limit} watchers on this connection already",
                )
            try:
                pattern = compile_topics_pattern(req.topics_pattern, self._max_pattern_length)
            except PatternTooLong as exc:
                raise BrokerError(E.NotAllowedError, f"Unable to create topic list watcher: {exc}") from None
            except InvalidTopicsPattern as exc:
                raise BrokerError(E.InvalidTopicName, f"Invalid topics pattern: {exc}") from None
            topics = pattern.filter(self.broker_topics_in(req.namespace))
            watcher = Watcher(self, req.watcher_id, req.namespace, pattern, set(topics))
            watchers.add(watcher)
        resp, s = new_command(T.WATCH_TOPIC_LIST_SUCCESS)
        s.request_id = req.request_id
        s.watcher_id = req.watcher_id
        s.topic.extend(sorted(watcher.topics))
        s.topics_hash = watcher.hash()
        self.send(resp)

    @property
    def _max_pattern_length(self) -> int:
        return self.service.config.max_topics_pattern_length

    def on_watch_topic_list_close(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.watchTopicListClose
        self.service.watchers.remove(self, req.watcher_id)
        self._success(req.request_id)

    def send_watch_update(self, watcher_id: int, new_topics: list[str], digest: str) -> None:
        cmd, s = new_command(T.WATCH_TOPIC_UPDATE)
        s.watcher_id = watcher_id
        s.new_topics.extend(new_topics)
        s.topics_hash = digest
        self.send(cmd)

    # -- Sender (used by subscriptions) -------------------------------------------------
    def send_message(
        self, consumer: ConsumerRef, entry: Entry, redelivery_count: int, ack_set: list[int] | None
    ) -> None:
        cmd, m = new_command(T.MESSAGE)
        m.consumer_id = consumer.consumer_id
        m.message_id.ledgerId = entry.ledger_id
        m.message_id.entryId = entry.entry_id
        found = self.consumers.get(consumer.consumer_id)
        if found is not None and found[1].partition_index >= 0:
            m.message_id.partition = found[1].partition_index
        if redelivery_count:
            m.redelivery_count = redelivery_count
        if ack_set:
            m.ack_set.extend(ack_set)
        data = corrupt(entry.data) if self.service.faults.take("corrupt_dispatches") else entry.data
        self.write(encode_with_stored_entry(cmd, data))

    def send_active_change(self, consumer: ConsumerRef, active: bool) -> None:
        cmd, s = new_command(T.ACTIVE_CONSUMER_CHANGE)
        s.consumer_id = consumer.consumer_id
        s.is_active = active
        self.send(cmd)

    def send_end_of_topic(self, consumer: ConsumerRef) -> None:
        if not self.end_of_topic_notices:
            return
        cmd, s = new_command(T.REACHED_END_OF_TOPIC)
        s.consumer_id = consumer.consumer_id
        self.send(cmd)

    _HANDLERS: dict[int, Any] = {
        T.CONNECT: on_connect,
        T.PING: on_ping,
        T.PONG: on_pong,
        T.PARTITIONED_METADATA: on_partitioned_metadata,
        T.LOOKUP: on_lookup,
        T.PRODUCER: on_producer,
        T.SEND: on_send,
        T.CLOSE_PRODUCER: on_close_producer,
        T.SUBSCRIBE: on_subscribe,
        T.FLOW: on_flow,
        T.ACK: on_ack,
        T.REDELIVER_UNACKNOWLEDGED_MESSAGES: on_redeliver,
        T.UNSUBSCRIBE: on_unsubscribe,
        T.CLOSE_CONSUMER: on_close_consumer,
        T.SEEK: on_seek,
        T.GET_LAST_MESSAGE_ID: on_get_last_message_id,
        T.CONSUMER_STATS: on_consumer_stats,
        T.GET_TOPICS_OF_NAMESPACE: on_get_topics_of_namespace,
        T.GET_SCHEMA: on_get_schema,
        T.GET_OR_CREATE_SCHEMA: on_get_or_create_schema,
        T.AUTH_RESPONSE: on_auth_response,
        T.WATCH_TOPIC_LIST: on_watch_topic_list,
        T.WATCH_TOPIC_LIST_CLOSE: on_watch_topic_list_close,
    }


def _signed(v: int) -> int:
    return v - 2**64 if v >= 2**63 else v


def _unexpected_failure(exc: Exception) -> tuple[int, str]:
    """The ServerError code and message for an exception no handler foresaw."""
    if isinstance(exc, OSError):
        if exc.errno == errno.ENAMETOOLONG:
            return E.InvalidTopicName, "topic name too long for the broker's file system"
        return E.PersistenceError, f"storage failed: {exc.strerror or exc}"
    if isinstance(exc, RecursionError):
        return E.UnknownError, "request nested too deep"
    if isinstance(exc, MemoryError):
        return E.UnknownError, "request too large"
    return E.UnknownError, f"{type(exc).__name__}: {str(exc)[:200]}"
