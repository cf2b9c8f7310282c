"""What producers and consumers need from the client that made them, as a ``typing.Protocol``.

A partition producer or consumer looks the broker of its topic up and gets a connection to it,
waits for answers at most the operation timeout, retries by the client's retry policy, and knows
the message size to assume before a broker announced one; a consumer with a dead-letter policy
also creates a producer. :class:`ClientContext` says exactly that, so the handler modules depend
on this small interface rather than on :class:`~pulsarwire.client.core.AsyncClient` (which imports
them to create them): no import cycle, and a test can hand a handler any object with these members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pulsarwire.codec.message_id import MessageId
    from pulsarwire.io.connection import Connection

    from .retry import RetryPolicy


class DeadLetterProducer(Protocol):
    """The producer a consumer stores dead letters with."""

    async def send(
        self, content: bytes, *, properties: dict[str, str] | None = ..., partition_key: str | None = ...
    ) -> MessageId: ...

    async def close(self) -> None: ...


class ClientContext(Protocol):
    """The client as its producers and consumers see it."""

    @property
    def operation_timeout(self) -> float:
        """Seconds to wait for the broker's answer to a request."""
        ...

    @property
    def retry(self) -> RetryPolicy:
        """When a failed operation (creation, reconnect, send) is tried again."""
        ...

    @property
    def default_max_message_size(self) -> int:
        """The message size limit before a broker announced its own (CONNECTED)."""
        ...

    async def connection_for(self, topic: str) -> Connection:
        """A ready connection to the broker serving ``topic`` (looked up, redirects followed)."""
        ...

    async def create_producer(self, topic: str, *, batching_enabled: bool = ...) -> DeadLetterProducer:
        """A producer on ``topic`` (a consumer's dead-letter topic)."""
        ...
