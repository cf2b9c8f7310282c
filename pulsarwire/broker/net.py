"""Listening sockets and advertised addresses, shared by the broker's binary and HTTP listeners.

:func:`listen` binds one asyncio server and turns the operating system's refusals into a
:class:`ListenError` that names the address and what to do; :func:`advertised_host` is the host
name clients are told (LOOKUP answers, service URLs), and :func:`url_host` puts it in a URL.
Neither transport imports the other: both take these from here.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from typing import Any

from pulsarwire.errors import PulsarWireError


class BrokerStartError(PulsarWireError):
    """The broker cannot start (its data dir or address is unusable); the message says which and why."""


class ListenError(BrokerStartError):
    """The broker cannot listen on its address (port taken, unknown host...)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {url_host(host)}:{port}: {reason}")
        self.host, self.port, self.reason = host, port, reason


_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def advertised_host(host: str, advertised_address: str | None = None) -> str:
    """The host name a broker listening on ``host`` tells clients (LOOKUP answers, service_url).

    ``advertised_address`` when given; else ``host`` when it is a specific address; for a
    wildcard (0.0.0.0, ::) the machine's fully qualified host name, as Pulsar's default
    advertisedAddress (InetAddress.getLocalHost().getCanonicalHostName()), or 127.0.0.1 when
    that name does not resolve.
    """
    if advertised_address:
        return advertised_address
    if host not in _WILDCARD_HOSTS:
        return host
    name = socket.getfqdn()
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return "127.0.0.1"
    return name


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def listen(
    loop: asyncio.AbstractEventLoop, factory: Any, host: str, port: int, **kw: Any
) -> asyncio.Server:
    try:
        return await loop.create_server(factory, host, port, **kw)
    except OSError as exc:
        if isinstance(exc, socket.gaierror):
            reason = f"unknown host ({exc.strerror})"
        elif exc.errno == errno.EADDRINUSE:
            reason = "address already in use (another broker running? choose another port)"
        elif exc.errno == errno.EADDRNOTAVAIL:
            reason = "address not available on this machine"
        elif exc.errno == errno.EACCES:
            reason = "permission denied (ports below 1024 need privileges)"
        else:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ListenError(host, port, reason) from None
