"""The blocking API, named like the official Python client, on a background event loop.

Each :class:`Client` owns one daemon thread running an asyncio loop with the
:class:`~pulsarwire.client.core.AsyncClient`; blocking calls submit coroutines
to it and wait. Nothing of the caller's event loop is assumed, so it works in
scripts and in Spark Python workers. Clients still open at interpreter exit
are closed (pending messages flushed) by an ``atexit`` hook.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    AlreadyClosedError,
    InvalidConfigurationError,
    OperationTimeoutError,
    ProducerQueueIsFullError,
    ReachedEndOfTopicError,
)
from pulsarwire.proto import pb

from .bulk import read_arrow
from .consumer import Consumer as AsyncConsumer
from .consumer import DeadLetterPolicy, KeySharedPolicy
from .core import AsyncClient
from .message import Message
from .producer import Producer as AsyncProducer
from .routing import HashingScheme, RoutingMode
from .schema import SchemaInfo

R = TypeVar("R")
__all__ = [
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerType",
    "DeadLetterPolicy",
    "InitialPosition",
    "KeySharedPolicy",
    "Producer",
    "Reader",
]
Callback = Callable[[BaseException | None, MessageId | None], None]


class ConsumerType:
    Exclusive = pb.CommandSubscribe.Exclusive
    Shared = pb.CommandSubscribe.Shared
    Failover = pb.CommandSubscribe.Failover
    KeyShared = pb.CommandSubscribe.Key_Shared


class InitialPosition:
    Latest = pb.CommandSubscribe.Latest
    Earliest = pb.CommandSubscribe.Earliest


class CompressionType:
    NONE = pb.NONE
    LZ4 = pb.LZ4
    ZLib = pb.ZLIB
    ZLIB = pb.ZLIB
    ZSTD = pb.ZSTD
    SNAPPY = pb.SNAPPY


_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for client in list(_open_clients):
        with contextlib.suppress(Exception):  # interpreter exit: nothing useful left to do with an error
            client.close()


class Client:
    """``Client("pulsar://localhost:6650", authentication=AuthenticationToken(...), ...)``."""

    def __init__(self, service_url: str, **options: Any) -> None:
        self._stopped = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pulsarwire-client", daemon=True)
        self._thread.start()
        self._core = self._run(self._make(service_url, options))
        self._closed = False
        _open_clients.add(self)

    @staticmethod
    async def _make(service_url: str, options: dict[str, Any]) -> AsyncClient:
        return AsyncClient(service_url, **options)

    def _run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        if self._stopped:  # the loop is gone: nothing would ever run it
            coro.close()
            raise AlreadyClosedError("client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        *,
        hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
        message_routing_mode: RoutingMode = RoutingMode.RoundRobinPartition,
        message_router: Callable[[str | None, int], int] | None = None,
        **config: Any,
    ) -> Producer:
        core = self._run(
            self._core.create_producer(
                topic,
                producer_name=producer_name,
                hashing_scheme=hashing_scheme,
                message_routing_mode=message_routing_mode,
                message_router=message_router,
                **config,
            )
        )
        return Producer(self, core)

    def subscribe(self, topic: Any, subscription_name: str, **options: Any) -> Consumer:
        """Subscribe to a topic, a list of topics or a compiled regex (see ConsumerConfig for options)."""
        if "start_message_id" in options:
            raise TypeError("use create_reader for a start message id")
        return Consumer(self, self._run(self._core.subscribe(topic, subscription_name, **options)))

    def create_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> Reader:
        return Reader(self, self._run(self._core.create_reader(topic, start_message_id, **options)))

    def read_arrow(self, topic: str, start: MessageId, end: MessageId, **options: Any) -> Iterator[Any]:
        """The messages in (start, end] of one topic-partition as pyarrow RecordBatches (see client.bulk)."""
        agen = read_arrow(self._core, topic, start, end, **options)

        async def next_batch() -> Any:
            return await agen.__anext__()

        try:
            while True:
                try:
                    yield self._run(next_batch())
                except StopAsyncIteration:
                    return
        finally:
            if not self._stopped:  # an abandoned iteration still closes its reader
                self._run(agen.aclose())

    def check_connection(self, timeout_seconds: float = 5.0) -> str:
        """Connect to the service URL once, without retries (see AsyncClient.check_connection)."""
        return self._run(self._core.check_connection(timeout_seconds))

    def get_topic_partitions(self, topic: str, *, create: bool = True) -> list[str]:
        """The partitions of ``topic`` (``[topic]`` when not partitioned); ``create=False`` asks the
        broker not to create a missing topic (Pulsar answers TopicNotFound)."""
        return self._run(self._core.get_topic_partitions(topic, create=create))

    def get_schema(self, topic: str, version: bytes | None = None) -> SchemaInfo | None:
        """The topic's latest schema (or ``version``), None when it has none (GET_SCHEMA)."""
        return self._run(self._core.get_schema(topic, version))

    def get_topics_of_namespace(self, namespace: str, pattern: str | None = None) -> list[str]:
        """Persistent topics (partitions listed one by one) of ``tenant/namespace``, full-matching
        ``pattern`` when given (a partition matches when its parent topic does)."""
        return self._run(self._core.topics_of_namespace(namespace, pattern))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _open_clients.discard(self)
        try:
            self._run(self._core.close(), timeout=60)
        finally:
            self._stopped = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


