"""The Kafka broker's network side: the dispatch registry, connections, and :class:`Broker`.

Registry. ``HANDLERS`` maps an API key to ``async def handler(ctx: RequestContext, body: dict)
-> dict`` (bodies are the codec's dicts, ``pulsarwire.kafka.codec``). ApiVersions advertises
exactly the registered keys, each with the codec's version range (or the range given at
registration); a request for a key that has no handler, or for a version outside its range,
closes the connection as Kafka does -- except ApiVersions, whose unsupported versions get the v0
answer with UNSUPPORTED_VERSION and the supported ranges, so a client can negotiate down.

Adding handlers from another module -- either call :func:`register` at import time::

    from pulsarwire.kafka.broker.server import register
    register(API_KEYS["JoinGroup"], join_group)

or define ``handlers() -> Mapping[int, Handler]`` in a module named in :data:`PLUGINS`
(``handlers``, ``transactions``, ``groups``, ``sasl``, ``acl`` beside this file):
:func:`load_plugins` imports each that exists and registers what it returns (at the versions in
its optional ``VERSIONS_SERVED: Mapping[int, tuple[int, int]]``, else every version the codec
defines).
Such a module may also define ``attach(state: BrokerState) -> None``, called once per broker
before it listens (to put its objects in ``state.extensions``, install ``state.authorize`` or
a ``state.request_gates`` entry, read ``state.config.extra``), and ``add_arguments(parser)``
to add command-line flags (their values land in ``config.extra`` by their dest names).

Listener. One, plain TCP (PLAINTEXT) or, given a certificate, TLS only (SSL); SASL works on
either (SASL_PLAINTEXT, SASL_SSL).

Connections. Each connection reads one frame at a time: the 4-byte size is checked against
``max_request_bytes`` before anything is read for it, the request is decoded and answered,
and only then is the next one read -- so responses leave in request order and a connection
has one request in flight in the broker (the rest wait in its reader's buffer of
:data:`READ_BUFFER` bytes, then in the socket's), as Kafka mutes a channel while it serves it.
A malformed request (bad bytes, unknown API or version, a handler that fails) closes that
connection only; others go on being served. Produce with ``acks=0`` gets no response.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pulsarwire._background import start_loop_thread, stop_loop_thread
from pulsarwire.broker.net import BrokerStartError, listen, url_host
from pulsarwire.errors import PulsarWireError, StorageError
from pulsarwire.kafka.broker.context import RequestContext, Session
from pulsarwire.kafka.broker.state import BrokerState, KafkaBrokerConfig
from pulsarwire.kafka.codec import API_KEYS, decode_request, encode_response, versions
from pulsarwire.kafka.codec.frames import SIZE
from pulsarwire.kafka.errors import KafkaProtocolError, KafkaUnknownApiError

log = logging.getLogger("pulsarwire.kafka.broker")

Handler = Callable[[RequestContext, dict[str, Any]], Awaitable[dict[str, Any]]]

#: api_key -> handler
HANDLERS: dict[int, Handler] = {}
#: api_key -> (min, max) versions served (the codec's range unless registered narrower)
VERSIONS: dict[int, tuple[int, int]] = {}
#: modules beside this one whose handlers() / attach() / add_arguments() are collected when present
PLUGINS = ("handlers", "transactions", "groups", "sasl", "acl")

API_VERSIONS = API_KEYS["ApiVersions"]
PRODUCE = API_KEYS["Produce"]
UNSUPPORTED_VERSION = 35
#: a TLS client that has not finished its handshake by then is dropped
TLS_HANDSHAKE_SECONDS = 30.0
#: bytes a connection's reader buffers before it stops reading the socket (a request larger than
#: this is still read whole: reading resumes as the frame is taken)
READ_BUFFER = 1 << 20
_plugins_loaded: list[Any] = []


def register(api_key: int, handler: Handler, versions_served: tuple[int, int] | None = None) -> None:
    """Serve ``api_key`` with ``handler`` (replacing an earlier one), at ``versions_served`` or
    every version the codec defines."""
    lo, hi = versions(api_key)
    if versions_served is not None:
        lo, hi = max(lo, versions_served[0]), min(hi, versions_served[1])
    HANDLERS[api_key] = handler
    VERSIONS[api_key] = (lo, hi)


def load_plugins() -> list[Any]:
    """Import the :data:`PLUGINS` modules that exist and register their handlers (once)."""
    if not _plugins_loaded:
        for name in PLUGINS:
            module_name = f"{__package__}.{name}"
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name != module_name:
                    raise
                continue
            provide = getattr(module, "handlers", None)
            served = getattr(module, "VERSIONS_SERVED", {})
            if provide is not None:
                for api_key, handler in provide().items():
                    register(api_key, handler, served.get(api_key))
            _plugins_loaded.append(module)
    return list(_plugins_loaded)


def api_versions_body(error_code: int = 0) -> dict[str, Any]:
    """ApiVersions' answer: every registered key with its range."""
    keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(VERSIONS.items())]
    return {"error_code": error_code, "api_keys": keys}


