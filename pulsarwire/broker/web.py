"""The broker's web service: a subset of Apache Pulsar's admin REST API v2, HTTP lookup and /metrics.

Pulsar brokers answer HTTP beside the binary protocol (``webServicePort``, 8080 on a standalone):
the admin API (``/admin/v2/...``: tenants, namespaces, topics, schemas), HTTP lookup
(``/lookup/v2/topic/...``, which clients given an ``http://`` service URL use) and Prometheus
metrics. :class:`WebService` serves the same paths, JSON shapes and status codes for what this
broker has (``--http-port PORT``; off by default).

How it works: asyncio servers (plain HTTP, and HTTPS with the TLS listener's certificate) on the
broker's own event loop (no thread touches broker state) hand the bytes of each connection to an
h11 connection (sans-IO HTTP/1.1 framing: request line, headers, Content-Length or chunked
bodies, keep-alive) and read requests with bounded sizes and deadlines -- the request head at
most :data:`MAX_HEAD_BYTES` (else 431) within ``connect_timeout`` seconds of its first byte (else
408 and close: a slowloris cannot hold the connection), a body of at most ``max_message_size``
bytes (else 413), read within the same deadline; a connection's first request must start within
``connect_timeout``, later ones within ``keepalive_seconds``; a first byte that cannot start a
request line (a Pulsar frame) is answered 400 at once, as Jetty does, so that such a client
learns what it reached. Endpoints that read a body need ``application/json`` (else 415). At most
:func:`web_connection_cap` connections at once (else 503). :data:`ROUTES` is the routing table
(method, path template, handler name); a path no template matches is 404, a path matched for
another method is 405 with ``Allow``. Errors are Pulsar's ``{"reason": "..."}``.

Authentication and authorization are those of the binary protocol: ``Authorization: Bearer
TOKEN`` (method ``token``) or ``Basic`` (method ``basic``, the decoded ``user:password``) goes to
the broker's authenticator (in a worker thread: a password hash does not hold the loop); no
credential is the anonymous role when there is one, else 401. Topic operations need the grants
Pulsar's authorization provider asks for (lookup, stats, schemas read: produce or consume;
subscriptions: consume; schema upload: produce); namespaces, topic creation/deletion/termination
and policies need a superuser or an admin role of the tenant; tenants a superuser. ``/metrics``
needs nothing (Pulsar's ``authenticateMetricsEndpoint=false``). Without authentication nothing is checked.

This module is the HTTP side only: reading requests, routing, JSON shapes and status codes.
Every rule it shares with the binary protocol -- authorization, whether a tenant, namespace or
topic exists, partitioned metadata, lookup -- is a method of the service layer
(:class:`~pulsarwire.broker.service.BrokerService`), whose refusals (BrokerError, NotFound) are
mapped here to Pulsar's statuses (403, 404 with Pulsar's reason, 405, 503). It does not import
the binary handler nor the Broker.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import http
import json
import logging
import resource
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import h11

from pulsarwire.codec.entry import uncompressed_payload
from pulsarwire.codec.frames import decode_metadata, entry_layout
from pulsarwire.errors import AuthenticationError, InvalidTopicName, PulsarWireError
from pulsarwire.naming import DOMAINS, TopicName
from pulsarwire.proto import pb

from .authz import CONSUME, LOOKUP, PRODUCE, Action, GrantSyntaxError
from .compaction import CompactionInProgressError
from .net import listen, url_host
from .policies import NamespaceNotFound, Policies, PolicySyntaxError, Retention
from .schemas import Compatibility, IncompatibleSchemaError, InvalidSchemaError, type_name
from .service import (
    LATEST,
    MAX_INT32,
    SUPERUSER,
    BrokerError,
    BrokerService,
    InUse,
    InvalidPartitions,
    NotFound,
    PreconditionFailed,
    Unsupported,
)

if TYPE_CHECKING:
    from .storage import Entry
    from .topic import Topic

log = logging.getLogger("pulsarwire.broker.web")

#: Largest request line + headers (Pulsar's httpMaxRequestHeaderSize default: 8 KiB); above: 431.
MAX_HEAD_BYTES = 8 * 1024
#: Most header lines in one request; above: 431.
MAX_HEADERS = 100
#: Most HTTP connections at once (each costs a task and buffers); beyond: 503 and close. Lowered
#: to a quarter of the process's descriptor limit (see :func:`web_connection_cap`).
MAX_HTTP_CONNECTIONS = 1024
#: Largest Content-Length (a Java long, as Jetty reads it); above: 400.
MAX_INT64 = 2**63 - 1
#: Pulsar's reasons for a tenant or namespace a request names and does not exist (the service's
#: NotFound.what); for the rest the service's NotFound says it in Pulsar's words (a topic's, a
#: subscription's name in it).
_NOT_FOUND = {
    "tenant": "Tenant does not exist",
    "namespace": "Namespace does not exist",
}
_MODE = pb.CommandGetTopicsOfNamespace.Mode
#: ``?mode=`` of a namespace's topic list, and the mode listing one domain
_MODES = {"PERSISTENT": _MODE.PERSISTENT, "NON_PERSISTENT": _MODE.NON_PERSISTENT, "ALL": _MODE.ALL}
_DOMAIN_MODES = {"persistent": _MODE.PERSISTENT, "non-persistent": _MODE.NON_PERSISTENT}
_SCHEMA_TYPES = {name.upper(): value for name, value in pb.Schema.Type.items()}
_SCHEMA_TYPES["NONE"] = pb.Schema.Type.Value("None")
_SCHEMA_TYPES["BYTES"] = pb.Schema.Type.Value("None")
_SCHEMA_TYPES["KEY_VALUE"] = pb.Schema.KeyValue
_SCHEMA_TYPES["PROTOBUF_NATIVE"] = pb.Schema.ProtobufNative
_SCHEMA_TYPES["LOCAL_DATE"] = pb.Schema.LocalDate
_SCHEMA_TYPES["LOCAL_TIME"] = pb.Schema.LocalTime
_SCHEMA_TYPES["LOCAL_DATE_TIME"] = pb.Schema.LocalDateTime


def web_connection_cap() -> int:
    """Most HTTP connections at once: :data:`MAX_HTTP_CONNECTIONS`, and at most a quarter of the
    process's open-file limit, so that web clients can never take the descriptors the binary
    listener, the logs and the stored topics need."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_HTTP_CONNECTIONS
    return max(1, min(MAX_HTTP_CONNECTIONS, soft // 4))


class HttpError(PulsarWireError):
    """A request answered with ``status`` and Pulsar's ``{"reason": ...}``."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers or {}


@dataclass(frozen=True, slots=True)
class Route:
    """``method`` on a path template (``{name}`` matches one segment; ``{domain}`` only a topic domain)."""

    method: str
    template: str
    handler: str
    #: whether the caller must authenticate (everything but /metrics)
    authenticated: bool = True
    #: whether it reads a JSON body (then another Content-Type is 415, as Pulsar's
    #: ``@Consumes(MediaType.APPLICATION_JSON)`` resources answer)
    body: bool = False

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.template.strip("/").split("/"))


_TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
_NS = "/admin/v2/namespaces/{tenant}/{namespace}"
_SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema"

#: The routing table: the first template that matches the path and method handles the request.
ROUTES: tuple[Route, ...] = (
    Route("GET", "/metrics", "metrics", authenticated=False),
    Route("GET", "/admin/v2/brokers/health", "health"),
    Route("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", "lookup"),
    Route("GET", "/admin/v2/tenants", "list_tenants"),
    Route("GET", "/admin/v2/tenants/{tenant}", "get_tenant"),
    Route("PUT", "/admin/v2/tenants/{tenant}", "create_tenant", body=True),
    Route("POST", "/admin/v2/tenants/{tenant}", "update_tenant", body=True),
    Route("DELETE", "/admin/v2/tenants/{tenant}", "delete_tenant"),
    Route("GET", "/admin/v2/namespaces/{tenant}", "list_namespaces"),
    Route("GET", _NS, "get_namespace"),
    Route("PUT", _NS, "create_namespace", body=True),
    Route("DELETE", _NS, "delete_namespace"),
    Route("GET", _NS + "/permissions", "get_namespace_permissions"),
    Route("POST", _NS + "/permissions/{role}", "grant_namespace_permission", body=True),
    Route("DELETE", _NS + "/permissions/{role}", "revoke_namespace_permission"),
    Route("GET", _NS + "/topics", "namespace_topics"),
    Route("GET", _NS + "/deduplication", "get_namespace_deduplication"),
    Route("POST", _NS + "/deduplication", "set_namespace_deduplication", body=True),
    Route("GET", _NS + "/retention", "get_namespace_retention"),
    Route("POST", _NS + "/retention", "set_namespace_retention", body=True),
    Route("GET", _NS + "/schemaCompatibilityStrategy", "get_namespace_compatibility"),
    Route("PUT", _NS + "/schemaCompatibilityStrategy", "set_namespace_compatibility", body=True),
    Route("GET", "/admin/v2/{domain}/{tenant}/{namespace}", "list_topics"),
    Route("GET", "/admin/v2/{domain}/{tenant}/{namespace}/partitioned", "list_partitioned_topics"),
    Route("GET", _TOPIC + "/partitions", "get_partitions"),
    Route("PUT", _TOPIC + "/partitions", "create_partitioned_topic", body=True),
    Route("POST", _TOPIC + "/partitions", "update_partitioned_topic", body=True),
    Route("DELETE", _TOPIC + "/partitions", "delete_partitioned_topic"),
    Route("PUT", _TOPIC, "create_topic"),
    Route("DELETE", _TOPIC, "delete_topic"),
    Route("GET", _TOPIC + "/stats", "topic_stats"),
    Route("GET", _TOPIC + "/internalStats", "topic_internal_stats"),
    Route("GET", _TOPIC + "/partitioned-stats", "partitioned_stats"),
    Route("GET", _TOPIC + "/partitioned-internalStats", "partitioned_internal_stats"),
    Route("GET", _TOPIC + "/lastMessageId", "last_message_id"),
    Route("GET", _TOPIC + "/examinemessage", "examine_message"),
    Route("GET", _TOPIC + "/subscription/{subscription}/position/{position}", "peek_message"),
    Route("GET", _TOPIC + "/ledger/{ledger}/entry/{entry}", "message_by_id"),
    Route("PUT", _TOPIC + "/unload", "unload"),
    Route("GET", _TOPIC + "/permissions", "get_topic_permissions"),
    Route("POST", _TOPIC + "/permissions/{role}", "grant_topic_permission", body=True),
    Route("DELETE", _TOPIC + "/permissions/{role}", "revoke_topic_permission"),
    Route("GET", _TOPIC + "/subscriptions", "list_subscriptions"),
    Route("PUT", _TOPIC + "/subscription/{subscription}", "create_subscription", body=True),
    Route("DELETE", _TOPIC + "/subscription/{subscription}", "delete_subscription"),
    Route("POST", _TOPIC + "/subscription/{subscription}/resetcursor", "reset_cursor_to_id", body=True),
    Route("POST", _TOPIC + "/subscription/{subscription}/skip_all", "skip_all"),
    Route("POST", _TOPIC + "/subscription/{subscription}/resetcursor/{timestamp}", "reset_cursor"),
    Route("POST", _TOPIC + "/terminate", "terminate"),
    Route("PUT", _TOPIC + "/compaction", "trigger_compaction"),
    Route("GET", _TOPIC + "/compaction", "compaction_status"),
    Route("GET", _TOPIC + "/deduplicationEnabled", "get_topic_deduplication"),
    Route("POST", _TOPIC + "/deduplicationEnabled", "set_topic_deduplication", body=True),
    Route("DELETE", _TOPIC + "/deduplicationEnabled", "remove_topic_deduplication"),
    Route("GET", _SCHEMA, "get_schema"),
    Route("GET", _SCHEMA + "/{version}", "get_schema_version"),
    Route("POST", _SCHEMA, "post_schema", body=True),
    Route("DELETE", _SCHEMA, "delete_schema"),
    Route(
        "POST",
        "/admin/v2/schemas/{tenant}/{namespace}/{topic}/compatibility",
        "test_compatibility",
        body=True,
    ),
)


def match_route(method: str, segments: list[str]) -> tuple[Route, dict[str, str]]:
    """The route and path parameters for a request; raises HttpError 404 (no template) or 405."""
    allowed: list[str] = []
    for route in ROUTES:
        params = _match(route.parts, segments)
        if params is None:
            continue
        if route.method == method:
            return route, params
        allowed.append(route.method)
    if allowed:
        raise HttpError(405, "Method Not Allowed", {"Allow": ", ".join(sorted(set(allowed)))})
    raise HttpError(404, "Not Found")


def _match(parts: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
    if len(parts) != len(segments):
        return None
    params: dict[str, str] = {}
    for part, seg in zip(parts, segments, strict=True):
        if part.startswith("{"):
            name = part[1:-1]
            if not seg or (name == "domain" and seg not in DOMAINS):
                return None
            params[name] = seg
        elif part != seg:
            return None
    return params


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""
    #: the authenticated role (None: no authentication on the broker)
    role: str | None = None

    def json(self) -> Any:
        """The body as JSON; raises HttpError 400 when it is not."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            raise HttpError(400, "the request body is not valid JSON") from None

    def flag(self, name: str) -> bool:
        return self.query.get(name, "false").lower() == "true"


@dataclass
class Response:
    status: int = 204
    body: Any = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    #: more headers, a name may repeat (a message's X-Pulsar-replicated-to...)
    header_list: list[tuple[str, str]] = field(default_factory=list)

    def events(self, close: bool) -> list[h11.Response | h11.Data | h11.EndOfMessage]:
        """The h11 events of this answer (``close``: the connection ends after it)."""
        if self.body is None:
            data = b""
        elif isinstance(self.body, bytes):
            data = self.body
        elif isinstance(self.body, str) and self.content_type != "application/json":
            data = self.body.encode()
        else:
            data = json.dumps(self.body).encode()
        headers = [("Content-Length", str(len(data)))]
        if data:
            headers.append(("Content-Type", self.content_type))
        headers.extend(self.headers.items())
        headers.extend(self.header_list)
        if close:
            headers.append(("Connection", "close"))
        try:
            phrase = http.HTTPStatus(self.status).phrase
        except ValueError:
            phrase = "Unknown"
        head = h11.Response(status_code=self.status, headers=headers, reason=phrase)
        return [head, h11.Data(data=data), h11.EndOfMessage()]


#: HTTP statuses of the service's refusals (ServerError codes) other than NotFound.
_STATUS_OF_CODE: dict[int, int] = {
    pb.AuthorizationError: 403,
    pb.NotAllowedError: 405,
    pb.ServiceNotReady: 503,
    pb.InvalidTopicName: 412,
}


def _status_of(code: int) -> int:
    return _STATUS_OF_CODE.get(code, 500)


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> Response:
    return Response(status, {"reason": reason}, headers=dict(headers or {}))


class _Close(Exception):
    """The connection ends without an answer (peer gone, idle, or nothing to answer)."""


class WebService:
    """HTTP on the broker's loop: see the module docstring."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: the plain HTTP port and the HTTPS port (None: that listener is off)
        self.port: int | None = None
        self.tls_port: int | None = None
        self.requests = 0
        self.refused = 0
        self.max_connections = web_connection_cap()

    # -- lifecycle -----------------------------------------------------------------
    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Listen on ``host:port``, with TLS (HTTPS) when ``tls`` is given (the TLS handshake
        has the connect deadline); raises ListenError (port taken, unknown host...)."""
        loop = asyncio.get_running_loop()

        def factory() -> asyncio.StreamReaderProtocol:
            reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES, loop=loop)
            return asyncio.StreamReaderProtocol(reader, self._accepted)

        kw: dict[str, Any] = {}
        if tls is not None:
            kw = {"ssl": tls, "ssl_handshake_timeout": self.service.config.connect_timeout}
        server = await listen(loop, factory, host, port, **kw)
        self._servers.append(server)
        bound = server.sockets[0].getsockname()[1]
        if tls is not None:
            self.tls_port = bound
        else:
            self.port = bound

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers = []

    @property
    def url(self) -> str | None:
        """``http://host:port`` (None: no plain HTTP listener)."""
        host = url_host(self.service.advertised_host)
        return f"http://{host}:{self.port}" if self.port is not None else None

    @property
    def url_tls(self) -> str | None:
        """``https://host:port`` (None: no HTTPS listener)."""
        host = url_host(self.service.advertised_host)
        return f"https://{host}:{self.tls_port}" if self.tls_port is not None else None

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- connection ------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cfg = self.service.config
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            if len(self._tasks) > self.max_connections:
                self.refused += 1
                self._send(conn, writer, _error(503, "too many HTTP connections"), close=True)
                return
            # A connection's first request has the connect deadline to start; later ones may wait
            # keepalive_seconds (idle between requests).
            idle = cfg.connect_timeout
            while True:
                try:
                    request = await self._read_request(conn, reader, writer, idle, cfg.connect_timeout)
                except HttpError as exc:
                    self._send(conn, writer, _error(exc.status, exc.reason), close=True)
                    await asyncio.wait_for(writer.drain(), cfg.connect_timeout)
                    return
                response = await self.handle(request)
                self._send(conn, writer, response, close=False)
                await asyncio.wait_for(writer.drain(), cfg.connect_timeout)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # HTTP/1.0, Connection: close, or a body left unread
                conn.start_next_cycle()
                idle = cfg.keepalive_seconds
        except (_Close, ConnectionError, TimeoutError, asyncio.IncompleteReadError, h11.LocalProtocolError):
            pass
        except Exception:  # a broker bug: this connection ends, logged once, the others go on
            log.exception("closing an HTTP connection: unexpected failure")
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    def _send(conn: h11.Connection, writer: asyncio.StreamWriter, response: Response, *, close: bool) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            raise _Close()
        for event in response.events(close):
            writer.write(conn.send(event) or b"")

    async def _read_request(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        idle: float,
        deadline: float,
    ) -> Request:
        """One request: its first byte within ``idle`` seconds, then the whole request (head and
        body) within ``deadline`` seconds of that byte. Framing is h11's: a malformed request line,
        header or Content-Length (also two that disagree) is 400, a head over MAX_HEAD_BYTES 431."""
        loop = asyncio.get_running_loop()
        ends: float | None = None
        head: h11.Request | None = None
        body = bytearray()
        limit = self.service.config.max_message_size
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                reason = "Request Header Fields Too Large" if status == 431 else f"Bad Request: {exc}"
                raise HttpError(status, reason) from None
            if event is h11.NEED_DATA:
                wait = idle if ends is None else max(0.0, ends - loop.time())
                try:
                    data = await asyncio.wait_for(reader.read(65536), wait)
                except TimeoutError:
                    if ends is None:
                        raise _Close() from None
                    raise HttpError(408, "Request Timeout") from None
                if ends is None and data:
                    if not data[:1].isalpha():  # a request line starts with its method: another protocol
                        raise HttpError(400, "Bad Request: not an HTTP request")
                    ends = loop.time() + deadline
                if not data and ends is None:
                    raise _Close()
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                head = event
                _check_head(event, limit)
                if conn.they_are_waiting_for_100_continue:  # curl's Expect: 100-continue, as Jetty
                    go_on = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
                    writer.write(conn.send(go_on) or b"")
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > limit:
                    raise HttpError(413, f"the body is over {limit} bytes")
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return _request_of(head, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                raise _Close()

    # -- dispatch ----------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        """Answer one request (runs on the broker's loop, but for the credential's check; never raises)."""
        self.requests += 1
        try:
            segments = [urllib.parse.unquote(s) for s in request.path.strip("/").split("/")]
            route, params = match_route(request.method, segments)
            if route.authenticated:
                request.role = await self._authenticate(request)
            if route.body:
                _require_json(request)
            handler: Callable[[Request, dict[str, str]], Response] = getattr(self, "on_" + route.handler)
            return handler(request, params)
        except HttpError as exc:
            return _error(exc.status, exc.reason, exc.headers)
        except NotFound as exc:
            return _error(404, _NOT_FOUND.get(exc.what, str(exc)))  # else the service's own words
        except InUse as exc:
            return _error(409, str(exc))
        except PreconditionFailed as exc:
            return _error(412, str(exc))
        except Unsupported as exc:
            return _error(400, str(exc))
        except GrantSyntaxError as exc:
            return _error(400, str(exc))
        except BrokerError as exc:
            return _error(_status_of(exc.code), str(exc))
        except NamespaceNotFound:
            return _error(404, "Namespace does not exist")
        except InvalidPartitions as exc:
            return _error(406, str(exc))
        except (InvalidTopicName, PolicySyntaxError) as exc:
            return _error(412, str(exc))
        except Exception as exc:  # a broker bug or an unforeseen input: that request fails
            log.error("%s %s failed unexpectedly", request.method, request.path, exc_info=exc)
            return _error(500, f"{type(exc).__name__}: {str(exc)[:200]}")

    async def _authenticate(self, request: Request) -> str | None:
        """The role of the request's credential, checked in a worker thread (a password hash costs
        milliseconds: other requests and connections are served meanwhile); 401 when refused."""
        auth = self.service.config.auth
        if auth is None:
            return None
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        method, data = "", b""
        if scheme.lower() == "bearer":
            method, data = "token", credential.strip().encode()
        elif scheme.lower() == "basic":
            try:
                method, data = "basic", base64.b64decode(credential.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise HttpError(401, "Authentication required") from None
        check = partial(auth.authenticate, method, data, time.time(), None)
        try:
            return (await asyncio.get_running_loop().run_in_executor(None, check)).role
        except AuthenticationError as exc:
            self.service.auth_failures += 1
            log.info("HTTP authentication failed: %s", exc)
            raise HttpError(401, "Authentication required") from None

    def _authorize(self, request: Request, namespace: str, needs: frozenset[Action], what: str) -> None:
        """Refuse (403) unless the role may ``needs`` on ``namespace`` (SUPERUSER: a superuser)."""
        self.service.authorize(request.role, namespace, needs, what=what)

    # -- helpers -----------------------------------------------------------------------
    def _namespace(self, request: Request, p: dict[str, str], needs: frozenset[Action], what: str) -> str:
        namespace = f"{p['tenant']}/{p['namespace']}"
        self._authorize(request, namespace, needs, what)
        self.service.require_namespace(namespace)
        return namespace

    def _topic_name(self, p: dict[str, str]) -> TopicName:
        domain = p.get("domain", "persistent")
        return TopicName.parse(f"{domain}://{p['tenant']}/{p['namespace']}/{p['topic']}")

    def _topic(self, request: Request, p: dict[str, str], needs: frozenset[Action], what: str) -> TopicName:
        """The topic of the path, authorized and in a namespace that exists."""
        name = self._topic_name(p)
        self._namespace(request, p, needs, what)
        return name

    def _loaded(self, name: TopicName) -> Topic:
        """The non-partitioned topic, loaded; 404 when it does not exist (or is partitioned)."""
        try:
            return self.service.existing_topic(str(name))
        except BrokerError as exc:
            raise HttpError(404, f"Topic {name} not found") from exc

    def _body_json(self, request: Request, kind: type, what: str) -> Any:
        value = request.json()
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise HttpError(400, f"the body must be {what}")
        return value

    def _body_int(self, request: Request, what: str, most: int) -> int:
        """A body that is one integer of Java's type up to ``most`` (int: 2**31-1, long: 2**63-1),
        as Jackson reads it; 400 otherwise."""
        value = self._body_json(request, int, what)
        if not -most - 1 <= value <= most:
            raise HttpError(400, f"the body must be {what}, at most {most}")
        return cast(int, value)

    def _update_policies(self, scope: str, **changes: Any) -> None:
        self.service.update_policies(scope, **changes)

    # -- broker ------------------------------------------------------------------------
    def on_metrics(self, request: Request, p: dict[str, str]) -> Response:
        return Response(200, prometheus_text(self.service), "text/plain; version=0.0.4")

    def on_health(self, request: Request, p: dict[str, str]) -> Response:
        self._authorize(request, "", SUPERUSER, "check the broker's health")
        return Response(200, "ok", "text/plain")

    def on_lookup(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic_name(p)
        found = self.service.lookup(
            str(name), request.role, request.query.get("listenerName") or None, http=True
        )
        urls = found.urls
        return Response(
            200,
            {
                "brokerUrl": urls.url or "",
                "brokerUrlTls": urls.url_tls or "",
                "httpUrl": found.http_url,
                "httpUrlTls": found.http_url_tls,
                "nativeUrl": urls.url or "",
            },
        )

    # -- tenants and namespaces -----------------------------------------------------------
    def on_list_tenants(self, request: Request, p: dict[str, str]) -> Response:
        self._authorize(request, "", SUPERUSER, "list tenants")
        return Response(200, self.service.namespaces.tenants())

    def on_get_tenant(self, request: Request, p: dict[str, str]) -> Response:
        self._authorize(request, "", SUPERUSER, "administrate tenants")
        if not self.service.namespaces.has_tenant(p["tenant"]):
            raise HttpError(404, "Tenant does not exist")
        return Response(
            200,
            {
                "adminRoles": self.service.namespaces.admin_roles(p["tenant"]),
                "allowedClusters": [self.service.name],
            },
        )

    def _admin_roles(self, request: Request) -> list[str] | None:
        """The ``adminRoles`` of a TenantInfo body (None: no body); 400 when it is not a list of names."""
        if not request.body:
            return None
        body = self._body_json(request, dict, "a TenantInfo object")
        roles = body.get("adminRoles") or []
        if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
            raise HttpError(400, "adminRoles must be a list of role names")
        clusters = body.get("allowedClusters")
        if clusters is not None and (
            not isinstance(clusters, list) or any(c != self.service.name for c in clusters)
        ):
            raise HttpError(412, f"Clusters do not exist: only {self.service.name} is known")
        return roles

    def on_create_tenant(self, request: Request, p: dict[str, str]) -> Response:
        self._authorize(request, "", SUPERUSER, "administrate tenants")
        roles = self._admin_roles(request)
        if not self.service.create_tenant(p["tenant"], roles or ()):
            raise HttpError(409, "Tenant already exists")
        return Response(204)

    def on_update_tenant(self, request: Request, p: dict[str, str]) -> Response:
        self._authorize(request, "", SUPERUSER, "administrate tenants")
        roles = self._admin_roles(request)
        if not self.service.namespaces.has_tenant(p["tenant"]):
            raise HttpError(404, "Tenant does not exist")
        self.service.set_tenant_admins(p["tenant"], roles or ())
        return Response(204)

    def on_delete_tenant(self, request: Request, p: dict[str, str]) -> Response:
        self._authorize(request, "", SUPERUSER, "administrate tenants")
        try:
            self.service.delete_tenant(p["tenant"])
        except NotFound as exc:
            raise HttpError(404, str(exc)) from None  # Pulsar's "Tenant doesn't exist" here
        return Response(204)

    def on_delete_namespace(self, request: Request, p: dict[str, str]) -> Response:
        namespace = f"{p['tenant']}/{p['namespace']}"
        self._authorize(request, namespace, SUPERUSER, "administrate namespaces")
        try:
            self.service.delete_namespace(namespace, force=request.flag("force"))
        except NotFound as exc:
            if exc.what != "namespace":
                raise
            raise HttpError(404, f"Namespace {namespace} does not exist.") from None
        return Response(204)

    # -- permissions ------------------------------------------------------------------------
    def _actions(self, request: Request) -> list[str]:
        """A Set<AuthAction> body: a JSON list of action names; 400 otherwise."""
        actions = self._body_json(request, list, "a list of actions")
        if not all(isinstance(a, str) for a in actions):
            raise HttpError(400, "the body must be a list of actions (produce, consume)")
        return cast(list[str], actions)

    def on_get_namespace_permissions(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "administrate namespaces")
        return Response(200, self.service.permissions(self.service.permission_scope(namespace)))

    def on_grant_namespace_permission(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "grant permissions")
        scope = self.service.permission_scope(namespace)
        self.service.grant_permission(scope, p["role"], self._actions(request))
        return Response(204)

    def on_revoke_namespace_permission(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "revoke permissions")
        self.service.revoke_permission(self.service.permission_scope(namespace), p["role"])
        return Response(204)

    def _topic_scope(self, request: Request, p: dict[str, str], what: str) -> str:
        name = self._topic(request, p, SUPERUSER, what)
        return self.service.permission_scope(name.namespace_name, str(name))

    def on_get_topic_permissions(self, request: Request, p: dict[str, str]) -> Response:
        return Response(200, self.service.permissions(self._topic_scope(request, p, "administrate topics")))

    def on_grant_topic_permission(self, request: Request, p: dict[str, str]) -> Response:
        scope = self._topic_scope(request, p, "grant permissions")
        self.service.grant_permission(scope, p["role"], self._actions(request))
        return Response(204)

    def on_revoke_topic_permission(self, request: Request, p: dict[str, str]) -> Response:
        self.service.revoke_permission(self._topic_scope(request, p, "revoke permissions"), p["role"])
        return Response(204)

    def on_list_namespaces(self, request: Request, p: dict[str, str]) -> Response:
        self._authorize(request, f"{p['tenant']}/", SUPERUSER, "list the namespaces of the tenant")
        tenant = p["tenant"]
        if not self.service.namespaces.has_tenant(tenant):
            raise HttpError(404, "Tenant does not exist")
        return Response(200, [n for n in self.service.namespaces.names() if n.partition("/")[0] == tenant])

    def on_get_namespace(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "administrate namespaces")
        own = self.service.namespaces.policies_of(namespace)
        body: dict[str, Any] = {
            "replication_clusters": [self.service.name],
            "deduplicationEnabled": own.deduplication,
            "schema_compatibility_strategy": own.schema_compatibility.name
            if own.schema_compatibility
            else "UNDEFINED",
            "retention_policies": _retention_json(own.retention) if own.retention else None,
            "auth_policies": self.service.auth_policies(namespace),
        }
        return Response(200, body)

    def on_create_namespace(self, request: Request, p: dict[str, str]) -> Response:
        namespace = f"{p['tenant']}/{p['namespace']}"
        self._authorize(request, namespace, SUPERUSER, "administrate namespaces")
        policies = (
            _policies_of_body(self._body_json(request, dict, "a Policies object")) if request.body else None
        )
        if not self.service.namespaces.has_tenant(p["tenant"]):
            raise HttpError(404, "Tenant does not exist")
        if namespace in self.service.namespaces:
            raise HttpError(409, "Namespace already exists")
        self.service.create_namespace(namespace)
        if policies is not None and policies != Policies():
            self._update_policies(
                namespace,
                deduplication=policies.deduplication,
                schema_compatibility=policies.schema_compatibility,
                retention=policies.retention,
            )
        return Response(204)

    def on_namespace_topics(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, LOOKUP, "list the topics of the namespace")
        mode = request.query.get("mode", "PERSISTENT").upper()
        if mode not in _MODES:
            raise HttpError(400, f"unknown mode {mode!r} (PERSISTENT, NON_PERSISTENT, ALL)")
        return Response(200, self.service.topics_in(namespace, _MODES[mode]))

    def on_get_namespace_deduplication(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "administrate namespaces")
        value = self.service.namespaces.policies_of(namespace).deduplication
        return Response(200 if value is not None else 204, value)

    def on_set_namespace_deduplication(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "administrate namespaces")
        self._update_policies(namespace, deduplication=self._body_json(request, bool, "true or false"))
        return Response(204)

    def on_get_namespace_retention(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "administrate namespaces")
        retention = self.service.namespaces.policies_of(namespace).retention
        return Response(200 if retention else 204, _retention_json(retention) if retention else None)

    def on_set_namespace_retention(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "administrate namespaces")
        retention = _retention(self._body_json(request, dict, "a RetentionPolicies object"))
        self._update_policies(namespace, retention=retention)
        return Response(204)

    def on_get_namespace_compatibility(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "administrate namespaces")
        strategy = self.service.namespaces.policies_of(namespace).schema_compatibility
        return Response(200, strategy.name if strategy else "UNDEFINED")

    def on_set_namespace_compatibility(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, SUPERUSER, "administrate namespaces")
        text = request.body.decode("utf-8", "replace").strip()
        value = self._body_json(request, str, "a strategy name") if text.startswith('"') else text
        if value.upper() == "UNDEFINED":
            self._update_policies(namespace, schema_compatibility=None)
            return Response(204)
        try:
            strategy = Compatibility.parse(value)
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        self._update_policies(namespace, schema_compatibility=strategy)
        return Response(204)

    # -- topics ------------------------------------------------------------------------
    def on_list_topics(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, LOOKUP, "list the topics of the namespace")
        return Response(200, self.service.topics_in(namespace, _DOMAIN_MODES[p["domain"]]))

    def on_list_partitioned_topics(self, request: Request, p: dict[str, str]) -> Response:
        namespace = self._namespace(request, p, LOOKUP, "list the topics of the namespace")
        return Response(200, self.service.partitioned_topics_in(namespace, p["domain"]))

    def on_get_partitions(self, request: Request, p: dict[str, str]) -> Response:
        name = str(self._topic_name(p))
        create = request.flag("checkAllowAutoCreation")
        n = self.service.partitioned_metadata(name, request.role, auto_create=create)
        return Response(200, {"partitions": n, "deleted": False})  # PartitionedTopicMetadata, as Pulsar 4

    def on_create_partitioned_topic(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "create topics")
        partitions = self._body_int(request, "the number of partitions", MAX_INT32)
        full = str(name)
        if name.partition_index >= 0:
            raise HttpError(412, "Partitioned Topic Name should not contain '-partition-'")
        if self.service.partition_count(full) is not None or self.service.get_topic(full, create=False):
            raise HttpError(409, "This topic already exists")
        self.service.create_partitioned_topic(full, partitions)
        return Response(204)

    def on_update_partitioned_topic(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "update topics")
        partitions = self._body_int(request, "the number of partitions", MAX_INT32)
        full = str(name)
        current = self.service.partition_count(full)
        if current is None:
            raise HttpError(404, "Partitioned topic does not exist")
        if partitions <= current:
            raise HttpError(422, f"Desired partitions {partitions} must be more than the current {current}")
        self.service.create_partitioned_topic(full, partitions)
        return Response(204)

    def on_delete_partitioned_topic(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "delete topics")
        full = str(name)
        if self.service.partition_count(full) is None:
            raise HttpError(404, f"Topic {full} not found.")
        self._check_deletable(self.service.present_partitions(full), request.flag("force"))
        self.service.delete_topic(full)
        return Response(204)

    def on_create_topic(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "create topics")
        full = str(name)
        parent = str(name.partitioned_topic)
        if self.service.topic_exists(full):
            raise HttpError(409, "This topic already exists")
        if name.partition_index >= 0 and self.service.partition_count(parent) is not None:
            raise HttpError(409, "This topic already exists")
        self.service.get_topic(full, create=True)
        return Response(204)

    def on_delete_topic(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "delete topics")
        full = str(name)
        if self.service.partition_count(full) is not None:
            raise HttpError(409, "Topic is a partitioned topic: delete it with DELETE .../partitions")
        if not self.service.topic_exists(full):
            raise HttpError(404, f"Topic {full} not found")
        self._check_deletable([full], request.flag("force"))
        self.service.delete_topic(full)
        return Response(204)

    def _check_deletable(self, names: list[str], force: bool) -> None:
        """412 when a topic has connected producers or consumers (``force``: disconnect them)."""
        if not force and any(self.service.busy(full) for full in names):
            raise HttpError(412, "Topic has active producers/subscriptions")
        if force:
            for full in names:
                self.service.disconnect_topic(full)

    def on_topic_stats(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, LOOKUP, "get the stats of topics")
        topic = self.service.with_subscriptions(self._loaded(name))
        return Response(200, topic_stats(self.service, topic))

    def on_topic_internal_stats(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, LOOKUP, "get the stats of topics")
        topic = self.service.with_subscriptions(self._loaded(name))
        return Response(200, internal_stats(topic))

    def on_list_subscriptions(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "list the subscriptions of topics")
        return Response(200, self.service.subscription_names(str(name)))

    def on_partitioned_stats(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, LOOKUP, "get the stats of topics")
        n, parts = self.service.partition_topics(str(name))
        per_partition = request.query.get("perPartition", "true").lower() != "false"
        return Response(200, partitioned_stats(self.service, str(name), n, parts, per_partition))

    def on_partitioned_internal_stats(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, LOOKUP, "get the stats of topics")
        n, parts = self.service.partition_topics(str(name))
        body = {
            "metadata": {"partitions": n, "deleted": False},
            "partitions": {part: internal_stats(t) for part, t in parts.items()},
        }
        return Response(200, body)

    def on_last_message_id(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "get the last message id of topics")
        last = self.service.last_message_id(self._loaded(name))  # a partitioned topic is 404, as Pulsar
        # Pulsar's MessageIdImpl / BatchMessageIdImpl as its Jackson writes them
        body: dict[str, int] = {
            "ledgerId": last.ledger_id,
            "entryId": last.entry_id,
            "partitionIndex": last.partition,
            "batchIndex": last.batch_index,
            "batchSize": 0,
        }
        if last.batch_index >= 0:
            body.update(outstandingAcksInSameBatch=0, originalBatchSize=0)
        return Response(200, body)

    def on_examine_message(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "examine messages")
        initial = request.query.get("initialPosition", "latest")
        position = _path_long(request.query.get("messagePosition", "1") or "1", "messagePosition", "a number")
        return self._message(self.service.examine(str(name), initial, position))

    def on_peek_message(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "peek messages")
        position = _path_long(p["position"], "message position", "a number")
        return self._message(self.service.peek(str(name), p["subscription"], position))

    def on_message_by_id(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "get messages")
        ledger = _path_long(p["ledger"], "ledgerId", "a number")
        entry = _path_long(p["entry"], "entryId", "a number")
        return self._message(self.service.message_by_id(str(name), (ledger, entry)))

    def _message(self, entry: Entry) -> Response:
        """Pulsar's answer carrying one stored entry: the payload (decompressed; a batch whole),
        its metadata in X-Pulsar-* headers (PersistentTopicsBase.generateResponseWithEntry)."""
        try:
            headers, body = message_answer(entry, self.service.config.max_message_size)
        except PulsarWireError as exc:  # a corrupt or undecodable stored entry
            raise HttpError(500, f"cannot read the entry {_position(entry.position)}: {exc}") from None
        return Response(200, body, "application/octet-stream", header_list=headers)

    def on_unload(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "unload topics")
        self.service.unload(str(name))
        return Response(204)

    def on_create_subscription(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "subscribe")
        position = _reset_cursor_data(request.json())[0] if request.body else LATEST
        self.service.create_subscription(str(name), p["subscription"], position)
        return Response(204)

    def on_reset_cursor_to_id(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "reset cursors")
        position, excluded = _reset_cursor_data(request.json())
        self.service.reset_cursor(str(name), p["subscription"], position=position, excluded=excluded)
        return Response(204)

    def _subscriptions(self, name: TopicName, sub_name: str) -> list[tuple[Topic, Any]]:
        """The subscription ``sub_name`` on the topic or each of its partitions (NotFound: 404)."""
        return self.service.subscriptions_of(str(name), sub_name)

    def on_delete_subscription(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "unsubscribe")
        found = self._subscriptions(name, p["subscription"])
        force = request.flag("force")
        if not force and any(sub.consumers for _t, sub in found):
            raise HttpError(412, "Subscription has active connected consumers")
        for topic, sub in found:
            self.service.delete_subscription(topic, sub)
        return Response(204)

    def on_skip_all(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "skip messages")
        for topic, sub in self._subscriptions(name, p["subscription"]):
            sub.reset(topic.log.last_position)
            self.service.check_end_of_topic(topic, sub)
        return Response(204)

    def on_reset_cursor(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, CONSUME, "reset cursors")
        timestamp = _path_long(p["timestamp"], "timestamp", "a number of milliseconds")
        self.service.reset_cursor(str(name), p["subscription"], publish_time=timestamp)
        return Response(204)

    def on_terminate(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "terminate topics")
        if self.service.partition_count(str(name)) is not None:
            raise HttpError(405, "Termination of a partitioned topic is not allowed")
        self._loaded(name)
        ledger, entry = self.service.terminate_topic(str(name))
        return Response(200, {"ledgerId": ledger, "entryId": entry, "partitionIndex": name.partition_index})

    def on_trigger_compaction(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "compact topics")
        self._loaded(name)
        try:
            self.service.compact(str(name))
        except CompactionInProgressError as exc:
            raise HttpError(409, str(exc)) from None
        except BrokerError as exc:
            raise HttpError(404 if exc.code == pb.TopicNotFound else 405, str(exc)) from None
        return Response(204)

    def on_compaction_status(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "compact topics")
        self._loaded(name)
        try:
            return Response(200, self.service.compaction_status(str(name)))
        except BrokerError as exc:
            raise HttpError(404 if exc.code == pb.TopicNotFound else 405, str(exc)) from None

    def on_get_topic_deduplication(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "administrate topic policies")
        if request.flag("applied"):
            return Response(200, self.service.deduplication_enabled(str(name)))
        value = self.service.namespaces.policies_of(str(name)).deduplication
        return Response(200 if value is not None else 204, value)

    def on_set_topic_deduplication(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "administrate topic policies")
        self._update_policies(str(name), deduplication=self._body_json(request, bool, "true or false"))
        return Response(204)

    def on_remove_topic_deduplication(self, request: Request, p: dict[str, str]) -> Response:
        name = self._topic(request, p, SUPERUSER, "administrate topic policies")
        self._update_policies(str(name), deduplication=None)
        return Response(204)

    # -- schemas -----------------------------------------------------------------------
    def _schema_topic(self, request: Request, p: dict[str, str], needs: frozenset[Action], what: str) -> str:
        return str(self._topic(request, p, needs, what))

    def on_get_schema(self, request: Request, p: dict[str, str]) -> Response:
        topic = self._schema_topic(request, p, LOOKUP, "get schemas")
        return self._schema_answer(topic, None)

    def on_get_schema_version(self, request: Request, p: dict[str, str]) -> Response:
        topic = self._schema_topic(request, p, LOOKUP, "get schemas")
        version = _path_long(p["version"], "schema version", "a number")
        if version < 0:
            raise HttpError(400, f"schema version {version} is not a version")
        return self._schema_answer(topic, version)

    def _schema_answer(self, topic: str, version: int | None) -> Response:
        found = self.service.schemas.get(topic, version)
        if found is None:
            raise HttpError(404, "Schema not found")
        s = found.schema
        return Response(
            200,
            {
                "version": found.version,
                "type": type_name(s.type),
                "timestamp": 0,
                "data": s.schema_data.decode("utf-8", "replace"),
                "properties": {kv.key: kv.value for kv in s.properties},
            },
        )

    def _payload_schema(self, request: Request, topic: str) -> pb.Schema:
        """Pulsar's PostSchemaPayload (``type``, ``schema``, ``properties``) as a protocol Schema."""
        body = self._body_json(request, dict, "a PostSchemaPayload object")
        type_text, definition = body.get("type"), body.get("schema", "")
        props = body.get("properties") or {}
        if not isinstance(type_text, str) or type_text.upper() not in _SCHEMA_TYPES:
            raise HttpError(422, f"unknown schema type {type_text!r}")
        if not isinstance(definition, str) or not isinstance(props, dict):
            raise HttpError(422, "schema must be a string and properties an object")
        schema = pb.Schema(name=topic, type=_SCHEMA_TYPES[type_text.upper()], schema_data=definition.encode())
        for k, v in props.items():
            schema.properties.add(key=str(k), value=str(v))
        return schema

    def on_post_schema(self, request: Request, p: dict[str, str]) -> Response:
        topic = self._schema_topic(request, p, PRODUCE, "upload schemas")
        schema = self._payload_schema(request, topic)
        try:
            version = self.service.schemas.register(topic, schema, self.service.schema_compatibility(topic))
        except InvalidSchemaError as exc:
            raise HttpError(422, str(exc)) from None
        except IncompatibleSchemaError as exc:
            raise HttpError(409, str(exc)) from None
        return Response(202, {"version": {"version": version if version is not None else -1}})

    def on_delete_schema(self, request: Request, p: dict[str, str]) -> Response:
        topic = self._schema_topic(request, p, SUPERUSER, "delete schemas")
        version = self.service.schemas.delete(topic)
        if version is None:
            raise HttpError(404, "Schema not found")
        return Response(200, {"version": version})

    def on_test_compatibility(self, request: Request, p: dict[str, str]) -> Response:
        topic = self._schema_topic(request, p, LOOKUP, "test schema compatibility")
        schema = self._payload_schema(request, topic)
        strategy = self.service.schema_compatibility(topic)
        try:
            compatible = self.service.schemas.is_compatible(topic, schema, strategy)
        except InvalidSchemaError as exc:
            raise HttpError(422, str(exc)) from None
        return Response(202, {"isCompatibility": compatible, "schemaCompatibilityStrategy": strategy.name})


def _require_json(request: Request) -> None:
    """415 unless a body (or a declared one) is ``application/json``, as JAX-RS refuses an entity
    of another media type (and one without a type, read as application/octet-stream)."""
    declared = request.headers.get("content-type")
    if not request.body and declared is None:
        return
    media = (declared or "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise HttpError(415, f"Unsupported Media Type: {declared or 'none'} (send application/json)")


def _path_long(text: str, name: str, what: str) -> int:
    """A path value Pulsar reads as a Java long (ASCII digits, an optional minus); 400 otherwise."""
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19) or int(digits) > MAX_INT64:
        raise HttpError(400, f"{name} {text[:40]!r} is not {what}")
    return int(text)


def _check_head(head: h11.Request, limit: int) -> None:
    """Refuse a head before its body is read: 431 (too many header lines), 400 (a Content-Length
    past a Java long), 413 (a Content-Length over ``limit``)."""
    if len(head.headers) > MAX_HEADERS:
        raise HttpError(431, "Request Header Fields Too Large")
    for name, value in head.headers:
        if name == b"content-length":  # h11 checked it is digits and agrees with any other
            length = int(value)
            if length > MAX_INT64:
                raise HttpError(400, "bad Content-Length")
            if length > limit:
                raise HttpError(413, f"the body is over {limit} bytes")


def _request_of(head: h11.Request, body: bytes) -> Request:
    """The :class:`Request` of an h11 request head and its body."""
    headers: dict[str, str] = {}
    for name, value in head.headers:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    split = urllib.parse.urlsplit(head.target.decode("latin-1"))
    query = {k: v for k, v in urllib.parse.parse_qsl(split.query, keep_blank_values=True)}
    return Request(head.method.decode("latin-1").upper(), split.path, query, headers, body)


def _retention(body: dict[str, Any]) -> Retention:
    """A RetentionPolicies object; raises HttpError 400 for values past Pulsar's types (minutes:
    int, size: long), 412 for values below -1 or not numbers."""
    minutes, size = body.get("retentionTimeInMinutes", 0), body.get("retentionSizeInMB", 0)
    for value, most in ((minutes, MAX_INT32), (size, MAX_INT64)):
        if isinstance(value, int) and value > most:
            raise HttpError(400, f"retention value {value} is past {most}, Pulsar's largest")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= -1 for v in (minutes, size)):
        raise HttpError(
            412, "Invalid retention policy: retentionTimeInMinutes and retentionSizeInMB are -1 or more"
        )
    return Retention(minutes, size)


def _policies_of_body(body: dict[str, Any]) -> Policies:
    """The settings of a Pulsar Policies object this broker has (deduplicationEnabled,
    schema_compatibility_strategy, retention_policies); the others are ignored. Raises HttpError 400/412."""
    dedup = body.get("deduplicationEnabled")
    if dedup is not None and not isinstance(dedup, bool):
        raise HttpError(400, "deduplicationEnabled must be true or false")
    strategy = body.get("schema_compatibility_strategy")
    compatibility = None
    if strategy is not None and strategy != "UNDEFINED":
        try:
            compatibility = Compatibility.parse(str(strategy))
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
    retention = body.get("retention_policies")
    if retention is not None and not isinstance(retention, dict):
        raise HttpError(400, "retention_policies must be an object")
    return Policies(dedup, compatibility, _retention(retention) if retention is not None else None)


def _retention_json(retention: Retention) -> dict[str, int]:
    return {"retentionTimeInMinutes": retention.minutes, "retentionSizeInMB": retention.size_mb}


def _position(pos: tuple[int, int]) -> str:
    return f"{pos[0]}:{pos[1]}"


def _reset_cursor_data(body: Any) -> tuple[tuple[int, int], bool]:
    """The position and ``excluded`` of Pulsar's ResetCursorData (``ledgerId``, ``entryId``: -1:-1
    the earliest, Long.MAX_VALUE both the latest; ``excluded``, the JSON name of its ``isExcluded``
    field); 400 when it is not one."""
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a ResetCursorData object (ledgerId, entryId)")
    ledger, entry = body.get("ledgerId"), body.get("entryId")
    excluded = body.get("excluded", False)
    for value in (ledger, entry):
        if not isinstance(value, int) or isinstance(value, bool) or not -MAX_INT64 - 1 <= value <= MAX_INT64:
            raise HttpError(400, "ledgerId and entryId must be numbers (Java longs)")
    if not isinstance(excluded, bool):
        raise HttpError(400, "excluded must be true or false")
    return (cast(int, ledger), cast(int, entry)), excluded


def _http_date(ms: int) -> str:
    """A time in ms as Pulsar's DateFormatter writes it (ISO-8601 with offset; UTC here)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000))
    return f"{stamp}.{ms % 1000:03d}Z"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


#: (header, MessageMetadata field, how its value is written) of the optional fields Pulsar's
#: generateResponseWithEntry sends as headers when the field is set.
_MESSAGE_HEADERS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("X-Pulsar-publish-time", "publish_time", lambda v: _http_date(v)),
    ("X-Pulsar-event-time", "event_time", lambda v: _http_date(v)),
    ("X-Pulsar-deliver-at-time", "deliver_at_time", lambda v: _http_date(v)),
    ("X-Pulsar-null-value", "null_value", _bool),
    ("X-Pulsar-producer-name", "producer_name", str),
    ("X-Pulsar-sequence-id", "sequence_id", str),
    ("X-Pulsar-replicated-from", "replicated_from", str),
    ("X-Pulsar-partition-key", "partition_key", str),
    ("X-Pulsar-compression", "compression", lambda v: pb.CompressionType.Name(v)),
    ("X-Pulsar-uncompressed-size", "uncompressed_size", str),
    ("X-Pulsar-encryption-algo", "encryption_algo", str),
    ("X-Pulsar-Base64-encryption-param", "encryption_param", _b64),
    ("X-Pulsar-Base64-schema-version", "schema_version", _b64),
    ("X-Pulsar-partition-key-b64-encoded", "partition_key_b64_encoded", _bool),
    ("X-Pulsar-Base64-ordering-key", "ordering_key", _b64),
    ("X-Pulsar-marker-type", "marker_type", str),
    ("X-Pulsar-txnid-least-bits", "txnid_least_bits", str),
    ("X-Pulsar-txnid-most-bits", "txnid_most_bits", str),
    ("X-Pulsar-highest-sequence-id", "highest_sequence_id", str),
    ("X-Pulsar-uuid", "uuid", str),
    ("X-Pulsar-num-chunks-from-msg", "num_chunks_from_msg", str),
    ("X-Pulsar-total-chunk-msg-size", "total_chunk_msg_size", str),
    ("X-Pulsar-chunk-id", "chunk_id", str),
    ("X-Pulsar-null-partition-key", "null_partition_key", _bool),
)


def message_answer(entry: Entry, max_size: int) -> tuple[list[tuple[str, str]], bytes]:
    """The X-Pulsar-* headers and the body Pulsar answers for a stored entry (peek, examine,
    get-message-by-id; PersistentTopicsBase.generateResponseWithEntry of Pulsar 4): the metadata as
    headers (the properties as one JSON object in ``X-Pulsar-PROPERTY``), the payload decompressed
    (a batch whole, with ``X-Pulsar-num-batch-message``: the admin client splits it). Raises the
    codec's typed errors for an entry that cannot be decoded."""
    data = entry.data
    _body_start, md_start, md_size = entry_layout(data)
    md = decode_metadata(data[md_start : md_start + md_size])
    payload = uncompressed_payload(md, data[md_start + md_size :], max_size)
    h: list[tuple[str, str]] = [("X-Pulsar-Message-ID", _position(entry.position))]
    # Pulsar 4 sends the properties as one JSON object (earlier releases: a header per key)
    properties = {kv.key: kv.value for kv in md.properties}
    h.append(("X-Pulsar-PROPERTY", json.dumps(properties, separators=(",", ":"))))
    if md.HasField("num_messages_in_batch"):
        h.append(("X-Pulsar-num-batch-message", str(md.num_messages_in_batch)))
        h.append(("X-Pulsar-batch-size", str(len(data) - md.ByteSize())))
    if md.HasField("num_chunks_from_msg"):
        h.append(("X-Pulsar-PROPERTY-TOTAL-CHUNKS", str(md.num_chunks_from_msg)))
        h.append(("X-Pulsar-PROPERTY-CHUNK-ID", str(md.chunk_id)))
    h.append(("X-Pulsar-Is-Encrypted", _bool(len(md.encryption_keys) > 0)))
    fields = cast(Any, md)
    h += [(name, write(getattr(md, f))) for name, f, write in _MESSAGE_HEADERS if fields.HasField(f)]
    h += [("X-Pulsar-replicated-to", r) for r in md.replicate_to]
    h += [("X-Pulsar-Base64-encryption-keys", _b64(k.SerializeToString())) for k in md.encryption_keys]
    h.append(("X-Pulsar-txn-uncommitted", "false"))  # no transactions here: nothing is uncommitted
    # header values are latin-1 on the wire: text that is not is sent as its UTF-8 bytes
    return [(k, v.encode("utf-8").decode("latin-1")) for k, v in h], payload


def _empty_stats() -> dict[str, Any]:
    return {
        "msgInCounter": 0,
        "bytesInCounter": 0,
        "msgOutCounter": 0,
        "publishers": [],
        "subscriptions": {},
        "replication": {},
    }


def partitioned_stats(
    service: BrokerService, name: str, n: int, parts: dict[str, Topic | None], per_partition: bool
) -> dict[str, Any]:
    """Pulsar's PartitionedTopicStats: the partitions' TopicStats added up (counters summed,
    publishers listed, subscriptions merged by name with their backlogs summed and consumers
    listed), ``metadata.partitions`` and, with ``per_partition``, each partition's stats."""
    each = {part: topic_stats(service, t) if t is not None else _empty_stats() for part, t in parts.items()}
    total = _empty_stats()
    for stats in each.values():
        for counter in ("msgInCounter", "bytesInCounter", "msgOutCounter"):
            total[counter] += stats[counter]
        total["publishers"] += stats["publishers"]
        for sub_name, sub in stats["subscriptions"].items():
            merged = total["subscriptions"].setdefault(
                sub_name, {**sub, "msgBacklog": 0, "msgOutCounter": 0, "consumers": []}
            )
            merged["msgBacklog"] += sub["msgBacklog"]
            merged["msgOutCounter"] += sub["msgOutCounter"]
            merged["consumers"] += sub["consumers"]
    total["deduplicationStatus"] = "Enabled" if service.deduplication_enabled(name) else "Disabled"
    total["metadata"] = {"partitions": n, "deleted": False}
    total["partitions"] = each if per_partition else {}
    return total


def topic_stats(service: BrokerService, topic: Topic) -> dict[str, Any]:
    """Pulsar's TopicStats for the counters this broker keeps (no rates: it measures none)."""
    subs: dict[str, Any] = {}
    for name, sub in topic.subscriptions.items():
        subs[name] = {
            "type": pb.CommandSubscribe.SubType.Name(cast(Any, sub.sub_type)),
            "msgBacklog": sub.backlog(),
            "msgOutCounter": sub.msg_out,
            "isDurable": sub.durable,
            "consumers": [
                {
                    "consumerName": c.name,
                    "availablePermits": max(c.permits, 0),
                    "unackedMessages": len(c.pending),
                    "address": getattr(c.sender, "peer", ""),
                }
                for c in sub.consumers
            ],
        }
    return {
        "msgInCounter": topic.msg_in,
        "bytesInCounter": topic.bytes_in,
        "msgOutCounter": sum(s.msg_out for s in topic.subscriptions.values()),
        "publishers": [
            {
                "producerName": ref.name,
                "producerId": ref.producer_id,
                "address": getattr(ref.owner, "peer", ""),
            }
            for ref in topic.producers.values()
        ],
        "subscriptions": subs,
        "replication": {},
        "deduplicationStatus": "Enabled" if service.deduplication_enabled(topic.name) else "Disabled",
        "topicEpoch": None,
    }


def internal_stats(topic: Topic | None) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats, the fields this broker's log has (None: a partition
    that holds nothing yet)."""
    if topic is None:
        return {
            "entriesAddedCounter": 0,
            "numberOfEntries": 0,
            "currentLedgerEntries": 0,
            "lastConfirmedEntry": "-1:-1",
            "state": "LedgerOpened",
            "ledgers": [],
            "cursors": {},
        }
    log_ = topic.log
    return {
        "entriesAddedCounter": len(log_) + log_.trimmed,
        "numberOfEntries": len(log_),
        "currentLedgerEntries": log_.next_entry_id,
        "lastConfirmedEntry": _position(log_.last_position),
        "state": "Terminated" if topic.terminated else "LedgerOpened",
        "ledgers": [],
        "cursors": {
            name: {
                "markDeletePosition": _position(sub.mark_delete),
                "readPosition": _position(sub.read_pos),
                "messagesConsumedCounter": sub.msg_out,
                "state": "Open",
                "active": bool(sub.consumers),
            }
            for name, sub in topic.subscriptions.items()
        },
    }


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


#: (metric, type, help, value of a topic) -- Pulsar's topic-level metric names.
_TOPIC_METRICS: tuple[tuple[str, str, str, Callable[[Topic], int]], ...] = (
    ("pulsar_subscriptions_count", "gauge", "subscriptions of the topic", lambda t: len(t.subscriptions)),
    ("pulsar_producers_count", "gauge", "connected producers", lambda t: len(t.producers)),
    (
        "pulsar_consumers_count",
        "gauge",
        "connected consumers",
        lambda t: sum(len(s.consumers) for s in t.subscriptions.values()),
    ),
    ("pulsar_in_messages_total", "counter", "messages published", lambda t: t.msg_in),
    ("pulsar_in_bytes_total", "counter", "bytes published", lambda t: t.bytes_in),
    (
        "pulsar_out_messages_total",
        "counter",
        "messages dispatched",
        lambda t: sum(s.msg_out for s in t.subscriptions.values()),
    ),
    (
        "pulsar_msg_backlog",
        "gauge",
        "unacknowledged messages of all subscriptions",
        lambda t: sum(s.backlog() for s in t.subscriptions.values()),
    ),
    ("pulsar_storage_entries", "gauge", "entries stored", lambda t: len(t.log)),
)


def prometheus_text(broker: BrokerService) -> str:
    """The broker's counters and each loaded topic's in Prometheus' text format (as Pulsar names them)."""
    cluster = _label(broker.name)
    lines = []
    broker_metrics = (
        ("pulsar_active_connections", "gauge", len(broker.connections)),
        ("pulsar_connection_created_total_count", "counter", broker.connections_accepted),
        ("pulsar_topics_count", "gauge", len(broker.topics)),
        ("pulsarwire_auth_failures_total", "counter", broker.auth_failures),
        ("pulsarwire_write_failures_total", "counter", broker.write_failures),
    )
    for metric, kind, value in broker_metrics:
        lines += [f"# TYPE {metric} {kind}", f'{metric}{{cluster="{cluster}"}} {value}']
    topics = sorted(broker.topics.items())
    for metric, kind, help_, fn in _TOPIC_METRICS:
        lines += [f"# HELP {metric} {help_}", f"# TYPE {metric} {kind}"]
        for name, topic in topics:
            tn = TopicName.parse(name)
            labels = f'cluster="{cluster}",namespace="{_label(tn.namespace_name)}",topic="{_label(name)}"'
            lines.append(f"{metric}{{{labels}}} {fn(topic)}")
    return "\n".join(lines) + "\n"
