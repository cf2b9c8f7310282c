"""The asyncio API, mirroring the official client's ``pulsar.asyncio``.

``pulsarwire.asyncio.Client`` takes the same parameters as :class:`pulsarwire.Client`
and its ``create_producer`` / ``subscribe`` / ``create_reader`` are coroutines with the
blocking API's parameters; the producers, consumers and readers they return have the
official asyncio names (``await producer.send(...)``, ``await consumer.receive()``,
``await consumer.acknowledge(msg)``, ``await reader.read_next()``). They run on the
caller's event loop: each is a thin wrapper over the core
(:class:`pulsarwire.client.core.AsyncClient` and the producer/consumer classes beside it),
which the blocking API runs on a thread of its own.

Everything here is an async context manager (``async with``), and closing twice does
nothing. Errors are pulsarwire's typed errors; ``PulsarException`` is their root
(:class:`~pulsarwire.errors.PulsarWireError`), so ``except PulsarException`` catches them
as it does with the official client.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from pulsarwire.client import blocking as _blocking
from pulsarwire.client.auth import Authentication
from pulsarwire.client.consumer_config import DeadLetterPolicy, KeySharedPolicy
from pulsarwire.client.core import AsyncClient
from pulsarwire.client.enums import CompressionType, ConsumerType, InitialPosition
from pulsarwire.client.message import Message
from pulsarwire.client.multi_topic import Consumer as _CoreConsumer
from pulsarwire.client.options import (
    client_options,
    producer_options,
    reader_options,
    send_args,
    subscribe_options,
)
from pulsarwire.client.producer import Producer as _CoreProducer
from pulsarwire.client.producer import SendArrowResult
from pulsarwire.client.retry import RetryPolicy
from pulsarwire.client.routing import HashingScheme, RoutingMode
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import PulsarWireError
from pulsarwire.protocol.state import HandlerState

__all__ = ["Client", "Consumer", "Producer", "PulsarException", "Reader"]

#: the root of every error raised here (the official asyncio module's ``PulsarException``)
PulsarException = PulsarWireError

_A = TypeVar("_A", bound="_AsyncCloseable")
_F = TypeVar("_F", bound=Callable[..., Any])


class _AsyncCloseable:
    """``async with`` support: ``__aexit__`` awaits ``close()`` (which does nothing the second time)."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _doc(source: Callable[..., Any]) -> Callable[[_F], _F]:
    """Give an asyncio method the docstring of its blocking twin (one text for both)."""

    def apply(fn: _F) -> _F:
        fn.__doc__ = source.__doc__
        return fn

    return apply