class Producer:
    """Blocking producer. ``send_async`` hands messages to the loop without a round trip per message."""

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

    def topic(self) -> str:
        return self._core.topic

    def producer_name(self) -> str:
        return self._core.producer_name

    def last_sequence_id(self) -> int:
        return self._core.last_sequence_id()

    def send(self, content: bytes, **kw: Any) -> MessageId:
        """Send and wait for the receipt; raises the send's error."""
        done = threading.Event()
        box: list[tuple[BaseException | None, MessageId | None]] = []

        def callback(err: BaseException | None, mid: MessageId | None) -> None:
            box.append((err, mid))
            done.set()

        self.send_async(content, callback, **kw)
        done.wait()
        err, mid = box[0]
        if err is not None:
            raise err
        assert mid is not None
        return mid

    def send_async(self, content: bytes, callback: Callback | None, **kw: Any) -> None:
        """Queue a message; ``callback(error, message_id)`` runs on the client's loop thread.

        With ``max_pending_messages`` messages waiting, this blocks (``block_if_queue_full``) or
        reports ProducerQueueIsFullError to the callback (raises it when there is none).
        """
        if self._slots is not None and not self._slots.acquire(blocking=self._block):
            err = ProducerQueueIsFullError(f"{self._core.topic}: the pending queue is full")
            if callback is None:
                raise err
            callback(err, None)
            return
        with self._lock:
            self._submitted.append((bytes(content), _send_args(kw), callback))
            if self._scheduled:
                return
            self._scheduled = True
        self._client._loop.call_soon_threadsafe(self._start_drain)

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
        self.flush()
        self._client._run(self._core.close())


def _send_args(kw: dict[str, Any]) -> dict[str, Any]:
    """Map the official client's keyword names onto ours."""
    out = dict(kw)
    if "deliver_after" in out:
        after = out.pop("deliver_after")
        if after is not None:
            ms = int(after.total_seconds() * 1000) if hasattr(after, "total_seconds") else int(after)
            out["deliver_at"] = int(time.time() * 1000) + ms
    if isinstance(out.get("ordering_key"), str):
        out["ordering_key"] = out["ordering_key"].encode()
    return out


class _LoopCalls:
    """Calls queued from the caller's thread and run on the client's loop in order.

    The loop is woken at most once per ``DELAY`` (or at once when ``BURST`` calls wait), so a
    receive/ack loop costs no thread hand-off per message.
    """

    DELAY = 0.002
    BURST = 256

    def __init__(self, client: Client) -> None:
        self._client = client
        self._calls: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self._urgent = False

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._client._loop
        with self._lock:
            self._calls.append((fn, args))
            if not self._scheduled:
                self._scheduled = True
                loop.call_soon_threadsafe(loop.call_later, self.DELAY, self._run)
            elif len(self._calls) >= self.BURST and not self._urgent:
                self._urgent = True
                loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._calls:
                    self._scheduled = self._urgent = False
                    return
                fn, args = self._calls.popleft()
            fn(*args)

    def drain(self) -> None:
        """Wait until everything submitted so far ran."""

        async def nothing() -> None:
            return None

        while True:
            self._client._run(nothing())
            with self._lock:
                if not self._calls and not self._scheduled:
                    return


