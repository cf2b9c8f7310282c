"""The broker process: listeners, the event loop, and the thread-safe admin API.

:class:`Broker` is what Apache Pulsar calls ``PulsarService``: it owns the
:class:`~pulsarwire.broker.service.BrokerService` (topics, namespaces, policies, lookup,
authorization: service.py), listens for the binary protocol (each TCP connection a
:class:`~pulsarwire.broker.connection.ServerConnection`: connection.py) and, when asked, for HTTP
(:class:`~pulsarwire.broker.web.WebService`: web.py). The two transports call the service and
never each other; this module is the only one that knows all three.

Use it in-process (``with Broker() as b: b.service_url``) -- it then runs its own event loop
in a background thread -- or from asyncio (``await b.astart()``), or from the command line
(``python -m pulsarwire.broker``). Every admin method (``create_partitioned_topic``,
``terminate_topic``, ``inject``...) is one service method run on the broker's loop through
:meth:`Broker.call`, so it is safe from any thread.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from pulsarwire._background import start_loop_thread, stop_loop_thread
from pulsarwire.errors import StorageError

from .config import INTERNAL_LISTENER, BrokerConfig, Listener
from .connection import ServerConnection, understands_end_of_topic
from .faults import Faults
from .net import BrokerStartError, ListenError, advertised_host, listen, url_host
from .policies import Namespaces, Policies
from .schemas import Compatibility, SchemaRegistry
from .service import BrokerError, BrokerService, Connection
from .storage import check_data_dir
from .topic import Topic
from .watch import TopicWatchers
from .web import WebService

__all__ = [
    "INTERNAL_LISTENER",
    "Broker",
    "BrokerConfig",
    "BrokerError",
    "BrokerStartError",
    "ListenError",
    "Listener",
    "advertised_host",
    "understands_end_of_topic",
]

log = logging.getLogger("pulsarwire.broker")

V = TypeVar("V")


class _Shared(Generic[V]):
    """An attribute of the broker that is its service's (read and set through the broker)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, broker: Broker, owner: type | None = None) -> V:
        return cast(V, getattr(broker.service, self.name))

    def __set__(self, broker: Broker, value: V) -> None:
        setattr(broker.service, self.name, value)