class Producer(_AsyncCloseable):
    """An asyncio producer, made by :meth:`Client.create_producer`."""

    def __init__(self, core: _CoreProducer) -> None:
        self._core = core
        self._closed = False

    def topic(self) -> str:
        """The topic name (fully qualified)."""
        return self._core.topic

    def producer_name(self) -> str:
        """The producer's name (the broker's, when none was given)."""
        return self._core.producer_name

    def last_sequence_id(self) -> int:
        """The sequence id of the last message the broker confirmed (-1 before the first)."""
        return self._core.last_sequence_id()

    def is_connected(self) -> bool:
        """Whether every partition's producer is connected and ready."""
        return not self._closed and all(p.state is HandlerState.READY for p in self._core.partitions)

    @_doc(_blocking.Producer.send)
    async def send(
        self,
        content: bytes,
        *,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | bytes | None = None,
        sequence_id: int | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        kw = send_args(
            properties, partition_key, ordering_key, sequence_id, event_timestamp, deliver_at, deliver_after
        )
        return await self._core.send(content, **kw)

    @_doc(_blocking.Producer.send_arrow)
    async def send_arrow(
        self,
        batch: Any,
        *,
        value: str = "value",
        key: str | None = "key",
        properties: str | None = "properties",
        event_time: str | None = "event_time",
        sequence_id: str | None = "sequence_id",
        first_sequence_id: int | None = None,
    ) -> SendArrowResult:
        return await self._core.send_arrow(
            batch,
            value=value,
            key=key,
            properties=properties,
            event_time=event_time,
            sequence_id=sequence_id,
            first_sequence_id=first_sequence_id,
        )

    async def flush(self) -> None:
        """Send what is batched and wait until every message sent so far has its receipt (or failed)."""
        await self._core.flush()

    async def close(self) -> None:
        """Flush, then close the producer. Closing it again does nothing."""
        if self._closed:
            return
        self._closed = True
        await self._core.flush()
        await self._core.close()


class _Receiving(_AsyncCloseable):
    def __init__(self, core: _CoreConsumer) -> None:
        self._core = core

    def topic(self) -> str:
        """The topic name (topics joined by ``,`` for a multi-topic or regex consumer)."""
        return ",".join(self._core.topics)

    def is_connected(self) -> bool:
        """Whether every topic-partition's consumer is connected and ready."""
        return not self._core.closed and all(p.state is HandlerState.READY for p in self._core.parts)

    async def _next(self, timeout_millis: int | None) -> Message:
        return await self._core.receive(None if timeout_millis is None else timeout_millis / 1000)

    async def seek(self, messageid: MessageId | int) -> None:
        """Move to a message id or a publish time.

        Parameters
        ----------
        messageid: MessageId or int
            A message id (``MessageId.earliest``, ``MessageId.latest`` included) or a publish
            time in ms since the epoch.
        """
        await self._core.seek(messageid)

    async def close(self) -> None:
        """Close (pending acknowledgements are sent first). Closing it again does nothing."""
        if self._core.closed:
            return
        await self._core.close()


class Consumer(_Receiving):
    """An asyncio consumer, made by :meth:`Client.subscribe`."""

    def subscription_name(self) -> str:
        """The subscription's name."""
        return self._core.parts[0].config.subscription_name if self._core.parts else ""

    def consumer_name(self) -> str:
        """The consumer's name (empty when none was given)."""
        return (self._core.parts[0].config.consumer_name or "") if self._core.parts else ""

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message, waiting for one.

        Parameters
        ----------
        timeout_millis: int, optional
            Wait at most this long; forever when not given (the official asyncio client has no
            timeout here).

        Returns
        -------
        Message

        Raises
        ------
        OperationTimeoutError
            No message within ``timeout_millis``.
        ReachedEndOfTopicError
            The topic was terminated and everything was received.
        CorruptMessageError
            An entry could not be decoded (it is never acknowledged).
        """
        return await self._next(timeout_millis)

    async def batch_receive(
        self, max_num_messages: int = 100, max_num_bytes: int = 10 * 1024 * 1024, timeout_ms: int = 100
    ) -> list[Message]:
        """Up to ``max_num_messages`` messages or ``max_num_bytes`` bytes, waiting at most ``timeout_ms``.

        Parameters
        ----------
        max_num_messages: int, default=100
            At most this many messages.
        max_num_bytes: int, default=10 MiB
            Stop once the payloads reach this many bytes.
        timeout_ms: int, default=100
            Wait at most this long.

        Returns
        -------
        list of Message
            Possibly empty.
        """
        return await self._core.batch_receive(max_num_messages, max_num_bytes, timeout_ms / 1000)

    @_doc(_blocking.Consumer.acknowledge)
    async def acknowledge(self, message: Message | MessageId) -> None:
        self._core.acknowledge(message)

    @_doc(_blocking.Consumer.acknowledge_cumulative)
    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._core.acknowledge_cumulative(message)  # raises on Shared/Key_Shared

    @_doc(_blocking.Consumer.negative_acknowledge)
    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._core.negative_acknowledge(message)

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every message received and not yet acknowledged."""
        self._core.redeliver_unacknowledged_messages()

    async def get_last_message_id(self) -> MessageId:
        """The id of the last message stored on the topic (one topic-partition only)."""
        return await self._core.get_last_message_id()

    async def unsubscribe(self) -> None:
        """Delete the subscription on the broker and close this consumer."""
        await self._core.unsubscribe()


class Reader(_Receiving):
    """An asyncio reader, made by :meth:`Client.create_reader`."""

    @_doc(_blocking.Reader.read_next)
    async def read_next(self, timeout_millis: int | None = None) -> Message:
        return await self._next(timeout_millis)

    async def has_message_available(self) -> bool:
        """Whether a message after the last one read is stored on the topic."""
        return await self._core.has_message_available()


class Client(_AsyncCloseable):
    """The asyncio Pulsar client (see :class:`pulsarwire.Client`); use it on one event loop."""

    @_doc(_blocking.Client.__init__)
    def __init__(
        self,
        service_url: str,
        *,
        authentication: Authentication | None = None,
        operation_timeout_seconds: float = 30,
        connection_timeout_ms: int = 10000,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = True,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        keepalive_interval_seconds: float = 30.0,
        connection_timeout_seconds: float | None = None,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self._core = AsyncClient(service_url, **client_options(locals()))

    @_doc(_blocking.Client.create_producer)
    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        *,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType | int = CompressionType.NONE,
        max_pending_messages: int = 1000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: RoutingMode = RoutingMode.RoundRobinDistribution,
        properties: dict[str, str] | None = None,
        message_router: Callable[[str | None, int], int] | None = None,
        hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
    ) -> Producer:
        core = await self._core.create_producer(topic, **producer_options(locals()))
        return Producer(core)

    @_doc(_blocking.Client.subscribe)
    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        *,
        consumer_type: ConsumerType | int = ConsumerType.Exclusive,
        receiver_queue_size: int = 1000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        pattern_auto_discovery_period: int = 60,
        initial_position: InitialPosition | int = InitialPosition.Latest,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        key_shared_policy: KeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = True,
        dead_letter_policy: DeadLetterPolicy | None = None,
        durable: bool = True,
        priority_level: int = 0,
        ack_group_time_ms: int = 100,
        expire_time_of_incomplete_chunked_message_ms: int = 60000,
        max_message_size: int | None = None,
        force_topic_creation: bool = True,
    ) -> Consumer:
        core = await self._core.subscribe(topic, subscription_name, **subscribe_options(locals()))
        return Consumer(core)

    @_doc(_blocking.Client.create_reader)
    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        *,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        start_message_id_inclusive: bool = False,
    ) -> Reader:
        core = await self._core.create_reader(topic, start_message_id, **reader_options(locals()))
        return Reader(core)

    @_doc(_blocking.Client.get_topic_partitions)
    async def get_topic_partitions(self, topic: str, *, create: bool = True) -> list[str]:
        return await self._core.get_topic_partitions(topic, create=create)

    async def close(self) -> None:
        """Close every producer, consumer and reader, then the connections. Closing it again does
        nothing."""
        await self._core.close()
