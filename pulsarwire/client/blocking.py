"""The blocking API, named like the official Python client, on a background event loop.

The signatures follow the official client (``pulsar.Client``, ``create_producer``,
``subscribe``, ...): the same parameter names and, except where docs/client.md lists a
reason, the same defaults; parameters the official client has and pulsarwire does not
implement are absent rather than silently ignored. Clients, producers, consumers and
readers are context managers, and closing one twice does nothing.

Each :class:`Client` owns one daemon thread running an asyncio loop with the
:class:`~pulsarwire.client.core.AsyncClient` (bridge.py: :class:`LoopThread`, and
:class:`LoopCalls` for calls batched from the caller's thread); blocking calls submit
coroutines to it and wait. Nothing of the caller's event loop is assumed, so it works in
scripts and in Spark Python workers. Clients still open at interpreter exit are closed
(pending messages flushed) by an ``atexit`` hook. The official client's enums and alias
names live in enums.py and the mapping of the public parameters onto the core's keywords in
options.py, both shared with ``pulsarwire.asyncio``; this module re-exports the enums.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import math
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, TypeVar

from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    AlreadyClosedError,
    OperationTimeoutError,
    ProducerQueueIsFullError,
    ReachedEndOfTopicError,
)
from pulsarwire.protocol.state import HandlerState

from .acks import AckKind, ThreadAck
from .auth import Authentication
from .bridge import LoopCalls, LoopThread
from .bulk import read_arrow
from .consumer_config import DeadLetterPolicy, KeySharedPolicy
from .core import AsyncClient
from .enums import (
    CompressionType,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    InitialPosition,
    PartitionsRoutingMode,
)
from .message import Message
from .multi_topic import Consumer as AsyncConsumer
from .options import client_options, producer_options, reader_options, send_args, subscribe_options
from .producer import Producer as AsyncProducer
from .producer import SendArrowResult
from .retry import RetryPolicy
from .routing import HashingScheme, RoutingMode
from .schema import SchemaInfo

R = TypeVar("R")
__all__ = [
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "DeadLetterPolicy",
    "InitialPosition",
    "KeySharedPolicy",
    "PartitionsRoutingMode",
    "Producer",
    "Reader",
]
#: ``callback(error, message_id)`` of :meth:`Producer.send_async`
Callback = Callable[[BaseException | None, MessageId | None], None]
_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for client in list(_open_clients):
        with contextlib.suppress(Exception):  # interpreter exit: nothing useful left to do with an error
            client.close()


class _Closeable:
    """``with`` support: ``__exit__`` calls ``close()`` (which does nothing the second time)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_C = TypeVar("_C", bound=_Closeable)