class Connection:
    """One client connection (see the module docstring)."""

    def __init__(
        self, state: BrokerState, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cid: int
    ):
        self.state = state
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.session = Session(cid, f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer))

    async def serve(self) -> None:
        limit = self.state.config.max_request_bytes
        try:
            while True:
                try:
                    head = await self.reader.readexactly(SIZE.size)
                except asyncio.IncompleteReadError:
                    return  # the client closed
                (size,) = SIZE.unpack(head)
                if size < 0 or size > limit:
                    log.warning(
                        "closing %s: a request of %d bytes (socket.request.max.bytes is %d)",
                        self.session.peer, size, limit,
                    )  # fmt: skip
                    return
                payload = await self.reader.readexactly(size)
                answer = await self._answer(payload)
                if answer is False:
                    return
                if isinstance(answer, bytes):
                    self.writer.write(SIZE.pack(len(answer)) + answer)
                    await self.writer.drain()
                close_after = self.session.data.get("close_after_answer")
                if close_after is not None:
                    # a handler asked (sasl.py: a failed login is answered, then closed after
                    # Kafka's connection.failed.authentication.delay.ms, so the client reads it first)
                    await asyncio.sleep(float(close_after))
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.writer.close()

    async def _answer(self, payload: bytes) -> bytes | bool | None:
        """The response's bytes; None for none (acks=0); False to close the connection."""
        try:
            request = decode_request(payload, strict=False)  # trailing bytes ignored, as Kafka does
        except KafkaUnknownApiError as exc:
            if exc.api_key == API_VERSIONS and exc.correlation_id is not None:
                return encode_response(
                    API_VERSIONS, 0, exc.correlation_id, api_versions_body(UNSUPPORTED_VERSION)
                )
            log.info("closing %s: %s", self.session.peer, exc)
            return False
        except KafkaProtocolError as exc:
            log.info("closing %s: malformed request: %s", self.session.peer, exc)
            log.debug("the request's first bytes: %s", payload[:256].hex())
            return False
        key, version = request.api_key, request.api_version
        handler = HANDLERS.get(key)
        lo, hi = VERSIONS.get(key, (0, -1))
        if handler is None or not lo <= version <= hi:
            if key == API_VERSIONS:
                return encode_response(
                    API_VERSIONS, 0, request.correlation_id, api_versions_body(UNSUPPORTED_VERSION)
                )
            log.info("closing %s: %sRequest v%d is not served", self.session.peer, request.api_name, version)
            return False
        ctx = RequestContext(
            key, version, request.correlation_id, request.client_id, self.session, self.state
        )
        for gate in self.state.request_gates:
            if not gate(ctx):
                log.info(
                    "closing %s: %sRequest refused before authentication", self.session.peer, request.api_name
                )
                return False
        try:
            body = await handler(ctx, request.body)
            if key == PRODUCE and request.body.get("acks") == 0:
                return None
            return encode_response(key, version, request.correlation_id, body)
        except KafkaProtocolError as exc:
            log.info("closing %s: %sRequest: %s", self.session.peer, request.api_name, exc)
            return False
        except Exception:
            log.exception("closing %s: %sRequest failed", self.session.peer, request.api_name)
            return False


