"""Bulk reads for Spark: a range of one topic-partition straight into ``pyarrow.RecordBatch``es.

``read_arrow(client, topic, start, end)`` opens a non-durable reader after
``start`` (exclusive; ``MessageId.EARLIEST`` for the beginning) and yields
RecordBatches of at most ``batch_rows`` rows until ``end`` (inclusive) has
been read. Messages are unpacked by the consumer machinery (decompression,
batches, chunks, corrupt entries) and go straight into column lists — no
Message object per message. Permits are returned only as rows are handed out,
so memory stays bounded by ``receiver_queue_size`` however slow the caller is.

``end`` may name a batch index (as GET_LAST_MESSAGE_ID reports for batched
entries) or a whole entry (batch_index -1: the entry is included entirely).
pyarrow is imported lazily: it is part of the ``spark`` extra, not a runtime
dependency of pulsarwire.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from pulsarwire.codec.entry import EntryMessage
from pulsarwire.codec.message_id import MessageId, serialize_batch_ids
from pulsarwire.errors import OperationTimeoutError
from pulsarwire.proto import pb

from .consumer import ConsumerConfig, MessageQueue, PartitionConsumer

if TYPE_CHECKING:
    import pyarrow as pa

    from .core import AsyncClient

COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "ledger_id",
    "entry_id",
    "batch_index",
    "publish_time",
    "event_time",
    "properties",
    "producer_name",
    "sequence_id",
    "message_id",
)


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("ledger_id", pa.int64()),
            ("entry_id", pa.int64()),
            ("batch_index", pa.int32()),
            ("publish_time", pa.timestamp("ms", tz="UTC")),
            ("event_time", pa.timestamp("ms", tz="UTC")),
            ("properties", pa.map_(pa.string(), pa.string())),
            ("producer_name", pa.string()),
            ("sequence_id", pa.int64()),
            ("message_id", pa.binary()),
        ]
    )


def _past(mid: MessageId, end: MessageId) -> bool:
    if end.batch_index < 0 or mid.batch_index < 0:
        return (mid.ledger_id, mid.entry_id) > (end.ledger_id, end.entry_id)
    return (mid.ledger_id, mid.entry_id, mid.batch_index) > (end.ledger_id, end.entry_id, end.batch_index)


def _after(end: MessageId, start: MessageId) -> bool:
    """True when the range (start, end] holds something; batch index -1 means the whole entry."""
    whole = 1 << 62
    return (end.ledger_id, end.entry_id, whole if end.batch_index < 0 else end.batch_index) > (
        start.ledger_id,
        start.entry_id,
        whole if start.batch_index < 0 else start.batch_index,
    )


def _at_end(mid: MessageId, md: pb.MessageMetadata, end: MessageId) -> bool:
    """True once ``mid`` is the last message of the range."""
    if (mid.ledger_id, mid.entry_id) != (end.ledger_id, end.entry_id):
        return (mid.ledger_id, mid.entry_id) > (end.ledger_id, end.entry_id)
    if end.batch_index >= 0:
        return mid.batch_index >= end.batch_index
    last = md.num_messages_in_batch - 1 if md.HasField("num_messages_in_batch") else -1
    return mid.batch_index >= last


class _ColumnReader(PartitionConsumer):
    """A reader whose messages fill column lists instead of a queue."""

    def __init__(
        self, client: AsyncClient, topic: str, partition: int, config: ConsumerConfig, end: MessageId
    ):
        super().__init__(client, topic, partition, config, MessageQueue())
        self.end = end
        self.finished = False
        self.rows = 0
        self.cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
        self.arrived = asyncio.Event()
        #: (ledger_id, entry_id) of the first entry the broker delivered, before any filtering
        self.first_entry: tuple[int, int] | None = None

    def on_event(self, event: Any) -> None:
        super().on_event(event)
        self.arrived.set()  # a message, an error, the end of the topic: the reading loop looks again

    def _deliver_entry(
        self,
        base: MessageId,
        md: pb.MessageMetadata,
        messages: list[EntryMessage],
        keep: set[int] | None,
        batch_size: int,
        redelivery_count: int,
    ) -> None:
        """Whole entries inside the range go into the columns at once, without a MessageId each."""
        if self.first_entry is None:
            self.first_entry = (base.ledger_id, base.entry_id)
        end = self.end
        whole = (
            keep is None
            and self._start is None
            and not self.finished
            and (base.ledger_id, base.entry_id) < (end.ledger_id, end.entry_id)
        )
        if not whole or not batch_size:
            super()._deliver_entry(base, md, messages, keep, batch_size, redelivery_count)
            if not self.finished and (base.ledger_id, base.entry_id) >= (end.ledger_id, end.entry_id):
                self.finished = True  # the end entry is through, even if all of it was before the start
                self.arrived.set()
            return
        n = len(messages)
        c = self.cols
        singles = [m.single for m in messages]
        c["key"].extend(
            s.partition_key.encode() if s is not None and s.HasField("partition_key") else None
            for s in singles
        )
        c["value"].extend(m.payload for m in messages)
        c["topic"].extend([self.topic] * n)
        c["partition"].extend([self.partition] * n)
        c["ledger_id"].extend([base.ledger_id] * n)
        c["entry_id"].extend([base.entry_id] * n)
        c["batch_index"].extend(range(n))
        c["publish_time"].extend([md.publish_time] * n)
        c["event_time"].extend((s.event_time or None) if s is not None else None for s in singles)
        c["properties"].extend(
            [(kv.key, kv.value) for kv in s.properties] if s is not None and s.properties else []
            for s in singles
        )
        c["producer_name"].extend([md.producer_name] * n)
        first_seq = md.sequence_id
        c["sequence_id"].extend(
            s.sequence_id if s is not None and s.HasField("sequence_id") else first_seq + i
            for i, s in enumerate(singles)
        )
        c["message_id"].extend(serialize_batch_ids(base.ledger_id, base.entry_id, self.partition, n))
        self.rows += n
        self.last_dequeued = MessageId(base.ledger_id, base.entry_id, self.partition, n - 1, n)
        self.arrived.set()

    def take(self) -> dict[str, list[Any]]:
        cols, self.cols = self.cols, {c: [] for c in COLUMNS}
        self.rows = 0
        return cols

    def _deliver(
        self,
        mid: MessageId,
        md: pb.MessageMetadata,
        single: pb.SingleMessageMetadata | None,
        payload: bytes,
        redelivery_count: int,
    ) -> None:
        if self.finished or _past(mid, self.end):
            self.finished = True
            self.consumed(1)
            self.arrived.set()
            return
        c = self.cols
        if single is not None:
            key = single.partition_key.encode() if single.HasField("partition_key") else None
            props = [(kv.key, kv.value) for kv in single.properties]
            event = single.event_time or None
            seq = single.sequence_id if single.HasField("sequence_id") else md.sequence_id + mid.batch_index
        else:
            key = md.partition_key.encode() if md.HasField("partition_key") else None
            props = [(kv.key, kv.value) for kv in md.properties]
            event = md.event_time or None
            seq = md.sequence_id
        c["key"].append(key)
        c["value"].append(payload)
        c["topic"].append(self.topic)
        c["partition"].append(self.partition)
        c["ledger_id"].append(mid.ledger_id)
        c["entry_id"].append(mid.entry_id)
        c["batch_index"].append(mid.batch_index)
        c["publish_time"].append(md.publish_time)
        c["event_time"].append(event)
        c["properties"].append(props)
        c["producer_name"].append(md.producer_name)
        c["sequence_id"].append(seq)
        c["message_id"].append(mid.serialize())
        self.rows += 1
        self.last_dequeued = mid
        if _at_end(mid, md, self.end):
            self.finished = True
        self.arrived.set()


async def read_arrow(
    client: AsyncClient,
    topic: str,
    start: MessageId,
    end: MessageId,
    *,
    partition: int = -1,
    batch_rows: int = 10_000,
    receiver_queue_size: int = 10_000,
    idle_timeout: float | None = None,
    on_first: Callable[[MessageId], None] | None = None,
) -> AsyncGenerator[pa.RecordBatch, None]:
    """Yield the messages in (start, end] of one topic-partition as RecordBatches.

    ``on_first`` is called once, before any rows are yielded, with the id of the
    first entry the broker delivered (batch index -1): a caller checks it for a
    gap after ``start`` (data removed by retention) and may raise to stop.

    Raises CorruptMessageError for an entry that fails validation and
    OperationTimeoutError when nothing arrives for ``idle_timeout`` seconds
    (default: the client's operation timeout) before ``end`` is reached.
    """
    import pyarrow as pa

    schema = arrow_schema()
    if end.entry_id < 0 or (start.ledger_id >= 0 and not _after(end, start)):
        return
    # Permits come back as rows are handed out: the queue must hold at least two batches.
    receiver_queue_size = max(receiver_queue_size, 2 * batch_rows)
    cfg = ConsumerConfig(
        subscription_name=f"bulk-{uuid.uuid4().hex[:10]}",
        consumer_type=pb.CommandSubscribe.Exclusive,
        durable=False,
        start_message_id=start,
        start_message_id_inclusive=False,
        receiver_queue_size=receiver_queue_size,
    )
    reader = _ColumnReader(client, topic, partition, cfg, end)
    timeout = client.operation_timeout if idle_timeout is None else idle_timeout
    await reader.start()
    try:
        while True:
            if reader.queue.errors:
                raise reader.queue.errors.popleft()
            if on_first is not None and reader.first_entry is not None:
                on_first(MessageId(*reader.first_entry, reader.partition))
                on_first = None
            if reader.rows >= batch_rows or (reader.finished and reader.rows):
                rows = reader.rows
                cols = reader.take()
                yield pa.RecordBatch.from_pydict(cols, schema=schema)
                reader.consumed(rows)
                continue
            if reader.finished:
                return
            reader.arrived.clear()
            try:
                await asyncio.wait_for(reader.arrived.wait(), timeout)
            except TimeoutError:
                if reader.queue.errors:
                    continue
                raise OperationTimeoutError(
                    f"{topic}: nothing arrived for {timeout:.0f} s before reaching {end}"
                ) from None
    finally:
        await reader.close()
