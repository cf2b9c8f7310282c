"""Connection pool: one connection per broker address, shared by every producer and consumer.

``await pool.get(url)`` returns a ready connection to ``url`` (``pulsar://host:port``
or ``pulsar+ssl://host:port``), opening it on first use and again after it
closed. Concurrent callers share one attempt. TLS uses the configured CA file
and checks the broker's host name unless ``tls_validate_hostname`` is False.
A failed open is a ConnectError; it is not retriable (``retriable=False``) when
trying again cannot help: a certificate that does not verify, a host name that
does not exist (NXDOMAIN), a port that answers CONNECT with something that is
not Pulsar (:class:`~pulsarwire.errors.NotPulsarError`: an HTTP server, say; told from the
first bytes by :func:`pulsarwire.io.connection.other_protocol`), a ``pulsar+ssl://`` URL
whose server does not answer TLS (:class:`~pulsarwire.errors.NotTlsError`: it closes during
the handshake or sends bytes that are not TLS: a plaintext port).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pulsarwire.errors import (
    ConnectError,
    InvalidBrokerUrlError,
    NotPulsarError,
    NotTlsError,
    PulsarWireError,
    RemoteProtocolError,
    TlsDowngradeError,
)
from pulsarwire.protocol.connection import ClientProtocol

from .connection import Connection, credentials

#: getaddrinfo errors that retrying cannot heal (the name does not exist)
_NO_SUCH_NAME = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, n)}


@dataclass(frozen=True, slots=True)
class TlsOptions:
    trust_certs_file: str | None = None
    validate_hostname: bool = True
    allow_insecure: bool = False
    cert_file: str | None = None
    key_file: str | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.trust_certs_file)
        if self.allow_insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif not self.validate_hostname:
            ctx.check_hostname = False
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


def parse_broker_url(url: str) -> tuple[bool, str, int]:
    """(tls, host, port) of ``pulsar://host:port`` / ``pulsar+ssl://host:port`` (port 6650 / 6651
    when absent); raises InvalidBrokerUrlError for a bad scheme, a missing host, a bad port or a path."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # urlsplit's own complaints: bad port, bad IPv6 brackets
        raise InvalidBrokerUrlError(f"not a broker URL: {url!r} ({exc})") from None
    if parts.scheme not in ("pulsar", "pulsar+ssl"):
        raise InvalidBrokerUrlError(f"not a pulsar:// or pulsar+ssl:// URL: {url!r}")
    tls = parts.scheme == "pulsar+ssl"
    if not parts.hostname:
        raise InvalidBrokerUrlError(f"no host in {url!r}")
    if parts.path.strip("/") or parts.query or parts.fragment or "," in parts.netloc:
        raise InvalidBrokerUrlError(f"a broker URL is pulsar[+ssl]://host:port, got {url!r}")
    return tls, parts.hostname, port or (6651 if tls else 6650)


def choose_broker_url(what: str, url: str | None, url_tls: str | None, *, use_tls: bool) -> str:
    """The broker URL a lookup answer (``url``, ``url_tls``) sends a client to: the one rule of both
    lookup paths (binary LOOKUP and HTTP lookup). ``what`` names the answer in messages
    ("lookup of persistent://...").

    A client on TLS (``pulsar+ssl://`` or ``https://`` service URL) uses ``url_tls`` only, as the
    Java client does, and it must be ``pulsar+ssl://``: anything else would mean talking in clear
    and raises TlsDowngradeError before any connection. Raises InvalidBrokerUrlError for a URL
    that is not ``pulsar[+ssl]://host:port``.
    """
    if use_tls:
        if not url_tls:
            raise TlsDowngradeError(
                f"{what} answered no TLS URL (only {url or 'nothing'!r}) to a TLS client; "
                "refusing to connect in clear"
            )
        chosen = url_tls
    else:
        chosen = url or ""
    try:
        tls, _host, _port = parse_broker_url(chosen)
    except InvalidBrokerUrlError as exc:
        raise InvalidBrokerUrlError(f"{what} answered a bad broker URL: {exc}") from None
    if use_tls and not tls:
        raise TlsDowngradeError(
            f"{what} answered {chosen!r} as its TLS URL to a TLS client; refusing to connect in clear"
        )
    return chosen


