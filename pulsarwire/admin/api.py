"""The admin REST API client of ``pulsarwire-admin``: one HTTP request per call, over h11.

:class:`AdminClient` sends a request to ``--admin-url`` + a Pulsar REST path with
:func:`pulsarwire.io.http.request_sync` (h11 framing, one deadline for the whole exchange,
redirects followed under its rules: the credential never follows one to another origin, nothing
goes from https to http). The credential is added to each request: a token (also OAuth2's) as
``Authorization: Bearer``, basic as ``Authorization: Basic``, a TLS client certificate in the
TLS context. An answer of 400 or more is :class:`AdminError` with the method, the URL (without
any user info), the status and Pulsar's ``reason``; a broker that cannot be reached is
:class:`Unreachable`. Neither ever holds the credential.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from pulsarwire.client.plugins import PluginAuth
from pulsarwire.errors import PulsarWireError
from pulsarwire.io.http import Answer, HttpError, request_sync

#: largest answer read (stats of a large namespace, a large message)
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class AdminError(PulsarWireError):
    """The broker answered a request with an error status."""

    def __init__(self, method: str, url: str, status: int, reason: str) -> None:
        super().__init__(f"{method} {url}: {status} {reason}")
        self.method = method
        self.url = url
        self.status = status
        self.reason = reason


class Unreachable(PulsarWireError):
    """No answer: the connection failed, timed out, or the answer was not HTTP."""


def shown_url(url: str) -> str:
    """``url`` without user info (``http://user:secret@host`` → ``http://host``): what errors print."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def tls_context(
    *, trust_cert_path: str | None, allow_insecure: bool, auth: PluginAuth | None
) -> ssl.SSLContext:
    """The TLS context of https admin URLs: pulsar-admin's ``--tls-trust-cert-path`` (else the
    system's trust store), ``--tls-allow-insecure`` (no certificate or host name check), the
    client certificate of the TLS plugin. Raises OSError / ssl.SSLError for unreadable files."""
    context = ssl.create_default_context(cafile=trust_cert_path)
    if allow_insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if auth is not None and auth.tls_cert_file and auth.tls_key_file:
        context.load_cert_chain(auth.tls_cert_file, auth.tls_key_file)
    return context


@dataclass
class AdminClient:
    """Requests to the admin REST API at ``url``; see the module docstring."""

    url: str
    auth: PluginAuth | None = None
    ssl_context: ssl.SSLContext | None = None
    #: seconds for one whole request (pulsar-admin's --request-timeout)
    timeout: float = 60.0

    def _credentials(self) -> dict[str, str]:
        provider = self.auth.provider if self.auth is not None else None
        if provider is None:
            return {}
        data = provider.auth_data()
        if provider.method == "basic":
            return {"Authorization": "Basic " + base64.b64encode(data).decode("ascii")}
        return {"Authorization": "Bearer " + data.decode("utf-8")}

    def request(
        self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None
    ) -> Answer:
        """``method`` on ``path`` (already percent-encoded) with a JSON ``body``; the answer (2xx).

        Raises AdminError (4xx/5xx), Unreachable, and the credential's AuthenticationError.
        """
        url = self.url.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif method in ("POST", "PUT"):
            data = b""
        try:
            answer = request_sync(
                method,
                url,
                deadline=time.monotonic() + self.timeout,
                headers=headers,
                credentials=self._credentials(),
                body=data,
                ssl_context=self.ssl_context,
                max_body=MAX_ANSWER_BYTES,
            )
        except (OSError, HttpError) as exc:  # TimeoutError is an OSError
            raise Unreachable(f"{method} {shown_url(url)}: {_cause(exc)}") from exc
        if answer.status >= 300:
            raise AdminError(method, shown_url(url), answer.status, _reason(answer))
        return answer

    def json(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> Any:
        """The answer's JSON body (None when it has none); raises as :meth:`request`, and
        Unreachable for a body that is not JSON."""
        answer = self.request(method, path, body, query)
        if not answer.body:
            return None
        try:
            return json.loads(answer.body)
        except ValueError:
            raise Unreachable(f"{method} {shown_url(answer.url)}: the answer is not JSON") from None


def _cause(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time (--request-timeout)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused: is the broker's web service (--http-port) there? check --admin-url"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed ({exc.reason or exc}): check --tls-trust-cert-path"
    return str(exc) or type(exc).__name__


def _reason(answer: Answer) -> str:
    """Pulsar's ``{"reason": ...}``, else the body's first line, else the status phrase."""
    try:
        doc = json.loads(answer.body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("reason"), str):
        return str(doc["reason"])
    text = answer.body.decode("utf-8", "replace").strip().splitlines()
    return (
        text[0][:200]
        if text
        else {401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}.get(answer.status, "error")
    )