class Broker:
    """A single-node Pulsar broker. See the module docstring."""

    topics: _Shared[dict[str, Topic]] = _Shared()
    partitioned: _Shared[dict[str, int]] = _Shared()
    namespaces: _Shared[Namespaces] = _Shared()
    schemas: _Shared[SchemaRegistry] = _Shared()
    connections: _Shared[set[Connection]] = _Shared()
    faults: _Shared[Faults] = _Shared()
    watchers: _Shared[TopicWatchers] = _Shared()
    #: set by Cluster: who owns which topic
    cluster: _Shared[Any] = _Shared()
    name: _Shared[str] = _Shared()
    # counters visible to tests and --stats
    connections_accepted: _Shared[int] = _Shared()
    lookups_redirected: _Shared[int] = _Shared()
    auth_refreshes: _Shared[int] = _Shared()
    auth_failures: _Shared[int] = _Shared()
    connections_refused: _Shared[int] = _Shared()
    corrupt_acks: _Shared[int] = _Shared()
    write_failures: _Shared[int] = _Shared()

    def __init__(self, config: BrokerConfig | None = None, **overrides: Any) -> None:
        cfg = config or BrokerConfig()
        for k, v in overrides.items():
            setattr(cfg, k, v)
        if cfg.data_dir is not None:
            cfg.data_dir = Path(cfg.data_dir)
        self.config = cfg
        self.port = cfg.port
        self.tls_port = cfg.tls_port
        self._server: asyncio.AbstractServer | None = None
        self._tls_server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        #: the web service when ``http_port`` is set (see web.py)
        self.web: WebService | None = None
        self.service = BrokerService(cfg, self)

    # -- addresses ---------------------------------------------------------------
    @property
    def advertised_host(self) -> str:
        """The host clients are told to connect to (LOOKUP answers, service_url)."""
        return self.service.advertised_host

    @property
    def service_url(self) -> str:
        return f"pulsar://{url_host(self.advertised_host)}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        if self._tls_server is None:
            return None
        return f"pulsar+ssl://{url_host(self.advertised_host)}:{self.tls_port}"

    @property
    def http_url(self) -> str | None:
        """``http://host:port`` of the web service (None when it is off)."""
        return self.web.url if self.web is not None else None

    @property
    def http_url_tls(self) -> str | None:
        """``https://host:port`` of the web service (None when HTTPS is off)."""
        return self.web.url_tls if self.web is not None else None

    def _tls_context(self) -> ssl.SSLContext:
        """The server context of the TLS listeners (binary and HTTPS): one certificate for both."""
        cfg = self.config
        if cfg.tls_cert_file is None or cfg.tls_key_file is None:
            raise ValueError("a TLS listener (tls_port, https_port) needs tls_cert_file and tls_key_file")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cfg.tls_cert_file), str(cfg.tls_key_file))
        if cfg.tls_trust_certs_file is not None:
            # Clients may present a certificate (TLS authentication); one not signed by these
            # CAs fails the handshake, as with Pulsar's tlsAllowInsecureConnection=false.
            context.load_verify_locations(cafile=str(cfg.tls_trust_certs_file))
            context.verify_mode = ssl.CERT_OPTIONAL
        return context

    # -- lifecycle ---------------------------------------------------------------
    async def astart(self) -> None:
        """Listen; raises BrokerStartError (one line: what and why) when the data dir is unusable or
        ListenError (a BrokerStartError) when the address cannot be bound."""
        if self.config.data_dir is not None:
            try:
                check_data_dir(self.config.data_dir)
                self.service.keep_namespaces()
            except StorageError as exc:
                raise BrokerStartError(
                    f"cannot keep data in {exc.path}: {exc.reason} (choose a writable --data-dir)"
                ) from None
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise BrokerStartError(
                    f"cannot keep data in {self.config.data_dir}: {reason} (choose a writable --data-dir)"
                ) from None
        self._loop = self.service.loop = asyncio.get_running_loop()
        cfg = self.config
        self._server = await listen(self._loop, self._connection, cfg.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.tls_port is not None:
            try:
                context = self._tls_context()
                self._tls_server = await listen(
                    self._loop,
                    self._connection,
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
        if cfg.http_port is not None or cfg.https_port is not None:
            web = WebService(self.service)
            try:
                if cfg.http_port is not None:
                    await web.start(cfg.host, cfg.http_port)
                if cfg.https_port is not None:
                    await web.start(cfg.host, cfg.https_port, self._tls_context())
            except BaseException:
                await web.stop()
                for server in (self._server, self._tls_server):
                    if server is not None:
                        server.close()
                self._server = self._tls_server = None
                raise
            self.web = web
            # a restart listens on the same ports
            cfg.http_port, cfg.https_port = web.port, web.tls_port
            if cfg.auth is not None and web.tls_port is None:
                log.warning(
                    "authentication is on and the admin API is served over plain HTTP only (%s):"
                    " credentials cross the network in clear; add --https-port",
                    web.url,
                )
        urls = (self.service_url, self.service_url_tls, self.http_url, self.http_url_tls)
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
        await self.service.cancel_tasks()
        self.service.close_logs()

    def start(self) -> Broker:
        """Start in a background thread with its own event loop; returns when listening."""
        _loop, self._thread = start_loop_thread("pulsarwire-broker", self.astart, self.astop)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            stop_loop_thread(self._loop, self._thread)
            self._thread = None

    def restart(self) -> Broker:
        """Stop and start again on the same ports and data dir, forgetting everything not on disk."""
        self.stop()
        self.service.reset()
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

    def _connection(self) -> ServerConnection:
        return ServerConnection(self.service)

    # -- admin API: each a service method run on the loop (thread-safe) ---------------------
    def create_namespace(self, namespace: str) -> bool:
        """Create ``tenant/namespace`` (False when it exists); raises PolicySyntaxError for a bad name,
        OSError when the data dir cannot keep it."""
        return cast(bool, self.call(self.service.create_namespace, namespace))

    def set_policies(self, scope: str, policies: Policies) -> None:
        """Set the policies of a namespace (``tenant/ns``) or topic, replacing that scope's earlier ones.

        Raises PolicySyntaxError, NamespaceNotFound, OSError (the data dir cannot keep them)."""
        self.call(self.service.set_policies, scope, policies)

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Create a partitioned topic; raises NamespaceNotFound when its namespace does not exist."""
        self.call(self.service.create_partitioned_topic, topic, partitions)

    def terminate_topic(self, topic: str) -> tuple[int, int]:
        """Terminate a topic: producers are refused, consumers reach the end of the topic."""
        return cast(tuple[int, int], self.call(self.service.terminate_topic, topic))

    def delete_topic(self, topic: str) -> None:
        """Forget a topic (a partitioned one: all its partitions) with its stored entries, subscriptions
        and cursors (see :meth:`BrokerService.delete_topic`)."""
        self.call(self.service.delete_topic, topic)

    def trim_topic(self, topic: str, entries: int) -> None:
        """Drop the oldest ``entries`` entries (simulates retention)."""
        self.call(self.service.trim_topic, topic, entries)

    def compact(self, topic: str) -> None:
        """Start compacting ``topic`` (see :meth:`BrokerService.compact`)."""
        self.call(self.service.compact, topic)

    def compaction_status(self, topic: str) -> dict[str, str]:
        """Pulsar's GET .../compaction answer (see :meth:`BrokerService.compaction_status`)."""
        return cast(dict[str, str], self.call(self.service.compaction_status, topic))

    def inject(self, **faults: Any) -> None:
        """Arm faults for the next operations, e.g. ``inject(fail_receipts=1)``; see :class:`Faults`."""
        self.call(lambda: self.service.inject(**faults))

    def drop_connections(self, topic: str | None = None) -> int:
        """Cut TCP connections (all, or those with producers/consumers on ``topic``); returns how many."""
        return cast(int, self.call(self.service.drop_connections, topic))

    def close_producers(self, topic: str) -> None:
        """Send CLOSE_PRODUCER to every producer of ``topic`` (clients look up again and reconnect)."""
        self.call(self.service.close_producers, topic)

    def close_consumers(self, topic: str) -> None:
        """Send CLOSE_CONSUMER to every consumer of ``topic``."""
        self.call(self.service.close_consumers, topic)

    def unload_topic(self, topic: str) -> None:
        """Unload: disconnect the topic's producers and consumers; in a cluster it moves to another broker."""
        if self.cluster is not None:
            self.cluster.unload_topic(topic)
            return
        self.call(self.service.disconnect_topic, topic)

    def stats(self, topic: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.call(self.service.stats, topic))

    def topic_names(self) -> list[str]:
        return cast(list[str], self.call(self.service.topic_names))

    def topic_exists(self, name: str) -> bool:
        return cast(bool, self.call(self.service.topic_exists, name))

    def get_topic(self, name: str, *, create: bool) -> Topic | None:
        return cast("Topic | None", self.call(lambda: self.service.get_topic(name, create=create)))

    def deduplication_enabled(self, topic: str) -> bool:
        """Whether SENDs to ``topic`` are deduplicated (never on non-persistent topics, as Pulsar)."""
        return cast(bool, self.call(self.service.deduplication_enabled, topic))

    def policies(self, topic: str) -> Policies:
        """The policies that apply to ``topic``: its own, its namespace's, else the broker's."""
        return cast(Policies, self.call(self.service.policies, topic))

    def schema_compatibility(self, topic: str) -> Compatibility:
        return cast(Compatibility, self.call(self.service.schema_compatibility, topic))

    def listener(self, name: str | None) -> Listener:
        """The URLs a LOOKUP for listener ``name`` is answered with (see :meth:`BrokerService.listener`)."""
        return cast(Listener, self.call(self.service.listener, name))

    def owns(self, name: str) -> bool:
        return self.service.owns(name)


async def _as_coro(fn: Any, *args: Any) -> Any:
    return fn(*args)