class KafkaServer:
    """The broker's state and listener on the current event loop."""

    def __init__(self, config: KafkaBrokerConfig) -> None:
        self.config = config
        self.state: BrokerState | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)

    async def start(self) -> BrokerState:
        """Load the data dir and listen; raises BrokerStartError (one line: what and why)."""
        plugins = load_plugins()
        cfg = self.config
        state = BrokerState(cfg)
        if cfg.data_dir is not None:
            from pulsarwire._log import check_data_dir

            try:
                check_data_dir(cfg.data_dir)
                state.load()
            except StorageError as exc:
                raise BrokerStartError(
                    f"cannot keep data in {exc.path}: {exc.reason} (choose a writable --data-dir)"
                ) from None
        for module in plugins:
            attach = getattr(module, "attach", None)
            if attach is not None:
                try:
                    attach(state)
                except PulsarWireError as exc:  # a plugin's files or settings (SASL users, group log)
                    state.close()
                    raise BrokerStartError(str(exc)) from None
        self._server = await _listen(self._accept, cfg.host, cfg.port, _tls_context(cfg))
        state.port = self._server.sockets[0].getsockname()[1]
        self.state = state
        return state

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.state is not None
        limit = self.config.max_connections
        if limit and len(self._connections) >= limit:
            log.warning("refusing a connection: %d are open (--max-connections)", limit)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await Connection(self.state, reader, writer, next(self._ids)).serve()
        except asyncio.CancelledError:
            pass  # the broker is stopping: the connection ends quietly
        finally:
            self._connections.discard(task)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.state is not None:
            self.state.close()


def _tls_context(cfg: KafkaBrokerConfig) -> ssl.SSLContext | None:
    """The listener's TLS context, or None for plain TCP; raises BrokerStartError for files it cannot use."""
    if cfg.tls_cert_file is None:
        if cfg.tls_key_file is not None:
            raise BrokerStartError("--tls-key needs --tls-cert (the certificate the key belongs to)")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(cfg.tls_cert_file), str(cfg.tls_key_file) if cfg.tls_key_file else None)
    except (OSError, ssl.SSLError) as exc:
        where = f"{cfg.tls_cert_file}" + (f" / {cfg.tls_key_file}" if cfg.tls_key_file else "")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BrokerStartError(
            f"cannot use the TLS certificate {where}: {reason} (give a PEM certificate and its key)"
        ) from None
    return context


async def _listen(callback: Any, host: str, port: int, context: ssl.SSLContext | None) -> asyncio.Server:
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.StreamReaderProtocol:
        reader = asyncio.StreamReader(limit=READ_BUFFER, loop=loop)
        return asyncio.StreamReaderProtocol(reader, callback, loop=loop)

    if context is None:
        return await listen(loop, factory, host, port)
    return await listen(loop, factory, host, port, ssl=context, ssl_handshake_timeout=TLS_HANDSHAKE_SECONDS)


class Broker:
    """A Kafka broker in a background thread: ``with Broker(data_dir=...) as b: b.bootstrap_servers``.

    Keyword arguments are :class:`KafkaBrokerConfig` fields (``port=0`` picks a free port, the
    default here); unknown ones go to ``config.extra`` for the optional modules.
    """

    def __init__(self, config: KafkaBrokerConfig | None = None, **overrides: Any) -> None:
        cfg = config or KafkaBrokerConfig(port=0)
        known = set(KafkaBrokerConfig.__dataclass_fields__)
        for k, v in overrides.items():
            if k in known:
                setattr(cfg, k, v)
            else:
                cfg.extra[k] = v
        if cfg.data_dir is not None:
            cfg.data_dir = Path(cfg.data_dir)
        self.config = cfg
        self.server: KafkaServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> BrokerState:
        if self.server is None or self.server.state is None:
            raise RuntimeError("the Kafka broker is not running")
        return self.server.state

    @property
    def port(self) -> int:
        return self.state.port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` to give clients (``bootstrap.servers``)."""
        return f"{url_host(self.state.host)}:{self.state.port}"

    async def astart(self) -> Broker:
        self.server = KafkaServer(self.config)
        await self.server.start()
        self.config.port = self.state.port  # a restart listens on the same port
        log.info("Kafka broker listening on %s", self.bootstrap_servers)
        return self

    async def astop(self) -> None:
        if self.server is not None:
            await self.server.stop()

    def start(self) -> Broker:
        """Start in a background thread with its own event loop; returns when listening."""
        self._loop, self._thread = start_loop_thread("pulsarwire-kafka-broker", self.astart, self.astop)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            stop_loop_thread(self._loop, self._thread)
            self._thread = None

    def restart(self) -> Broker:
        """Stop and start again on the same port and data dir, forgetting everything not on disk."""
        self.stop()
        return self.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the broker's loop (thread-safe access to the state)."""
        if self._loop is None or self._thread is None or threading.current_thread() is self._thread:
            return fn(*args)

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        """Create a topic; raises TopicError (exists, bad name or count) or StorageError."""
        self.call(self.state.create_topic, name, partitions, configs)

    def topic_names(self) -> list[str]:
        return sorted(self.call(lambda: list(self.state.topics)))

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
