"""The client's HTTP/1.1 requests (lookup over the web service, OAuth2 token exchanges), framed by h11.

One request per connection (``Connection: close``); h11 does the framing both ways, so an answer
may come with ``Content-Length``, chunked or delimited by the server closing the connection, as
real web servers send them (Jetty chunks any answer larger than its buffer). The same limits
hold for every answer: a head of at most :data:`MAX_HEAD_BYTES` and a body of at most the
caller's ``max_body`` bytes.

Redirects (301, 302, 303, 307, 308) are followed by :func:`request_async` /
:func:`request_sync` under the rules of :func:`redirect_target`, the ones libcurl, requests and
httpx keep:

* a redirect to a scheme other than ``http`` / ``https``, or from ``https`` to ``http``, is not
  followed (:class:`RedirectRefused`): nothing that was meant for TLS goes out in clear;
* credentials (``credentials``: the ``Authorization`` header) go only to the origin (scheme,
  host, port) they were given for; after a redirect to another origin they are dropped for the
  rest of the request;
* a request whose body is itself a credential (an OAuth2 form with the client secret) follows
  only 307 / 308 and only within its origin; anything else is refused.

The whole request -- every hop's connect, TLS handshake, send and the entire answer -- has one
``deadline`` (``time.monotonic()``): :class:`TimeoutError` when it passes, however slowly the
server trickles bytes. Transport failures are :class:`OSError`; a malformed or oversized answer
is :class:`BadAnswer`. Callers turn these into their own typed errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import h11

#: largest status line plus headers accepted
MAX_HEAD_BYTES = 64 * 1024
#: most redirects followed for one request
MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_READ_SIZE = 64 * 1024


class HttpError(Exception):
    """Base of what this module raises besides OSError / TimeoutError."""


class BadAnswer(HttpError):
    """The answer is not HTTP/1.1 h11 accepts, or breaks a limit (head or body size, redirects)."""


class RedirectRefused(HttpError):
    """A redirect that is not followed (scheme downgrade, credentials to another origin)."""


@dataclass(frozen=True, slots=True)
class Answer:
    url: str  # the URL that answered (after redirects)
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes
    #: every header as sent (names in the sender's case, repeats kept)
    raw_headers: tuple[tuple[str, str], ...] = ()


def origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def redirect_target(current: str, location: str) -> str:
    """The absolute URL a redirect from ``current`` to ``location`` leads to.

    Raises RedirectRefused for a scheme other than http(s), a downgrade from https to http, or
    a location that is not a URL.
    """
    try:
        target = urljoin(current, location.strip())
        parts = urlsplit(target)
        _ = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError:
        raise RedirectRefused(f"{current} redirected to a malformed location {location[:200]!r}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise RedirectRefused(f"{current} redirected to {target[:200]!r}: only http(s) URLs are followed")
    if origin(current)[0] == "https" and scheme != "https":
        raise RedirectRefused(
            f"{current} redirected to {target[:200]!r}: an https request is never followed to cleartext http"
        )
    return target


# -- one exchange, sans-IO -----------------------------------------------------------------------------
def _request_bytes(
    conn: h11.Connection, method: str, url: str, headers: dict[str, str], body: bytes | None
) -> bytes:
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    fields = [("Host", parts.netloc), ("Connection", "close"), ("User-Agent", "pulsarwire")]
    fields += list(headers.items())
    if body is not None:
        fields.append(("Content-Length", str(len(body))))
    try:
        out = conn.send(h11.Request(method=method, target=target, headers=fields)) or b""
        if body:
            out += conn.send(h11.Data(data=body)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
    except h11.LocalProtocolError as exc:
        raise HttpError(f"cannot send {method} {url}: {exc}") from None
    return out


class _Parser:
    """Feeds received bytes to h11 until the whole answer is in."""

    def __init__(self, url: str, max_body: int) -> None:
        self.url = url
        self.max_body = max_body
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.raw_headers: tuple[tuple[str, str], ...] = ()
        self.body = bytearray()

    def start(self, method: str, headers: dict[str, str], body: bytes | None) -> bytes:
        return _request_bytes(self.conn, method, self.url, headers, body)

    def feed(self, data: bytes) -> Answer | None:
        """Take ``data`` (b"": the server closed); the answer once complete, else None."""
        try:
            self.conn.receive_data(data)
            while True:
                event = self.conn.next_event()
                if event is h11.NEED_DATA:
                    if not data:
                        raise BadAnswer(f"{self.url}: the server closed the connection mid-answer")
                    return None
                if isinstance(event, h11.Response):
                    self.status = event.status_code
                    self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers}
                    self.raw_headers = tuple(
                        (k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers.raw_items()
                    )
                elif isinstance(event, h11.Data):
                    self.body += event.data
                    if len(self.body) > self.max_body:
                        raise BadAnswer(f"{self.url}: answer larger than {self.max_body} bytes")
                elif isinstance(event, h11.EndOfMessage):
                    return Answer(self.url, self.status, self.headers, bytes(self.body), self.raw_headers)
                elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    raise BadAnswer(f"{self.url}: the server closed the connection mid-answer")
                # InformationalResponse (1xx): wait for the final answer
        except h11.RemoteProtocolError as exc:
            raise BadAnswer(f"{self.url}: malformed HTTP answer ({exc})") from None


def _endpoint(url: str) -> tuple[bool, str, int]:
    scheme, host, port = origin(url)
    return scheme == "https", urlsplit(url).hostname or host, port


def _remaining(deadline: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"{url}: no complete answer in time")
    return left


# -- drivers ---------------------------------------------------------------------------------------------
def _exchange_sync(
    url: str,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    deadline: float,
    ssl_context: ssl.SSLContext | None,
    max_body: int,
) -> Answer:
    tls, host, port = _endpoint(url)
    parser = _Parser(url, max_body)
    sock = socket.create_connection((host, port), timeout=_remaining(deadline, url))
    try:
        if tls:
            sock.settimeout(_remaining(deadline, url))
            sock = (ssl_context or ssl.create_default_context()).wrap_socket(sock, server_hostname=host)
        sock.settimeout(_remaining(deadline, url))
        sock.sendall(parser.start(method, headers, body))
        while True:
            sock.settimeout(_remaining(deadline, url))
            answer = parser.feed(sock.recv(_READ_SIZE))
            if answer is not None:
                return answer
    except TimeoutError:
        raise TimeoutError(f"{url}: no complete answer in time") from None
    finally:
        sock.close()


async def _exchange_async(
    url: str,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    deadline: float,
    ssl_context: ssl.SSLContext | None,
    max_body: int,
) -> Answer:
    tls, host, port = _endpoint(url)
    parser = _Parser(url, max_body)
    context = (ssl_context or ssl.create_default_context()) if tls else None
    try:
        async with asyncio.timeout(_remaining(deadline, url)):
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
            try:
                writer.write(parser.start(method, headers, body))
                await writer.drain()
                while True:
                    answer = parser.feed(await reader.read(_READ_SIZE))
                    if answer is not None:
                        return answer
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), 1)
    except TimeoutError:
        raise TimeoutError(f"{url}: no complete answer in time") from None


def _follow(
    answer: Answer, method: str, credentials: dict[str, str], body_is_credential: bool, first: str
) -> tuple[str, dict[str, str]] | None:
    """Where a redirect ``answer`` leads and the credentials that may go there; None: not a redirect."""
    if answer.status not in _REDIRECTS or "location" not in answer.headers:
        return None
    target = redirect_target(answer.url, answer.headers["location"])
    kept = credentials if origin(target) == origin(first) else {}
    if body_is_credential:
        if answer.status not in (307, 308):
            raise RedirectRefused(
                f"{method} {answer.url} answered {answer.status} to {target[:200]!r}: "
                "a request carrying credentials follows only 307/308"
            )
        if origin(target) != origin(first):
            raise RedirectRefused(
                f"{method} {answer.url} redirected to {target[:200]!r}: "
                "its credentials are not sent to another origin"
            )
    return target, kept


def request_sync(
    method: str,
    url: str,
    *,
    deadline: float,
    headers: dict[str, str] | None = None,
    credentials: dict[str, str] | None = None,
    body: bytes | None = None,
    body_is_credential: bool = False,
    ssl_context: ssl.SSLContext | None = None,
    max_body: int,
    check_url: Callable[[str], None] | None = None,
) -> Answer:
    """``method url`` with redirects followed (module docstring), blocking until ``deadline``.

    ``check_url`` is called with every redirect target before it is contacted (it raises to refuse).
    Raises OSError, TimeoutError, BadAnswer, RedirectRefused.
    """
    creds = dict(credentials or {})
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        answer = _exchange_sync(
            current, method, {**(headers or {}), **creds}, body, deadline, ssl_context, max_body
        )
        hop = _follow(answer, method, creds, body_is_credential, url)
        if hop is None:
            return answer
        current, creds = hop
        if check_url is not None:
            check_url(current)
    raise BadAnswer(f"{method} {url}: more than {MAX_REDIRECTS} redirects")


async def request_async(
    method: str,
    url: str,
    *,
    deadline: float,
    headers: dict[str, str] | None = None,
    credentials: dict[str, str] | None = None,
    body: bytes | None = None,
    ssl_context: ssl.SSLContext | None = None,
    max_body: int,
) -> Answer:
    """:func:`request_sync` on the running event loop (no body credentials: lookups send none)."""
    creds = dict(credentials or {})
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        answer = await _exchange_async(
            current, method, {**(headers or {}), **creds}, body, deadline, ssl_context, max_body
        )
        hop = _follow(answer, method, creds, False, url)
        if hop is None:
            return answer
        current, creds = hop
    raise BadAnswer(f"{method} {url}: more than {MAX_REDIRECTS} redirects")