class _Receiving:
    """Blocking receive straight from the consumer's queue: no loop round trip while messages wait."""

    def __init__(self, client: Client, core: AsyncConsumer) -> None:
        self._client = client
        self._core = core
        self._calls = _LoopCalls(client)

    def topic(self) -> str:
        return ",".join(self._core.topics)

    def _receive(self, timeout_millis: int | None) -> Message:
        core = self._core
        queue = core.queue
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            if core.closed:
                raise AlreadyClosedError("consumer is closed")
            if queue.errors:
                raise queue.errors.popleft()
            item = queue.take()
            if item is not None:
                owner, msg = item
                owner.last_dequeued = msg.message_id()  # now: a resubscribe must start after it
                self._calls.submit(functools.partial(owner.dequeued, track_position=False), msg)
                return msg
            if core.parts and all(p.end_of_topic for p in core.parts):
                raise ReachedEndOfTopicError(f"end of topic {', '.join(core.topics)}")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise OperationTimeoutError(f"no message within {timeout_millis} ms")
            with queue.ready:
                if not len(queue) and not queue.errors and not core.closed:
                    queue.ready.wait(0.5 if remaining is None else min(remaining, 0.5))


class Consumer(_Receiving):
    """Blocking consumer: ``receive``, acks, seek, ... as in the official client."""

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises OperationTimeoutError, ReachedEndOfTopicError or CorruptMessageError."""
        return self._receive(timeout_millis)

    def batch_receive(
        self, max_num_messages: int = 100, max_num_bytes: int = 10 * 1024 * 1024, timeout_ms: int = 100
    ) -> list[Message]:
        out: list[Message] = []
        size = 0
        deadline = time.monotonic() + timeout_ms / 1000
        while len(out) < max_num_messages and size < max_num_bytes:
            left = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                msg = self._receive(left)
            except OperationTimeoutError:
                break
            out.append(msg)
            size += len(msg.data())
        return out

    def _check_open(self) -> None:
        if self._core.closed:
            raise AlreadyClosedError("consumer is closed")

    def _ack(self, kind: str, message: Message | MessageId) -> None:
        self._check_open()
        owner, mid = self._core.owner_of(message)
        owner.ack_from_thread(kind, mid)  # ordered before any resubscribe of that consumer
        self._calls.submit(owner.flush_acks_soon)

    def acknowledge(self, message: Message | MessageId) -> None:
        self._ack("individual", message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        kind = self._core.parts[0].config.consumer_type if self._core.parts else None
        if kind in (pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared):
            raise InvalidConfigurationError("cumulative acknowledgement is not allowed on Shared/Key_Shared")
        self._ack("cumulative", message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._ack("negative", message)

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the client's loop after everything submitted so far (tests use it)."""
        self._calls.drain()

        async def go() -> None:
            fn(*args)

        self._client._run(go())

    def redeliver_unacknowledged_messages(self) -> None:
        self._check_open()
        self._calls.submit(self._core.redeliver_unacknowledged_messages)
        self._calls.drain()

    def seek(self, target: MessageId | int) -> None:
        """Seek to a message id or a publish time in ms."""
        self._calls.drain()
        self._client._run(self._core.seek(target))

    def get_last_message_id(self) -> MessageId:
        return self._client._run(self._core.get_last_message_id())

    def get_backlog(self) -> dict[str, int]:
        """topic-partition → messages not yet acknowledged on this subscription, as the broker counts.

        Acknowledgements made before the call go out first: the answer includes them.
        """
        self._calls.drain()
        return self._client._run(self._core.backlog())

    def unsubscribe(self) -> None:
        self._calls.drain()
        self._client._run(self._core.unsubscribe())

    def close(self) -> None:
        self._calls.drain()
        self._client._run(self._core.close())


class Reader(_Receiving):
    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._receive(timeout_millis)

    def has_message_available(self) -> bool:
        self._calls.drain()
        return self._client._run(self._core.has_message_available())

    def seek(self, target: MessageId | int) -> None:
        self._calls.drain()
        self._client._run(self._core.seek(target))

    def close(self) -> None:
        self._calls.drain()
        self._client._run(self._core.close())
