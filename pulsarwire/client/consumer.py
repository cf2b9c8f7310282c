"""A partition consumer: one subscription on one topic-partition, from the wire to the receive queue.

:class:`PartitionConsumer` is subscribed to one topic (or partition) and lives through
reconnects (:class:`~pulsarwire.client.handler.Handler`). Entries from the broker are counted
against the FLOW permits granted (:mod:`~pulsarwire.client.flow`), decompressed and unbatched on
arrival; batch indexes the broker marks as acknowledged (``ack_set``), indexes acked here whose
ack is not sent yet, and, for readers and after a seek, messages before the start position are
dropped. An entry's messages go together to the :class:`~pulsarwire.client.receive_queue.MessageQueue`
shared by every partition of one consumer (:mod:`~pulsarwire.client.multi_topic`); a message
taken out (settled by the queue: :meth:`PartitionConsumer.handed_out`), or skipped, counts as
consumed, and permits go back in halves of the receiver queue.

Acks are grouped by :class:`~pulsarwire.client.acks.AckGroup` and sent by :meth:`PartitionConsumer.flush_acks`
(also on close and before a resubscribe asks for messages); acking a chunked message acks all its
chunks. Acks made on other threads wait in the group's deque and are applied on the loop, in
order, at the flush, before a resubscribe or a redelivery request, on the timer tick and when a
redelivered entry arrives (what was acked is no news). From protocol 17 on each ACK asks for a
receipt: acks the broker did not apply (cut connection, consumer closed by the broker first) are
queued again, so nothing acknowledged comes back. Negative acks and the ack timeout are
:class:`~pulsarwire.client.redelivery.RedeliveryTimers`, which a timer task turns into
REDELIVER_UNACKNOWLEDGED_MESSAGES; a message redelivered ``max_redeliver_count`` times goes to the
dead-letter topic when it fails once more.

An entry that fails validation (checksum, decompression, batch layout, a batch
count below 1 or more than its bytes hold) is neither delivered nor
acknowledged: ``receive`` raises CorruptMessageError naming it, once — the
redelivery that follows a reconnect is dropped quietly (a bounded record of
reported entries, cleared by a seek). Its permits go back like a consumed
message's, and a count below 1 (which a broker may charge as nothing) widens the
flow-control books instead of tripping them. Decompression is bounded by the
broker's ``max_message_size`` from CONNECTED plus Pulsar's frame padding.

Chunked messages given up by the reassembler are settled as the Java client
does: expired ones are acknowledged (they can never complete), ones evicted to
make room are redelivered after the negative-ack delay (acknowledged with
``auto_ack_oldest_chunked_message_on_queue_full``), and later chunks of such a
message follow it the same way; the reassembler's record of them is drained
after every chunk. After REACHED_END_OF_TOPIC, ``receive`` raises
ReachedEndOfTopicError once the queue is empty.

Reconnects (connection loss, CLOSE_CONSUMER, unload) resubscribe — a reader
from the last message it handed out, exclusive — clear the queue and grant
permits again. A seek clears the queue and ignores everything from before it,
also what arrives while the SEEK is in flight; requests wait for the
resubscribe that follows a seek.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from itertools import compress, groupby
from typing import TYPE_CHECKING, Any, cast

from pulsarwire.codec.batch import unacked_indexes
from pulsarwire.codec.chunks import EVICTED, EXPIRED, ChunkReassembler, is_chunk
from pulsarwire.codec.entry import unpack_entry
from pulsarwire.codec.frames import DEFAULT_MAX_MESSAGE_SIZE, FRAME_PADDING, new_command
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    AlreadyClosedError,
    ConsumerBusy,
    CorruptMessageError,
    FlowControlError,
    OperationTimeoutError,
    PulsarWireError,
)
from pulsarwire.proto import pb
from pulsarwire.protocol.connection import (
    ActiveConsumerChange,
    ConsumerClosedByBroker,
    CorruptMessage,
    EndOfTopic,
    Event,
    MessageReceived,
)
from pulsarwire.protocol.state import (
    CLOSED_AT_ONCE,
    STARTABLE,
    HandlerState,
)

from .acks import MAX_GROUPED, AckGroup, AckKind, AckRun, refuse_cumulative, run_of_id, runs_of_messages
from .consumer_config import ConsumerConfig, DeadLetterPolicy
from .creation import Creation, create
from .flow import PermitBooks
from .handler import Handler
from .message import Delivery, Message, messages_of
from .receive_queue import pop_front
from .redelivery import RedeliveryTimers

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from pulsarwire.io.connection import Connection

    from .context import ClientContext, DeadLetterProducer
    from .receive_queue import MessageQueue

log = logging.getLogger("pulsarwire.consumer")
T = pb.BaseCommand
SubType = pb.CommandSubscribe.SubType
#: corrupt entries remembered per consumer so a redelivery is not reported again
REPORTED_LIMIT = 1024
#: uuids of chunked messages given up, remembered so their later chunks follow them
GIVEN_UP_LIMIT = 1024


class PartitionConsumer(Handler):
    KIND = "consumer"
    BUSY = ConsumerBusy

    def __init__(
        self, client: ClientContext, topic: str, partition: int, config: ConsumerConfig, queue: MessageQueue
    ) -> None:
        self.client = client
        self.topic = topic
        self.partition = partition
        self.config = config
        self.queue = queue
        self.state = HandlerState.UNINITIALIZED
        self.consumer_id = 0
        self.connection: Connection | None = None
        self.creating: Creation | None = None  # the SUBSCRIBE in flight
        self._last_in_broker: MessageId | None = None  # from the last GET_LAST_MESSAGE_ID
        #: flow control books of the current subscription
        self.permits = PermitBooks(config.receiver_queue_size)
        self.consumer_name = config.consumer_name
        self.end_of_topic = False
        self.active = True
        self._start = config.start_message_id
        self._start_inclusive = config.start_message_id_inclusive
        self._last_dequeued: MessageId | None = None
        #: the last message taken from the queue, set by the taker (its id made when asked for)
        self.last_taken: Message | None = None
        self._dlq: DeadLetterProducer | None = None  # created on first use
        self._dlq_candidates: dict[tuple[int, int, int], Message] = {}
        #: acks waiting to be sent
        self.acks = AckGroup(
            batch_index_ack_enabled=config.batch_index_ack_enabled,
            group_time_ms=config.ack_group_time_ms,
            flush=self.flush_acks,
        )
        #: negative acks and the ack timeout
        self.redelivery = RedeliveryTimers()
        self._chunk_ids: dict[tuple[int, int], tuple[MessageId, ...]] = {}  # last chunk -> all its chunks
        self._seeking = False  # a SEEK is in flight: what arrives is from before it
        #: after a seek by publish time, until a message at or after it arrives: entries published
        #: earlier are dropped (a reader that resubscribes before reading starts again from the
        #: earliest message and must not hand out anything from before the seek)
        self._seek_time: int | None = None
        self._seek_filter = False  # dropping entries before _seek_time until one at/after it came
        self._seeks = 0  # seeks so far (acks from before a seek are not sent again after it)
        self._tasks: list[asyncio.Task[None]] = []
        self._reconnecting: asyncio.Task[None] | None = None
        self._chunks: ChunkReassembler[MessageId] = ChunkReassembler(
            max_pending=config.max_pending_chunked_message,
            expire_after_ms=config.expire_time_of_incomplete_chunked_message_ms,
        )
        #: corrupt entries already reported (a redelivery after a reconnect is not news)
        self._reported: OrderedDict[tuple[int, int], None] = OrderedDict()
        #: uuid of a chunked message given up -> True when its chunks are acked, False: redelivered
        self._given_up: OrderedDict[str, bool] = OrderedDict()
        queue.register(self)  # its messages can be received (and acked) before Consumer.add

    async def start(self) -> None:
        """Subscribe for the first time; raises when the consumer cannot be created.

        Called again by the client's retries after a retriable failure; raises
        AlreadyClosedError once the consumer was closed (or failed) meanwhile.
        """
        if self.state not in STARTABLE:
            raise AlreadyClosedError(f"consumer on {self.topic} is {self.state.value}")
        self._set(HandlerState.CONNECTING)
        await self._connect()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._timers()))

    async def _connect(self) -> None:
        conn = await self.client.connection_for(self.topic)
        cid = conn.proto.new_consumer_id()
        cfg = self.config
        cmd, s = new_command(T.SUBSCRIBE)
        s.topic = self.topic
        s.subscription = cfg.subscription_name
        s.subType = cast(Any, cfg.consumer_type)
        s.consumer_id = cid
        if self.consumer_name:
            s.consumer_name = self.consumer_name
        s.priority_level = cfg.priority_level
        s.durable = cfg.durable
        s.initialPosition = cast(Any, cfg.initial_position)
        s.read_compacted = cfg.is_read_compacted
        s.force_topic_creation = cfg.force_topic_creation
        policy = cfg.key_shared_policy
        if policy is not None and cfg.consumer_type == SubType.Key_Shared:
            meta = s.keySharedMeta
            meta.keySharedMode = pb.STICKY if policy.sticky_ranges else pb.AUTO_SPLIT
            for lo, hi in policy.sticky_ranges:
                meta.hashRanges.add(start=lo, end=hi)
            meta.allowOutOfOrderDelivery = policy.allow_out_of_order_delivery
        if not cfg.durable:
            if self.last_dequeued is not None:  # resume after the last message handed out, not at it
                self._start, self._start_inclusive = self.last_dequeued, False
            elif self._seek_time is not None:  # sought by time, nothing read since: filter from the start
                self._start = MessageId.EARLIEST
                self._seek_filter = True
            start = self._start
            if start is not None:
                s.start_message_id.CopyFrom(start.to_proto())
        close, c = new_command(T.CLOSE_CONSUMER)
        c.consumer_id = cid
        creation = Creation(conn, conn.consumers, cid, self)
        await create(self, creation, cmd, close, self.client.operation_timeout, "consumer")
        self.consumer_id = cid
        self.connection = conn
        # Anything still queued from before is redelivered by the broker (or re-read by a reader).
        self.queue.drop(self)
        # acks.batches survives: acks of batch indexes made before the reconnect stay valid.
        self.permits.restart()  # a new subscription: new books
        self._set(HandlerState.READY)
        self.flush_acks()  # acks made while disconnected go first, or the broker would redeliver those
        self._flow(cfg.receiver_queue_size)

    def _flow(self, permits: int) -> None:
        if permits <= 0 or self.connection is None or not self._in(HandlerState.READY):
            return
        cmd, f = new_command(T.FLOW)
        f.consumer_id = self.consumer_id
        f.messagePermits = permits
        with contextlib.suppress(PulsarWireError):  # a reconnect grants the whole queue again
            self.connection.send(cmd)
            self.permits.granting(permits)

    def consumed(self, count: int = 1) -> None:
        """``count`` messages left the queue (or were skipped): give permits back in halves."""
        self._flow(self.permits.consume(count))

    # -- reconnect (Handler) ----------------------------------------------------------
    def _registry(self, connection: Connection) -> dict[int, Any]:
        return connection.consumers

    def _handler_id(self) -> int:
        return self.consumer_id

    def _after_lost(self) -> None:
        dropped = self.queue.drop(self)
        if dropped:
            log.debug("consumer on %s: dropped %d queued messages", self.topic, dropped)

    async def _recreate(self) -> None:
        await self._connect()

    def _give_up(self, exc: PulsarWireError) -> None:
        self._set(HandlerState.FAILED)
        self.queue.put_error(exc)

    # -- events from the connection ------------------------------------------------
    def _within_permits(self, declared: int) -> bool:
        """Count one entry that declares ``declared`` messages (:meth:`PermitBooks.entry`); False when
        the broker had no permit for it. Such a broker is flooding us: the connection is closed with
        FlowControlError (nothing of the entry is queued or acknowledged; the resubscribe gets it
        again), so the receive queue stays bounded by the permits granted.
        """
        if self.permits.entry(declared):
            return True
        conn = self.connection
        if conn is not None:
            conn.abort(
                FlowControlError(
                    f"consumer on {self.topic}: the broker sent entry {self.permits.entries} with only "
                    f"{self.permits.granted} permits granted"
                )
            )
        return False

    def on_event(self, event: Event) -> None:
        if isinstance(event, MessageReceived):
            if self._within_permits(_declared(event.payload.metadata)):
                self._on_message(event)
        elif isinstance(event, CorruptMessage):
            if not self._within_permits(1):
                return
            mid = event.message_id.with_partition(self.partition)
            self._corrupt(mid, event.error, 1, event.raw)
        elif isinstance(event, ConsumerClosedByBroker):
            self._lost("closed by the broker")
        elif isinstance(event, EndOfTopic):
            self.end_of_topic = True
            self.queue.wake()
        elif isinstance(event, ActiveConsumerChange):
            self.active = event.is_active

    def _skip(self, mid: MessageId) -> bool:
        """True for messages before the start position (readers, after a seek)."""
        start = self._start
        if start is None:
            return False
        if not MessageId.EARLIEST < start < MessageId.LATEST:
            self._start = None  # EARLIEST and LATEST are no position to filter by
            return False
        here: tuple[int, ...]
        there: tuple[int, ...]
        if start.batch_index < 0 or mid.batch_index < 0:
            here, there = (mid.ledger_id, mid.entry_id), (start.ledger_id, start.entry_id)
        else:
            here = (mid.ledger_id, mid.entry_id, mid.batch_index)
            there = (start.ledger_id, start.entry_id, start.batch_index)
        if here < there or (here == there and not self._start_inclusive):
            return True
        self._start = None  # past the start: no more filtering
        return False

    def _on_message(self, ev: MessageReceived) -> None:
        md = ev.payload.metadata
        if self.acks.from_threads:  # a redelivery of what was acked on another thread is no news
            self._apply_thread_acks()
        if self._seeking:  # sent before the broker reset the cursor: it comes again if still wanted
            self.consumed(max(_declared(md), 1))
            return
        if self._seek_filter and self._seek_time is not None:
            if md.publish_time < self._seek_time:
                self.consumed(max(_declared(md), 1))
                return
            # The first entry at or after the seek time: the rest of this subscription follows it.
            # _seek_time stays until a message is handed out (last_dequeued then places a resubscribe).
            self._seek_filter = False
        base = ev.message_id
        entry_id = MessageId(base.ledger_id, base.entry_id, self.partition)
        if is_chunk(md):
            if self._skip(entry_id):
                self.consumed(1)
                return
            if md.chunk_id > 0 and md.uuid in self._given_up:  # a later chunk of a message given up
                self.consumed(1)
                self._settle_chunks([_entry(entry_id)], ack=self._given_up[md.uuid])
                return
            self._given_up.pop(md.uuid, None)  # chunk 0 again: the message starts over
            try:
                done = self._chunks.add(md, ev.payload.payload, entry_id, int(time.time() * 1000))
            except PulsarWireError as exc:
                self._settle_dropped_chunks()
                self._corrupt(entry_id, f"chunk: {exc}", 1, ev.payload.entry)
                return
            self._settle_dropped_chunks()
            if done is None:
                self.consumed(1)
                return
            first = done.chunk_ids[0]
            mid = MessageId(base.ledger_id, base.entry_id, self.partition, first_chunk_message_id=first)
            self.consumed(len(done.chunk_ids) - 1)
            self._chunk_ids[_entry(mid)] = done.chunk_ids
            delivery = Delivery(
                _entry(mid), self.partition, 0, self.topic, done.metadata, ev.redelivery_count, chunked=mid
            )
            self._deliver(delivery, [-1], [None], [done.payload])
            return
        try:
            singles, payloads = unpack_entry(md, ev.payload.payload, self._max_uncompressed())
            keep = set(unacked_indexes(ev.ack_set, len(payloads))) if ev.ack_set else None
            mine = self.acks.still_unacked((base.ledger_id, base.entry_id), len(payloads))
            if mine is not None:  # acked, the ack not sent yet: those are no news
                keep = mine if keep is None else keep & mine
        except PulsarWireError as exc:
            self._corrupt(entry_id, exc, self._permits_of(md), ev.payload.entry)
            return
        batch_size = len(payloads) if md.HasField("num_messages_in_batch") else 0
        self._deliver_entry(base, md, singles, payloads, keep, batch_size, ev.redelivery_count)

    def _max_uncompressed(self) -> int:
        """The largest payload an entry may decompress to: the configured ``max_message_size``, or
        the one the broker announced in CONNECTED, plus Pulsar's frame padding."""
        size = self.config.max_message_size
        if size is None:
            conn = self.connection
            size = conn.max_message_size if conn is not None else DEFAULT_MAX_MESSAGE_SIZE
        return size + FRAME_PADDING

    def _permits_of(self, md: pb.MessageMetadata) -> int:
        """Permits a corrupt entry gives back: its declared count, at least 1 (Pulsar's client
        returns one for a corrupt entry) and at most a receiver queue (a count that lies must not
        make us hand the broker unbounded permits)."""
        return min(max(_declared(md), 1), max(self.config.receiver_queue_size, 1))

    def _corrupt(self, mid: MessageId, error: object, permits: int, raw: bytes | None) -> None:
        """An entry that cannot be read: its ``permits`` go back and it is reported once as a
        CorruptMessageError (never delivered, never acknowledged). A redelivery of an entry
        already reported (after a reconnect) is dropped quietly, and so is one at or before a
        reader's start position (it belongs to what came before)."""
        key = _entry(mid)
        if self._skip(mid):
            self.consumed(permits)
            return
        if key in self._reported:
            log.debug("consumer on %s: corrupt entry %s again; reported before", self.topic, mid)
            self.consumed(permits)
            return
        self._reported[key] = None
        if len(self._reported) > REPORTED_LIMIT:
            self._reported.popitem(last=False)
        reason = str(error)
        log.warning("consumer on %s: message %s is corrupt: %s", self.topic, mid, reason)
        report = CorruptMessageError(
            f"message {mid} on {self.topic} is corrupt: {reason}", message_id=mid, reason=reason, raw=raw
        )
        self.consumed(permits - self._report(report))

    def _report(self, error: CorruptMessageError) -> int:
        """Hand a corrupt entry to the user: ``receive`` raises ``error``. Returns the permits kept
        back (given when what stands for the entry is consumed later): none here."""
        self.queue.put_error(error)
        return 0

    def _settle_dropped_chunks(self) -> None:
        """Drain the reassembler's record of messages given up: an expired one is acknowledged, one
        evicted to make room redelivered (or acknowledged with
        ``auto_ack_oldest_chunked_message_on_queue_full``); an inconsistent one was reported as
        corrupt and is left alone, like any corrupt entry."""
        for dropped in self._chunks.take_dropped():
            if dropped.cause == EXPIRED:
                ack = True
            elif dropped.cause == EVICTED:
                ack = self.config.auto_ack_oldest_chunked_message_on_queue_full
            else:
                continue
            log.warning(
                "consumer on %s: chunked message %s given up (%s); its %d chunks are %s",
                self.topic,
                dropped.uuid,
                dropped.reason,
                len(dropped.chunk_ids),
                "acknowledged" if ack else "redelivered",
            )
            self._given_up[dropped.uuid] = ack
            if len(self._given_up) > GIVEN_UP_LIMIT:
                self._given_up.popitem(last=False)
            self._settle_chunks([_entry(c) for c in dropped.chunk_ids], ack=ack)

    def _settle_chunks(self, entries: list[tuple[int, int]], *, ack: bool) -> None:
        """Acknowledge the chunks' entries, or have them redelivered as negatively acknowledged
        ones are (after ``negative_ack_redelivery_delay_ms``: a message evicted again and again
        must not make the broker and us pass it back and forth without pause)."""
        if ack:
            for key in entries:
                self.acks.add(key, None)
            return
        due = time.monotonic() + self.config.negative_ack_redelivery_delay_ms / 1000
        for key in entries:
            self.redelivery.nack(key, due)

    def _deliver_entry(
        self,
        base: MessageId,
        md: pb.MessageMetadata,
        singles: Sequence[bytes | None],
        payloads: list[bytes],
        keep: set[int] | None,
        batch_size: int,
        redelivery_count: int,
    ) -> None:
        """The messages of one entry (each one's serialized metadata, None when not batched, and
        payload), minus acked indexes and those before the start position."""
        # A few C-level passes per entry and no Python code per message: this runs for every
        # message received.
        delivery = Delivery(
            (base.ledger_id, base.entry_id), self.partition, batch_size, self.topic, md, redelivery_count
        )
        count = len(payloads)
        indexes: Sequence[int] = range(count) if batch_size else [-1] * count
        if keep is not None:
            wanted = [i in keep for i in indexes]
            indexes = list(compress(indexes, wanted))
            singles, payloads = list(compress(singles, wanted)), list(compress(payloads, wanted))
        if self._start is not None:  # in order: the first one past the start ends the filtering
            wanted = [not self._skip(delivery.message_id(i)) for i in indexes]
            indexes = list(compress(indexes, wanted))
            singles, payloads = list(compress(singles, wanted)), list(compress(payloads, wanted))
        skipped = count - len(payloads)
        if payloads:
            self._deliver(delivery, indexes, singles, payloads)
        if skipped:
            self.consumed(skipped)

    def _deliver(
        self,
        delivery: Delivery,
        indexes: Sequence[int],
        singles: Sequence[bytes | None],
        payloads: list[bytes],
    ) -> None:
        """Unpacked messages of one delivered entry (their batch indexes, serialized metadata and
        payloads, parallel sequences), in order: queued as Messages together, a waiter woken once
        (the bulk reader overrides this to fill columns)."""
        msgs = messages_of(delivery, payloads, singles, indexes)
        policy = self.config.dead_letter_policy
        if policy is not None and delivery.redelivery_count >= policy.max_redeliver_count:
            # As the Java client: still delivered; if it fails once more it goes to the DLQ instead.
            ledger, entry = delivery.entry
            for msg in msgs:
                self._dlq_candidates[(ledger, entry, msg[2])] = msg
        self.queue.put_many(msgs)

    async def _dead_letter(self, msg: Message, policy: DeadLetterPolicy) -> None:
        """Store ``msg`` on the dead-letter topic, then acknowledge it here (never the other way round)."""
        topic = policy.dead_letter_topic or f"{self.topic}-{self.config.subscription_name}-DLQ"
        try:
            if self._dlq is None:
                self._dlq = await self.client.create_producer(topic, batching_enabled=False)
            props = {**msg.properties(), "REAL_TOPIC": self.topic, "ORIGIN_MESSAGE_ID": str(msg.message_id())}
            await self._dlq.send(msg.data(), properties=props, partition_key=msg.partition_key() or None)
        except PulsarWireError as exc:
            log.warning(
                "consumer on %s: dead-lettering %s failed (%s); it will be redelivered",
                self.topic,
                msg.message_id(),
                exc,
            )
            return
        self.acknowledge(msg.message_id())

    # -- receive bookkeeping ---------------------------------------------------------
    @property
    def last_dequeued(self) -> MessageId | None:
        """The last message handed out (a resubscribe of a reader starts after it): the one a taker
        took last (:attr:`last_taken`), unless set since."""
        taken = self.last_taken
        return taken.message_id() if taken is not None else self._last_dequeued

    @last_dequeued.setter
    def last_dequeued(self, mid: MessageId | None) -> None:
        self._last_dequeued = mid
        self.last_taken = None

    def handed_out(self, messages: list[Message]) -> None:
        """``messages`` were taken out of the queue (the queue settles them on the loop, see
        :meth:`MessageQueue.settle <pulsarwire.client.receive_queue.MessageQueue.settle>`; the
        taker already set :attr:`last_taken`): permits, ack timeout."""
        self.consumed(len(messages))
        timeout = self.config.unacked_messages_timeout_ms
        if timeout:
            due = time.monotonic() + timeout / 1000
            for msg in messages:
                self.redelivery.handed_out(msg[3].entry, due)

    # -- acknowledgements ------------------------------------------------------------
    def _ack_ready(self) -> None:
        if self.state in (HandlerState.CLOSED, HandlerState.CLOSING):
            raise AlreadyClosedError(f"consumer on {self.topic} is closed")

    def acknowledge(self, mid: MessageId) -> None:
        self._ack_ready()
        self._acknowledge([run_of_id(mid)])

    def _acknowledge(self, runs: list[AckRun]) -> None:
        """Individual acks, in order, an entry's run at a time (this runs for every message)."""
        acks = self.acks
        if self._dlq_candidates or self._chunk_ids:
            for (ledger, entry), _size, indexes in runs:
                for index in indexes:
                    self._dlq_candidates.pop((ledger, entry, index), None)
                for chunk in self._chunk_ids.pop((ledger, entry), ()):  # a chunked message: every chunk
                    acks.add(_entry(chunk), None)
        redelivery = self.redelivery
        for key in acks.entries_done(runs):
            if redelivery.nacks or redelivery.unacked:  # not before: a nacked batch message is due
                redelivery.acked(key)
            acks.add(key, None)

    def acknowledge_cumulative(self, mid: MessageId) -> None:
        self._ack_ready()
        refuse_cumulative(self.config.consumer_type)
        self.redelivery.acked_up_to(_entry(mid))
        for key in [k for k in self._chunk_ids if k <= _entry(mid)]:
            del self._chunk_ids[key]
        self.acks.cumulative(mid)

    def thread_acks_waiting(self) -> None:
        """Acks made on other threads wait (:meth:`AckGroup.from_thread`, which asked for this call):
        flushed after the group time, at once when the group time is 0 or a full group waits."""
        acks = self.acks
        if acks.group_time_ms <= 0 or len(acks.from_threads) >= MAX_GROUPED:
            self.flush_acks()
        else:
            acks.schedule()

    def _apply_thread_acks(self) -> None:
        """Apply the acks made on other threads, in order (at a flush, before a resubscribe)."""
        acks = self.acks
        waiting = acks.take_from_threads()
        if not waiting or self.state in (HandlerState.CLOSED, HandlerState.CLOSING):
            return
        acks.applying = True  # one ACK for all of them: no flush per full group in between
        try:
            taken = pop_front(waiting, len(waiting))  # only the loop pops: that many are there
            for kind_of, run in groupby(taken, type):
                if kind_of is Message:  # individual acks of Messages: the usual case
                    self._acknowledge(runs_of_messages(cast("Iterator[Message]", run)))
                    continue
                for kind, mid in cast("Iterator[tuple[AckKind, MessageId]]", run):
                    if kind == "individual":
                        self._acknowledge([run_of_id(mid)])
                    elif kind == "cumulative":
                        self.acknowledge_cumulative(mid)
                    else:
                        self.negative_acknowledge(mid)
        finally:
            acks.applying = False

    def flush_acks(self) -> None:
        self._apply_thread_acks()
        self.acks.cancel_timer()
        conn = self.connection
        if conn is None or conn.is_closed:
            return  # the broker redelivers what was not acked; acks are retried at the next flush
        try:
            acks = self.acks
            if acks.pending:
                self._send_acks(conn, acks.individual_command(self.consumer_id), acks.pending, None)
                acks.pending = {}
            if acks.pending_cumulative is not None:
                cumulative = acks.pending_cumulative
                self._send_acks(conn, acks.cumulative_command(self.consumer_id, cumulative), {}, cumulative)
                acks.pending_cumulative = None
        except PulsarWireError as exc:
            log.info("consumer on %s: acks kept for the next flush: %s", self.topic, exc)

    def _send_acks(
        self,
        conn: Connection,
        cmd: pb.BaseCommand,
        acks: dict[tuple[int, int], list[int] | None],
        cumulative: tuple[MessageId, list[int] | None] | None,
    ) -> None:
        """Send an ACK, with a receipt from protocol 17 on: acks the broker did not apply (the
        connection was cut with the ACK in flight, or the broker closed the consumer first) are
        queued again, and a resubscribe sends them before asking for messages."""
        if conn.proto.protocol_version < 17:
            conn.send(cmd)
            return
        rid = conn.proto.new_request_id()
        cmd.ack.request_id = rid
        conn.send(cmd)
        conn.proto.pending_requests.add(rid)
        receipt: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        conn.requests[rid] = receipt
        seeks = self._seeks

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is None:
                answer = f.result().command  # ERROR, or an ACK_RESPONSE that may carry an error
                if answer.type == T.ACK_RESPONSE and not answer.ackResponse.HasField("error"):
                    return
            if seeks != self._seeks or self.state in (HandlerState.CLOSING, HandlerState.CLOSED):
                return  # a seek reset the cursor since, or nobody is left to ack for
            self.acks.requeue(acks, cumulative)
            if self._in(HandlerState.READY):
                self.acks.schedule()

        receipt.add_done_callback(done)

    def negative_acknowledge(self, mid: MessageId) -> None:
        self._ack_ready()
        self.redelivery.nack(
            _entry(mid), time.monotonic() + self.config.negative_ack_redelivery_delay_ms / 1000
        )

    def _redeliver(self, keys: list[tuple[int, int]] | None) -> None:
        conn = self.connection
        if conn is None or conn.is_closed:
            return
        cmd, r = new_command(T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        r.consumer_id = self.consumer_id
        for key in keys or ():  # a chunked message is redelivered with all its chunks
            for ledger, entry in [_entry(c) for c in self._chunk_ids.get(key, ())] or [key]:
                r.message_ids.add(ledgerId=ledger, entryId=entry)
        try:
            conn.send(cmd)
        except PulsarWireError as exc:
            log.info("consumer on %s: redelivery request lost with the connection: %s", self.topic, exc)
            return
        self.permits.redelivery_requested()

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask the broker to send every unacknowledged message again."""
        self._ack_ready()
        self.queue.settle()  # what was taken on other threads is handed out (the ack timeout books)
        self._apply_thread_acks()  # ... and what was acked there is not unacknowledged
        if self.config.consumer_type in (SubType.Shared, SubType.Key_Shared):
            keys = sorted(set(self.redelivery.unacked) | set(self.queue.entries_of(self)))
            self.queue.drop(self)
            self._redeliver(keys)
        else:
            dropped = self.queue.drop(self)
            self.permits.consumed += dropped
            self._redeliver(None)
        self.redelivery.unacked.clear()

    async def _timers(self) -> None:
        """Negative-ack delays and the ack timeout."""
        while self.state not in (HandlerState.CLOSED, HandlerState.FAILED):
            await asyncio.sleep(0.05)
            self.queue.settle()  # messages taken on other threads start their ack timeout ...
            self._apply_thread_acks()  # ... and acks made there end it (and cancel negative acks)
            now = time.monotonic()
            due = self.redelivery.due(now)
            if self._chunks.expire(int(time.time() * 1000)):
                self._settle_dropped_chunks()
            if due:
                for k in due:
                    self.redelivery.acked(k)
                policy = self.config.dead_letter_policy
                doomed = [m for key, m in self._dlq_candidates.items() if key[:2] in due]
                if policy is not None and doomed:
                    for m in doomed:
                        del self._dlq_candidates[_key(m.message_id())]
                        self._tasks.append(
                            asyncio.get_running_loop().create_task(self._dead_letter(m, policy))
                        )
                    gone = {_entry(m.message_id()) for m in doomed}
                    due = [k for k in due if k not in gone]
                if due:
                    self._redeliver(sorted(due))

    # -- seek, last message id, close ------------------------------------------------
    async def _connected(self) -> Connection:
        """The connection, once (re)subscribed (a seek makes the broker close the consumer).

        Raises AlreadyClosedError when closed or failed, OperationTimeoutError after the operation timeout.
        """
        deadline = time.monotonic() + self.client.operation_timeout
        while self.connection is None or not self._in(HandlerState.READY):
            if self.state in (HandlerState.CLOSING, HandlerState.CLOSED, HandlerState.FAILED):
                raise AlreadyClosedError(f"consumer on {self.topic} is {self.state.value}")
            if time.monotonic() > deadline:
                raise OperationTimeoutError(f"consumer on {self.topic} is not connected")
            await asyncio.sleep(0.01)
        return self.connection

    async def seek(self, target: MessageId | int) -> None:
        conn = await self._connected()
        cmd, s = new_command(T.SEEK)
        s.consumer_id = self.consumer_id
        if isinstance(target, MessageId):
            s.message_id.CopyFrom(MessageId(target.ledger_id, target.entry_id).to_proto())
            self._start, self._start_inclusive = target, self.config.start_message_id_inclusive
            self._seek_time = None
            self._seek_filter = False
        else:
            s.message_publish_time = int(target)
            self._start = None
            self._seek_time = int(target)
            self._seek_filter = True
        self.flush_acks()
        self.acks.pending.clear()
        self.redelivery.clear()
        self._reported.clear()  # after a seek a corrupt entry is news again
        self.last_dequeued = None
        self.queue.drop(self)
        self._seeking = True  # what is still on the wire is from before the seek
        self._seeks += 1
        try:
            resp = await conn.request(cmd, self.client.operation_timeout)
        finally:
            self._seeking = False
        if resp.is_error:
            raise resp.error()
        self.queue.drop(self)  # nothing from before the seek survives it

    async def get_last_message_id(self) -> MessageId:
        return (await self._last_message_id())[0]

    async def backlog(self) -> int:
        """Messages of this subscription not yet acknowledged, as the broker counts them (CONSUMER_STATS)."""
        conn = await self._connected()
        cmd, g = new_command(T.CONSUMER_STATS)
        g.consumer_id = self.consumer_id
        resp = await conn.request(cmd, self.client.operation_timeout)
        if resp.is_error:
            raise resp.error()
        return int(resp.command.consumerStatsResponse.msgBacklog)

    async def mark_delete_position(self) -> MessageId | None:
        """The subscription's mark-delete position (every message up to it is acknowledged), as the
        broker reports it with GET_LAST_MESSAGE_ID; None from a broker that does not report it."""
        mark_delete = (await self._last_message_id())[1]
        return None if mark_delete is None else MessageId(*mark_delete, partition=self.partition)

    async def _last_message_id(self) -> tuple[MessageId, tuple[int, int] | None]:
        """The last message id of the topic and the subscription's mark-delete position (if sent)."""
        conn = await self._connected()
        cmd, g = new_command(T.GET_LAST_MESSAGE_ID)
        g.consumer_id = self.consumer_id
        resp = await conn.request(cmd, self.client.operation_timeout)
        if resp.is_error:
            raise resp.error()
        r = resp.command.getLastMessageIdResponse
        mark_delete = None
        if r.HasField("consumer_mark_delete_position"):
            md = MessageId.from_proto(r.consumer_mark_delete_position)
            mark_delete = (md.ledger_id, md.entry_id)
        return MessageId.from_proto(r.last_message_id, self.partition), mark_delete

    def message_known_available(self) -> bool:
        """True when a message is queued, or the broker's last id seen before is past the last
        message handed out (no round trip: the Java client's ``lastMessageIdInBroker``)."""
        if self.queue.holds(self):
            return True
        known, ref = self._last_in_broker, self.last_dequeued
        return known is not None and ref is not None and _key(known) > _key(ref)

    async def has_message_available(self) -> bool:
        if self.message_known_available():
            return True
        if self.end_of_topic:
            return False
        last, mark_delete = await self._last_message_id()
        self._last_in_broker = last
        if last.entry_id < 0:
            return False
        ref = self.last_dequeued
        if ref is None:
            start = self._start
            if start is None or not MessageId.EARLIEST < start < MessageId.LATEST:
                # Nothing read since subscribing at EARLIEST/LATEST or a seek: the cursor tells.
                if mark_delete is not None:
                    return _entry(last) > mark_delete
                return start is not None and start.ledger_id < 0
            return _key(last) > _key(start) or (self._start_inclusive and _key(last) >= _key(start))
        return _key(last) > _key(ref)

    async def unsubscribe(self) -> None:
        conn = await self._connected()
        cmd, u = new_command(T.UNSUBSCRIBE)
        u.consumer_id = self.consumer_id
        resp = await conn.request(cmd, self.client.operation_timeout)
        if resp.is_error:
            raise resp.error()
        await self.close()

    async def close(self) -> None:
        if self.state in (HandlerState.CLOSED, HandlerState.CLOSING):
            return
        self.flush_acks()
        prior = self.state
        if prior not in CLOSED_AT_ONCE:
            self._set(HandlerState.CLOSING)  # a failed or never-started one goes straight to CLOSED
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        if self.creating is not None:  # a late answer finds it closed (see client.creation)
            self.creating.forget()
        for t in self._tasks:
            t.cancel()
        conn = self.connection
        if conn is not None and not conn.is_closed and prior is HandlerState.READY:
            cmd, c = new_command(T.CLOSE_CONSUMER)
            c.consumer_id = self.consumer_id
            try:
                await conn.request(cmd, self.client.operation_timeout)
            except (PulsarWireError, OperationTimeoutError) as exc:
                log.debug("consumer on %s: close: %s", self.topic, exc)
            conn.consumers.pop(self.consumer_id, None)
        self.queue.drop(self)
        if self._dlq is not None:
            await self._dlq.close()
        self._set(HandlerState.CLOSED)
        self.queue.wake()


def _entry(mid: MessageId) -> tuple[int, int]:
    return (mid.ledger_id, mid.entry_id)


def _declared(md: pb.MessageMetadata) -> int:
    """The message count an entry declares (1 when it is not a batch); may be anything when corrupt."""
    return int(md.num_messages_in_batch) if md.HasField("num_messages_in_batch") else 1


def _key(mid: MessageId) -> tuple[int, int, int]:
    return (mid.ledger_id, mid.entry_id, mid.batch_index)
