"""The broker: an asyncio server speaking the Pulsar binary protocol over the shared codec.

:class:`Broker` owns the topics (logs, subscriptions, producers), the
partitioned-topic metadata and the listening socket. Each TCP connection is a
:class:`ServerConnection` that decodes frames with the codec's FrameDecoder and
answers commands the way Apache Pulsar's broker does (same responses, same
error codes, same ordering where clients depend on it — e.g. CLOSE_CONSUMER
before SUCCESS on seek).

Use it in-process (``with Broker() as b: b.service_url``) — it then runs its
own event loop in a background thread — or from asyncio (``await b.astart()``),
or from the command line (``python -m pulsarwire.broker``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pulsarwire.codec.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FrameDecoder,
    encode_command,
    encode_with_stored_entry,
    new_command,
)
from pulsarwire.errors import (
    AuthenticationError,
    ChecksumMismatchError,
    InvalidTopicName,
    PayloadError,
    PulsarWireError,
    RemoteProtocolError,
    StorageError,
)
from pulsarwire.proto import PROTOCOL_VERSION, pb

from .auth import REFRESH_AUTH_DATA, TOKEN_METHOD, Identity, TokenAuth
from .faults import Faults, corrupt
from .naming import TopicName
from .schemas import IncompatibleSchemaError, SchemaRegistry
from .storage import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_MAX_OPEN_LOGS,
    Entry,
    EntryCache,
    OpenFiles,
    TopicLog,
    stored_topics,
    topic_dir,
)
from .subscription import EARLIEST, KEY_HASH_RANGE, ConsumerRef, Subscription
from .topic import ProducerRef, Topic
from .watch import TopicWatchers, Watcher, compile_topics_pattern, pattern_matches, topics_hash

log = logging.getLogger("pulsarwire.broker")

SERVER_VERSION = "pulsarwire-broker/0.1"
#: Outgoing bytes buffered per connection before dispatch to it pauses (see Sender.writable).
WRITE_BUFFER_HIGH = 1024 * 1024
T = pb.BaseCommand
E = pb.ServerError
SubType = pb.CommandSubscribe.SubType

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


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    data_dir: Path | None = None
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    allow_auto_topic_creation: bool = True
    default_partitions: int = 0
    deduplication: bool = False
    entries_per_ledger: int = 50_000
    fsync: bool = False
    #: bytes of entry bodies cached in RAM for reads, shared by all topics (data dir only)
    entry_cache_size: int = DEFAULT_CACHE_BYTES
    #: entry logs open at once (LRU, shared by all topics; data dir only)
    max_open_logs: int = DEFAULT_MAX_OPEN_LOGS
    keepalive_seconds: float = 30.0
    cursor_flush_seconds: float = 0.1
    #: token authentication (None: every client is accepted)
    auth: TokenAuth | None = None
    #: role -> namespaces ("tenant/ns", or "*") it may produce to / consume from; None: no authorization
    authorization: dict[str, list[str]] | None = None
    #: seconds a client has to answer AUTH_CHALLENGE with a fresh credential
    auth_challenge_timeout: float = 10.0
    #: TLS listener (pulsar+ssl://): port (0 = any free port) and PEM files
    tls_port: int | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None


class BrokerError(PulsarWireError):
    """A request the broker refuses; carries the protocol ServerError code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Broker:
    """A single-node Pulsar broker. See the module docstring."""

    def __init__(self, config: BrokerConfig | None = None, **overrides: Any) -> None:
        cfg = config or BrokerConfig()
        for k, v in overrides.items():
            setattr(cfg, k, v)
        if cfg.data_dir is not None:
            cfg.data_dir = Path(cfg.data_dir)
        self.config = cfg
        self.entry_cache = EntryCache(cfg.entry_cache_size)
        self.open_files = OpenFiles(cfg.max_open_logs)
        self.topics: dict[str, Topic] = {}
        self.partitioned: dict[str, int] = {}
        self._producer_names = itertools.count()
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.connections: set[ServerConnection] = set()
        self.port = cfg.port
        self._flush_handle: asyncio.TimerHandle | None = None
        self._dirty_topics: set[Topic] = set()
        self._tls_server: asyncio.AbstractServer | None = None
        self.tls_port = cfg.tls_port
        self.name = "standalone"
        #: set by Cluster: who owns which topic
        self.cluster: Any = None
        self.faults = Faults()
        self.watchers = TopicWatchers()
        # counters visible to tests and --stats
        self.connections_accepted = 0
        self.lookups_redirected = 0
        self.auth_refreshes = 0
        self.auth_failures = 0
        self.corrupt_acks = 0
        self._load_metadata()

    # -- lifecycle ---------------------------------------------------------------
    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.host}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        return f"pulsar+ssl://{self.config.host}:{self.tls_port}" if self._tls_server is not None else None

    async def astart(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(
            lambda: ServerConnection(self), self.config.host, self.port
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.tls_port is not None:
            cfg = self.config
            if cfg.tls_cert_file is None or cfg.tls_key_file is None:
                raise ValueError("a TLS listener needs tls_cert_file and tls_key_file")
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(cfg.tls_cert_file), str(cfg.tls_key_file))
            self._tls_server = await self._loop.create_server(
                lambda: ServerConnection(self), cfg.host, self.tls_port, ssl=context
            )
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
        log.info("broker listening on %s %s", self.service_url, self.service_url_tls or "")

    async def astop(self) -> None:
        for server in (self._server, self._tls_server):
            if server is not None:
                server.close()
        for conn in list(self.connections):
            conn.close()
        for server in (self._server, self._tls_server):
            if server is not None:
                await server.wait_closed()
        self._server = self._tls_server = None
        self.flush_state()
        for topic in self.topics.values():
            topic.log.close()

    def start(self) -> Broker:
        """Start in a background thread with its own event loop; returns when listening."""
        ready = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.astart())
            except BaseException as exc:  # report start failures to the caller
                error.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.astop())
            loop.close()

        self._thread = threading.Thread(target=run, name="pulsarwire-broker", daemon=True)
        self._thread.start()
        ready.wait()
        if error:
            raise error[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._thread = None

    def restart(self) -> Broker:
        """Stop and start again on the same ports and data dir, forgetting everything not on disk."""
        self.stop()
        self.topics = {}
        self.partitioned = {}
        self._dirty_topics = set()
        self._load_metadata()
        return self.start()

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the broker's loop and return its result (thread-safe admin access)."""
        if self._loop is None or self._thread is None or threading.current_thread() is self._thread:
            return fn(*args)
        fut = asyncio.run_coroutine_threadsafe(_as_coro(fn, *args), self._loop)
        return fut.result(timeout=30)

    # -- metadata ----------------------------------------------------------------
    def _meta_path(self) -> Path | None:
        return self.config.data_dir / "partitioned.json" if self.config.data_dir else None

    def _load_metadata(self) -> None:
        self.schemas = SchemaRegistry(self.config.data_dir)
        path = self._meta_path()
        if path is not None and path.exists():
            self.partitioned = {k: int(v) for k, v in json.loads(path.read_text()).items()}

    def _save_metadata(self) -> None:
        path = self._meta_path()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.partitioned))
            tmp.replace(path)

    # -- admin API (thread-safe through `call`) --------------------------------------
    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        def do() -> None:
            name = str(TopicName.parse(topic))
            if partitions <= 0:
                raise ValueError("partitions must be positive")
            self.partitioned[name] = partitions
            self._save_metadata()
            for i in range(partitions):
                self._topic_created(str(TopicName.parse(name).partition(i)))

        self.call(do)

    def terminate_topic(self, topic: str) -> tuple[int, int]:
        """Terminate a topic: producers are refused, consumers reach the end of the topic."""

        def do() -> tuple[int, int]:
            t = self.get_topic(str(TopicName.parse(topic)), create=True)
            assert t is not None
            t.terminated = True
            t.save_state()
            for p in list(t.producers.values()):
                p.owner.close_producer(p)
            for sub in t.subscriptions.values():
                self._check_end_of_topic(t, sub)
            return t.log.last_position

        return cast(tuple[int, int], self.call(do))

    def trim_topic(self, topic: str, entries: int) -> None:
        """Drop the oldest ``entries`` entries (simulates retention)."""

        def do() -> None:
            t = self.get_topic(str(TopicName.parse(topic)), create=True)
            assert t is not None
            t.log.trim_head(entries)

        self.call(do)

    # -- fault injection (thread-safe) -----------------------------------------------
    def inject(self, **faults: Any) -> None:
        """Arm faults for the next operations, e.g. ``inject(fail_receipts=1)``; see :class:`Faults`."""

        def do() -> None:
            for k, v in faults.items():
                if not hasattr(self.faults, k):
                    raise AttributeError(f"unknown fault {k!r}")
                setattr(self.faults, k, v)

        self.call(do)

    def drop_connections(self, topic: str | None = None) -> int:
        """Cut TCP connections (all, or those with producers/consumers on ``topic``); returns how many."""

        def do() -> int:
            name = str(TopicName.parse(topic)) if topic else None
            victims = [c for c in self.connections if name is None or c.uses_topic(name)]
            for c in victims:
                c.abort()
            return len(victims)

        return cast(int, self.call(do))

    def close_producers(self, topic: str) -> None:
        """Send CLOSE_PRODUCER to every producer of ``topic`` (clients look up again and reconnect)."""
        self._on_every_connection("close_topic_producers", topic)

    def close_consumers(self, topic: str) -> None:
        """Send CLOSE_CONSUMER to every consumer of ``topic``."""
        self._on_every_connection("close_topic_consumers", topic)

    def _on_every_connection(self, method: str, topic: str) -> None:
        name = str(TopicName.parse(topic))

        def do() -> None:
            for c in list(self.connections):
                getattr(c, method)(name)

        self.call(do)

    def unload_topic(self, topic: str) -> None:
        """Unload: disconnect the topic's producers and consumers; in a cluster it moves to another broker."""
        if self.cluster is not None:
            self.cluster.unload_topic(topic)
            return
        self.call(self._disconnect_topic, str(TopicName.parse(topic)))

    def _disconnect_topic(self, name: str) -> None:
        for c in list(self.connections):
            c.close_topic_producers(name)
            c.close_topic_consumers(name)

    def owns(self, name: str) -> bool:
        return self.cluster is None or self.cluster.owner_of(name) is self

    def stats(self, topic: str) -> dict[str, Any]:
        def do() -> dict[str, Any]:
            t = self.get_topic(str(TopicName.parse(topic)), create=False)
            if t is None:
                return {}
            return {
                "msg_in": t.msg_in,
                "bytes_in": t.bytes_in,
                "entries": len(t.log),
                "producers": sorted(t.producers),
                "subscriptions": {
                    n: {
                        "type": SubType.Name(cast(Any, s.sub_type)),
                        "backlog": s.backlog(),
                        "msg_out": s.msg_out,
                        "consumers": [c.name for c in s.consumers],
                        "mark_delete": s.mark_delete,
                    }
                    for n, s in t.subscriptions.items()
                },
            }

        return cast(dict[str, Any], self.call(do))

    def topic_names(self) -> list[str]:
        return cast(list[str], self.call(lambda: sorted(self.topics)))

    # -- topics --------------------------------------------------------------------
    def partitions_of(self, name: str, *, create: bool) -> int:
        if name in self.partitioned:
            return self.partitioned[name]
        tn = TopicName.parse(name)
        if tn.partition_index >= 0 or name in self.topics:
            return 0
        if create and self.config.allow_auto_topic_creation and self.config.default_partitions > 0:
            self.partitioned[name] = self.config.default_partitions
            self._save_metadata()
            return self.config.default_partitions
        return 0

    def get_topic(self, name: str, *, create: bool) -> Topic | None:
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        if not create:
            return None
        tn = TopicName.parse(name)
        log_ = TopicLog(
            name,
            data_dir=self.config.data_dir,
            entries_per_ledger=self.config.entries_per_ledger,
            fsync=self.config.fsync,
            cache=self.entry_cache,
            files=self.open_files,
        )
        topic = Topic(name, log_, partition_index=tn.partition_index, data_dir=self.config.data_dir)
        self.topics[name] = topic
        self._topic_created(name)
        return topic

    def _topic_created(self, name: str) -> None:
        brokers = self.cluster.brokers if self.cluster is not None else [self]
        for b in brokers:
            for watcher, digest in b.watchers.topic_created(name):
                watcher.owner.send_watch_update(watcher.watcher_id, [name], digest)

    def topic_exists(self, name: str) -> bool:
        if name in self.topics or name in self.partitioned:
            return True
        return self.config.data_dir is not None and topic_dir(self.config.data_dir, name).exists()

    def new_producer_name(self) -> str:
        return f"pulsarwire-{self.port}-{next(self._producer_names)}"

    def mark_dirty(self, topic: Topic) -> None:
        if topic.data_dir is None:
            return
        self._dirty_topics.add(topic)
        if self._flush_handle is None and self._loop is not None:
            self._flush_handle = self._loop.call_later(self.config.cursor_flush_seconds, self.flush_state)

    def flush_state(self) -> None:
        self._flush_handle = None
        dirty, self._dirty_topics = self._dirty_topics, set()
        for topic in dirty:
            topic.save_state()

    def _check_end_of_topic(self, topic: Topic, sub: Subscription) -> None:
        if not topic.terminated:
            return
        last = topic.log.last_position
        if sub.mark_delete >= last or not topic.log.entries:
            for c in sub.consumers:
                c.sender.send_end_of_topic(c)  # type: ignore[attr-defined]


