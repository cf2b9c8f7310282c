"""OAuth2 client-credentials authentication: :class:`AuthenticationOauth2`.

The provider sends method ``"token"`` with an access token it obtains from an
OAuth2 issuer, as the official clients' ``AuthenticationOauth2`` does:

1. discovery -- ``GET {issuer_url}/.well-known/openid-configuration`` gives the
   ``token_endpoint`` (fetched once, then kept);
2. the client-credentials grant -- ``POST`` to the token endpoint with
   ``grant_type=client_credentials``, ``client_id``, ``client_secret`` and the
   optional ``audience`` and ``scope`` (form-encoded); the answer's
   ``access_token`` and ``expires_in`` are cached.

``private_key`` is the credentials file as the official clients take it: a
path, a ``file:`` URL or a ``data:application/json;base64,...`` URL of a JSON
object with ``client_id`` and ``client_secret``; it is read on every fetch, so a
rotated file is picked up.

Refresh: a token counts as expired :data:`EXPIRY_SKEW` before its ``expires_in``
runs out (``exp`` claims are whole seconds) and is due :data:`REFRESH_FRACTION`
of its lifetime before that. When a connection has asked for it on an event
loop, the next token is fetched in the background on that loop once the cached
one is due, so the broker's AUTH_CHALLENGE finds a fresh token; a failing issuer
is retried every :data:`BACKGROUND_RETRY` seconds while the cached token still
holds (it keeps being used), and the first request after it expired fails with
the typed error. The background refresh goes on only while connections keep
asking (each challenge does), so a closed client stops it after one more fetch.
An AUTH_CHALLENGE asks for a new token at once (``refresh=True``) unless one was
fetched in the last :data:`MIN_REFRESH_INTERVAL` seconds (several connections
challenged together share one fetch).

HTTP goes through :mod:`pulsarwire.io.http` (h11 framing, TLS verification on). One
exchange -- connect, TLS handshake, send and the entire answer -- has one deadline,
``http_timeout``, however slowly the issuer trickles bytes; a caller's ``timeout`` (the
client passes its operation timeout) bounds the whole fetch with its retries. The event
loop never waits on it: the connection calls :meth:`auth_data_async`, which answers from
the cache or runs the fetch in a worker thread (``asyncio.to_thread``); :meth:`auth_data`
is the blocking form.

The client secret never goes out in cleartext (:class:`~pulsarwire.errors.InsecureIssuerError`,
nothing sent): an ``http://`` issuer is refused unless it is loopback (``localhost``,
127.0.0.0/8, ``::1``) or ``allow_insecure_issuer=True``; with an ``https://`` issuer the
discovery document's ``token_endpoint`` and every redirect must be ``https://``; the token
request follows only 307/308 within its origin (the form holds the secret). ``expires_in``
must be a finite positive number.

Failures are typed (:mod:`pulsarwire.errors`), one line each, naming the issuer
or the file and never the client secret: :class:`~pulsarwire.errors.IssuerUnreachableError`
(connection refused, timeout, HTTP 5xx/429: retried :data:`DEFAULT_RETRIES`
times with a growing pause, within the caller's timeout), :class:`~pulsarwire.errors.BadCredentialsError`
(HTTP 401 or ``invalid_client``: not retried), :class:`~pulsarwire.errors.CredentialsFileError`,
:class:`~pulsarwire.errors.InsecureIssuerError`, and :class:`~pulsarwire.errors.OAuth2Error` for any
other refusal or a malformed answer.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import json
import logging
import math
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pulsarwire.errors import (
    BadCredentialsError,
    CredentialsFileError,
    InsecureIssuerError,
    IssuerUnreachableError,
    OAuth2Error,
)
from pulsarwire.io import http

log = logging.getLogger("pulsarwire.auth.oauth2")

#: a token is refreshed once less than this fraction of its lifetime is left
REFRESH_FRACTION = 0.1
#: a token counts as expired this long before ``expires_in`` says (exp claims are whole seconds)
EXPIRY_SKEW = 1.0
#: an AUTH_CHALLENGE does not fetch again when a token was fetched this recently (seconds)
MIN_REFRESH_INTERVAL = 1.0
#: seconds between background refresh attempts after one failed (while the token is valid)
BACKGROUND_RETRY = 1.0
#: attempts after the first for a failure that can heal (unreachable, 5xx, 429)
DEFAULT_RETRIES = 3
#: pause before the first retry, doubled for each further one (seconds)
DEFAULT_RETRY_DELAY = 0.2
#: seconds for one whole HTTP exchange with the issuer (connect, send, the entire answer)
DEFAULT_HTTP_TIMEOUT = 10.0
DISCOVERY_PATH = "/.well-known/openid-configuration"
MAX_ANSWER_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class _Credentials:
    client_id: str
    client_secret: str

    def __repr__(self) -> str:
        return f"_Credentials(client_id={self.client_id!r}, client_secret=<hidden>)"


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    fetched_at: float  # time.monotonic()
    expires_at: float | None  # time.monotonic(); None: the issuer gave no expires_in
    refresh_at: float | None


class _Retriable(Exception):
    """One attempt failed in a way that can heal; the message names the issuer."""


def _describe(spec: str) -> str:
    return "the data: URL credentials" if spec.startswith("data:") else f"credentials file {spec!r}"


def _read_credentials(spec: str, issuer: str) -> _Credentials:
    what = _describe(spec)
    if spec.startswith("data:"):
        header, sep, payload = spec[len("data:") :].partition(",")
        if not sep:
            raise CredentialsFileError(f"{what}: no ',' after the media type", issuer=issuer)
        try:
            raw = base64.b64decode(payload, validate=True) if header.endswith(";base64") else payload.encode()
        except (binascii.Error, ValueError):
            raise CredentialsFileError(f"{what}: not valid base64", issuer=issuer) from None
    else:
        if spec.startswith("file:"):
            parts = urllib.parse.urlsplit(spec)
            if parts.netloc not in ("", "localhost"):
                raise CredentialsFileError(f"{what}: must name a local file", issuer=issuer)
            path = Path(urllib.parse.unquote(parts.path))
        else:
            path = Path(spec)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise CredentialsFileError(f"cannot read {what}: {reason}", issuer=issuer) from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        # from None: the decoder's message quotes the document, which holds the secret
        raise CredentialsFileError(f"{what} is not JSON", issuer=issuer) from None
    if not isinstance(doc, dict):
        raise CredentialsFileError(f"{what} is not a JSON object", issuer=issuer)
    missing = [k for k in ("client_id", "client_secret") if not isinstance(doc.get(k), str) or not doc[k]]
    if missing:
        raise CredentialsFileError(f"{what} has no {' or '.join(missing)}", issuer=issuer)
    return _Credentials(doc["client_id"], doc["client_secret"])


class AuthenticationOauth2:
    """OAuth2 client-credentials authentication (method ``"token"``).

    Takes the official client's JSON parameter string
    (``AuthenticationOauth2('{"issuer_url": ..., "private_key": ...}')``) or the
    same fields as keywords: ``issuer_url`` and ``private_key`` (required),
    ``audience`` and ``scope``. ``retries``, ``retry_delay``, ``http_timeout``
    and ``ssl_context`` (TLS verification towards the issuer; default: the
    system's trust store) are pulsarwire's own.

    Raises ValueError for a malformed parameter string or a missing required
    field; fetching raises the OAuth2Error family (see the module docstring).
    """

    method: ClassVar[str] = "token"

    def __init__(
        self,
        auth_params_string: str | None = None,
        *,
        issuer_url: str | None = None,
        private_key: str | Path | None = None,
        audience: str | None = None,
        scope: str | None = None,
        retries: int = DEFAULT_RETRIES,
        retry_delay: float = DEFAULT_RETRY_DELAY,
        http_timeout: float = DEFAULT_HTTP_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
        allow_insecure_issuer: bool = False,
    ) -> None:
        if auth_params_string is not None:
            params = parse_params(auth_params_string)
            issuer_url = params.get("issuer_url", issuer_url)
            private_key = params.get("private_key", private_key)
            audience = params.get("audience", audience)
            scope = params.get("scope", scope)
        if not issuer_url:
            raise ValueError("OAuth2 authentication needs issuer_url")
        if not private_key:
            raise ValueError("OAuth2 authentication needs private_key (the credentials file)")
        if urllib.parse.urlsplit(issuer_url).scheme not in ("http", "https"):
            raise ValueError(f"issuer_url must be an http(s) URL, got {issuer_url!r}")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.issuer_url = issuer_url.rstrip("/")
        self.allow_insecure_issuer = allow_insecure_issuer
        self._check_cleartext(self.issuer_url, "issuer_url")
        self.private_key = str(private_key)
        self.audience = audience or None
        self.scope = scope or None
        self.retries = retries
        self.retry_delay = retry_delay
        self.http_timeout = http_timeout
        self._ssl = ssl_context
        self._lock = threading.Lock()
        self._token: _Token | None = None
        self._token_endpoint: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._timer_for: _Token | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._used = False
        #: token requests sent to the issuer (successful or not): for metrics and tests
        self.fetches = 0

    # -- the Authentication protocol ------------------------------------------------
    def auth_data(self, *, refresh: bool = False, timeout: float | None = None) -> bytes:
        """The current access token, fetched when none is cached, it is about to
        expire, or ``refresh`` (an AUTH_CHALLENGE) asks for a new one. Blocks on HTTP,
        at most ``timeout`` seconds when given (retries included).

        Raises the OAuth2Error family.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            raise IssuerUnreachableError(
                f"issuer {self.issuer_url}: no token within {timeout:g} s (another fetch is still waiting)",
                issuer=self.issuer_url,
            )
        try:
            token = self._token
            now = time.monotonic()
            if token is not None and not self._wants_fetch(token, now, refresh):
                return token.value.encode()
            try:
                token = self._fetch(deadline)
            except OAuth2Error as exc:
                cached = self._token
                if isinstance(exc, IssuerUnreachableError) and cached is not None and _valid(cached, now):
                    log.warning("%s; using the cached token until it expires", exc)
                    return cached.value.encode()
                raise
            self._token = token
            return token.value.encode()
        finally:
            self._lock.release()

    async def auth_data_async(self, *, refresh: bool = False, timeout: float | None = None) -> bytes:
        """:meth:`auth_data` without blocking the event loop: from the cache, or in a thread,
        waiting at most ``timeout`` seconds when given.

        Also schedules the background refresh of the cached token on the running loop.
        """
        self._used = True
        return await self._get(refresh, timeout)

    async def _get(self, refresh: bool, timeout: float | None = None) -> bytes:
        token = self._token
        if token is not None and not self._wants_fetch(token, time.monotonic(), refresh):
            data = token.value.encode()
        else:
            data = await asyncio.to_thread(self.auth_data, refresh=refresh, timeout=timeout)
        self._schedule_refresh()
        return data

    # -- background refresh -------------------------------------------------------------
    def _schedule_refresh(self) -> None:
        """Fetch the next token on the running loop when the cached one is due, so a challenge
        finds a fresh token and a failing issuer is retried while the cached token still holds.
        A failed refresh is tried again every :data:`BACKGROUND_RETRY` seconds until the token
        expires; refreshing stops when no connection asked for a credential since the last one."""
        token = self._token
        now = time.monotonic()
        if token is None or token.refresh_at is None or not _valid(token, now):
            return
        loop = asyncio.get_running_loop()
        if self._timer is not None and self._timer_loop is loop:
            if self._timer_for is token:
                return
            self._timer.cancel()
        delay = token.refresh_at - now
        if delay <= 0:  # due already: the last refresh failed
            delay = BACKGROUND_RETRY
        self._timer = loop.call_later(delay, self._background_refresh, loop)
        self._timer_loop, self._timer_for = loop, token

    def _background_refresh(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if not self._used:
            return  # nobody asked since the last refresh (the client is gone): stop here
        self._used = False
        task = loop.create_task(self._refresh_quietly())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refresh_quietly(self) -> None:
        before = self._token
        try:
            await self._get(False)
        except OAuth2Error as exc:  # the token expired meanwhile: the next request fails typed
            log.warning("background token refresh failed: %s", exc)
            return
        if self._token is before:  # the issuer failed, the cached token still holds: try again
            self._used = True

    def token_expires_in(self) -> float | None:
        """Seconds the cached token stays valid (None when none is cached or it has no expiry)."""
        token = self._token
        if token is None or token.expires_at is None:
            return None
        return token.expires_at - time.monotonic()

    @staticmethod
    def _wants_fetch(token: _Token, now: float, refresh: bool) -> bool:
        if refresh:
            return now - token.fetched_at >= MIN_REFRESH_INTERVAL
        return token.refresh_at is not None and now >= token.refresh_at

    # -- HTTP -------------------------------------------------------------------------
    def _check_cleartext(self, url: str, what: str) -> None:
        """Refuse ``url`` as a place to send the client secret when it is cleartext http and not
        allowed: with an https issuer never; with an http issuer only loopback or by opt-in."""
        if urllib.parse.urlsplit(url).scheme.lower() != "http":
            return
        if urllib.parse.urlsplit(self.issuer_url).scheme.lower() == "https":
            raise InsecureIssuerError(
                f"issuer {self.issuer_url}: {what} {url[:200]!r} is cleartext http; "
                "the client secret goes to an https issuer only over https",
                issuer=self.issuer_url,
            )
        if not (self.allow_insecure_issuer or _is_loopback(url)):
            raise InsecureIssuerError(
                f"issuer {self.issuer_url}: {what} {url[:200]!r} would send the client secret in cleartext; "
                "use an https:// issuer (or allow_insecure_issuer=True on a trusted network)",
                issuer=self.issuer_url,
            )

    def _fetch(self, deadline: float | None = None) -> _Token:
        creds = _read_credentials(self.private_key, self.issuer_url)
        endpoint = self._discover(deadline)
        form = {
            "grant_type": "client_credentials",
            "client_id": creds.client_id,
            "client_secret": creds.client_secret,
        }
        if self.audience:
            form["audience"] = self.audience
        if self.scope:
            form["scope"] = self.scope
        body = urllib.parse.urlencode(form).encode()
        started = time.monotonic()
        self.fetches += 1
        answer = self._with_retries(
            "token request", deadline, lambda until: self._exchange(endpoint, body, until)
        )
        value = answer.get("access_token")
        if not isinstance(value, str) or not value:
            raise OAuth2Error(
                f"issuer {self.issuer_url}: the token answer has no access_token", issuer=self.issuer_url
            )
        expires_in = answer.get("expires_in")
        if expires_in is None:
            return _Token(value, started, None, None)
        lifetime = _positive_seconds(expires_in)
        if lifetime is None:
            raise OAuth2Error(
                f"issuer {self.issuer_url}: expires_in is not a finite positive number ({expires_in!r:.40})",
                issuer=self.issuer_url,
            )
        # The token's exp claim is whole seconds: count it as ending EXPIRY_SKEW early.
        expires_at = started + max(lifetime - EXPIRY_SKEW, lifetime / 2)
        refresh_at = expires_at - REFRESH_FRACTION * lifetime
        return _Token(value, started, expires_at, refresh_at)

    def _discover(self, deadline: float | None) -> str:
        if self._token_endpoint is None:
            url = self.issuer_url + DISCOVERY_PATH
            doc = self._with_retries("discovery", deadline, lambda until: self._exchange(url, None, until))
            endpoint = doc.get("token_endpoint")
            if not isinstance(endpoint, str) or urllib.parse.urlsplit(endpoint).scheme not in (
                "http",
                "https",
            ):
                raise OAuth2Error(
                    f"issuer {self.issuer_url}: the discovery document has no http(s) token_endpoint",
                    issuer=self.issuer_url,
                )
            self._check_cleartext(endpoint, "the discovery document's token_endpoint")
            self._token_endpoint = endpoint
        return self._token_endpoint

    def _with_retries(self, what: str, deadline: float | None, attempt: Any) -> dict[str, Any]:
        """``attempt(until)`` with retries; each attempt ends by ``until`` (``http_timeout`` from its
        start, never past ``deadline``), and no retry starts after ``deadline``."""
        delay = self.retry_delay
        for n in range(self.retries + 1):
            until = time.monotonic() + self.http_timeout
            if deadline is not None:
                until = min(until, deadline)
            try:
                result: dict[str, Any] = attempt(until)
                return result
            except _Retriable as exc:
                left = None if deadline is None else deadline - time.monotonic()
                if n == self.retries or (left is not None and left <= delay):
                    raise IssuerUnreachableError(
                        f"issuer {self.issuer_url} unreachable ({what}, {n + 1} attempts): {exc}",
                        issuer=self.issuer_url,
                    ) from None
                log.info("issuer %s: %s failed (%s), retrying in %.1f s", self.issuer_url, what, exc, delay)
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _exchange(self, url: str, body: bytes | None, until: float) -> dict[str, Any]:
        """One GET (no body) or form POST (redirects followed safely) finished by ``until``; the JSON
        object answered. Raises _Retriable or the OAuth2Error family."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        context = self._ssl if self._ssl is not None else ssl.create_default_context()
        try:
            answer = http.request_sync(
                "POST" if body is not None else "GET",
                url,
                deadline=until,
                headers=headers,
                body=body,
                body_is_credential=body is not None,
                ssl_context=context,
                max_body=MAX_ANSWER_BYTES,
                check_url=lambda target: self._check_cleartext(target, "a redirect to"),
            )
        except http.RedirectRefused as exc:
            raise InsecureIssuerError(f"issuer {self.issuer_url}: {exc}", issuer=self.issuer_url) from None
        except http.HttpError as exc:
            raise OAuth2Error(f"issuer {self.issuer_url}: {exc}", issuer=self.issuer_url) from None
        except ssl.SSLCertVerificationError as exc:
            raise IssuerUnreachableError(
                f"issuer {self.issuer_url}: TLS certificate does not verify: {exc.verify_message}",
                issuer=self.issuer_url,
            ) from None
        except (OSError, TimeoutError, ValueError) as exc:
            raise _Retriable(str(exc) or type(exc).__name__) from None
        if answer.status != 200:
            self._refused(answer.status, answer.body)
        try:
            doc = json.loads(answer.body, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            raise OAuth2Error(
                f"issuer {self.issuer_url}: answer from {answer.url} is not JSON", issuer=self.issuer_url
            ) from None
        if not isinstance(doc, dict):
            raise OAuth2Error(
                f"issuer {self.issuer_url}: answer from {answer.url} is not a JSON object",
                issuer=self.issuer_url,
            )
        return doc

    def _refused(self, status: int, body: bytes) -> Any:
        error = _oauth_error_code(body)
        if status >= 500 or status == 429:
            raise _Retriable(f"HTTP {status}") from None
        if status == 401 or error == "invalid_client":
            raise BadCredentialsError(
                f"issuer {self.issuer_url} refused the client credentials in {self.private_key_name}"
                f" (HTTP {status}{', ' + error if error else ''})",
                issuer=self.issuer_url,
            ) from None
        raise OAuth2Error(
            f"issuer {self.issuer_url} refused the request (HTTP {status}{', ' + error if error else ''})",
            issuer=self.issuer_url,
        ) from None

    @property
    def private_key_name(self) -> str:
        """The credentials' source for messages (a ``data:`` URL is not quoted: it holds the secret)."""
        return _describe(self.private_key)

    def __repr__(self) -> str:
        return (
            f"AuthenticationOauth2(issuer_url={self.issuer_url!r}, private_key={self.private_key_name!r},"
            f" audience={self.audience!r}, scope={self.scope!r})"
        )


def _valid(token: _Token, now: float) -> bool:
    return token.expires_at is None or now < token.expires_at


def _oauth_error_code(body: bytes) -> str:
    """The RFC 6749 ``error`` code of a refusal (only the code: descriptions may echo input)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    code = doc.get("error") if isinstance(doc, dict) else None
    return code if isinstance(code, str) and code.isascii() and code.isprintable() and len(code) <= 64 else ""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _positive_seconds(value: Any) -> float | None:
    """``value`` as a finite positive number of seconds, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _is_loopback(url: str) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_params(text: str) -> dict[str, str]:
    """The official clients' OAuth2 parameter string: a JSON object of string fields.

    Raises ValueError naming the problem (never quoting values).
    """
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError("OAuth2 parameters are not a JSON object") from None
    if not isinstance(doc, dict):
        raise ValueError("OAuth2 parameters are not a JSON object")
    out: dict[str, str] = {}
    for key, value in doc.items():
        if not isinstance(value, str):
            raise ValueError(f"OAuth2 parameter {key!r} must be a string")
        out[str(key)] = value
    return out
