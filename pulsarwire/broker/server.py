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
import errno
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import socket
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

from pulsarwire._version import __version__
from pulsarwire.codec.batch import MIN_ENTRY_SIZE
from pulsarwire.codec.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
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
    PulsarWireError,
    RemoteProtocolError,
    StorageError,
)
from pulsarwire.naming import TopicName
from pulsarwire.proto import PROTOCOL_VERSION, pb

from .auth import REFRESH_AUTH_DATA, TOKEN_METHOD, Authenticator, Identity, PeerCertificate
from .authz import CONSUME, LOOKUP, PRODUCE, Action, Grants
from .compaction import CompactionStatus
from .faults import Faults, corrupt
from .policies import (
    DEFAULT_NAMESPACE,
    Namespaces,
    Policies,
    read_names,
    read_state,
    write_names,
    write_state,
)
from .schemas import MAX_SCHEMA_SIZE, Compatibility, IncompatibleSchemaError, SchemaRegistry
from .storage import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_MAX_OPEN_LOGS,
    Entry,
    EntryCache,
    OpenFiles,
    TopicLog,
    check_data_dir,
    stored_topics,
    topic_dir,
)
from .subscription import (
    EARLIEST,
    MAX_HASH_RANGES_PER_CONSUMER,
    ConsumerRef,
    Subscription,
    sticky_ranges_refusal,
)
from .topic import ProducerRef, Topic, note_sequence
from .watch import (
    MAX_TOPICS_PATTERN_LENGTH,
    MAX_WATCHERS_PER_CONNECTION,
    InvalidTopicsPattern,
    PatternTooLong,
    PatternUnsupported,
    TopicWatchers,
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
#: Topic domains GET_TOPICS_OF_NAMESPACE lists for each mode.
_DOMAINS_OF_MODE: dict[int, tuple[str, ...]] = {
    Mode.PERSISTENT: ("persistent",),
    Mode.NON_PERSISTENT: ("non-persistent",),
    Mode.ALL: ("persistent", "non-persistent"),
}
#: Pulsar's default name of the listener broker-to-broker traffic uses (internalListenerName).
INTERNAL_LISTENER = "internal"

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


#: seconds between attempts to save cursors after a write failed (disk full, read-only...)
RETRY_WRITE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Listener:
    """One advertised listener's addresses (Pulsar's ``advertisedListeners`` entry): pulsar://, pulsar+ssl://."""

    url: str | None = None
    url_tls: str | None = None


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
    #: authentication: a TokenAuth, a TlsAuth, or an Authentication of several providers and an
    #: anonymous role (None: every client is accepted and nothing is authorized)
    auth: Authenticator | None = None
    #: who may produce / consume where, consulted when ``auth`` is on (then no grant: only superusers act)
    grants: Grants = field(default_factory=Grants)
    #: seconds a connection has to complete CONNECT (the official clients' own connection timeout is 10 s)
    connect_timeout: float = 10.0
    #: concurrent connections accepted; 0 = no limit (Pulsar's brokerMaxConnections default)
    max_connections: int = 0
    #: seconds a client has to answer AUTH_CHALLENGE with a fresh credential
    auth_challenge_timeout: float = 10.0
    #: TLS listener (pulsar+ssl://): port (0 = any free port) and PEM files
    tls_port: int | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    #: CAs that sign client certificates; when set, the TLS listener asks clients for a certificate
    #: (optional, as Pulsar's tlsRequireTrustedClientCertOnConnect=false) -- TlsAuth needs it
    tls_trust_certs_file: Path | None = None
    #: host name or address put in LOOKUP answers and service_url (None: see advertised_host)
    advertised_address: str | None = None
    #: Pulsar's advertisedListeners: a LOOKUP naming one of them is answered with its URLs, one
    #: naming another is refused; the internal listener (below) is this broker's own URLs unless given
    advertised_listeners: dict[str, Listener] = field(default_factory=dict)
    #: the listener LOOKUPs without a listener name get (Pulsar's internalListenerName)
    internal_listener_name: str = INTERNAL_LISTENER
    #: namespaces ("tenant/namespace") that exist from the start; a standalone Pulsar has public/default
    namespaces: tuple[str, ...] = (DEFAULT_NAMESPACE,)
    #: policies by namespace ("tenant/ns") or topic ("persistent://tenant/ns/topic"); a topic's win
    #: over its namespace's, which win over the broker's own (deduplication, schema_compatibility)
    policies: dict[str, Policies] = field(default_factory=dict)
    #: the broker's schema compatibility strategy (Pulsar's schemaCompatibilityStrategy, default FULL)
    schema_compatibility: Compatibility = Compatibility.FULL
    #: longest topics pattern (without scheme) the broker evaluates (Pulsar: subscriptionPatternMaxLength)
    max_topics_pattern_length: int = MAX_TOPICS_PATTERN_LENGTH
    max_watchers_per_connection: int = MAX_WATCHERS_PER_CONNECTION
    #: largest serialized schema accepted (Pulsar documents no cap but the message size)
    max_schema_size: int = MAX_SCHEMA_SIZE
    #: the web service (admin REST API, HTTP lookup, /metrics; 0 = any free port); None = off
    http_port: int | None = None
    #: compact a topic once this many bytes were stored since its last compaction (0: never;
    #: Pulsar's compactionThreshold / brokerServiceCompactionThresholdInBytes)
    compaction_threshold: int = 0
    #: compaction keeps messages without a key (Pulsar's topicCompactionRetainNullKey, default false)
    compaction_retain_null_key: bool = False


class BrokerStartError(PulsarWireError):
    """The broker cannot start (its data dir or address is unusable); the message says which and why."""


class BrokerError(PulsarWireError):
    """A request the broker refuses; carries the protocol ServerError code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ListenError(BrokerStartError):
    """The broker cannot listen on its address (port taken, unknown host...)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {_url_host(host)}:{port}: {reason}")
        self.host, self.port, self.reason = host, port, reason


_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def advertised_host(host: str, advertised_address: str | None = None) -> str:
    """The host name a broker listening on ``host`` tells clients (LOOKUP answers, service_url).

    ``advertised_address`` when given; else ``host`` when it is a specific address; for a
    wildcard (0.0.0.0, ::) the machine's fully qualified host name, as Pulsar's default
    advertisedAddress (InetAddress.getLocalHost().getCanonicalHostName()), or 127.0.0.1 when
    that name does not resolve.
    """
    if advertised_address:
        return advertised_address
    if host not in _WILDCARD_HOSTS:
        return host
    name = socket.getfqdn()
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return "127.0.0.1"
    return name


def _url_host(host: str) -> str:
    """``host`` as it goes in a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def _listen(
    loop: asyncio.AbstractEventLoop, factory: Any, host: str, port: int, **kw: Any
) -> asyncio.Server:
    try:
        return await loop.create_server(factory, host, port, **kw)
    except OSError as exc:
        if isinstance(exc, socket.gaierror):
            reason = f"unknown host ({exc.strerror})"
        elif exc.errno == errno.EADDRINUSE:
            reason = "address already in use (another broker running? choose another port)"
        elif exc.errno == errno.EADDRNOTAVAIL:
            reason = "address not available on this machine"
        elif exc.errno == errno.EACCES:
            reason = "permission denied (ports below 1024 need privileges)"
        else:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ListenError(host, port, reason) from None


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
        self._boot_id = secrets.token_hex(3)
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.connections: set[ServerConnection] = set()
        self.port = cfg.port
        self._flush_handle: asyncio.TimerHandle | None = None
        self._dirty_topics: set[Topic] = set()
        self._tls_server: asyncio.AbstractServer | None = None
        self.tls_port = cfg.tls_port
        #: the web service when ``http_port`` is set (see web.py)
        self.web: Any = None
        self._advertised_host: str | None = None
        self.name = "standalone"
        #: set by Cluster: who owns which topic
        self.cluster: Any = None
        self.faults = Faults()
        self.watchers = TopicWatchers()
        #: background work on the loop (compactions, liveness checks): held here, as asyncio keeps
        #: only weak references to tasks, and cancelled at stop
        self._tasks: set[asyncio.Task[Any]] = set()
        # counters visible to tests and --stats
        self.connections_accepted = 0
        self.lookups_redirected = 0
        self.auth_refreshes = 0
        self.auth_failures = 0
        self.connections_refused = 0
        self.corrupt_acks = 0
        self.write_failures = 0
        self._load_metadata()

    # -- lifecycle ---------------------------------------------------------------
    @property
    def advertised_host(self) -> str:
        """The host clients are told to connect to (LOOKUP answers, service_url)."""
        if self._advertised_host is None:
            self._advertised_host = advertised_host(self.config.host, self.config.advertised_address)
        return self._advertised_host

    @property
    def service_url(self) -> str:
        return f"pulsar://{_url_host(self.advertised_host)}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        if self._tls_server is None:
            return None
        return f"pulsar+ssl://{_url_host(self.advertised_host)}:{self.tls_port}"

    @property
    def http_url(self) -> str | None:
        """``http://host:port`` of the web service (None when it is off)."""
        return self.web.url if self.web is not None else None

    async def astart(self) -> None:
        """Listen; raises BrokerStartError (one line: what and why) when the data dir is unusable or
        ListenError (a BrokerStartError) when the address cannot be bound."""
        if self.config.data_dir is not None:
            try:
                check_data_dir(self.config.data_dir)
                self._keep_namespaces()
            except StorageError as exc:
                raise BrokerStartError(
                    f"cannot keep data in {exc.path}: {exc.reason} (choose a writable --data-dir)"
                ) from None
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise BrokerStartError(
                    f"cannot keep data in {self.config.data_dir}: {reason} (choose a writable --data-dir)"
                ) from None
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        self._server = await _listen(self._loop, lambda: ServerConnection(self), cfg.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.tls_port is not None:
            try:
                if cfg.tls_cert_file is None or cfg.tls_key_file is None:
                    raise ValueError("a TLS listener needs tls_cert_file and tls_key_file")
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                context.load_cert_chain(str(cfg.tls_cert_file), str(cfg.tls_key_file))
                if cfg.tls_trust_certs_file is not None:
                    # Clients may present a certificate (TLS authentication); one not signed by these
                    # CAs fails the handshake, as with Pulsar's tlsAllowInsecureConnection=false.
                    context.load_verify_locations(cafile=str(cfg.tls_trust_certs_file))
                    context.verify_mode = ssl.CERT_OPTIONAL
                self._tls_server = await _listen(
                    self._loop,
                    lambda: ServerConnection(self),
                    cfg.host,
                    self.tls_port,
                    ssl=context,
                    ssl_handshake_timeout=cfg.connect_timeout,
                )
            except BaseException:
                self._server.close()  # the plain listener must not outlive a failed start
                self._server = None
                raise
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
        if cfg.http_port is not None:
            from .web import WebService

            web = WebService(self)
            try:
                await web.start(cfg.host, cfg.http_port)
            except BaseException:
                for server in (self._server, self._tls_server):
                    if server is not None:
                        server.close()
                self._server = self._tls_server = None
                raise
            self.web = web
            cfg.http_port = web.port  # a restart listens on the same port
        urls = (self.service_url, self.service_url_tls, self.http_url)
        log.info("broker listening on %s", " ".join(u for u in urls if u))

    async def astop(self) -> None:
        if self.web is not None:
            await self.web.stop()
            self.web = None
        for server in (self._server, self._tls_server):
            if server is not None:
                server.close()
        for conn in list(self.connections):
            conn.close()
        for server in (self._server, self._tls_server):
            if server is not None:
                await server.wait_closed()
        self._server = self._tls_server = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
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
        self._boot_id = secrets.token_hex(3)
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
        cfg = self.config
        self.schemas = SchemaRegistry(cfg.data_dir, max_schema_size=cfg.max_schema_size, fsync=cfg.fsync)
        path = self._meta_path()
        if path is not None and path.exists():
            self.partitioned = {k: int(v) for k, v in json.loads(path.read_text()).items()}
        if self.cluster is None:  # a cluster's brokers share one registry (Cluster sets it)
            names = [*cfg.namespaces, *(read_names(cfg.data_dir) if cfg.data_dir is not None else [])]
            tenants, kept = read_state(cfg.data_dir, names) if cfg.data_dir is not None else ([], {})
            # Policies set at run time (admin REST API) are kept; the flags of this start win over them.
            self.namespaces = Namespaces(names, {**kept, **cfg.policies}, tenants)

    def _keep_namespaces(self) -> None:
        """Write the namespaces into the data dir when it does not hold them all yet."""
        data_dir = self.config.data_dir
        if data_dir is not None and set(read_names(data_dir)) != set(self.namespaces.names()):
            write_names(data_dir, self.namespaces.names())

    def keep_policies(self) -> None:
        """Write the tenants and policies set at run time into the data dir, if any. Raises OSError."""
        if self.config.data_dir is not None:
            write_state(self.config.data_dir, self.namespaces)

    def _save_metadata(self) -> None:
        path = self._meta_path()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.partitioned))
            tmp.replace(path)

    # -- admin API (thread-safe through `call`) --------------------------------------
    def create_namespace(self, namespace: str) -> bool:
        """Create ``tenant/namespace`` (False when it exists); raises PolicySyntaxError for a bad name,
        OSError when the data dir cannot keep it."""

        def do() -> bool:
            created = self.namespaces.create(namespace)
            if created:
                self._keep_namespaces()
            return created

        return cast(bool, self.call(do))

    def set_policies(self, scope: str, policies: Policies) -> None:
        """Set the policies of a namespace (``tenant/ns``) or topic, replacing that scope's earlier ones.

        Raises PolicySyntaxError, NamespaceNotFound, OSError (the data dir cannot keep them)."""

        def do() -> None:
            self.namespaces.set_policies(scope, policies)
            self.keep_policies()

        self.call(do)

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Create a partitioned topic; raises NamespaceNotFound when its namespace does not exist."""

        def do() -> None:
            name = str(TopicName.parse(topic))
            if partitions <= 0:
                raise ValueError("partitions must be positive")
            self.namespaces.require(TopicName.parse(name).namespace_name)
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

    def delete_topic(self, topic: str) -> None:
        """Forget a topic (a partitioned one: all its partitions) with its stored entries, subscriptions
        and cursors, as Pulsar's topic deletion; its schema stays. Connected clients are not told
        (the admin API refuses to delete a topic in use unless forced, and disconnects them first)."""

        def forget(name: str) -> None:
            found = self.topics.pop(name, None)
            if found is not None:
                self._dirty_topics.discard(found)
                found.log.close()
            if self.config.data_dir is not None and name.startswith("persistent://"):
                shutil.rmtree(topic_dir(self.config.data_dir, name), ignore_errors=True)

        def do() -> None:
            name = TopicName.parse(topic)
            n = self.partitioned.pop(str(name), None)
            for part in [str(p) for p in name.partitions(n or 0)]:
                forget(part)
            if n:
                self._save_metadata()

        self.call(do)

    def trim_topic(self, topic: str, entries: int) -> None:
        """Drop the oldest ``entries`` entries (simulates retention)."""

        def do() -> None:
            t = self.get_topic(str(TopicName.parse(topic)), create=True)
            assert t is not None
            t.log.trim_head(entries)

        self.call(do)

    # -- compaction (thread-safe) --------------------------------------------------------
    def compact(self, topic: str) -> None:
        """Start compacting ``topic`` (Pulsar's PUT .../compaction); returns at once, the status tells
        when it is done. Raises BrokerError (TopicNotFound: no such topic; NotAllowedError: a
        partitioned topic, compact its partitions) and CompactionInProgressError while one runs."""

        def do() -> None:
            self._start_compaction(self._existing_topic(topic))

        self.call(do)

    def compaction_status(self, topic: str) -> dict[str, str]:
        """Pulsar's GET .../compaction: ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": ...}``;
        raises BrokerError as :meth:`compact`."""

        def do() -> dict[str, str]:
            t = self._existing_topic(topic)
            return {"status": t.compaction_status.value, "lastError": t.compaction_error}

        return cast(dict[str, str], self.call(do))

    def _existing_topic(self, topic: str) -> Topic:
        name = str(TopicName.parse(topic))
        if name in self.partitioned:
            raise BrokerError(E.NotAllowedError, f"{name} is a partitioned topic: use its partitions")
        t = self.get_topic(name, create=self.topic_exists(name))
        if t is None:
            raise BrokerError(E.TopicNotFound, f"Topic {name} not found")
        return t

    def _start_compaction(self, topic: Topic) -> None:
        self.keep_task(
            topic.start_compaction(
                retain_null_key=self.config.compaction_retain_null_key,
                max_message_size=self.config.max_message_size,
            )
        )

    def keep_task(self, task: asyncio.Task[Any]) -> None:
        """Hold ``task`` until it is done (cancelled at stop)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def compact_over_threshold(self, topic: Topic) -> None:
        """Start a compaction of ``topic`` when the bytes stored since the last one pass the threshold."""
        threshold = self.config.compaction_threshold
        if (
            threshold > 0
            and topic.bytes_since_compaction > threshold
            and topic.compaction_status != CompactionStatus.RUNNING
        ):
            self._start_compaction(topic)

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
        last_sequence: dict[str, int] = {}
        persistent = tn.is_persistent
        data_dir = self.config.data_dir if persistent else None  # a non-persistent topic stores nothing
        log_ = TopicLog(
            name,
            data_dir=data_dir,
            entries_per_ledger=self.config.entries_per_ledger,
            fsync=self.config.fsync,
            cache=self.entry_cache,
            files=self.open_files,
            on_recover=partial(note_sequence, last_sequence),
        )
        topic = Topic(
            name,
            log_,
            partition_index=tn.partition_index,
            data_dir=data_dir,
            persistent=persistent,
            last_sequence=last_sequence,
        )
        self.topics[name] = topic
        self._topic_created(name)
        return topic

    def _topic_created(self, name: str) -> None:
        if not name.startswith("persistent://"):
            return  # as Pulsar's topic-list watchers: persistent topics only
        brokers = self.cluster.brokers if self.cluster is not None else [self]
        for b in brokers:
            for watcher, digest in b.watchers.topic_created(name):
                watcher.owner.send_watch_update(watcher.watcher_id, [name], digest)

    def topics_in(self, namespace: str, mode: int = Mode.PERSISTENT) -> list[str]:
        """The topics of ``namespace`` of the domains ``mode`` asks for (partitions, not their parent),
        as GET_TOPICS_OF_NAMESPACE and the admin API list them."""
        domains = _DOMAINS_OF_MODE.get(cast(Any, mode), ("persistent",))
        prefixes = tuple(f"{domain}://{namespace}/" for domain in domains)
        names: set[str] = set()
        for name, n in self.partitioned.items():
            if name.startswith(prefixes):
                names.update(str(TopicName.parse(name).partition(i)) for i in range(n))
        names.update(t for t in self.topics if t.startswith(prefixes))
        if self.config.data_dir is not None and "persistent" in domains:
            # Topics written before a restart exist even while no client has loaded them yet.
            names.update(t for t in stored_topics(self.config.data_dir) if t.startswith(prefixes))
        return sorted(names)

    def topic_exists(self, name: str) -> bool:
        if name in self.topics or name in self.partitioned:
            return True
        return self.config.data_dir is not None and topic_dir(self.config.data_dir, name).exists()

    def policies(self, topic: str) -> Policies:
        """The policies that apply to ``topic``: its own, its namespace's, else the broker's."""
        cfg = self.config
        return self.namespaces.effective(topic, Policies(cfg.deduplication, cfg.schema_compatibility))

    def deduplication_enabled(self, topic: str) -> bool:
        """Whether SENDs to ``topic`` are deduplicated (never on non-persistent topics, as Pulsar)."""
        deduplication = self.policies(topic).deduplication
        return bool(deduplication) and topic.startswith("persistent://")

    def schema_compatibility(self, topic: str) -> Compatibility:
        return self.policies(topic).schema_compatibility or Compatibility.FULL

    def listener(self, name: str | None) -> Listener:
        """The URLs a LOOKUP for listener ``name`` is answered with (None: the internal listener).

        Raises BrokerError ServiceNotReady for a listener this broker does not advertise, as Pulsar.
        """
        cfg = self.config
        internal = cfg.internal_listener_name
        given = cfg.advertised_listeners.get(name or internal)
        if name and name != internal:
            if given is None:
                raise BrokerError(E.ServiceNotReady, f"the broker do not have {name} listener")
            return given
        # The internal listener: the URLs given for it, this broker's own for the others (Pulsar
        # fills them in from its ports).
        given = given or Listener()
        return Listener(given.url or self.service_url, given.url_tls or self.service_url_tls)

    def new_producer_name(self) -> str:
        # The boot id keeps names unique across restarts (a name carries its deduplication state).
        return f"pulsarwire-{self.port}-{self._boot_id}-{next(self._producer_names)}"

    def mark_dirty(self, topic: Topic) -> None:
        if topic.data_dir is None:
            return
        self._dirty_topics.add(topic)
        if self._flush_handle is None and self._loop is not None:
            self._flush_handle = self._loop.call_later(self.config.cursor_flush_seconds, self.flush_state)

    def flush_state(self) -> None:
        """Write the cursors of the topics marked dirty; a topic whose write fails stays dirty and
        is tried again at the next flush (its cursors on disk stay older: a restart redelivers)."""
        self._flush_handle = None
        dirty, self._dirty_topics = self._dirty_topics, set()
        failed = []
        for topic in dirty:
            try:
                topic.save_state()
            except OSError as exc:
                self.write_failures += 1
                log.error(
                    "cannot save the cursors of %s (tried again in %g s): %s",
                    topic.name,
                    RETRY_WRITE_SECONDS,
                    exc,
                )
                failed.append(topic)
        if failed:
            self._dirty_topics.update(failed)
            if self._flush_handle is None and self._loop is not None:
                self._flush_handle = self._loop.call_later(RETRY_WRITE_SECONDS, self.flush_state)

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

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = str(transport.get_extra_info("peername"))
        self.peer_cert = transport.get_extra_info("peercert") or None
        cfg = self.broker.config
        if cfg.max_connections and len(self.broker.connections) >= cfg.max_connections:
            # As Pulsar's brokerMaxConnections: ERROR NotAllowedError (request id -1), then close.
            self.broker.connections_refused += 1
            log.warning(
                "refusing %s: reached the maximum number of connections (%d)", self.peer, cfg.max_connections
            )
            self._error(2**64 - 1, E.NotAllowedError, "Reached the maximum number of connections")
            self.close()
            return
        self.broker.connections.add(self)
        self.broker.connections_accepted += 1
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        self._schedule_keepalive()
        # A fixed deadline from the accept: frames (PING) or trickled bytes do not extend it.
        self._connect_deadline = asyncio.get_running_loop().call_later(
            cfg.connect_timeout, self._connect_timed_out
        )

    def _connect_timed_out(self) -> None:
        self._connect_deadline = None
        if self.transport is not None and not self.connected:
            log.info("closing %s: no CONNECT within %g s", self.peer, self.broker.config.connect_timeout)
            self.close()

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
        auth = self.broker.config.auth
        if auth is not None:
            try:
                identity = auth.authenticate(c.auth_method_name, c.auth_data, time.time(), self.peer_cert)
            except AuthenticationError as exc:
                self.broker.auth_failures += 1
                log.info("authentication failed for %s: %s", self.peer, exc)
                self._error(2**64 - 1, E.AuthenticationError, str(exc))  # request id -1, as Pulsar
                self.close()
                return
            self._set_identity(identity)
        if self._connect_deadline is not None:
            self._connect_deadline.cancel()
            self._connect_deadline = None
        resp, sub = new_command(T.CONNECTED)
        sub.server_version = SERVER_VERSION
        sub.protocol_version = self.protocol_version
        sub.max_message_size = self.broker.config.max_message_size
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
        auth = self.broker.config.auth
        try:
            if auth is None:
                raise AuthenticationError("authentication is not enabled on this broker")
            method = r.auth_method_name or TOKEN_METHOD
            identity = auth.authenticate(method, r.auth_data, time.time(), self.peer_cert)
        except AuthenticationError as exc:
            log.info("closing %s: refreshed credential refused: %s", self.peer, exc)
            self._error(2**64 - 1, E.AuthenticationError, str(exc))  # request id -1, as Pulsar
            self.close()
            return
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
        self.broker.auth_refreshes += 1

    def _authorize(self, name: str, needs: frozenset[Action]) -> None:
        """Refuse a command on topic ``name`` (AuthorizationError) unless the role holds one of ``needs``."""
        self._authorize_namespace(TopicName.parse(name).namespace_name, needs, name)

    def _authorize_namespace(self, namespace: str, needs: frozenset[Action], target: str = "") -> None:
        """Refuse (AuthorizationError) unless the role holds one of ``needs`` on ``namespace``.

        Nothing is checked without authentication; with it, only grants and superusers count.
        """
        if self.broker.config.auth is None:
            return
        role = self.identity.role if self.identity is not None else None
        if not self.broker.config.grants.allows(role, namespace, needs):
            what = " or ".join(sorted(a.value for a in needs))
            target = target or namespace
            log.info("role %r (%s) is not authorized to %s on %s", role, self.peer, what, target)
            raise BrokerError(E.AuthorizationError, f"role {role!r} is not authorized to {what} on {target}")

    def _check_namespace(self, name: str) -> None:
        """Refuse (TopicNotFound, as Pulsar) a topic whose tenant or namespace does not exist.

        After authorization: a role learns nothing about namespaces it may not use.
        """
        namespace = TopicName.parse(name).namespace_name
        if namespace not in self.broker.namespaces:
            raise BrokerError(E.TopicNotFound, f"Tenant or namespace or topic does not exist: {namespace}")

    def on_ping(self, cmd: pb.BaseCommand, _: Any) -> None:
        self.send(new_command(T.PONG)[0])

    def on_pong(self, cmd: pb.BaseCommand, _: Any) -> None:
        self._settle_liveness(True)  # last_seen is refreshed for every frame

    def on_partitioned_metadata(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.partitionMetadata
        name = str(TopicName.parse(req.topic))
        self._authorize(name, LOOKUP)
        self._check_namespace(name)
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
        self._authorize(name, LOOKUP)
        self._check_namespace(name)
        owner = self.broker.cluster.owner_of(name) if self.broker.cluster is not None else self.broker
        urls = owner.listener(req.advertised_listener_name or None)
        resp, sub = new_command(T.LOOKUP_RESPONSE)
        sub.request_id = req.request_id
        if owner is self.broker:
            sub.response = pb.CommandLookupTopicResponse.Connect
        else:
            sub.response = pb.CommandLookupTopicResponse.Redirect
            self.broker.lookups_redirected += 1
        if urls.url is not None:
            sub.brokerServiceUrl = urls.url
        if urls.url_tls is not None:
            sub.brokerServiceUrlTls = urls.url_tls
        sub.authoritative = True
        self.send(resp)

    def _topic_for_use(self, topic: str, needs: frozenset[Action]) -> Topic:
        name = str(TopicName.parse(topic))
        self._authorize(name, needs)
        self._check_namespace(name)
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
        topic = self._topic_for_use(req.topic, PRODUCE)
        if topic.terminated:
            raise BrokerError(E.TopicTerminatedError, f"topic {topic.name} is terminated")
        name = req.producer_name if req.HasField("producer_name") and req.producer_name else None
        if name is None:
            name = self.broker.new_producer_name()
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
        dedup = self.broker.deduplication_enabled(ref.topic.name)
        ready = ref.ready
        sub.last_sequence_id = ref.topic.last_sequence.get(ref.name, -1) if dedup and ready else -1
        schema_version = ref.schema_version
        if schema_version is None:  # no schema of its own: the topic's latest, if any
            latest = self.broker.schemas.latest(ref.topic.name)
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
        if self.broker.deduplication_enabled(topic.name) and first <= topic.last_sequence.get(ref.name, -1):
            self._receipt(req, -1, -1)
            return
        try:
            entry = topic.append(payload.entry, md)
        except StorageError as exc:
            # Nothing was stored. Fence the producer as Pulsar does after a failed write: its later
            # sends are refused until it is re-created, so no gap can hide behind deduplication.
            ref.fenced = True
            self.broker.write_failures += 1
            log.error("cannot store a message of %s on %s: %s", ref.name, topic.name, exc)
            self._send_error(
                req.producer_id, req.sequence_id, E.PersistenceError, f"cannot store the message: {exc}"
            )
            return
        self._receipt(req, entry.ledger_id, entry.entry_id)
        topic.dispatch_all()
        self.broker.compact_over_threshold(topic)

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
            if size > self.broker.config.max_message_size:
                raise BrokerError(
                    E.NotAllowedError,
                    f"batch of {size} bytes uncompressed is over the max message size"
                    f" {self.broker.config.max_message_size}",
                )
        if count * MIN_ENTRY_SIZE > size:
            raise BrokerError(
                E.NotAllowedError,
                f"batch claims {count} messages, its {size} bytes hold at most {size // MIN_ENTRY_SIZE}",
            )

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
            strategy = self.broker.schema_compatibility(topic.name)
            return self.broker.schemas.register(topic.name, schema, strategy)
        except IncompatibleSchemaError as exc:
            raise BrokerError(E.IncompatibleSchema, f"{topic.name}: {exc}") from None

    def _check_consumer_schema(self, topic: Topic, schema: pb.Schema) -> None:
        """As Pulsar's addSchemaIfIdleOrCheckCompatible: a consumer's schema is added to an idle topic
        (no schema, no producer, no consumer, no entry), else checked against the topic's history
        (BrokerError IncompatibleSchema)."""
        if schema.type in (pb.Schema.Type.Value("None"), pb.Schema.AutoConsume):
            return
        registry = self.broker.schemas
        strategy = self.broker.schema_compatibility(topic.name)
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
        topic = self._topic_for_use(req.topic, PRODUCE)
        resp, sub = new_command(T.GET_OR_CREATE_SCHEMA_RESPONSE)
        sub.request_id = req.request_id
        try:
            version = self.broker.schemas.register(
                topic.name, req.schema, self.broker.schema_compatibility(topic.name)
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
        self._check_namespace(name)
        if not req.force_topic_creation and not self.broker.topic_exists(name):
            raise BrokerError(E.TopicNotFound, f"topic {name} does not exist")
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
                    self.broker.keep_task(task)
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
        self.broker._check_end_of_topic(topic, sub)

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
        saved = getattr(topic, "saved_subscriptions", {}).get(req.subscription) if durable else None
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
        self._authorize(topic.name, CONSUME)
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
        return self.broker.topics_in(namespace, mode)

    # -- topic list watchers -------------------------------------------------------------
    def on_watch_topic_list(self, cmd: pb.BaseCommand, _: Any) -> None:
        req = cmd.watchTopicList
        self._authorize_namespace(req.namespace, LOOKUP)
        watchers = self.broker.watchers
        watcher = watchers.get(self, req.watcher_id)
        if watcher is None:  # as Pulsar: a watcher id already registered is answered again
            limit = self.broker.config.max_watchers_per_connection
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
        return self.broker.config.max_topics_pattern_length

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