async def _as_coro(fn: Any, *args: Any) -> Any:
    return fn(*args)


class ServerConnection(asyncio.Protocol):
    """One client connection: decode frames, dispatch commands, write responses."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.decoder = FrameDecoder(broker.config.max_message_size)
        self.transport: asyncio.Transport | None = None
        self.connected = False
        self.protocol_version = 0
        self.end_of_topic_notices = True
        self.producers: dict[int, ProducerRef] = {}
        self.consumers: dict[int, tuple[ConsumerRef, Topic, Subscription]] = {}
        self.last_seen = time.monotonic()
        self.peer = ""
        self.identity: Identity | None = None
        self._ping_outstanding = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._auth_timer: asyncio.TimerHandle | None = None
        self._auth_deadline: asyncio.TimerHandle | None = None
        #: receipts held back by a delay fault: (release time, send, ledger, entry), in order
        self._held_receipts: deque[tuple[float, pb.CommandSend, int, int]] = deque()
        #: False while the transport's write buffer is over its high-water mark (Sender.writable)
        self.writable = True

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = str(transport.get_extra_info("peername"))
        self.broker.connections.add(self)
        self.broker.connections_accepted += 1
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        self._schedule_keepalive()

    def _schedule_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(self.broker.config.keepalive_seconds, self._keepalive_check)

    def _keepalive_check(self) -> None:
        """Ping a connection idle for a keepalive interval; close it when the ping went unanswered."""
        if self.transport is None:
            return
        idle = time.monotonic() - self.last_seen
        if idle >= self.broker.config.keepalive_seconds:
            if self._ping_outstanding:
                log.info("closing %s: no answer to PING for %.1f s", self.peer, idle)
                self.close()
                return
            self._ping_outstanding = True
            self.send(new_command(T.PING)[0])
        self._schedule_keepalive()

    def connection_lost(self, exc: Exception | None) -> None:
        self.broker.connections.discard(self)
        self.broker.watchers.remove(self)
        for timer in (self._keepalive, self._auth_timer, self._auth_deadline):
            if timer is not None:
                timer.cancel()
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
        while self.transport is not None:
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
        else:
            from pulsarwire.codec.frames import sub_command

            request_id = getattr(sub_command(cmd), "request_id", None)
            if request_id is not None:
                self._error(request_id, code, message)
            else:
                log.warning("%s: %s", T.Type.Name(t), message)

    # -- dispatch ------------------------------------------------------------------
    def handle(self, cmd: pb.BaseCommand, payload: Any) -> None:
        t = cmd.type
        if not self.connected and t not in (T.CONNECT, T.PING, T.PONG):
            log.warning("command %s before CONNECT from %s", T.Type.Name(t), self.peer)
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
        if self.broker.config.auth is not None:
            try:
                self._authenticate(c.auth_method_name, c.auth_data)
            except AuthenticationError as exc:
                self.broker.auth_failures += 1
                log.info("authentication failed for %s: %s", self.peer, exc)
                self._error(2**64 - 1, E.AuthenticationError, str(exc))  # request id -1, as Pulsar
                self.close()
                return
        resp, sub = new_command(T.CONNECTED)
        sub.server_version = SERVER_VERSION
        sub.protocol_version = self.protocol_version
        sub.max_message_size = self.broker.config.max_message_size
        sub.feature_flags.supports_auth_refresh = True
        sub.feature_flags.supports_broker_entry_metadata = True
        sub.feature_flags.supports_topic_watchers = True
        self.connected = True
        self.send(resp)

    def _authenticate(self, method: str, data: bytes) -> None:
        auth = cast(TokenAuth, self.broker.config.auth)
        self.identity = auth.authenticate(method, data, time.time())
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
            self.broker.config.auth_challenge_timeout, self._auth_timed_out
        )

    def _auth_timed_out(self) -> None:
        log.info("closing %s: no fresh credential after AUTH_CHALLENGE", self.peer)
        self.close()

    def on_auth_response(self, cmd: pb.BaseCommand, _: Any) -> None:
        r = cmd.authResponse.response
        if self._auth_deadline is not None:
            self._auth_deadline.cancel()
            self._auth_deadline = None
        try:
            self._authenticate(r.auth_method_name or TOKEN_METHOD, r.auth_data)
        except AuthenticationError as exc:
            log.info("closing %s: refreshed credential refused: %s", self.peer, exc)
            self._error(2**64 - 1, E.AuthenticationError, str(exc))  # request id -1, as Pulsar
            self.close()
            return
        self.broker.auth_refreshes += 1

    def _authorize(self, name: str) -> None:
        rules = self.broker.config.authorization
        if rules is None or self.broker.config.auth is None:
            return
        role = self.identity.role if self.identity else ""
        namespace = TopicName.parse(name).namespace_name
        allowed = rules.get(role, [])
        if "*" not in allowed and namespace not in allowed:
            raise BrokerError(E.AuthorizationError, f"role {role!r} is not authorized on {namespace}")

    def on_ping(self, cmd: pb.BaseCommand, _: Any) -> None:
        self.send(new_command(T.PONG)[0])

    def on_pong(self, cmd: pb.BaseCommand, _: Any) -> None:
        pass  # last_seen is refreshed for every frame

    def on_partitioned_metadata(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.partitionMetadata
        name = str(TopicName.parse(req.topic))
        create = req.metadata_auto_creation_enabled
        n = self.broker.partitions_of(name, create=create)
        if n == 0 and not self.broker.config.allow_auto_topic_creation and not self.broker.topic_exists(name):
            raise BrokerError(E.TopicNotFound, f"topic {name} does not exist")
        resp, sub = new_command(T.PARTITIONED_METADATA_RESPONSE)
        sub.request_id = req.request_id
        sub.partitions = n
        sub.response = pb.CommandPartitionedTopicMetadataResponse.Success
        self.send(resp)

    def on_lookup(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.lookupTopic
        name = str(TopicName.parse(req.topic))
        self._authorize(name)
        owner = self.broker.cluster.owner_of(name) if self.broker.cluster is not None else self.broker
        resp, sub = new_command(T.LOOKUP_RESPONSE)
        sub.request_id = req.request_id
        if owner is self.broker:
            sub.response = pb.CommandLookupTopicResponse.Connect
        else:
            sub.response = pb.CommandLookupTopicResponse.Redirect
            self.broker.lookups_redirected += 1
        sub.brokerServiceUrl = owner.service_url
        if owner.service_url_tls is not None:
            sub.brokerServiceUrlTls = owner.service_url_tls
        sub.authoritative = True
        self.send(resp)

    def _topic_for_use(self, topic: str) -> Topic:
        name = str(TopicName.parse(topic))
        self._authorize(name)
        if not self.broker.owns(name):
            raise BrokerError(E.ServiceNotReady, f"topic {name} is not served by {self.broker.name}")
        if name in self.broker.partitioned:
            raise BrokerError(E.NotAllowedError, f"{name} is a partitioned topic: use its partitions")
        if not self.broker.config.allow_auto_topic_creation and not self.broker.topic_exists(name):
            raise BrokerError(E.TopicNotFound, f"topic {name} does not exist")
        found = self.broker.get_topic(name, create=True)
        assert found is not None
        return found

    # -- producers -------------------------------------------------------------------
    def on_producer(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.producer
        if req.producer_id in self.producers:
            existing = self.producers[req.producer_id]
            self._producer_success(req.request_id, existing)
            return
        topic = self._topic_for_use(req.topic)
        if topic.terminated:
            raise BrokerError(E.TopicTerminatedError, f"topic {topic.name} is terminated")
        name = req.producer_name if req.HasField("producer_name") and req.producer_name else None
        if name is None:
            name = self.broker.new_producer_name()
        if name in topic.producers:
            raise BrokerError(E.ProducerBusy, f"producer with name '{name}' is already connected to topic")
        version = self._register_schema(topic.name, req.schema) if req.HasField("schema") else None
        ref = ProducerRef(req.producer_id, name, topic, self)
        topic.producers[name] = ref
        self.producers[req.producer_id] = ref
        self._producer_success(req.request_id, ref, version)

    def _producer_success(self, request_id: int, ref: ProducerRef, schema_version: int | None = None) -> None:
        resp, sub = new_command(T.PRODUCER_SUCCESS)
        sub.request_id = request_id
        sub.producer_name = ref.name
        sub.last_sequence_id = (
            ref.topic.last_sequence.get(ref.name, -1) if self.broker.config.deduplication else -1
        )
        if schema_version is None:  # no schema of its own: the topic's latest, if any
            latest = self.broker.schemas.latest(ref.topic.name)
            schema_version = latest.version if latest is not None else None
        if schema_version is not None:
            sub.schema_version = schema_version.to_bytes(8, "big")
        self.send(resp)

    def on_send(self, cmd: pb.BaseCommand, payload: Any) -> None:
        req = cmd.send
        ref = self.producers.get(req.producer_id)
        if ref is None:
            raise BrokerError(E.UnknownError, f"no producer {req.producer_id}")
        topic = ref.topic
        if topic.terminated:
            raise BrokerError(E.TopicTerminatedError, f"topic {topic.name} is terminated")
        if payload is None:
            raise BrokerError(E.UnknownError, "SEND without payload")
        faults = self.broker.faults
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
        # As Pulsar does: an entry is a duplicate when its *first* sequence id is not above the
        # highest one stored for the producer name (a batch straddling it is dropped whole).
        first = min(req.sequence_id, md.sequence_id) if md.HasField("sequence_id") else req.sequence_id
        if self.broker.config.deduplication and first <= topic.last_sequence.get(ref.name, -1):
            self._receipt(req, -1, -1)
            return
        entry = topic.append(payload.entry, md)
        self._receipt(req, entry.ledger_id, entry.entry_id)
        topic.dispatch_all()

    def _receipt(self, req: pb.CommandSend, ledger_id: int, entry_id: int) -> None:
        """Answer a stored SEND. Receipts leave in order even when a fault delays some of them."""
        loop = asyncio.get_running_loop()
        faults = self.broker.faults
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
        if ref.topic.producers.get(ref.name) is ref:
            del ref.topic.producers[ref.name]

    def close_producer(self, ref: ProducerRef) -> None:
        """Broker-initiated CLOSE_PRODUCER (the client is expected to look up and reconnect)."""
        self._remove_producer(ref)
        cmd, sub = new_command(T.CLOSE_PRODUCER)
        sub.producer_id = ref.producer_id
        sub.request_id = 0
        self.send(cmd)

    # -- schemas -------------------------------------------------------------------
    def _register_schema(self, topic: str, schema: pb.Schema) -> int | None:
        try:
            return self.broker.schemas.register(topic, schema)
        except IncompatibleSchemaError as exc:
            raise BrokerError(E.IncompatibleSchema, f"{topic}: {exc}") from None

    def on_get_schema(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.getSchema
        resp, sub = new_command(T.GET_SCHEMA_RESPONSE)
        sub.request_id = req.request_id
        name = str(TopicName.parse(req.topic))  # no topic is created by asking for its schema
        want = int.from_bytes(req.schema_version, "big") if req.HasField("schema_version") else None
        found = self.broker.schemas.get(name, want)
        if found is None:
            sub.error_code = E.TopicNotFound
            sub.error_message = "schema not found"
        else:
            sub.schema.CopyFrom(found.schema)
            sub.schema_version = found.version.to_bytes(8, "big")
        self.send(resp)

    def on_get_or_create_schema(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.getOrCreateSchema
        topic = self._topic_for_use(req.topic)
        resp, sub = new_command(T.GET_OR_CREATE_SCHEMA_RESPONSE)
        sub.request_id = req.request_id
        try:
            version = self.broker.schemas.register(topic.name, req.schema)
        except IncompatibleSchemaError as exc:
            sub.error_code = E.IncompatibleSchema
            sub.error_message = f"{topic.name}: {exc}"
        else:
            if version is not None:
                sub.schema_version = version.to_bytes(8, "big")
        self.send(resp)

    # -- consumers -------------------------------------------------------------------
    def on_subscribe(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.subscribe
        if req.consumer_id in self.consumers:
            self._success(req.request_id)
            return
        name = str(TopicName.parse(req.topic))
        if not req.force_topic_creation and not self.broker.topic_exists(name):
            raise BrokerError(E.TopicNotFound, f"topic {name} does not exist")
        topic = self._topic_for_use(req.topic)
        sub = topic.subscriptions.get(req.subscription)
        if sub is None:
            sub = self._new_subscription(topic, req)
        elif sub.consumers:
            if sub.sub_type != req.subType:
                raise BrokerError(E.ConsumerBusy, "subscription is of a different type")
            if sub.sub_type == SubType.Exclusive:
                raise BrokerError(E.ConsumerBusy, "exclusive consumer is already connected")
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
            ranges = [(r.start, r.end) for r in meta.hashRanges]
            if not ranges or any(not 0 <= a <= b < KEY_HASH_RANGE for a, b in ranges):
                raise BrokerError(E.ConsumerAssignError, f"invalid sticky hash ranges {ranges}")
            consumer.hash_ranges = ranges
        refusal = sub.check_hash_ranges(consumer)
        if refusal is not None:
            raise BrokerError(E.ConsumerAssignError, refusal)
        self.consumers[req.consumer_id] = (consumer, topic, sub)
        self._success(req.request_id)
        sub.add_consumer(consumer)
        self.broker._check_end_of_topic(topic, sub)

    def _new_subscription(self, topic: Topic, req: pb.CommandSubscribe) -> Subscription:
        log_ = topic.log
        durable = req.durable
        saved = getattr(topic, "saved_subscriptions", {}).get(req.subscription) if durable else None
        if not durable and req.HasField("start_message_id"):
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
        sub = Subscription(
            req.subscription,
            log_,
            req.subType,
            durable=durable,
            start=start,
            partition_index=topic.partition_index,
            on_change=lambda: self.broker.mark_dirty(topic),
        )
        if saved:
            sub.restore(saved)
        topic.subscriptions[req.subscription] = sub
        if durable:
            self.broker.mark_dirty(topic)
        return sub

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
            self.broker.corrupt_acks += 1
            log.warning(
                "consumer %s on %s discarded corrupt entries %s (%s)",
                req.consumer_id,
                topic.name,
                [f"{m.ledgerId}:{m.entryId}" for m in req.message_id],
                pb.CommandAck.ValidationError.Name(req.validation_error),
            )
        for mid in req.message_id:
            pos = (_signed(mid.ledgerId), _signed(mid.entryId))
            ack_set = list(mid.ack_set) or None
            if req.ack_type == pb.CommandAck.Cumulative:
                sub.ack_cumulative(pos, ack_set)
            else:
                sub.ack_individual(pos, ack_set)
        if req.HasField("request_id"):
            resp, s = new_command(T.ACK_RESPONSE)
            s.consumer_id = req.consumer_id
            s.request_id = req.request_id
            self.send(resp)
        self.broker._check_end_of_topic(topic, sub)
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
        log_ = topic.log
        if req.HasField("message_publish_time"):
            idx = log_.index_by_publish_time(req.message_publish_time)
        elif req.HasField("message_id"):
            mid = req.message_id
            pos = (_signed(mid.ledgerId), _signed(mid.entryId))
            idx = 0 if pos[0] < 0 else log_.index_at_or_after(pos)
        else:
            raise BrokerError(E.MetadataError, "seek without message id or publish time")
        # As Apache Pulsar does: disconnect the subscription's consumers, reset, then answer.
        for conn_consumer in list(sub.consumers):
            conn = cast(ServerConnection, conn_consumer.sender)
            conn.close_consumer(conn_consumer.consumer_id)
        if not sub.durable:
            topic.subscriptions[sub.name] = sub
        sub.reset(topic.position_before_index(idx))
        self._success(req.request_id)

    def on_get_last_message_id(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.getLastMessageId
        _consumer, topic, sub = self._consumer(req.consumer_id)
        resp, s = new_command(T.GET_LAST_MESSAGE_ID_RESPONSE)
        s.request_id = req.request_id
        ledger, entry = topic.log.last_position
        s.last_message_id.ledgerId = ledger % 2**64
        s.last_message_id.entryId = entry % 2**64
        if topic.partition_index >= 0:
            s.last_message_id.partition = topic.partition_index
        if topic.log.entries and topic.log.entries[-1].is_batch:
            s.last_message_id.batch_index = topic.log.entries[-1].num_messages - 1
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
        topics = self.broker_topics_in(req.namespace)
        resp, s = new_command(T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
        s.request_id = req.request_id
        if req.HasField("topics_pattern"):
            # As Pulsar's TopicList.filterTopics: a full match of the scheme-less pattern against
            # the scheme-less name of the (partitioned) topic, not a prefix match of the full name.
            pattern = compile_topics_pattern(req.topics_pattern)
            topics = [t for t in topics if pattern_matches(pattern, t)]
            s.filtered = True
        digest = topics_hash(topics)
        s.topics_hash = digest
        if req.HasField("topics_hash") and req.topics_hash == digest:
            s.changed = False
        else:
            s.topics.extend(topics)
        self.send(resp)

    def broker_topics_in(self, namespace: str) -> list[str]:
        prefix = f"persistent://{namespace}/"
        names: set[str] = set()
        for name, n in self.broker.partitioned.items():
            if name.startswith(prefix):
                names.update(str(TopicName.parse(name).partition(i)) for i in range(n))
        names.update(t for t in self.broker.topics if t.startswith(prefix))
        if self.broker.config.data_dir is not None:
            # Topics written before a restart exist even while no client has loaded them yet.
            names.update(t for t in stored_topics(self.broker.config.data_dir) if t.startswith(prefix))
        return sorted(names)

    # -- topic list watchers -------------------------------------------------------------
    def on_watch_topic_list(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.watchTopicList
        pattern = compile_topics_pattern(req.topics_pattern)
        topics = [t for t in self.broker_topics_in(req.namespace) if pattern_matches(pattern, t)]
        self.broker.watchers.add(Watcher(self, req.watcher_id, req.namespace, pattern, set(topics)))
        resp, s = new_command(T.WATCH_TOPIC_LIST_SUCCESS)
        s.request_id = req.request_id
        s.watcher_id = req.watcher_id
        s.topic.extend(topics)
        s.topics_hash = topics_hash(topics)
        self.send(resp)

    def on_watch_topic_list_close(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.watchTopicListClose
        self.broker.watchers.remove(self, req.watcher_id)
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
        data = corrupt(entry.data) if self.broker.faults.take("corrupt_dispatches") else entry.data
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
