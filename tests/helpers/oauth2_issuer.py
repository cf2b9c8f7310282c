"""A local OAuth2 issuer for tests: OpenID discovery plus a client-credentials token endpoint.

``LocalIssuer`` serves, on ``http://127.0.0.1:<port>`` from a thread:

* ``GET /.well-known/openid-configuration`` -- ``{"issuer": ..., "token_endpoint": ...}``;
* ``POST /oauth/token`` -- the client-credentials grant: form fields ``client_id`` and
  ``client_secret`` checked against ``clients``; answers an RS256 JWT (``sub`` = the client id,
  ``aud`` = the requested audience, ``exp`` = now + ``expires_in``) signed with a key made at
  start, 401 ``invalid_client`` for wrong credentials, or 503 while ``down`` is set; while
  ``gate`` holds an Event it answers only once that event is set (or after 5 s).

``public_key_pem`` is what a broker verifies the tokens with; ``token_requests`` counts
token requests (also those answered 503); ``stop()`` closes the socket so the issuer is
unreachable (connection refused).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


class LocalIssuer:
    def __init__(self, clients: dict[str, str], *, expires_in: float = 60.0) -> None:
        self.clients = dict(clients)
        self.expires_in = expires_in
        self.down = False
        #: when set, the token endpoint waits (at most 5 s) for this event before answering;
        #: ``gate_results`` records whether it was set in time
        self.gate: threading.Event | None = None
        self.gate_results: list[bool] = []
        self.token_requests = 0
        #: time.time() of every token request answered 503 (``down``)
        self.refused_at: list[float] = []
        self.issued: list[dict[str, Any]] = []
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_key_pem = self._key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="oauth2-issuer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def credentials_file(self, directory: Path, client_id: str, secret: str) -> Path:
        path = directory / f"{client_id}-{abs(hash(secret)) % 10_000}.json"
        path.write_text(
            json.dumps({"type": "client_credentials", "client_id": client_id, "client_secret": secret})
        )
        return path

    @staticmethod
    def data_url(client_id: str, secret: str) -> str:
        doc = json.dumps({"client_id": client_id, "client_secret": secret}).encode()
        return "data:application/json;base64," + base64.b64encode(doc).decode()

    def _token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.token_requests += 1
        if self.gate is not None:
            self.gate_results.append(self.gate.wait(5))
        if self.down:
            self.refused_at.append(time.time())
            return 503, {"error": "temporarily_unavailable"}
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        client_id = form.get("client_id", "")
        if self.clients.get(client_id) != form.get("client_secret") or client_id not in self.clients:
            return 401, {"error": "invalid_client"}
        now = time.time()
        claims: dict[str, Any] = {"sub": client_id, "iat": int(now), "exp": int(now + self.expires_in)}
        if "audience" in form:
            claims["aud"] = form["audience"]
        self.issued.append(claims)
        token = jwt.encode(claims, self._key, algorithm="RS256")
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": self.expires_in}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    self._answer(200, {"issuer": issuer.url, "token_endpoint": issuer.url + "/oauth/token"})
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                if self.path != "/oauth/token":
                    self._answer(404, {"error": "not_found"})
                    return
                self._answer(*issuer._token(form))

        return Handler
