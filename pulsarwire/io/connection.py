"""One broker connection on asyncio, driving :class:`pulsarwire.protocol.connection.ClientProtocol`.

The connection writes whatever the protocol queued, feeds it what the socket
reads, ticks its keepalive, answers AUTH_CHALLENGE with a fresh credential,
completes request futures and hands producer/consumer events to the handler
registered for their id. When the connection ends, every outstanding request
fails with ConnectionClosedError and every handler hears ``connection_closed``
so it can reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from pulsarwire.errors import (
    ConnectError,
    ConnectionClosedError,
    NotPulsarError,
    OperationTimeoutError,
    PulsarWireError,
)
from pulsarwire.proto import pb
from pulsarwire.protocol.connection import (
    ActiveConsumerChange,
    AuthChallenge,
    ClientProtocol,
    Connected,
    ConnectionClosed,
    ConsumerClosedByBroker,
    CorruptMessage,
    EndOfTopic,
    Event,
    MessageReceived,
    ProducerClosedByBroker,
    Response,
    SendError,
    SendReceipt,
    TopicListUpdate,
)

log = logging.getLogger("pulsarwire.connection")


async def credentials(auth: Any, *, refresh: bool = False, timeout: float | None = None) -> bytes:
    """``auth``'s credential without blocking the loop: its ``auth_data_async`` when it has one
    (a provider that fetches over HTTP), else ``auth_data()``.

    ``refresh`` asks for a new credential (the broker sent AUTH_CHALLENGE); ``timeout`` bounds a
    fetch (the provider's ``auth_data_async`` takes it and raises its own typed error when it
    passes). Raises AuthenticationError.
    """
    fetch = getattr(auth, "auth_data_async", None)
    if fetch is not None:
        data: bytes = await (
            fetch(refresh=refresh) if timeout is None else fetch(refresh=refresh, timeout=timeout)
        )
        return data
    data = auth.auth_data()
    return data


def other_protocol(first: bytes) -> tuple[str, str] | None:
    """(protocol, reason) when the first bytes a server sent before CONNECTED are another
    protocol's that can be told (an HTTP status line, a TLS record), else None.

    A Pulsar frame starts with its size, a big-endian int far below four printable characters
    read as one (``HTTP`` is 1.2 GB), and a TLS record starts with its content type (21 alert,
    22 handshake) and major version 3.
    """
    if first.startswith((b"HTTP/", b"<")):  # a status line, or an HTTP/0.9 answer: an HTML page
        return "HTTP", (
            "the server answered HTTP, not the Pulsar protocol (a web or admin port such as 8080? "
            "Pulsar's binary protocol listens on 6650, 6651 with TLS)"
        )
    if len(first) >= 2 and first[0] in (21, 22) and first[1] == 3:
        return "TLS", "the server answered TLS: this is a TLS port, use pulsar+ssl://"
    if len(first) >= 4 and all(32 <= b < 127 for b in first[:4]):  # as a frame size: over 500 MB
        return "text", "the server answered with text, not the Pulsar protocol (another service's port?)"
    return None


class Handler(Protocol):
    """A producer or consumer attached to a connection."""

    def on_event(self, event: Event) -> None: ...

    def connection_closed(self, connection: Connection) -> None: ...


class Connection(asyncio.Protocol):
    def __init__(self, url: str, protocol: ClientProtocol, auth: Any = None) -> None:
        self.url = url
        self.proto = protocol
        self.auth = auth
        self._challenge_task: asyncio.Task[None] | None = None
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[Connected] = self.loop.create_future()
        self.closed_future: asyncio.Future[None] = self.loop.create_future()
        self.requests: dict[int, asyncio.Future[Response]] = {}
        self.producers: dict[int, Handler] = {}
        self.consumers: dict[int, Handler] = {}
        self.watchers: dict[int, Handler] = {}
        self._keepalive: asyncio.TimerHandle | None = None
        self.close_error: Exception | None = None
        self._received = False  # any byte from the server yet

    @property
    def is_closed(self) -> bool:
        return self.closed_future.done()

    @property
    def max_message_size(self) -> int:
        return self.proto.max_message_size

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.proto.connect(time.monotonic())
        self._flush()
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        if not self._received and (other := other_protocol(data)) is not None:
            self.abort(NotPulsarError(self.url, other[1], other[0]))
            return
        self._received = True
        self.proto.receive_data(data, time.monotonic())
        self._drain()

    def eof_received(self) -> bool | None:
        if not self._received:  # closed without a byte of answer to CONNECT
            self.abort(
                ConnectError(
                    f"cannot connect to {self.url}: the server closed the connection without answering "
                    "the Pulsar handshake (a TLS port? then use pulsar+ssl://)"
                )
            )
            return None
        self.proto.receive_data(b"", time.monotonic())
        self._drain()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._finish(exc or ConnectionClosedError(f"connection to {self.url} closed"))

    # -- driving the protocol ------------------------------------------------------
    def _flush(self) -> None:
        data = self.proto.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def _schedule_keepalive(self) -> None:
        interval = max(self.proto.keepalive_interval / 4, 0.05)
        self._keepalive = self.loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        self.proto.tick(time.monotonic())
        self._drain()
        if not self.is_closed:
            self._schedule_keepalive()

    def _drain(self) -> None:
        while (event := self.proto.next_event()) is not None:
            self._dispatch(event)
        self._flush()

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, Response):
            fut = self.requests.pop(event.request_id, None)
            if fut is not None and not fut.done():
                fut.set_result(event)
        elif isinstance(event, SendReceipt | SendError | ProducerClosedByBroker):
            handler = self.producers.get(event.producer_id)
            if handler is not None:
                handler.on_event(event)
            else:
                log.warning(
                    "%s: %s for unknown producer %s", self.url, type(event).__name__, event.producer_id
                )
        elif isinstance(
            event,
            MessageReceived | CorruptMessage | ConsumerClosedByBroker | ActiveConsumerChange | EndOfTopic,
        ):
            consumer = self.consumers.get(event.consumer_id)
            if consumer is not None:
                consumer.on_event(event)
            else:
                log.debug("%s: %s for unknown consumer %s", self.url, type(event).__name__, event.consumer_id)
        elif isinstance(event, TopicListUpdate):
            watcher = self.watchers.get(event.watcher_id)
            if watcher is not None:
                watcher.on_event(event)
        elif isinstance(event, AuthChallenge):
            self._answer_challenge()
        elif isinstance(event, Connected):
            if not self.ready.done():
                self.ready.set_result(event)
        elif isinstance(event, ConnectionClosed):
            if self.close_error is None:  # not already closed by abort()
                self.close_error = event.error
            log.info("%s: %s", self.url, event.reason)
            if self.transport is not None:
                self.transport.close()
            self._finish(event.error or ConnectionClosedError(event.reason))

    def _answer_challenge(self) -> None:
        if self.auth is None:
            return
        if self._challenge_task is not None and not self._challenge_task.done():
            return  # a fresh credential is already on its way
        self._challenge_task = self.loop.create_task(self._answer_challenge_async(self.auth))

    async def _answer_challenge_async(self, auth: Any) -> None:
        """Fetch a fresh credential (in a thread when it needs HTTP) and send AUTH_RESPONSE.

        When none can be had the challenge stays unanswered: the broker closes the connection
        and the handlers' reconnect meets the typed error.
        """
        try:
            data = await credentials(auth, refresh=True)
        except PulsarWireError as exc:
            log.warning("%s: cannot refresh credentials: %s", self.url, exc)
            return
        except Exception as exc:  # a provider's bug: named by type only (its message may hold a secret)
            name = type(exc).__name__
            log.warning("%s: cannot refresh credentials: the provider raised %s", self.url, name)
            return
        if self.is_closed:
            return
        self.proto.answer_auth_challenge(auth.method, data)
        self._flush()

    def _finish(self, exc: Exception) -> None:
        if self.closed_future.done():
            return
        if self._keepalive is not None:
            self._keepalive.cancel()
        self.proto.close()
        if not self.ready.done():
            self.ready.set_exception(exc if isinstance(exc, PulsarWireError) else ConnectError(str(exc)))
            self.ready.exception()  # mark retrieved; the caller awaiting it still sees it
        for fut in self.requests.values():
            if not fut.done():
                fut.set_exception(ConnectionClosedError(f"connection to {self.url} closed: {exc}"))
        self.requests.clear()
        self.closed_future.set_result(None)
        for handler in [*self.producers.values(), *self.consumers.values(), *self.watchers.values()]:
            handler.connection_closed(self)
        self.producers.clear()
        self.consumers.clear()
        self.watchers.clear()

    # -- API for producers/consumers -------------------------------------------------
    async def request(self, cmd: pb.BaseCommand, timeout: float) -> Response:
        """Send a request and wait for its response (ERROR responses are returned, not raised)."""
        if self.is_closed:
            raise ConnectionClosedError(f"connection to {self.url} is closed")
        rid = self.proto.send_request(cmd)
        fut: asyncio.Future[Response] = self.loop.create_future()
        self.requests[rid] = fut
        self._flush()
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.requests.pop(rid, None)
            self.proto.cancel_request(rid)
            raise OperationTimeoutError(
                f"no answer to {pb.BaseCommand.Type.Name(cmd.type)} from {self.url} in {timeout:.1f} s"
            ) from None

    def send_request_nowait(self, cmd: pb.BaseCommand) -> None:
        """Send a request whose answer nobody waits for (closing a watcher on the way out)."""
        if self.is_closed:
            raise ConnectionClosedError(f"connection to {self.url} is closed")
        self.proto.send_request(cmd)
        self._flush()

    def send(self, cmd: pb.BaseCommand) -> None:
        if self.is_closed:
            raise ConnectionClosedError(f"connection to {self.url} is closed")
        self.proto.send_command(cmd)
        self._flush()

    def send_message(self, cmd: pb.BaseCommand, metadata: pb.MessageMetadata | bytes, payload: bytes) -> None:
        if self.is_closed:
            raise ConnectionClosedError(f"connection to {self.url} is closed")
        self.proto.send_message(cmd, metadata, payload)
        self._flush()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self, error: PulsarWireError) -> None:
        """Close at once because the broker broke the protocol: everything on the connection
        sees ``error`` (requests fail, handlers reconnect)."""
        if self.is_closed:
            return
        if self.ready.done():  # before CONNECTED the error goes to whoever opens the connection
            log.error("%s: %s; closing the connection", self.url, error)
        self.close_error = error
        self._finish(error)
        if self.transport is not None:
            self.transport.close()