#: OpenSSL's reasons for a handshake answered with bytes that are not TLS
_NOT_TLS_REASONS = {"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"}


def not_tls(exc: BaseException) -> str | None:
    """Why a TLS handshake that failed with ``exc`` shows the server does not speak TLS (None
    when it does not show that): it closed the connection instead of answering the client's
    hello (a plaintext Pulsar broker drops a frame it cannot read), or answered with bytes that
    are not a TLS record."""
    hint = "is it a plaintext port? pulsar+ssl:// needs the broker's TLS port (6651 by default)"
    if isinstance(exc, ConnectionResetError | ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return f"the server did not answer TLS (it closed the connection during the handshake: {hint})"
    if isinstance(exc, ssl.SSLError) and exc.reason in _NOT_TLS_REASONS:
        return f"the server did not answer TLS (it sent bytes that are not TLS: {hint})"
    return None


class ConnectionPool:
    def __init__(
        self,
        *,
        client_version: str,
        auth: Any = None,
        tls: TlsOptions | None = None,
        keepalive_interval: float = 30.0,
        connect_timeout: float = 10.0,
        credentials_timeout: float | None = None,
    ) -> None:
        self.client_version = client_version
        self.auth = auth
        self.tls = tls or TlsOptions()
        self.keepalive_interval = keepalive_interval
        self.connect_timeout = connect_timeout
        #: bound on fetching the credential a connection opens with (the client's operation timeout)
        self.credentials_timeout = credentials_timeout
        self._connections: dict[str, Connection] = {}
        self._pending: dict[str, asyncio.Future[Connection]] = {}
        self._ssl: ssl.SSLContext | None = None

    async def get(self, url: str) -> Connection:
        conn = self._connections.get(url)
        if conn is not None and not conn.is_closed:
            return conn
        pending = self._pending.get(url)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._pending[url] = fut
        try:
            conn = await self._open(url)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._pending.pop(url, None)
        self._connections[url] = conn
        fut.set_result(conn)
        return conn

    async def _open(self, url: str) -> Connection:
        tls, host, port = parse_broker_url(url)
        method = self.auth.method if self.auth is not None else None
        data = (
            await credentials(self.auth, timeout=self.credentials_timeout) if self.auth is not None else None
        )
        proto = ClientProtocol(
            client_version=self.client_version,
            auth_method=method,
            auth_data=data,
            keepalive_interval=self.keepalive_interval,
        )
        loop = asyncio.get_running_loop()
        ssl_ctx = None
        if tls:
            if self._ssl is None:
                self._ssl = self.tls.context()
            ssl_ctx = self._ssl
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(url, proto, self.auth),
                    host,
                    port,
                    ssl=ssl_ctx,
                    server_hostname=host if tls else None,
                ),
                self.connect_timeout,
            )
            await asyncio.wait_for(asyncio.shield(conn.ready), self.connect_timeout)
        except RemoteProtocolError as exc:  # the answer to CONNECT is not Pulsar: another service
            raise NotPulsarError(url, f"the port does not speak the Pulsar protocol ({exc})") from exc
        except PulsarWireError:
            raise
        except socket.gaierror as exc:  # a name that does not exist stays so; a DNS hiccup may pass
            raise ConnectError(
                f"cannot connect to {url}: {exc}", retriable=exc.errno not in _NO_SUCH_NAME
            ) from exc
        except ssl.SSLCertVerificationError as exc:
            raise ConnectError(f"cannot connect to {url}: {exc}", retriable=False) from exc
        except (ConnectionResetError, ssl.SSLError) as exc:
            if tls and (reason := not_tls(exc)) is not None:
                raise NotTlsError(url, reason) from exc
            raise ConnectError(f"cannot connect to {url}: {exc or type(exc).__name__}") from exc
        except (OSError, TimeoutError) as exc:
            raise ConnectError(f"cannot connect to {url}: {exc}") from exc
        return conn

    async def close(self) -> None:
        conns = list(self._connections.values())
        self._connections.clear()
        for c in conns:
            c.close()
        for c in conns:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(c.closed_future), 5)