class Client(_Closeable):
    """The Pulsar client: one connection pool shared by the producers, consumers and readers it creates.

    Examples
    --------
    >>> with pulsarwire.Client("pulsar://localhost:6650") as client:  # doctest: +SKIP
    ...     with client.create_producer("my-topic") as producer:
    ...         producer.send(b"hello")
    """

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
        """Create a client; no connection is made until the first producer, consumer or lookup.

        Parameters
        ----------
        service_url: str
            The broker(s): ``pulsar://host:6650``, ``pulsar+ssl://host:6651`` or several hosts
            ``pulsar://h1:6650,h2:6650`` (lookups go round-robin over them).
        authentication: Authentication, optional
            The credential provider, e.g. :class:`AuthenticationToken`. Its data is read on every
            connect and on every AUTH_CHALLENGE.
        operation_timeout_seconds: float, default=30
            Timeout of client operations (lookup, create producer, subscribe, close, seek, ...),
            retries included.
        connection_timeout_ms: int, default=10000
            Timeout of establishing a TCP (and TLS) connection.
        tls_trust_certs_file_path: str, optional
            CA certificates (PEM) that verify the broker; the system's default CAs when not given.
        tls_allow_insecure_connection: bool, default=False
            Accept a broker certificate that does not verify.
        tls_validate_hostname: bool, default=True
            Check that the broker certificate names the host connected to (the official client's
            default is False; see docs/client.md).
        tls_private_key_file_path: str, optional
            The client's private key (PEM) for TLS client authentication.
        tls_certificate_file_path: str, optional
            The client's certificate (PEM) for TLS client authentication.
        keepalive_interval_seconds: float, default=30.0
            Interval of PING on an idle connection; a connection silent for twice as long is closed.
        connection_timeout_seconds: float, optional
            The connection timeout in seconds; when given it replaces ``connection_timeout_ms``.
        retry_policy: RetryPolicy, optional
            Backoff of retried operations (default: 100 ms doubling to 60 s with jitter, bounded by
            ``operation_timeout_seconds``).

        Raises
        ------
        InvalidConfigurationError
            The service URL is malformed.
        """
        options = client_options(locals())
        self._closed = True  # until the core exists: close() has nothing to do
        self._bridge = LoopThread()
        try:
            self._core = self._run(_make_core(service_url, options))
        except BaseException:
            self._bridge.stop()
            raise
        self._closed = False
        _open_clients.add(self)

    def _run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run ``coro`` on the client's loop and wait for its result (see :class:`LoopThread`)."""
        return self._bridge.run(coro, timeout)

    def create_producer(
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
        """Create a producer on a topic (every partition of a partitioned topic).

        Parameters
        ----------
        topic: str
            The topic name (``my-topic`` is ``persistent://public/default/my-topic``).
        producer_name: str, optional
            The producer's name; the broker assigns a unique one when not given. With broker
            deduplication, a producer that reuses a name continues its sequence ids.
        initial_sequence_id: int, optional
            The sequence id before the first message's; by default the broker's last stored
            sequence id of this producer name (``-1`` for a new name).
        send_timeout_millis: int, default=30000
            A message without a receipt after this long fails with SendTimeoutError (0: never).
        compression_type: CompressionType, default=CompressionType.NONE
            ``NONE``, ``LZ4``, ``ZLib``, ``ZSTD`` or ``SNAPPY``.
        max_pending_messages: int, default=1000
            Messages per partition that may wait for their receipt (0: no limit).
        block_if_queue_full: bool, default=False
            When that many wait, ``send``/``send_async`` block instead of failing with
            ProducerQueueIsFullError.
        batching_enabled: bool, default=True
            Group messages into batches (the official blocking client's default is False; see
            docs/client.md).
        batching_max_messages: int, default=1000
            A batch is sent when it holds this many messages...
        batching_max_allowed_size_in_bytes: int, default=128*1024
            ... or this many bytes ...
        batching_max_publish_delay_ms: int, default=10
            ... or its first message has waited this long.
        chunking_enabled: bool, default=False
            Split a message above the broker's ``max_message_size`` into chunks (needs batching
            off); otherwise such a message fails with MessageTooBigError.
        message_routing_mode: PartitionsRoutingMode, default=PartitionsRoutingMode.RoundRobinDistribution
            How keyless messages are spread over partitions: ``RoundRobinDistribution``,
            ``UseSinglePartition`` or ``CustomPartition`` (with ``message_router``). A message with a
            partition key always goes to the key's partition (except with CustomPartition).
        properties: dict, optional
            Producer properties the broker shows in its stats.
        message_router: callable, optional
            ``router(partition_key, num_partitions) -> partition`` for every message (the key is
            None when the message has none); giving one makes the mode CustomPartition. The
            official client passes the Message instead of its key.
        hashing_scheme: HashingScheme, default=HashingScheme.JavaStringHash
            How a partition key is hashed (``JavaStringHash`` or ``Murmur3_32Hash``, as the Java
            client).

        Returns
        -------
        Producer
            The producer, connected to every partition.

        Raises
        ------
        ServerError
            The broker refused the producer (e.g. TopicNotFound, AuthorizationError, ProducerBusy).
        OperationTimeoutError
            The producer could not be created within the operation timeout.
        """
        options = producer_options(locals())
        core = self._run(self._core.create_producer(topic, **options))
        return Producer(self, core)

    def subscribe(
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
        """Subscribe to a topic, a list of topics or a regex of topics.

        Parameters
        ----------
        topic: str, list of str, or re.Pattern
            ``"my-topic"``, ``["t1", "t2"]`` or ``re.compile("persistent://public/default/t-.*")``
            (topics created later that match are picked up).
        subscription_name: str
            The subscription's name.
        consumer_type: ConsumerType, default=ConsumerType.Exclusive
            ``Exclusive``, ``Shared``, ``Failover`` or ``KeyShared``.
        receiver_queue_size: int, default=1000
            Messages the broker may push ahead of ``receive`` (0: one at a time, on demand).
        consumer_name: str, optional
            The consumer's name.
        unacked_messages_timeout_ms: int, optional
            Redeliver a message not acknowledged within this long (off when not given).
        negative_ack_redelivery_delay_ms: int, default=60000
            Delay before a negatively acknowledged message is redelivered.
        is_read_compacted: bool, default=False
            Read the compacted view of the topic.
        pattern_auto_discovery_period: int, default=60
            Seconds between listings of the namespace for a regex subscription (topic watchers
            report new topics at once where the broker supports them).
        initial_position: InitialPosition, default=InitialPosition.Latest
            Where a new subscription starts: ``Latest`` or ``Earliest``.
        max_pending_chunked_message: int, default=10
            Chunked messages reassembled at once; beyond it the oldest is given up.
        auto_ack_oldest_chunked_message_on_queue_full: bool, default=False
            Acknowledge (instead of redeliver) a chunked message given up for room.
        start_message_id_inclusive: bool, default=False
            A seek to a message id delivers that message too.
        key_shared_policy: KeySharedPolicy, optional
            Key_Shared options (sticky hash ranges, out-of-order delivery).
        batch_index_ack_enabled: bool, default=True
            Acknowledge single messages of a batch (the official client's default is False; see
            docs/client.md).
        dead_letter_policy: ConsumerDeadLetterPolicy, optional
            Move a message redelivered too often to a dead-letter topic.
        durable: bool, default=True
            False: a non-durable subscription (the broker keeps no cursor after the consumer left).
        priority_level: int, default=0
            Shared subscriptions: lower levels get messages first.
        ack_group_time_ms: int, default=100
            Acknowledgements are grouped for this long (0: each sent at once).
        expire_time_of_incomplete_chunked_message_ms: int, default=60000
            A chunked message still incomplete after this long is given up.
        max_message_size: int, optional
            Decompression limit; by default the broker's ``max_message_size``.
        force_topic_creation: bool, default=True
            Let the broker create a missing topic (as the official client always does); False:
            a missing topic is TopicNotFound (the pipelines source never creates topics).

        Returns
        -------
        Consumer

        Raises
        ------
        ServerError
            The broker refused the subscription (e.g. ConsumerBusy on a taken Exclusive one).
        OperationTimeoutError
            The subscription could not be made within the operation timeout.
        """
        options = subscribe_options(locals())
        return Consumer(self, self._run(self._core.subscribe(topic, subscription_name, **options)))

    def create_reader(
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
        """Create a reader: a non-durable subscription positioned at a message id.

        Parameters
        ----------
        topic: str
            The topic name.
        start_message_id: MessageId
            ``MessageId.earliest``, ``MessageId.latest``, or a message id: the first message read
            is the one after it (that one too with ``start_message_id_inclusive``). A serialized
            id comes back with ``MessageId.deserialize(data)``.
        receiver_queue_size: int, default=1000
            Messages the broker may push ahead of ``read_next``.
        reader_name: str, optional
            The reader's (consumer's) name.
        subscription_role_prefix: str, optional
            Prefix of the generated subscription name (``reader`` when not given).
        is_read_compacted: bool, default=False
            Read the compacted view of the topic.
        start_message_id_inclusive: bool, default=False
            Deliver ``start_message_id`` itself first.

        Returns
        -------
        Reader

        Raises
        ------
        ServerError
            The broker refused the subscription.
        OperationTimeoutError
            The reader could not be created within the operation timeout.
        """
        options = reader_options(locals())
        return Reader(self, self._run(self._core.create_reader(topic, start_message_id, **options)))

    def read_arrow(
        self,
        topic: str,
        start: MessageId,
        end: MessageId,
        *,
        partition: int = -1,
        batch_rows: int = 10_000,
        receiver_queue_size: int = 10_000,
        idle_timeout: float | None = None,
        on_first: Callable[[MessageId], None] | None = None,
        on_corrupt: Literal["raise", "skip", "rows"] = "raise",
    ) -> Iterator[Any]:
        """The messages in (start, end] of one topic-partition as pyarrow RecordBatches.

        Needs the ``arrow`` extra (pyarrow). Not in the official client.

        Parameters
        ----------
        topic: str
            One topic-partition (or a non-partitioned topic).
        start, end: MessageId
            The range: messages after ``start`` up to and including ``end``.
        partition: int, default=-1
            The partition index written into the message ids.
        batch_rows: int, default=10000
            Rows per RecordBatch (at most).
        receiver_queue_size: int, default=10000
            Messages the broker may push ahead.
        idle_timeout: float, optional
            Give up (OperationTimeoutError) when nothing arrives for this many seconds.
        on_first: callable, optional
            Called with the id of the first entry delivered, before any rows.
        on_corrupt: {"raise", "skip", "rows"}, default="raise"
            What a corrupt entry in the range becomes (docs/client.md).

        Yields
        ------
        pyarrow.RecordBatch

        Raises
        ------
        CorruptMessageError
            A corrupt entry in the range with ``on_corrupt="raise"``.
        """
        agen = read_arrow(
            self._core,
            topic,
            start,
            end,
            partition=partition,
            batch_rows=batch_rows,
            receiver_queue_size=receiver_queue_size,
            idle_timeout=idle_timeout,
            on_first=on_first,
            on_corrupt=on_corrupt,
        )

        async def next_batch() -> Any:
            return await agen.__anext__()

        try:
            while True:
                try:
                    yield self._run(next_batch())
                except StopAsyncIteration:
                    return
        finally:
            if not self._bridge.stopped:  # an abandoned iteration still closes its reader
                self._run(agen.aclose())

    def check_connection(self, timeout_seconds: float = 5.0) -> str:
        """Connect to the service URL once, without retries (a preflight before long work).

        Parameters
        ----------
        timeout_seconds: float, default=5.0
            How long each host of the service URL may take to complete the handshake.

        Returns
        -------
        str
            The URL of the host that answered.

        Raises
        ------
        ConnectError
            No host completed the handshake (``retriable`` is False when trying again cannot help:
            unknown host, a port that does not speak the Pulsar protocol).
        """
        return self._run(self._core.check_connection(timeout_seconds))

    def get_topic_partitions(self, topic: str, *, create: bool = True) -> list[str]:
        """The partitions of a topic (the topic itself when it is not partitioned).

        Parameters
        ----------
        topic: str
            The topic name.
        create: bool, default=True
            Whether the broker may create a missing topic to answer (False: a missing topic is
            TopicNotFound, as Pulsar answers when auto-creation is not asked for).

        Returns
        -------
        list of str
            Fully qualified names (``persistent://public/default/t-partition-0``, ...).
        """
        return self._run(self._core.get_topic_partitions(topic, create=create))

    def get_schema(self, topic: str, version: bytes | None = None) -> SchemaInfo | None:
        """The topic's schema (GET_SCHEMA). Not in the official client.

        Parameters
        ----------
        topic: str
            The topic name.
        version: bytes, optional
            A schema version; the latest when not given.

        Returns
        -------
        SchemaInfo or None
            None when the topic has no schema.
        """
        return self._run(self._core.get_schema(topic, version))

    def get_topics_of_namespace(self, namespace: str, pattern: str | None = None) -> list[str]:
        """Persistent topics of a namespace (GET_TOPICS_OF_NAMESPACE). Not in the official client.

        Parameters
        ----------
        namespace: str
            ``tenant/namespace``.
        pattern: str, optional
            A regex the topic (or, for a partition, its parent topic) must fully match.

        Returns
        -------
        list of str
            Topic names, partitions listed one by one.
        """
        return self._run(self._core.topics_of_namespace(namespace, pattern))

    def close(self) -> None:
        """Close every producer (pending messages are flushed), consumer and reader, then the
        connections. Closing a closed client does nothing."""
        if self._closed:
            return
        self._closed = True
        _open_clients.discard(self)
        try:
            self._run(self._core.close(), timeout=60)
        finally:
            self._bridge.stop()


async def _make_core(service_url: str, options: dict[str, Any]) -> AsyncClient:
    return AsyncClient(service_url, **options)


def _connected(handlers: list[Any]) -> bool:
    return bool(handlers) and all(h.state is HandlerState.READY for h in handlers)


class Producer(_Closeable):
    """A producer, made by :meth:`Client.create_producer`.

    ``send_async`` hands messages to the client's loop without a round trip per message.
    """

    def __init__(self, client: Client, core: AsyncProducer) -> None:
        self._client = client
        self._core = core
        cfg = core.partitions[0].config
        limit = cfg.max_pending_messages * len(core.partitions)
        self._slots = threading.Semaphore(limit) if limit > 0 else None
        self._block = cfg.block_if_queue_full
        self._submitted: deque[tuple[bytes, dict[str, Any], Callback | None]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self._drain_task: asyncio.Task[None] | None = None
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
        return not self._closed and _connected(list(self._core.partitions))

    def send(
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
        """Publish a message and wait until the broker stored it.

        Parameters
        ----------
        content: bytes
            The payload.
        properties: dict, optional
            Application-defined string properties.
        partition_key: str, optional
            The message key; a keyed message goes to the key's partition.
        ordering_key: str or bytes, optional
            The key Key_Shared subscriptions order and route by (the partition key when absent).
        sequence_id: int, optional
            The message's sequence id (deduplication); the next one when not given.
        event_timestamp: int, optional
            The event time, in ms since the epoch.
        deliver_at: int, optional
            Do not deliver before this time (ms since the epoch, UTC); Shared subscriptions only.
        deliver_after: timedelta, optional
            Do not deliver before this delay has passed.

        Returns
        -------
        MessageId
            Where the message is stored.

        Raises
        ------
        SendTimeoutError, ProducerQueueIsFullError, MessageTooBigError, ServerError
            The send failed.
        """
        done = threading.Event()
        box: list[tuple[BaseException | None, MessageId | None]] = []

        def callback(err: BaseException | None, mid: MessageId | None) -> None:
            box.append((err, mid))
            done.set()

        self.send_async(
            content,
            callback,
            properties=properties,
            partition_key=partition_key,
            ordering_key=ordering_key,
            sequence_id=sequence_id,
            event_timestamp=event_timestamp,
            deliver_at=deliver_at,
            deliver_after=deliver_after,
        )
        done.wait()
        err, mid = box[0]
        if err is not None:
            raise err
        assert mid is not None
        return mid

    def send_async(
        self,
        content: bytes,
        callback: Callback | None,
        *,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | bytes | None = None,
        sequence_id: int | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> None:
        """Queue a message; ``callback(error, message_id)`` runs on the client's loop thread.

        With ``max_pending_messages`` messages waiting, this blocks (``block_if_queue_full``) or
        reports ProducerQueueIsFullError to the callback (raises it when there is none).

        Parameters
        ----------
        content: bytes
            The payload.
        callback: callable or None
            ``callback(error, message_id)``: ``error`` is None on success.
        properties, partition_key, ordering_key, sequence_id, event_timestamp, deliver_at, deliver_after
            As in :meth:`send`.
        """
        kw = send_args(
            properties, partition_key, ordering_key, sequence_id, event_timestamp, deliver_at, deliver_after
        )
        if self._slots is not None and not self._slots.acquire(blocking=self._block):
            err = ProducerQueueIsFullError(f"{self._core.topic}: the pending queue is full")
            if callback is None:
                raise err
            callback(err, None)
            return
        with self._lock:
            self._submitted.append((bytes(content), kw, callback))
            if self._scheduled:
                return
            self._scheduled = True
        self._client._bridge.call_soon(self._start_drain)

    def send_arrow(
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
        """Publish the rows of a pyarrow RecordBatch or Table, in order; wait until all are stored.

        Each row is one message, exactly as :meth:`send` would send it (same batching limits,
        sequence ids, deduplication, resend on reconnect, send timeout and refusal handling),
        but the batch entries are encoded straight from the Arrow columns. Messages sent before
        (also with ``send_async``) are stored before the rows. On a partitioned topic each row
        goes where ``send`` would send it. Needs pyarrow (the ``arrow`` extra). Each entry waits
        for room in the pending queue (``max_pending_messages``), whatever
        ``block_if_queue_full`` says.

        Parameters
        ----------
        batch: pyarrow.RecordBatch or pyarrow.Table
            The rows to send.
        value: str
            The payload column: binary or string, no nulls.
        key: str or None
            The partition key column (string; a null key: none), used when the batch has it.
        properties: str or None
            The properties column (map<string, string>), used when the batch has it.
        event_time: str or None
            The event time column (timestamp, or integer ms since the epoch; null or 0: none),
            used when the batch has it.
        sequence_id: str or None
            The sequence id column (integers increasing from row to row), used when the batch
            has it; otherwise the producer's next ids (or ``first_sequence_id``) are taken.
        first_sequence_id: int, optional
            The first row's sequence id, the next rows' ids following it one by one (not on a
            partitioned topic).

        Returns
        -------
        SendArrowResult
            ``first`` and ``last`` message ids and the ``count`` of messages stored; on a
            partitioned topic, one such result per partition in ``partitions``.

        Raises
        ------
        ArrowColumnError, ArrowValueError, InvalidConfigurationError
            A column is missing or cannot be sent, or the ids are given twice (nothing was sent).
        SendTimeoutError, SendRefusedError, MessageTooBigError, ServerError
            A send failed; earlier entries may be stored (with explicit sequence ids, send the
            whole batch again: deduplication drops what was stored).
        """
        return self._client._run(
            self._send_arrow(
                batch,
                value=value,
                key=key,
                properties=properties,
                event_time=event_time,
                sequence_id=sequence_id,
                first_sequence_id=first_sequence_id,
            )
        )

    async def _send_arrow(self, batch: Any, **kw: Any) -> SendArrowResult:
        while self._drain_task is not None and not self._drain_task.done():  # send_async's first
            await self._drain_task
        return await self._core.send_arrow(batch, **kw)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._submitted:
                    self._scheduled = False
                    return
                content, kw, callback = self._submitted.popleft()
            try:
                fut = await self._core.send_async(content, **kw)
            except Exception as exc:  # refused before queuing (closed, too big, ...): the caller hears it
                self._finished(callback, exc, None)
                continue
            fut.add_done_callback(functools.partial(self._settle, callback))

    def _settle(self, callback: Callback | None, fut: asyncio.Future[MessageId]) -> None:
        exc = fut.exception()
        self._finished(callback, exc, None if exc is not None else fut.result())

    def _finished(self, callback: Callback | None, exc: BaseException | None, mid: MessageId | None) -> None:
        if self._slots is not None:
            self._slots.release()
        if callback is not None:
            callback(exc, mid)

    async def _flush(self) -> None:
        while self._drain_task is not None and not self._drain_task.done():
            await self._drain_task
        await self._core.flush()

    def flush(self) -> None:
        """Send what is queued and wait until every message sent so far has its receipt (or failed)."""
        while True:
            self._client._run(self._flush())
            with self._lock:
                if not self._submitted and not self._scheduled:
                    return

    def close(self) -> None:
        """Flush, then close the producer. Closing it again, or after its client, does nothing."""
        if self._closed or self._client._bridge.stopped:
            self._closed = True
            return
        self.flush()
        self._client._run(self._core.close())
        self._closed = True


class _Receiving(_Closeable):
    """Blocking receive straight from the consumer's queue: no loop round trip while messages wait."""

    def __init__(self, client: Client, core: AsyncConsumer) -> None:
        self._client = client
        self._core = core
        self._calls = LoopCalls(client._bridge)

    def topic(self) -> str:
        """The topic name (topics joined by ``,`` for a multi-topic or regex consumer)."""
        return ",".join(self._core.topics)

    def is_connected(self) -> bool:
        """Whether every topic-partition's consumer is connected and ready."""
        return not self._core.closed and _connected(list(self._core.parts))

    def _receive(self, timeout_millis: int | None) -> Message:
        """The next message: taken from the queue on this thread (lock-free, no loop round trip,
        see :mod:`~pulsarwire.client.receive_queue`); only an empty queue makes it wait."""
        core = self._core
        queue = core.queue
        deadline: float | None = None
        while True:
            if core.closed:
                raise AlreadyClosedError("consumer is closed")
            if queue.errors:
                raise queue.errors.popleft()
            msg = queue.take()
            if msg is not None:
                return msg
            if core.parts and all(p.end_of_topic for p in core.parts):
                raise ReachedEndOfTopicError(f"end of topic {', '.join(core.topics)}")
            now = time.monotonic()
            if deadline is None:  # the clock starts when the queue is first found empty
                deadline = math.inf if timeout_millis is None else now + timeout_millis / 1000
            remaining = deadline - now
            if remaining <= 0:
                raise OperationTimeoutError(f"no message within {timeout_millis} ms")
            queue.wait_ready(min(remaining, 0.5), stop=core.closed)

    def _must_return(self, have: list[Message]) -> bool:
        """A batch being gathered stops early: ``receive`` would raise (closed, an error, the end of
        the topic), and the messages already taken must reach the caller first."""
        core = self._core
        ended = bool(core.parts) and all(p.end_of_topic for p in core.parts)
        return bool(have) and (core.closed or bool(core.queue.errors) or ended)

    def _seek(self, messageid: MessageId | int) -> None:
        self._calls.drain()
        self._client._run(self._core.seek(messageid))

    def close(self) -> None:
        """Close (pending acknowledgements are sent first). Closing it again, or after its client,
        does nothing."""
        if self._core.closed or self._client._bridge.stopped:
            return
        self._calls.drain()
        self._client._run(self._core.close())


class Consumer(_Receiving):
    """A consumer, made by :meth:`Client.subscribe`: ``receive``, acknowledgements, seek, ..."""

    def subscription_name(self) -> str:
        """The subscription's name."""
        return self._core.parts[0].config.subscription_name if self._core.parts else ""

    def consumer_name(self) -> str:
        """The consumer's name (empty when none was given)."""
        return (self._core.parts[0].config.consumer_name or "") if self._core.parts else ""

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message, waiting for one.

        Parameters
        ----------
        timeout_millis: int, optional
            Wait at most this long; forever when not given.

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
        AlreadyClosedError
            The consumer is closed.
        """
        core = self._core
        if not core.closed and not core.queue.errors:  # the fast path: a message is waiting
            msg = core.queue.take()
            if msg is not None:
                return msg
        return self._receive(timeout_millis)

    def batch_receive(
        self, max_num_messages: int = 100, max_num_bytes: int = 10 * 1024 * 1024, timeout_ms: int = 100
    ) -> list[Message]:
        """Up to ``max_num_messages`` messages or ``max_num_bytes`` bytes, waiting at most ``timeout_ms``.

        The official client takes these limits from ``batch_receive_policy`` at subscribe time.

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
        queue = self._core.queue
        deadline = time.monotonic() + timeout_ms / 1000
        if self._core.closed:
            raise AlreadyClosedError("consumer is closed")
        out, size = queue.take_many(max_num_messages, max_num_bytes)  # what waits, in one go
        while len(out) < max_num_messages and size < max_num_bytes and not self._must_return(out):
            left = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                msg = self._receive(left)
            except OperationTimeoutError:
                break
            out.append(msg)
            size += len(msg.data())
            more, more_size = queue.take_many(max_num_messages - len(out), max_num_bytes - size)
            out += more
            size += more_size
        return out

    def _check_open(self) -> None:
        if self._core.closed:
            raise AlreadyClosedError("consumer is closed")

    def _ack(self, kind: AckKind, message: Message | MessageId) -> None:
        """Group the ack on this thread (:meth:`AckGroup.from_thread`); the loop is woken once per
        group, applies the group before any resubscribe and sends it within the group time."""
        core = self._core
        if core.closed or self._client._bridge.stopped:
            raise AlreadyClosedError("consumer is closed")
        owner = core.owner_of(message)
        if isinstance(message, Message):  # individual: the Message itself, which need not make its id
            ack: ThreadAck = message if kind == "individual" else (kind, message.message_id())
        else:
            ack = (kind, message)
        if owner.acks.from_thread(ack):
            self._client._bridge.call_soon(owner.thread_acks_waiting)

    def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (acks are grouped and sent within ``ack_group_time_ms``).

        Parameters
        ----------
        message: Message or MessageId
            The message (a MessageId alone is enough for a single topic-partition).
        """
        # The fast path of :meth:`_ack`, for a Message of a topic this consumer reads: it runs for
        # every message, so it makes no call it can do without.
        core = self._core
        if type(message) is Message and not core.closed and not self._client._bridge.stopped:
            owner = core.by_topic.get(message[3].topic)
            if owner is not None:
                if owner.acks.from_thread(message):
                    self._client._bridge.call_soon(owner.thread_acks_waiting)
                return
        self._ack("individual", message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge a message and every message before it on its topic-partition.

        Parameters
        ----------
        message: Message or MessageId
            The last message acknowledged.

        Raises
        ------
        InvalidConfigurationError
            On a Shared or KeyShared subscription.
        """
        self._core.check_cumulative()
        self._ack("cumulative", message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Ask for a redelivery of a message after ``negative_ack_redelivery_delay_ms``.

        Parameters
        ----------
        message: Message or MessageId
            The message that failed to be processed.
        """
        self._ack("negative", message)

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the client's loop after everything submitted so far (tests use it)."""
        self._calls.drain()

        async def go() -> None:
            fn(*args)

        self._client._run(go())

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every message received and not yet acknowledged."""
        self._check_open()
        self._calls.submit(self._core.redeliver_unacknowledged_messages)
        self._calls.drain()

    def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time.

        Parameters
        ----------
        messageid: MessageId or int
            A message id (``MessageId.earliest``, ``MessageId.latest`` included) or a publish
            time in ms since the epoch.
        """
        self._seek(messageid)

    def get_last_message_id(self) -> MessageId:
        """The id of the last message stored on the topic (one topic-partition only)."""
        return self._client._run(self._core.get_last_message_id())

    def get_backlog(self) -> dict[str, int]:
        """topic-partition → messages not yet acknowledged on this subscription, as the broker counts.

        Acknowledgements made before the call go out first: the answer includes them.
        """
        self._calls.drain()
        return self._client._run(self._core.backlog(flush_acks=True))

    def get_mark_delete_positions(self) -> dict[str, MessageId | None]:
        """topic-partition → the subscription's mark-delete position: every message up to it is
        acknowledged (Pulsar's ``markDeletePosition``; the batch index is not part of it). None
        where the broker does not report it. Acknowledgements made before the call go out first.
        """
        self._calls.drain()
        return self._client._run(self._core.mark_delete_positions(flush_acks=True))

    def unsubscribe(self) -> None:
        """Delete the subscription on the broker and close this consumer."""
        self._calls.drain()
        self._client._run(self._core.unsubscribe())


class Reader(_Receiving):
    """A reader, made by :meth:`Client.create_reader`."""

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message, waiting for one.

        Parameters
        ----------
        timeout_millis: int, optional
            Wait at most this long; forever when not given.

        Returns
        -------
        Message

        Raises
        ------
        OperationTimeoutError
            No message within ``timeout_millis``.
        ReachedEndOfTopicError
            The topic was terminated and everything was read.
        """
        return self._receive(timeout_millis)

    def has_message_available(self) -> bool:
        """Whether a message after the last one read is stored on the topic."""
        self._calls.drain()
        return self._client._run(self._core.has_message_available())

    def seek(self, messageid: MessageId | int) -> None:
        """Move the reader to a message id or a publish time.

        Parameters
        ----------
        messageid: MessageId or int
            A message id or a publish time in ms since the epoch.
        """
        self._seek(messageid)
