"""Bulk reads for Spark: a range of one topic-partition straight into ``pyarrow.RecordBatch``es.

``read_arrow(client, topic, start, end)`` opens a non-durable reader after
``start`` (exclusive; ``MessageId.EARLIEST`` for the beginning) and yields
RecordBatches of at most ``batch_rows`` rows until ``end`` (inclusive) has
been read. Batch entries inside the range are decoded straight into columns
(:func:`~pulsarwire.codec.batch.split_batch_columns`: no Python object per
message); the rest (the entry holding ``start``, single messages, chunks,
entries that fail to decode) goes through the consumer machinery, message by
message, into the same columns. Permits are returned only as rows are handed
out, so memory stays bounded by ``receiver_queue_size`` however slow the caller is.

``end`` may name a batch index (as GET_LAST_MESSAGE_ID reports for batched
entries) or a whole entry (batch_index -1: the entry is included entirely).
pyarrow is imported lazily: it is part of the ``spark`` extra, not a runtime
dependency of pulsarwire.

A corrupt entry inside the range (see the consumer) is, by ``on_corrupt``:
``"raise"`` (default) CorruptMessageError; ``"skip"`` logged and left out;
``"rows"`` one row of its own, with ``value`` = the entry's bytes as the broker
sent them, its entry id (batch index -1), null metadata columns and the reason
in an extra ``corrupt_reason`` column (null on every other row). A corrupt entry
at or before the start belongs to the range before (it was handled there) and
one after the end to the range after.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import uuid
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from pulsarwire.codec.batch import BatchColumns, as_text, key_bytes, split_batch_columns
from pulsarwire.codec.chunks import is_chunk
from pulsarwire.codec.entry import uncompressed_payload
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    CorruptMessageError,
    InvalidConfigurationError,
    OperationTimeoutError,
    PulsarWireError,
)
from pulsarwire.proto import pb
from pulsarwire.protocol.connection import MessageReceived

from .consumer import PartitionConsumer
from .consumer_config import ConsumerConfig
from .message import Delivery
from .receive_queue import MessageQueue

if TYPE_CHECKING:
    import pyarrow as pa

    from .context import ClientContext

log = logging.getLogger("pulsarwire.bulk")
OnCorrupt = Literal["raise", "skip", "rows"]
#: the extra column of ``on_corrupt="rows"``
CORRUPT_REASON = "corrupt_reason"

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


def arrow_schema(*, corrupt_reason: bool = False) -> pa.Schema:
    """The RecordBatch schema of :func:`read_arrow` (with ``corrupt_reason`` for ``on_corrupt="rows"``)."""
    import pyarrow as pa

    schema = pa.schema(
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
    return schema.append(pa.field(CORRUPT_REASON, pa.string())) if corrupt_reason else schema


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


def _index_bytes(batch_index: int) -> bytes:
    """The bytes a batch index adds to a serialized message id.

    Protobuf writes fields in field-number order, so the id of message i of a batch is
    the id of its entry (ledger, entry, partition), then these bytes, then the batch size.
    """
    return MessageId(0, 0, -1, batch_index).serialize()[len(_ID_PREFIX) :]


_ID_PREFIX = MessageId(0, 0).serialize()


@functools.lru_cache(maxsize=4)
def _index_table(size: int) -> pa.Array:
    """b"" then the bytes of batch indexes 0 .. size - 2, as a binary array to take from."""
    import pyarrow as pa

    return pa.array([b""] + [_index_bytes(i) for i in range(size - 1)], pa.binary())


def _index_pieces(size: int) -> pa.Array:
    """:func:`_index_table` with at least ``size`` items (sizes rounded up: few tables are made)."""
    return _index_table(max(1024, 1 << (size - 1).bit_length()))


def _text_array(values: list[Any]) -> pa.Array:
    """A string column of protobuf strings; one that is not valid UTF-8 (protobuf hands it back
    as bytes) is decoded with replacement characters, as the Java client does."""
    import pyarrow as pa

    try:
        return pa.array(values, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.array([as_text(v) for v in values], pa.string())


def _first_rows(cols: BatchColumns, rows: int) -> BatchColumns:
    """The first ``rows`` entries of a batch."""
    counts = cols.property_counts
    props = sum(counts[:rows]) if counts is not None else 0
    return BatchColumns(
        cols.payloads[:rows],
        None if cols.partition_keys is None else cols.partition_keys[:rows],
        None if cols.event_times is None else cols.event_times[:rows],
        None if cols.sequence_ids is None else cols.sequence_ids[:rows],
        None if counts is None else counts[:rows],
        cols.property_keys[:props],
        cols.property_values[:props],
    )


class _Rows:
    """Rows waiting to become one RecordBatch.

    Values that differ per message are kept in lists; values of a whole entry (ledger,
    entry, publish time, producer) once per entry, with where each entry's rows end,
    and expanded by Arrow (run-end decoding). Whole batches arrive as
    :class:`~pulsarwire.codec.batch.BatchColumns`, without a Python object per message.
    """

    def __init__(self, corrupt_reason: bool = False) -> None:
        self.corrupt_reason = corrupt_reason
        #: row -> why it is corrupt (rows that stand for corrupt entries)
        self.reasons: dict[int, str] = {}
        self.count = 0
        self.keys: list[bytes | None] = []
        self.values: list[bytes] = []
        self.event_times: list[int | None] = []
        self.property_counts: list[int] = []
        self.property_keys: list[str] = []
        self.property_values: list[str] = []
        self.sequence_ids: list[int | None] = []
        #: each entry's message ids: id_heads[e] + the bytes of the row's batch index + id_tails[e]
        #: (id_split[e] == 1), or id_heads[e] alone (0)
        self.id_heads: list[bytes] = []
        self.id_tails: list[bytes] = []
        self.id_split: list[int] = []
        self.run_ends: list[int] = []
        #: batch index of each entry's first row minus the row's position (rows count up from it)
        self.index_shifts: list[int] = []
        self.max_index = -1
        self.ledger_ids: list[int] = []
        self.entry_ids: list[int] = []
        self.publish_times: list[int | None] = []
        self.producer_names: list[str | None] = []

    def _entry(self, mid: MessageId, md: pb.MessageMetadata | None, n: int, first_index: int) -> None:
        self.index_shifts.append(first_index - self.count)
        self.max_index = max(self.max_index, first_index + n - 1)
        self.count += n
        self.run_ends.append(self.count)
        self.ledger_ids.append(mid.ledger_id)
        self.entry_ids.append(mid.entry_id)
        self.publish_times.append(None if md is None else md.publish_time)
        self.producer_names.append(None if md is None else md.producer_name)

    def add_corrupt(self, mid: MessageId, raw: bytes, reason: str) -> None:
        """A row standing for a corrupt entry: its bytes, its entry id and why (nothing else is known)."""
        self.reasons[self.count] = reason
        self._entry(mid, None, 1, -1)
        self.keys.append(None)
        self.values.append(raw)
        self.event_times.append(None)
        self.property_counts.append(0)
        self.sequence_ids.append(None)
        self.id_heads.append(mid.serialize())
        self.id_tails.append(b"")
        self.id_split.append(0)

    def add_batch(
        self, base: MessageId, partition: int, md: pb.MessageMetadata, cols: BatchColumns, rows: int
    ) -> None:
        """The first ``rows`` messages of a batch entry."""
        size = len(cols.payloads)
        if rows < size:
            cols = _first_rows(cols, rows)
        n = rows
        self._entry(base, md, n, 0)
        self.keys += [None] * n if cols.partition_keys is None else cols.partition_keys
        self.values += cols.payloads
        if cols.event_times is None:
            self.event_times += [None] * n
        elif 0 in cols.event_times:
            self.event_times += [t or None for t in cols.event_times]  # 0 means not set
        else:
            self.event_times += cols.event_times
        if cols.property_counts is None:
            self.property_counts += [0] * n
        else:
            self.property_counts += cols.property_counts
            self.property_keys += cols.property_keys
            self.property_values += cols.property_values
        seq = md.sequence_id
        if cols.sequence_ids is None:
            self.sequence_ids += range(seq, seq + n)
        elif None in cols.sequence_ids:
            self.sequence_ids += [seq + i if s is None else s for i, s in enumerate(cols.sequence_ids)]
        else:
            self.sequence_ids += cast("list[int]", cols.sequence_ids)  # no None in it
        head = MessageId(base.ledger_id, base.entry_id, partition).serialize()
        first = MessageId(base.ledger_id, base.entry_id, partition, 0, size).serialize()
        self.id_heads.append(head)
        self.id_tails.append(first[len(head) + len(_index_bytes(0)) :])
        self.id_split.append(1)

    def add(
        self,
        mid: MessageId,
        md: pb.MessageMetadata,
        single: pb.SingleMessageMetadata | None,
        payload: bytes,
    ) -> None:
        """One message, with the metadata of its batch entry (``single``) or of itself."""
        self._entry(mid, md, 1, mid.batch_index)
        meta = md if single is None else single
        self.keys.append(key_bytes(meta.partition_key) if meta.HasField("partition_key") else None)
        self.values.append(payload)
        self.event_times.append(meta.event_time or None)
        self.property_counts.append(len(meta.properties))
        for kv in meta.properties:
            self.property_keys.append(kv.key)
            self.property_values.append(kv.value)
        if single is None:
            self.sequence_ids.append(md.sequence_id)
        elif single.HasField("sequence_id"):
            self.sequence_ids.append(single.sequence_id)
        else:
            self.sequence_ids.append(md.sequence_id + mid.batch_index)
        self.id_heads.append(mid.serialize())
        self.id_tails.append(b"")
        self.id_split.append(0)

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        """The rows as one RecordBatch of :func:`arrow_schema`."""
        import pyarrow as pa
        import pyarrow.compute as pc

        schema = arrow_schema(corrupt_reason=self.corrupt_reason)
        types = {f.name: f.type for f in schema}
        n = self.count
        ends = pa.array(self.run_ends, pa.int32())

        def per_entry(values: list[Any] | pa.Array, typ: pa.DataType) -> pa.Array:
            array = values if isinstance(values, pa.Array) else pa.array(values, typ)
            return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, array))

        row = pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int32()), n), start=-1)  # 0, 1, ...
        batch_index = pc.add(row, per_entry(self.index_shifts, pa.int32()))
        pieces = pc.multiply(pc.add(batch_index, 1), per_entry(self.id_split, pa.int32()))
        message_id = pc.binary_join_element_wise(
            per_entry(self.id_heads, pa.binary()),
            pc.take(_index_pieces(self.max_index + 2), pieces),
            per_entry(self.id_tails, pa.binary()),
            b"",
        )
        if self.property_keys:
            offsets = [0]
            offsets += itertools.accumulate(self.property_counts)
            property_offsets = pa.array(offsets, pa.int32())
        else:
            property_offsets = pa.repeat(pa.scalar(0, pa.int32()), n + 1)
        properties = pa.MapArray.from_arrays(
            property_offsets,
            _text_array(self.property_keys),
            _text_array(self.property_values),
            type=types["properties"],
        )
        arrays = {
            "key": pa.array(self.keys, types["key"]),
            "value": pa.array(self.values, types["value"]),
            "topic": pa.repeat(pa.scalar(topic, types["topic"]), n),
            "partition": pa.repeat(pa.scalar(partition, types["partition"]), n),
            "ledger_id": per_entry(self.ledger_ids, types["ledger_id"]),
            "entry_id": per_entry(self.entry_ids, types["entry_id"]),
            "batch_index": batch_index,
            "publish_time": per_entry(self.publish_times, types["publish_time"]),
            "event_time": pa.array(self.event_times, types["event_time"]),
            "properties": properties,
            "producer_name": per_entry(_text_array(self.producer_names), types["producer_name"]),
            "sequence_id": pa.array(self.sequence_ids, types["sequence_id"]),
            "message_id": message_id,
        }
        if self.corrupt_reason:
            reasons = self.reasons
            arrays[CORRUPT_REASON] = (
                pa.array([reasons.get(i) for i in range(n)], pa.string())
                if reasons
                else pa.nulls(n, pa.string())
            )
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)


class _ColumnReader(PartitionConsumer):
    """A reader whose messages fill columns (:class:`_Rows`) instead of a queue.

    Batch entries that are wholly inside the range and need no filtering are decoded
    straight into columns (:func:`~pulsarwire.codec.batch.split_batch_columns`); all
    others, and any entry that fails to decode, take the consumer's own path.
    """

    def __init__(
        self,
        client: ClientContext,
        topic: str,
        partition: int,
        config: ConsumerConfig,
        end: MessageId,
        on_corrupt: OnCorrupt = "raise",
    ):
        super().__init__(client, topic, partition, config, MessageQueue())
        self.end = end
        self.on_corrupt = on_corrupt
        self.finished = False
        self.rows = _Rows(on_corrupt == "rows")
        self.arrived = asyncio.Event()
        #: (ledger_id, entry_id) of the first entry the broker delivered, before any filtering
        self.first_entry: tuple[int, int] | None = None

    def on_event(self, event: Any) -> None:
        super().on_event(event)
        self.arrived.set()  # a message, an error, the end of the topic: the reading loop looks again

    def _on_message(self, ev: MessageReceived) -> None:
        md = ev.payload.metadata
        base = ev.message_id
        end = self.end
        n = md.num_messages_in_batch
        here = (base.ledger_id, base.entry_id)
        last = here == (end.ledger_id, end.entry_id)
        if (self.finished or here > (end.ledger_id, end.entry_id)) and not is_chunk(md):
            # Past the end (the prefetch of a range that ends mid-topic): dropped unopened. The
            # consumer's own path would decompress it and make an object of each message, ~0.1 s
            # per range for a full receiver queue of batches; a corrupt one is the range after's.
            self.consumed(max(n, 1))
            self.finished = True
            self.arrived.set()
            return
        if (
            n <= 0
            or self.finished
            or ev.ack_set
            or self._seeking
            or self._seek_filter
            or is_chunk(md)
            or here > (end.ledger_id, end.entry_id)
            or here in self.acks.pending
        ):
            super()._on_message(ev)
            return
        try:
            data = uncompressed_payload(md, ev.payload.payload, self._max_uncompressed())
            cols = split_batch_columns(data, n)
        except PulsarWireError:
            cols = None
        # The consumer's own path reports a corrupt entry and drops messages before the start.
        if cols is None or self._skip(MessageId(base.ledger_id, base.entry_id, self.partition, 0, n)):
            super()._on_message(ev)
            return
        if self.first_entry is None:
            self.first_entry = here
        rows = min(n, end.batch_index + 1) if last and end.batch_index >= 0 else n
        self.rows.add_batch(base, self.partition, md, cols, rows)
        if rows < n:
            self.consumed(n - rows)  # past the end: never handed out
        self.last_dequeued = MessageId(base.ledger_id, base.entry_id, self.partition, rows - 1, n)
        self.finished = last
        self.arrived.set()

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
        if self.first_entry is None:
            self.first_entry = (base.ledger_id, base.entry_id)
        super()._deliver_entry(base, md, singles, payloads, keep, batch_size, redelivery_count)
        end = self.end
        if not self.finished and (base.ledger_id, base.entry_id) >= (end.ledger_id, end.entry_id):
            self.finished = True  # the end entry is through, even if all of it was before the start
            self.arrived.set()

    def take(self) -> _Rows:
        rows, self.rows = self.rows, _Rows(self.on_corrupt == "rows")
        return rows

    def _corrupt(self, mid: MessageId, error: object, permits: int, raw: bytes | None) -> None:
        """Only corrupt entries inside the range count: one after the end is the range after's
        (and one at or before the start entry the range before's: the consumer drops it)."""
        here, end = (mid.ledger_id, mid.entry_id), (self.end.ledger_id, self.end.entry_id)
        if self.finished or here > end:
            self.consumed(permits)
            self.finished = True
        else:
            if self.first_entry is None:
                self.first_entry = here
            self.finished = here == end
            super()._corrupt(mid, error, permits, raw)
        self.arrived.set()

    def _report(self, error: CorruptMessageError) -> int:
        if self.on_corrupt == "raise":
            return super()._report(error)
        mid = cast(MessageId, error.message_id)
        if self.on_corrupt == "skip":
            log.warning("%s: skipping corrupt message %s: %s", self.topic, mid, error.reason)
            return 0
        self.rows.add_corrupt(mid, error.raw or b"", error.reason)
        self.last_dequeued = mid
        return 1  # the row's permit comes back when the rows are handed out

    def _deliver(
        self,
        delivery: Delivery,
        indexes: Sequence[int],
        singles: Sequence[bytes | None],
        payloads: list[bytes],
    ) -> None:
        parse = pb.SingleMessageMetadata.FromString
        md = delivery.metadata
        for index, single, payload in zip(indexes, singles, payloads, strict=True):
            self._add_row(delivery.message_id(index), md, None if single is None else parse(single), payload)

    def _add_row(
        self,
        mid: MessageId,
        md: pb.MessageMetadata,
        single: pb.SingleMessageMetadata | None,
        payload: bytes,
    ) -> None:
        if self.finished or _past(mid, self.end):
            self.finished = True
            self.consumed(1)
            self.arrived.set()
            return
        self.rows.add(mid, md, single, payload)
        self.last_dequeued = mid
        if _at_end(mid, md, self.end):
            self.finished = True
        self.arrived.set()


async def read_arrow(
    client: ClientContext,
    topic: str,
    start: MessageId,
    end: MessageId,
    *,
    partition: int = -1,
    batch_rows: int = 10_000,
    receiver_queue_size: int = 10_000,
    idle_timeout: float | None = None,
    on_first: Callable[[MessageId], None] | None = None,
    on_corrupt: OnCorrupt = "raise",
) -> AsyncGenerator[pa.RecordBatch, None]:
    """Yield the messages in (start, end] of one topic-partition as RecordBatches.

    ``on_first`` is called once, before any rows are yielded, with the id of the
    first entry the broker delivered (batch index -1): a caller checks it for a
    gap after ``start`` (data removed by retention) and may raise to stop.

    ``on_corrupt`` says what an entry that fails validation becomes (see the module
    docstring): ``"raise"`` CorruptMessageError, ``"skip"`` nothing, ``"rows"`` a row
    with a ``corrupt_reason``.

    Raises CorruptMessageError (``on_corrupt="raise"``) and OperationTimeoutError when
    nothing arrives for ``idle_timeout`` seconds (default: the client's operation timeout)
    before ``end`` is reached; InvalidConfigurationError for an unknown ``on_corrupt``.
    """
    if on_corrupt not in ("raise", "skip", "rows"):
        raise InvalidConfigurationError(f"on_corrupt must be raise, skip or rows, got {on_corrupt!r}")
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
    reader = _ColumnReader(client, topic, partition, cfg, end, on_corrupt)
    timeout = client.operation_timeout if idle_timeout is None else idle_timeout
    await reader.start()
    try:
        while True:
            if reader.queue.errors:
                raise reader.queue.errors.popleft()
            if on_first is not None and reader.first_entry is not None:
                on_first(MessageId(*reader.first_entry, reader.partition))
                on_first = None
            if reader.rows.count >= batch_rows or (reader.finished and reader.rows.count):
                rows = reader.take()
                yield rows.to_batch(reader.topic, reader.partition)
                reader.consumed(rows.count)
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
