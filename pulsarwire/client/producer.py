"""Producers: batching, compression, chunking, pending queue, receipts, reconnect with resend.

:class:`PartitionProducer` produces to one topic (or one partition). Messages
go through a batch container (by count, bytes and delay) or straight to an
:class:`OpSend` (one SEND frame), which waits in ``pending`` until its receipt.
Receipts must arrive in order: the oldest pending op is the only one a receipt
may complete; an older sequence id is a stale duplicate (ignored), a newer one
means the broker lost something and the producer reconnects. A receipt for
-1:-1 is a deduplicated success.

When the connection is lost, the broker closes the producer or a send fails
with a retriable error, the producer looks the topic up again, re-creates
itself with the same name and resends every pending op with its original
sequence ids, in order — with broker deduplication this is exactly-once.

:class:`Producer` fans out over the partitions of a partitioned topic with a
:class:`pulsarwire.client.routing.Router`.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
import uuid as uuidlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pulsarwire.codec.batch import encode_batch
from pulsarwire.codec.compression import compress
from pulsarwire.codec.frames import new_command
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    AlreadyClosedError,
    ChecksumError,
    InvalidConfigurationError,
    LocalProtocolError,
    MessageTooBigError,
    ProducerBusy,
    ProducerQueueIsFullError,
    PulsarWireError,
    SendRefusedError,
    SendTimeoutError,
    TopicTerminatedError,
    UnexpectedReceiptError,
)
from pulsarwire.proto import pb
from pulsarwire.protocol.connection import Event, ProducerClosedByBroker, SendError, SendReceipt
from pulsarwire.protocol.state import (
    CLOSED_AT_ONCE,
    STARTABLE,
    HandlerState,
)

from .creation import Creation, create
from .handler import Handler
from .retry import Decision, decide

if TYPE_CHECKING:
    from pulsarwire.io.connection import Connection

    from .arrow_send import ArrowRows
    from .context import ClientContext

log = logging.getLogger("pulsarwire.producer")
#: room kept in a batch for its metadata and per-message headers
BATCH_OVERHEAD = 4096
T = pb.BaseCommand


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    producer_name: str | None = None
    batching_enabled: bool = True
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    compression_type: int = pb.NONE
    send_timeout_millis: int = 30_000
    max_pending_messages: int = 1000
    block_if_queue_full: bool = False
    chunking_enabled: bool = False
    initial_sequence_id: int | None = None
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SendArrowResult:
    """What ``send_arrow`` stored: ``count`` messages, from ``first`` to ``last`` one after the
    other on one partition (both None when ``count`` is 0). On a partitioned topic ``partitions``
    holds one result per partition that got rows, by partition (their ids name it), and ``first``
    and ``last`` are None."""

    first: MessageId | None
    last: MessageId | None
    count: int
    partitions: tuple[SendArrowResult, ...] = ()


@dataclass(slots=True)
class _Message:
    payload: bytes
    sequence_id: int
    future: asyncio.Future[MessageId]
    properties: dict[str, str] | None
    partition_key: str | None
    ordering_key: bytes | None
    event_time: int | None
    deliver_at: int | None


@dataclass(slots=True)
class _ChunkContext:
    uuid: str
    num_chunks: int
    first_id: MessageId | None = None


@dataclass(slots=True)
class OpSend:
    """One SEND frame waiting for its receipt."""

    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    metadata: pb.MessageMetadata
    payload: bytes
    futures: list[asyncio.Future[MessageId]]
    created: float
    chunk_id: int = -1
    chunks: _ChunkContext | None = None

    def command(self, producer_id: int) -> pb.BaseCommand:
        cmd, s = new_command(T.SEND)
        s.producer_id = producer_id
        s.sequence_id = self.sequence_id
        if self.num_messages != 1:
            s.num_messages = self.num_messages
        if self.highest_sequence_id != self.sequence_id:
            s.highest_sequence_id = self.highest_sequence_id
        if self.chunks is not None:
            s.is_chunk = True
        return cmd


def _fail(futures: list[asyncio.Future[MessageId]], exc: BaseException) -> None:
    for f in futures:
        if not f.done():
            f.set_exception(exc)
            f.exception()  # the error is reported to whoever awaits it; don't log "never retrieved"


class PartitionProducer(Handler):
    KIND = "producer"
    BUSY = ProducerBusy

    def __init__(self, client: ClientContext, topic: str, partition: int, config: ProducerConfig) -> None:
        self.client = client
        self.topic = topic
        self.partition = partition
        self.config = config
        self.state = HandlerState.UNINITIALIZED
        self.name: str | None = config.producer_name
        self.user_named = config.producer_name is not None
        self.producer_id = 0
        self.epoch = 0
        self.connection: Connection | None = None
        self.creating: Creation | None = None  # the PRODUCER request in flight
        self.pending: deque[OpSend] = deque()
        self.pending_messages = 0
        self._batch: list[_Message] = []
        self._batch_bytes = 0
        self._batch_timer: asyncio.TimerHandle | None = None
        #: the refused sequence id a caller choosing its own ids must resend from (see _refused)
        self._hole: tuple[int, str] | None = None
        self._explicit_ids = False
        self._next_sequence = config.initial_sequence_id + 1 if config.initial_sequence_id is not None else 0
        self.last_sequence_id_published = (
            config.initial_sequence_id if config.initial_sequence_id is not None else -1
        )
        self._space = asyncio.Condition()
        self._reconnecting: asyncio.Task[None] | None = None
        self._timeout_task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    @property
    def is_ready(self) -> bool:
        return self.state is HandlerState.READY and self.connection is not None

    async def start(self) -> None:
        """Connect for the first time; raises when the producer cannot be created.

        Called again by the client's retries after a retriable failure; raises
        AlreadyClosedError once the producer was closed (or ended) meanwhile.
        """
        if self.state not in STARTABLE:
            raise self._error or AlreadyClosedError(f"producer on {self.topic} is {self.state.value}")
        self._set(HandlerState.CONNECTING)
        await self._connect(first=True)
        self._timeout_task = asyncio.get_running_loop().create_task(self._watch_timeouts())

    async def _connect(self, *, first: bool) -> None:
        conn = await self.client.connection_for(self.topic)
        self.producer_id = conn.proto.new_producer_id()
        cmd, p = new_command(T.PRODUCER)
        p.topic = self.topic
        p.producer_id = self.producer_id
        if self.name:
            p.producer_name = self.name
            p.user_provided_producer_name = self.user_named
        p.epoch = self.epoch
        for k, v in sorted(self.config.properties.items()):
            p.metadata.add(key=k, value=v)
        close, c = new_command(T.CLOSE_PRODUCER)
        c.producer_id = self.producer_id
        creation = Creation(conn, conn.producers, self.producer_id, self)
        resp = await create(self, creation, cmd, close, self.client.operation_timeout, "producer")
        ok = resp.command.producer_success
        self.name = ok.producer_name
        if first and self.config.initial_sequence_id is None and ok.last_sequence_id >= 0:
            self._next_sequence = ok.last_sequence_id + 1
            self.last_sequence_id_published = ok.last_sequence_id
        self.connection = conn
        self._set(HandlerState.READY)
        self._resend_pending()

    def _resend_pending(self) -> None:
        for op in list(self.pending):
            if self.connection is None or op not in self.pending:
                continue
            if not self._write(op):
                return

    # -- reconnect (Handler) ----------------------------------------------------------
    def _registry(self, connection: Connection) -> dict[int, Any]:
        return connection.producers

    def _handler_id(self) -> int:
        return self.producer_id

    def _describe(self) -> str:
        return f"producer {self.name} on {self.topic}"

    async def _recreate(self) -> None:
        self.epoch += 1
        await self._connect(first=False)

    def _give_up(self, exc: BaseException) -> None:
        self._error = exc
        if self.state not in (HandlerState.CLOSING, HandlerState.CLOSED):  # a closing one just closes
            terminated = isinstance(exc, TopicTerminatedError)
            self._set(HandlerState.TERMINATED if terminated else HandlerState.FAILED)
        self._fail_all(exc)

    def _fail_all(self, exc: BaseException) -> None:
        for op in self.pending:
            _fail(op.futures, exc)
        self.pending.clear()
        for m in self._batch:
            _fail([m.future], exc)
        self._batch.clear()
        self._batch_bytes = 0
        self.pending_messages = 0
        self._notify_space()

    # -- events from the connection ------------------------------------------------
    def on_event(self, event: Event) -> None:
        if isinstance(event, SendReceipt):
            self._on_receipt(event)
        elif isinstance(event, SendError):
            if isinstance(event.error, TopicTerminatedError):
                self._give_up(event.error)
            elif isinstance(event.error, ChecksumError):  # our bytes were damaged: that one alone
                op = next((o for o in self.pending if o.sequence_id == event.sequence_id), None)
                if op is not None:
                    self._drop_op(op, event.error)
            elif decide(event.error, 1, self.client.retry) is Decision.FAIL:
                self._refused(event.sequence_id, event.error)
            else:
                self._force_reconnect(f"send error {event.error}")
        elif isinstance(event, ProducerClosedByBroker):
            self._lost("closed by the broker")

    def _force_reconnect(self, reason: str) -> None:
        conn = self.connection
        self._lost(reason)
        if conn is not None:
            conn.close()

    def _on_receipt(self, r: SendReceipt) -> None:
        if not self.pending:
            log.warning("producer %s: receipt for %s with nothing pending", self.name, r.sequence_id)
            return
        op = self.pending[0]
        if r.sequence_id < op.sequence_id:
            log.debug(
                "producer %s: stale receipt %s (expecting %s)", self.name, r.sequence_id, op.sequence_id
            )
            return
        if r.sequence_id > op.sequence_id:
            err = UnexpectedReceiptError(
                f"receipt for {r.sequence_id} while {op.sequence_id} is the oldest pending"
            )
            log.warning("producer %s: %s; reconnecting to resend", self.name, err)
            self._force_reconnect(str(err))
            return
        self.pending.popleft()
        self.pending_messages -= op.num_messages
        self.last_sequence_id_published = max(self.last_sequence_id_published, op.highest_sequence_id)
        mid = r.message_id
        if op.chunks is not None:
            ctx = op.chunks
            if op.chunk_id == 0:
                ctx.first_id = MessageId(mid.ledger_id, mid.entry_id, self.partition)
            if op.chunk_id == ctx.num_chunks - 1:
                done = MessageId(
                    mid.ledger_id, mid.entry_id, self.partition, first_chunk_message_id=ctx.first_id
                )
                _complete(op.futures[0], done)
        elif op.num_messages == 1 and not op.metadata.HasField("num_messages_in_batch"):
            _complete(op.futures[0], MessageId(mid.ledger_id, mid.entry_id, self.partition))
        else:
            n = op.num_messages  # an entry of send_arrow has one future for all its messages
            for i, f in enumerate(op.futures):
                _complete(f, MessageId(mid.ledger_id, mid.entry_id, self.partition, i, n))
        self._notify_space()

    # -- sending -------------------------------------------------------------------
    def _notify_space(self) -> None:
        async def notify() -> None:
            async with self._space:
                self._space.notify_all()

        asyncio.get_running_loop().create_task(notify())

    async def _reserve(self) -> None:
        limit = self.config.max_pending_messages
        if limit <= 0:
            return
        if self.pending_messages + len(self._batch) < limit:
            return
        if not self.config.block_if_queue_full:
            raise ProducerQueueIsFullError(f"{limit} messages are pending on {self.topic}")
        async with self._space:
            await self._space.wait_for(
                lambda: self.pending_messages + len(self._batch) < limit or self.state is HandlerState.CLOSED
            )

    def _check_open(self) -> None:
        if self.state in (HandlerState.CLOSING, HandlerState.CLOSED):
            raise AlreadyClosedError(f"producer on {self.topic} is closed")
        if self._error is not None:
            raise self._error

    async def send(
        self,
        content: bytes,
        *,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: bytes | None = None,
        event_timestamp: int | None = None,
        sequence_id: int | None = None,
        deliver_at: int | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue one message; returns a future completed by its receipt."""
        self._check_open()
        await self._reserve()
        self._check_open()
        fut: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        if sequence_id is None:
            sequence_id = self._next_sequence
        elif (refusal := self._past_hole(sequence_id)) is not None:
            fut.set_exception(refusal)
            return fut
        self._next_sequence = max(self._next_sequence, sequence_id + 1)
        msg = _Message(
            bytes(content),
            sequence_id,
            fut,
            properties,
            partition_key,
            ordering_key,
            event_timestamp,
            deliver_at,
        )
        cfg = self.config
        if cfg.batching_enabled and deliver_at is None and not self._too_big(len(msg.payload)):
            room = min(cfg.batching_max_allowed_size_in_bytes, self._limit() - BATCH_OVERHEAD)
            if self._batch and self._batch_bytes + len(msg.payload) > room:
                self.flush_batch()  # the open batch would overflow: it goes first
            self._batch.append(msg)
            self._batch_bytes += len(msg.payload)
            if (
                len(self._batch) >= cfg.batching_max_messages
                or self._batch_bytes >= cfg.batching_max_allowed_size_in_bytes
            ):
                self.flush_batch()
            elif self._batch_timer is None:
                self._batch_timer = asyncio.get_running_loop().call_later(
                    cfg.batching_max_publish_delay_ms / 1000, self.flush_batch
                )
        else:
            self.flush_batch()
            self._send_single(msg)
        return fut

    def _past_hole(self, first_id: int) -> SendRefusedError | None:
        """For a send whose caller chose the sequence id ``first_id``: the refusal when it would
        be stored past a message the broker refused (see :meth:`_refused`), else None. An id at
        or before the refused one is the caller resending from it: that closes the hole."""
        self._explicit_ids = True
        if self._hole is None:
            return None
        if first_id > self._hole[0]:
            return SendRefusedError(self._hole[1])
        self._hole = None
        return None

    async def send_arrow(self, rows: ArrowRows, first_sequence_id: int | None = None) -> SendArrowResult:
        """Send ``rows`` in order, as ``send`` would send them one by one; wait for every receipt.

        Rows go into batch entries of up to ``batching_max_messages`` messages and
        ``batching_max_allowed_size_in_bytes`` bytes, each encoded straight from the columns
        (see :mod:`pulsarwire.client.arrow_send`); a row too large for a batch goes alone (or in
        chunks). Each entry waits for room in the pending queue (``max_pending_messages``),
        then flushes the open batch of ``send`` and takes the next sequence ids (or those of
        the rows, or from ``first_sequence_id`` on): ids always increase in the order the broker
        stores. Raises the first failure of an entry; later entries fail with it when the broker
        refused it (see :meth:`_refused`) and are not sent when it failed here (a row too big),
        so resending the rows from the first one never leaves a gap. With explicit ids, no entry
        straddles the last id the broker stored for the producer (stored rows go in an entry of
        their own, which deduplication drops): a rerun of the whole call stores the rest.
        """
        self._check_open()
        n = rows.count
        explicit = rows.sequence_ids
        if explicit is None and first_sequence_id is not None:
            explicit = list(range(first_sequence_id, first_sequence_id + n))
        if n == 0:
            return SendArrowResult(None, None, 0)
        if explicit is not None and (refusal := self._past_hole(explicit[0])) is not None:
            raise refusal
        cfg = self.config
        waits: list[tuple[asyncio.Future[MessageId], int]] = []
        sizes = rows.sizes()
        start = 0
        while start < n:
            # the limits of send(): an entry ends where the next row would overflow ``room``
            room = min(cfg.batching_max_allowed_size_in_bytes, self._limit() - BATCH_OVERHEAD)
            single = not cfg.batching_enabled or self._too_big(sizes[start])
            end = start + 1
            if not single:
                total = sizes[start]
                most = cfg.batching_max_messages
                if cfg.max_pending_messages > 0:  # as in send(): a batch never holds more than the queue
                    most = min(most, cfg.max_pending_messages)
                top = min(n, start + max(1, most))
                while end < top and total < cfg.batching_max_allowed_size_in_bytes:
                    if total + sizes[end] > room:
                        break
                    total += sizes[end]
                    end += 1
                if (
                    explicit is not None
                    and explicit[start] <= self.last_sequence_id_published < explicit[end - 1]
                ):
                    # the broker judges an entry by its ids as a whole: one that straddles what it
                    # stored would be dropped whole, so the stored rows go in an entry of their own
                    end = bisect.bisect_right(explicit, self.last_sequence_id_published, start, end)
            await self._room(end - start)
            self._check_open()
            self.flush_batch()  # what send() batched meanwhile goes first
            if explicit is not None:
                ids = explicit[start:end]
            else:
                ids = list(range(self._next_sequence, self._next_sequence + end - start))
            fut: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
            waits.append((fut, end - start))
            if explicit is not None and self._hole is not None and ids[0] > self._hole[0]:
                _fail([fut], SendRefusedError(self._hole[1]))  # refused meanwhile: not past the hole
                break
            self._next_sequence = max(self._next_sequence, ids[-1] + 1)
            if single:
                key = rows.keys[start] if rows.keys is not None else None
                times = rows.event_times
                msg = _Message(
                    rows.payload(start),
                    ids[0],
                    fut,
                    rows.properties_of(start),
                    key,
                    None,
                    times[start] if times is not None else None,
                    None,
                )
                self._send_single(msg)
            else:
                self._send_entry(rows, start, end, ids, fut)
            if fut.done():  # failed before it was sent (too big): nothing after it may be stored
                break
            start = end
        results = await asyncio.gather(*(f for f, _ in waits), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        first = cast(MessageId, results[0])
        last = cast(MessageId, results[-1])
        k = waits[-1][1]
        if last.batch_size:  # an entry: its first message's id names it; the last is at k - 1
            last = MessageId(last.ledger_id, last.entry_id, last.partition, k - 1, k)
        return SendArrowResult(first, last, n)

    async def _room(self, k: int) -> None:
        """Wait until ``k`` more messages fit in the pending queue (at once when nothing is pending)."""
        limit = self.config.max_pending_messages
        if limit <= 0:
            return

        def fits() -> bool:
            queued = self.pending_messages + len(self._batch)
            return queued == 0 or queued + k <= limit or self.state is HandlerState.CLOSED

        if fits():
            return
        async with self._space:
            await self._space.wait_for(fits)

    def _send_entry(
        self, rows: ArrowRows, start: int, end: int, ids: list[int], fut: asyncio.Future[MessageId]
    ) -> None:
        """One batch entry of rows ``[start, end)``, as :meth:`flush_batch` makes it for ``send``."""
        md = pb.MessageMetadata(
            producer_name=self.name or "", sequence_id=ids[0], publish_time=int(time.time() * 1000)
        )
        first_key = rows.keys[start] if rows.keys is not None else None
        if first_key is not None:
            md.partition_key = first_key
        md.num_messages_in_batch = end - start
        if ids[-1] != ids[0]:
            md.highest_sequence_id = ids[-1]
        payload = self._compressed(md, rows.encode(start, end, ids))
        self._enqueue(OpSend(ids[0], ids[-1], end - start, md, payload, [fut], time.monotonic()))

    def _too_big(self, size: int) -> bool:
        return size > self._limit() - BATCH_OVERHEAD

    def _metadata(self, msg: _Message) -> pb.MessageMetadata:
        md = pb.MessageMetadata(
            producer_name=self.name or "", sequence_id=msg.sequence_id, publish_time=int(time.time() * 1000)
        )
        if msg.properties:
            for k, v in msg.properties.items():
                md.properties.add(key=k, value=v)
        if msg.partition_key is not None:
            md.partition_key = msg.partition_key
        if msg.ordering_key is not None:
            md.ordering_key = msg.ordering_key
        if msg.event_time:
            md.event_time = msg.event_time
        if msg.deliver_at is not None:
            md.deliver_at_time = msg.deliver_at
        return md

    def _compressed(self, md: pb.MessageMetadata, raw: bytes) -> bytes:
        codec = self.config.compression_type
        if codec == pb.NONE:
            return raw
        md.compression = cast(Any, codec)
        md.uncompressed_size = len(raw)
        return compress(codec, raw)

    def _limit(self) -> int:
        return self.connection.max_message_size if self.connection else self.client.default_max_message_size

    def _send_single(self, msg: _Message) -> None:
        md = self._metadata(msg)
        payload = self._compressed(md, msg.payload)
        limit = self._limit()
        if len(payload) + md.ByteSize() > limit:
            if not self.config.chunking_enabled:
                size = len(payload) + md.ByteSize()
                _fail(
                    [msg.future],
                    MessageTooBigError(f"message of {size} bytes (with metadata) exceeds {limit}"),
                )
                return
            self._send_chunks(msg, md, payload, limit)
            return
        self._enqueue(
            OpSend(msg.sequence_id, msg.sequence_id, 1, md, payload, [msg.future], time.monotonic())
        )

    def _send_chunks(self, msg: _Message, md: pb.MessageMetadata, payload: bytes, limit: int) -> None:
        """Split into chunks whose payload plus metadata fit ``limit`` (as the Java client sizes them)."""
        uuid = f"{self.name}-{msg.sequence_id}-{uuidlib.uuid4().hex[:8]}"
        widest = pb.MessageMetadata()
        widest.CopyFrom(md)
        widest.uuid = uuid
        widest.chunk_id = widest.num_chunks_from_msg = widest.total_chunk_msg_size = len(payload)
        chunk_size = limit - widest.ByteSize()
        if chunk_size < 1024:
            _fail(
                [msg.future],
                MessageTooBigError(f"metadata of {widest.ByteSize()} bytes leaves no room in {limit}"),
            )
            return
        count = (len(payload) + chunk_size - 1) // chunk_size
        ctx = _ChunkContext(uuid, count)
        for i in range(count):
            cmd_md = pb.MessageMetadata()
            cmd_md.CopyFrom(md)
            cmd_md.uuid = ctx.uuid
            cmd_md.chunk_id = i
            cmd_md.num_chunks_from_msg = count
            cmd_md.total_chunk_msg_size = len(payload)
            part = payload[i * chunk_size : (i + 1) * chunk_size]
            futures = [msg.future]  # every chunk: any chunk's failure fails the message
            op = OpSend(msg.sequence_id, msg.sequence_id, 1, cmd_md, part, futures, time.monotonic(), i, ctx)
            self._enqueue(op)

    def flush_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        batch, self._batch = self._batch, []
        self._batch_bytes = 0
        if not batch:
            return
        first = batch[0]
        md = self._metadata(first)
        md.ClearField("properties")
        md.ClearField("event_time")
        md.num_messages_in_batch = len(batch)
        if batch[-1].sequence_id != first.sequence_id:
            md.highest_sequence_id = batch[-1].sequence_id
        entries = []
        for m in batch:
            smm = pb.SingleMessageMetadata(sequence_id=m.sequence_id)
            if m.properties:
                for k, v in m.properties.items():
                    smm.properties.add(key=k, value=v)
            if m.partition_key is not None:
                smm.partition_key = m.partition_key
            if m.ordering_key is not None:
                smm.ordering_key = m.ordering_key
            if m.event_time:
                smm.event_time = m.event_time
            entries.append((smm, m.payload))
        payload = self._compressed(md, encode_batch(entries))
        op = OpSend(
            first.sequence_id,
            batch[-1].sequence_id,
            len(batch),
            md,
            payload,
            [m.future for m in batch],
            time.monotonic(),
        )
        self._enqueue(op)

    def _enqueue(self, op: OpSend) -> None:
        self.pending.append(op)
        self.pending_messages += op.num_messages
        if self.is_ready:
            self._write(op)

    def _write(self, op: OpSend) -> bool:
        """Put one op on the wire; False when the connection is gone (the reconnect resends it)."""
        assert self.connection is not None
        try:
            self.connection.send_message(op.command(self.producer_id), op.metadata, op.payload)
            return True
        except LocalProtocolError as exc:  # can never be sent: fail it alone, now
            self._drop_op(op, MessageTooBigError(str(exc)))
            return True
        except PulsarWireError as exc:
            log.info("producer %s: send deferred until reconnect: %s", self.name, exc)
            return False

    def _refused(self, sequence_id: int, error: BaseException) -> None:
        """The broker refused ``sequence_id`` for good: fail it and everything sent after it.

        Pulsar fences a producer after a refused write, so what follows is refused too; were
        it re-sent after the reconnect and stored, the refused message would become a hole that
        deduplication hides for ever (a retry with its sequence id would count as a duplicate).
        Like Kafka's idempotent producer, later messages fail with it; the caller resends all.
        With sequence ids chosen by the caller, sends with a higher id fail too until the caller
        sends from the refused id again (:meth:`send`).
        """
        ops = list(self.pending)
        at = next((i for i, o in enumerate(ops) if o.sequence_id == sequence_id), None)
        if at is None:
            return
        refused = ops[at]
        self._drop_op(refused, error)  # with its other chunks, wherever they are
        # What was sent after it is now the tail of pending: cut it in one go (not one scan of
        # pending per message, which is quadratic with thousands pending).
        later = [o for o in ops[at + 1 :] if refused.chunks is None or o.chunks is not refused.chunks]
        why = f"not sent: the broker refused message {sequence_id} before it ({error})"
        for op in later:
            self.pending.pop()
            self.pending_messages -= op.num_messages
            _fail(op.futures, SendRefusedError(why))
        # The open batch was queued after it too, and so is every message a caller choosing its
        # own sequence ids sends until it goes back to the refused one: a task that has not yet
        # seen the failure keeps sending, and what it sends must not be stored past the hole.
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        opened, self._batch = self._batch, []
        self._batch_bytes = 0
        _fail([m.future for m in opened], SendRefusedError(why))
        if self._explicit_ids:
            self._hole = (sequence_id, why)
        self._notify_space()
        self._force_reconnect(f"message {sequence_id} refused: {error}")

    def _drop_op(self, op: OpSend, exc: BaseException) -> None:
        """Remove ``op`` (and the other chunks of its message) from pending and fail its messages."""
        doomed = [o for o in self.pending if o is op or (op.chunks is not None and o.chunks is op.chunks)]
        for o in doomed:
            self.pending.remove(o)
            self.pending_messages -= o.num_messages
        _fail(op.futures, exc)
        self._notify_space()

    # -- timeouts, flush, close -----------------------------------------------------
    async def _watch_timeouts(self) -> None:
        timeout = self.config.send_timeout_millis / 1000
        if timeout <= 0:
            return
        while self.state not in (HandlerState.CLOSED, HandlerState.FAILED, HandlerState.TERMINATED):
            await asyncio.sleep(min(timeout / 4, 0.1))
            now = time.monotonic()
            while self.pending and now - self.pending[0].created >= timeout:
                op = self.pending[0]
                self._drop_op(op, SendTimeoutError(f"no receipt within {timeout:.1f} s for {op.sequence_id}"))

    async def flush(self) -> None:
        """Send the current batch and wait until every message sent so far has its receipt (or failed)."""
        self.flush_batch()
        futures = [f for op in self.pending for f in op.futures]
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    async def close(self) -> None:
        if self.state in (HandlerState.CLOSED, HandlerState.CLOSING):
            return
        if self.state is HandlerState.READY:
            await self.flush()
        prior = self.state
        if prior not in CLOSED_AT_ONCE:  # a failed, terminated or never-started one goes straight to CLOSED
            self._set(HandlerState.CLOSING)
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        if self.creating is not None:  # a late answer finds it closed (see client.creation)
            self.creating.forget()
        conn = self.connection
        if conn is not None and not conn.is_closed and prior is HandlerState.READY:
            cmd, c = new_command(T.CLOSE_PRODUCER)
            c.producer_id = self.producer_id
            try:
                await conn.request(cmd, self.client.operation_timeout)
            except PulsarWireError as exc:
                log.debug("producer %s: close: %s", self.name, exc)
            conn.producers.pop(self.producer_id, None)
        self._set(HandlerState.CLOSED)
        self._fail_all(AlreadyClosedError(f"producer on {self.topic} closed"))
        if self._timeout_task is not None:
            self._timeout_task.cancel()


def _complete(fut: asyncio.Future[MessageId], mid: MessageId) -> None:
    if not fut.done():
        fut.set_result(mid)


class Producer:
    """A producer on a topic; for a partitioned topic, one PartitionProducer per partition behind a router."""

    def __init__(
        self,
        topic: str,
        partitions: list[PartitionProducer],
        router: Callable[[str | None, int], int],
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self._route = router

    @property
    def producer_name(self) -> str:
        return self.partitions[0].name or ""

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id_published for p in self.partitions)

    async def send_async(self, content: bytes, **kw: Any) -> asyncio.Future[MessageId]:
        if len(self.partitions) == 1:
            return await self.partitions[0].send(content, **kw)
        # As the Java client: the message key (partition_key) decides; no key → the router's choice.
        index = self._route(kw.get("partition_key"), len(self.partitions))
        return await self.partitions[index].send(content, **kw)

    async def send(self, content: bytes, **kw: Any) -> MessageId:
        fut = await self.send_async(content, **kw)
        return await fut

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
        """Send the rows of a pyarrow RecordBatch or Table (see :meth:`PartitionProducer.send_arrow`).

        The columns are checked before anything is sent. On a partitioned topic each row goes
        where ``send`` would send it (its key's partition, else the router's choice), the rows of
        each partition in their order.
        """
        from .arrow_send import as_record_batch, rows_from_arrow, split_by_partition  # the ``arrow`` extra

        def read(record: Any) -> ArrowRows:
            return rows_from_arrow(
                record,
                value=value,
                key=key,
                properties=properties,
                event_time=event_time,
                sequence_id=sequence_id,
            )

        record = as_record_batch(batch)
        rows = read(record)
        if rows.sequence_ids is not None and first_sequence_id is not None:
            raise InvalidConfigurationError("give sequence ids as a column or as first_sequence_id, not both")
        if first_sequence_id is not None and first_sequence_id < 0:
            raise InvalidConfigurationError(f"first_sequence_id {first_sequence_id} is negative")
        n = len(self.partitions)
        if n == 1:
            return await self.partitions[0].send_arrow(rows, first_sequence_id)
        if first_sequence_id is not None:
            raise InvalidConfigurationError(
                f"{self.topic} has {n} partitions: first_sequence_id would be ambiguous (give a column)"
            )
        # As send: a keyed row goes to its key's partition, a keyless one where the router says.
        keys = rows.keys if rows.keys is not None else [None] * rows.count
        chosen = [self._route(k, n) for k in keys]
        parts = [(i, read(b)) for i, b in split_by_partition(record, chosen)]
        done = await asyncio.gather(
            *(self.partitions[i].send_arrow(r) for i, r in parts), return_exceptions=True
        )
        results: list[SendArrowResult] = []
        for r in done:
            if isinstance(r, BaseException):
                raise r
            results.append(r)
        return SendArrowResult(None, None, rows.count, tuple(results))

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.partitions))

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.partitions))
