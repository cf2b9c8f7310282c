"""Lookup over HTTP: what a client given an ``http://`` or ``https://`` service URL asks the web service.

Apache Pulsar's clients accept the web service's URL (``http://host:8080``) as service URL; they
then ask over HTTP what they otherwise ask with LOOKUP and PARTITIONED_METADATA (the C++ core's
``HTTPLookupService``), and speak the binary protocol only to the broker the lookup names:

* ``GET /admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions?checkAllowAutoCreation=true`` →
  ``{"partitions": N}``;
* ``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}`` → ``{"brokerUrl", "brokerUrlTls", ...}``;
* ``GET /admin/v2/namespaces/{tenant}/{ns}/topics?mode=PERSISTENT`` → the namespace's topics.

:class:`HttpLookup` sends each ``GET`` with :mod:`pulsarwire.io.http` (h11 framing: answers with
``Content-Length``, chunked or close-delimited; head and body sizes bounded; one deadline, the
operation timeout, for the whole request including redirects and the credential). The client's
credential (``Authorization: Bearer TOKEN`` / ``Basic ...``) goes only to the service URL's
origin: a redirect elsewhere is followed without it, and a redirect to a non-http(s) scheme or
from https to http is not followed at all (UnsafeRedirectError). With an ``https://`` service
URL only ``brokerUrlTls`` is used and it must be ``pulsar+ssl://``
(:func:`~pulsarwire.io.pool.choose_broker_url`, the binary lookup's rule; TlsDowngradeError).

Refusals become the ServerError the binary protocol would give: 401 AuthenticationError, 403
AuthorizationError, 404 TopicNotFound, 5xx ServiceNotReady (retried), anything else
UnknownError. An answer that is not a lookup answer -- malformed HTTP, an oversized head or
body, not JSON, NaN/Infinity, wrong JSON types, a partition count outside 0..2^31-1 -- is a
MalformedLookupAnswerError, never a bare ValueError/TypeError.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from typing import Any
from urllib.parse import quote, urlsplit

from pulsarwire.errors import (
    MalformedLookupAnswerError,
    PulsarWireError,
    UnsafeRedirectError,
    server_error,
)
from pulsarwire.io import http
from pulsarwire.io.connection import credentials
from pulsarwire.io.pool import choose_broker_url
from pulsarwire.naming import TopicName
from pulsarwire.proto import pb

E = pb.ServerError
#: Largest answer read (a namespace's topic list is the largest one).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: Largest partition count accepted (Pulsar's is a Java int).
MAX_PARTITIONS = 2**31 - 1
_STATUS_ERRORS = {401: E.AuthenticationError, 403: E.AuthorizationError, 404: E.TopicNotFound}


def is_http_url(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(raw: bytes) -> Any:
    """Strict JSON: NaN and Infinity refused. Raises ValueError (incl. UnicodeDecodeError)."""
    return json.loads(raw, parse_constant=_no_constant)


class HttpLookup:
    """Lookups against the web service at ``url`` (``http://host:port``, ``https://...``)."""

    def __init__(
        self, url: str, *, auth: Any = None, timeout: float = 30.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL: {url!r}")
        if "," in parts.netloc:
            raise ValueError(f"an http(s) service URL names one host, got {url!r}")
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.use_tls = parts.scheme == "https"
        self.auth = auth
        self.timeout = timeout
        self.ssl_context = ssl_context

    async def partitions(self, topic: str) -> int:
        """Partitions of ``topic`` (0: not partitioned), creating it where the broker auto-creates."""
        body = await self.get_json(
            f"/admin/v2/{TopicName.parse(topic).rest_path}/partitions?checkAllowAutoCreation=true"
        )
        n = body.get("partitions", 0) if isinstance(body, dict) else None
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_PARTITIONS:
            raise MalformedLookupAnswerError(
                f"partitioned metadata of {topic} from {self.base}: "
                f"no partition count in 0..{MAX_PARTITIONS} in {_excerpt(body)}"
            )
        return n

    async def lookup(self, topic: str) -> str:
        """The binary-protocol URL of the broker serving ``topic`` (pulsar+ssl:// for an https service)."""
        body = await self.get_json(f"/lookup/v2/topic/{TopicName.parse(topic).rest_path}")
        urls: list[str | None] = []
        for key in ("brokerUrl", "brokerUrlTls"):
            url = body.get(key) if isinstance(body, dict) else 0
            if url is not None and not isinstance(url, str):
                raise MalformedLookupAnswerError(
                    f"lookup of {topic} from {self.base}: unexpected answer {_excerpt(body)}"
                )
            urls.append(url)
        return choose_broker_url(f"lookup of {topic}", urls[0], urls[1], use_tls=self.use_tls)

    async def topics_of_namespace(self, namespace: str) -> list[str]:
        body = await self.get_json(f"/admin/v2/namespaces/{quote(namespace)}/topics?mode=PERSISTENT")
        if not isinstance(body, list) or not all(isinstance(t, str) for t in body):
            raise MalformedLookupAnswerError(
                f"topics of namespace {namespace} from {self.base}: not a list of names: {_excerpt(body)}"
            )
        return body

    async def get_json(self, path: str) -> Any:
        """GET ``path`` (following redirects) and decode the JSON answer.

        Raises ServerError subclasses for refusals, UnsafeRedirectError, MalformedLookupAnswerError.
        """
        url = self.base + path
        deadline = time.monotonic() + self.timeout
        try:
            answer = await http.request_async(
                "GET",
                url,
                deadline=deadline,
                headers={"Accept": "application/json"},
                credentials=await self._auth_headers(),
                ssl_context=self.ssl_context,
                max_body=MAX_RESPONSE_BYTES,
            )
        except http.RedirectRefused as exc:
            raise UnsafeRedirectError(f"GET {url}: {exc}") from None
        except http.HttpError as exc:
            raise MalformedLookupAnswerError(f"GET {url}: {exc}") from None
        except (OSError, TimeoutError, ValueError) as exc:
            raise server_error(E.ServiceNotReady, f"GET {url} failed: {exc or type(exc).__name__}") from None
        if answer.status == 200:
            try:
                return parse_json(answer.body)
            except (ValueError, RecursionError):
                raise MalformedLookupAnswerError(f"GET {answer.url}: the answer is not JSON") from None
        reason = _reason(answer.body) or f"HTTP {answer.status}"
        code = _STATUS_ERRORS.get(
            answer.status, E.ServiceNotReady if answer.status >= 500 else E.UnknownError
        )
        raise server_error(code, f"GET {answer.url}: {reason}")

    async def _auth_headers(self) -> dict[str, str]:
        if self.auth is None or getattr(self.auth, "method", "none") in ("", "none"):
            return {}
        if self.auth.method == "token":
            token = await credentials(self.auth, timeout=self.timeout)
            return {"Authorization": "Bearer " + token.decode()}
        if self.auth.method == "basic":
            data = await credentials(self.auth, timeout=self.timeout)
            return {"Authorization": "Basic " + base64.b64encode(data).decode()}
        raise PulsarWireError(f"authentication method {self.auth.method!r} is not supported over HTTP lookup")


def _excerpt(body: Any) -> str:
    return f"{body!r:.200}"


def _reason(body: bytes) -> str:
    try:
        found = parse_json(body)
    except (ValueError, RecursionError):
        return " ".join(body[:200].decode("utf-8", "replace").split())
    reason = found.get("reason", "") if isinstance(found, dict) else ""
    return " ".join(reason[:500].split()) if isinstance(reason, str) else ""
