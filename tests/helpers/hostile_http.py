"""A hostile HTTP server on 127.0.0.1 for tests where the client is the target.

:class:`HostileHttp` accepts connections on a loopback port (plain, or TLS with the test CA's
certificate), reads one request per connection (head and ``Content-Length`` body) and answers
with whatever the test's ``respond`` function yields for it: ``bytes`` are written as they are
(any framing, malformed or not), a ``float`` pauses that many seconds (to trickle an answer),
then the connection is closed. It records every connection (``connections``) and every request
it read (``requests``: method, target, lower-case headers, body), so a test can check what the
client sent where, and that it never connected at all.

:func:`answer` builds a well-formed answer with ``Content-Length``, chunked, or close-delimited.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes = b""
    raw: bytes = field(default=b"", repr=False)


Respond = Callable[[Request], Iterable[bytes | float]]


def answer(
    status: int, body: Any, *, framing: str = "length", headers: dict[str, str] | None = None
) -> list[bytes]:
    """A whole answer: ``body`` (bytes, or JSON-encoded) framed by ``framing``: "length"
    (Content-Length), "chunked" (chunks of 1000 bytes) or "close" (ended by closing)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = [f"HTTP/1.1 {status} X", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if framing == "length":
        head.append(f"Content-Length: {len(data)}")
        return [("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data]
    if framing == "chunked":
        head.append("Transfer-Encoding: chunked")
        parts = [("\r\n".join(head) + "\r\n\r\n").encode("latin-1")]
        for i in range(0, len(data), 1000):
            piece = data[i : i + 1000]
            parts.append(b"%x\r\n%s\r\n" % (len(piece), piece))
        parts.append(b"0\r\n\r\n")
        return parts
    assert framing == "close"
    return [("\r\n".join(head) + "\r\n\r\n").encode("latin-1"), data]


def redirect(status: int, location: str) -> list[bytes]:
    return [f"HTTP/1.1 {status} Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode("latin-1")]


class HostileHttp:
    def __init__(self, respond: Respond, *, tls_cert: Path | None = None) -> None:
        self.respond = respond
        self.requests: list[Request] = []
        self.connections = 0
        self._tls: ssl.SSLContext | None = None
        if tls_cert is not None:
            self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._tls.load_cert_chain(str(tls_cert))
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, name="hostile-http", daemon=True).start()

    def __enter__(self) -> HostileHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            request = self._read(conn)
            if request is None:
                return
            self.requests.append(request)
            for item in self.respond(request):
                if isinstance(item, float):
                    time.sleep(item)
                else:
                    conn.sendall(item)
        except OSError:
            pass
        finally:
            conn.close()

    @staticmethod
    def _read(conn: socket.socket) -> Request | None:
        data = b""
        while b"\r\n\r\n" not in data:
            got = conn.recv(65536)
            if not got:
                return None
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        first, *lines = head.decode("latin-1").split("\r\n")
        method, target, *_ = first.split(" ")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            got = conn.recv(65536)
            if not got:
                break
            body += got
        return Request(method, target, headers, body, data)
