"""Lookup over HTTP: what a client given an ``http://`` or ``https://`` service URL asks the web service.

Apache Pulsar's clients accept the web service's URL (``http://host:8080``) as service URL; they
then ask over HTTP what they otherwise ask with LOOKUP and PARTITIONED_METADATA (the C++ core's
``HTTPLookupService``), and speak the binary protocol only to the broker the lookup names:

* ``GET /admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions?checkAllowAutoCreation=true`` →
  ``{"partitions": N}``;
* ``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}`` → ``{"brokerUrl", "brokerUrlTls", ...}``;
* ``GET /admin/v2/namespaces/{tenant}/{ns}/topics?mode=PERSISTENT`` → the namespace's topics.

:class:`HttpLookup` sends one ``GET`` per connection (``Connection: close``) with the client's
credential (``Authorization: Bearer TOKEN`` for token authentication), follows redirects (307,
at most :data:`MAX_REDIRECTS`), reads at most :data:`MAX_RESPONSE_BYTES` within the operation
timeout, and turns refusals into the ServerError the binary protocol would give: 401
AuthenticationError, 403 AuthorizationError, 404 TopicNotFound, 5xx ServiceNotReady (retried),
anything else UnknownError.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from pulsarwire.errors import PulsarWireError, server_error
from pulsarwire.io.connection import credentials
from pulsarwire.naming import TopicName
from pulsarwire.proto import pb

E = pb.ServerError
MAX_REDIRECTS = 20
#: Largest answer read (a namespace's topic list is the largest one).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
_STATUS_ERRORS = {401: E.AuthenticationError, 403: E.AuthorizationError, 404: E.TopicNotFound}


def is_http_url(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https")


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
        return int(body.get("partitions", 0)) if isinstance(body, dict) else 0

    async def lookup(self, topic: str) -> str:
        """The binary-protocol URL of the broker serving ``topic`` (pulsar+ssl:// for an https service)."""
        body = await self.get_json(f"/lookup/v2/topic/{TopicName.parse(topic).rest_path}")
        if not isinstance(body, dict):
            raise server_error(E.MetadataError, f"lookup of {topic}: unexpected answer {body!r:.200}")
        url = body.get("brokerUrlTls") if self.use_tls else None
        url = url or body.get("brokerUrl")
        if not isinstance(url, str) or not url:
            raise server_error(E.MetadataError, f"lookup of {topic}: no brokerUrl in {body!r:.200}")
        return url

    async def topics_of_namespace(self, namespace: str) -> list[str]:
        body = await self.get_json(f"/admin/v2/namespaces/{quote(namespace)}/topics?mode=PERSISTENT")
        return [t for t in body if isinstance(t, str)] if isinstance(body, list) else []

    async def get_json(self, path: str) -> Any:
        """GET ``path`` (following redirects) and decode the JSON answer; raises ServerError subclasses."""
        url = self.base + path
        for _hop in range(MAX_REDIRECTS):
            try:
                status, headers, body = await asyncio.wait_for(self._get(url), self.timeout)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                raise server_error(E.ServiceNotReady, f"GET {url} failed: {exc}") from None
            if status in (301, 302, 303, 307, 308) and "location" in headers:
                url = urljoin(url, headers["location"])
                continue
            if status == 200:
                try:
                    return json.loads(body)
                except ValueError:
                    raise server_error(E.MetadataError, f"GET {url}: the answer is not JSON") from None
            reason = _reason(body) or f"HTTP {status}"
            code = _STATUS_ERRORS.get(status, E.ServiceNotReady if status >= 500 else E.UnknownError)
            raise server_error(code, f"GET {url}: {reason}")
        raise server_error(E.ServiceNotReady, f"GET {self.base + path}: more than {MAX_REDIRECTS} redirects")

    async def _get(self, url: str) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        context = (self.ssl_context or ssl.create_default_context()) if tls else None
        reader, writer = await asyncio.open_connection(parts.hostname, port, ssl=context)
        try:
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            lines = [f"GET {target} HTTP/1.1", f"Host: {parts.netloc}", "Accept: application/json"]
            lines += ["Connection: close", "User-Agent: pulsarwire"]
            lines += [f"{k}: {v}" for k, v in (await self._auth_headers()).items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            status = int(status_line.split(" ")[1])
            headers = {}
            for line in header_lines:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            length = headers.get("content-length")
            if length is not None:
                size = int(length)
                if size > MAX_RESPONSE_BYTES:
                    raise ValueError(f"answer of {size} bytes")
                body = await reader.readexactly(size)
            else:
                body = await reader.read(MAX_RESPONSE_BYTES + 1)
                if len(body) > MAX_RESPONSE_BYTES:
                    raise ValueError("answer too large")
            return status, headers, body
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _auth_headers(self) -> dict[str, str]:
        if self.auth is None or getattr(self.auth, "method", "none") in ("", "none"):
            return {}
        if self.auth.method == "token":
            return {"Authorization": "Bearer " + (await credentials(self.auth)).decode()}
        if self.auth.method == "basic":
            return {"Authorization": "Basic " + base64.b64encode(await credentials(self.auth)).decode()}
        raise PulsarWireError(f"authentication method {self.auth.method!r} is not supported over HTTP lookup")


def _reason(body: bytes) -> str:
    try:
        found = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    return str(found.get("reason", "")) if isinstance(found, dict) else ""
