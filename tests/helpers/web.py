"""Plain HTTP calls to a broker's web service (urllib: a client we did not write).

:func:`request` answers ``(status, raw body, headers as sent)``; :func:`call` decodes a JSON body
(else the text) for the admin API's JSON endpoints.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def request(
    base: str,
    method: str,
    path: str,
    body: Any = None,
    token: str | None = None,
    raw: bytes | None = None,
    content_type: str | None = "application/json",
) -> tuple[int, bytes, list[tuple[str, str]]]:
    """(status, body bytes, header items in the sender's case) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": content_type} if content_type else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), list(r.headers.items())
    except urllib.error.HTTPError as e:
        return e.code, e.read(), list(e.headers.items())


def call(
    base: str, method: str, path: str, body: Any = None, token: str | None = None, raw: bytes | None = None
) -> tuple[int, Any, dict[str, str]]:
    """(status, JSON body or text, headers) of one request."""
    status, text, items = request(base, method, path, body, token, raw)
    hdrs = dict(items)
    if hdrs.get("Content-Type", "").startswith("application/json") and text:
        return status, json.loads(text), hdrs
    return status, text.decode(), hdrs
