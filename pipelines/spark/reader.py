"""The ``pulsarwire`` source: ``spark.read`` and ``spark.readStream`` over Pulsar topics.

Options follow Spark's Kafka source (:class:`pipelines.options.source.SourceOptions`). The driver
(:class:`PulsarBatchReader`, :class:`PulsarStreamReader`) resolves the
topic-partitions, the last message of each and — with admission control — how
far each partition may go in this batch (:mod:`pipelines.spark.planner`). Each Spark
input partition is one :class:`ReadRange` ``(start, end]`` of one
topic-partition — or, with ``minPartitions``, one sub-range of it cut at whole
entries (:mod:`pipelines.spark.split`; offsets stay per topic-partition); an
executor reads it with pulsarwire's bulk Arrow path (``Client.read_arrow``: a
non-durable reader, no Python object per message) and stops exactly at
``end``, batch indexes included. Offsets are JSON
``{topic-partition: "ledger:entry:batch"}`` (:mod:`pipelines.state.positions`).

Where a range's start no longer exists (retention, trimming), the first entry
the broker delivers is not adjacent to the start: with ``failOnDataLoss=true``
(default) the task fails with :class:`~pipelines.errors.DataLossError` naming the
topic-partition and the missing range; with ``false`` the gap is logged and
reading continues. Where a stream's start (its checkpoint or the offset store) is
past the partition's last message — the broker's data was reset, the job points at
another cluster, the topic was recreated — the driver stops before reading with
:class:`~pipelines.errors.OffsetsAheadError`; with ``failOnDataLoss=false`` it logs a
warning and reads that partition from its earliest message. Checked when the stream
starts and for every batch (under Trigger.AvailableNow against the end the query fixed
when it started: its triggers ask the broker nothing more).

The source never creates a topic (:mod:`pipelines.spark.planner`): a named topic that does
not exist fails the query, unless a stream sets ``waitForTopic=true`` and waits for it.

A message that cannot be decoded (a corrupt entry: checksum, compression, batch
layout, a batch count that lies) is handled by ``onCorruptMessage``: ``fail``
(default) fails the task with :class:`~pipelines.errors.CorruptMessageError`
naming topic-partition, message id and reason; ``skip`` leaves it out (logged on
the executor with its id); ``quarantine`` hands it on as a row of its own whose
``corruptReason`` (string) and ``corruptBytes`` (the entry as the broker sent it)
are set and whose other columns are null, except its topic, partition and ids.
Under ``quarantine`` every row has these two columns (null on good rows): the
writer routes (the pipelines runner appends them to the job's quarantine table).

A stream with ``subscriptionName`` (default: derived from the topics) keeps a
durable subscription that holds the backlog on the broker; it is acknowledged
only up to offsets Spark has committed (``commit``) or that a restarted query
starts from — never ahead of what the sink committed.

Spark runs the driver side of every streaming query in a new Python process, which imports
this module before anything else happens: what only some queries need is imported where it
is used, not here — :mod:`pipelines.spark.schemas` (fastavro) under ``schema=auto``,
:mod:`pipelines.state.offsets` (deltalake) with an ``offsetStore``, and ``pyarrow.compute``
for rows of corrupt entries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipelines.errors import CorruptMessageError, DataLossError, OffsetsAheadError
from pipelines.options.client import ClientSettings
from pipelines.options.source import SourceOptions
from pipelines.spark.planner import (
    Lag,
    PlanCancelled,
    Planner,
    SourceSettings,
    TopicSelector,
    bounds,
    resolve_start,
)
from pipelines.spark.split import split_ranges
from pipelines.state.positions import Offsets, Position, partition_of
from pulsarwire import CORRUPT_REASON as BULK_REASON
from pulsarwire import CorruptMessageError as CorruptEntry
from pulsarwire import MessageId, OperationTimeoutError

log = logging.getLogger("pipelines.spark.reader")

#: Spark column name -> bulk Arrow column name
_COLUMNS = (
    ("key", "key"),
    ("value", "value"),
    ("topic", "topic"),
    ("partition", "partition"),
    ("messageId", "message_id"),
    ("ledgerId", "ledger_id"),
    ("entryId", "entry_id"),
    ("batchIndex", "batch_index"),
    ("publishTime", "publish_time"),
    ("eventTime", "event_time"),
    ("properties", "properties"),
    ("producerName", "producer_name"),
    ("sequenceId", "sequence_id"),
)

#: onCorruptMessage -> what pulsarwire's read_arrow makes of a corrupt entry
_BULK_ON_CORRUPT = {"fail": "raise", "skip": "skip", "quarantine": "rows"}
#: the columns quarantine adds (null on every row that is not a corrupt message)
CORRUPT_REASON, CORRUPT_BYTES = "corruptReason", "corruptBytes"


def source_schema(options: Mapping[str, str]) -> StructType:
    """The row schema (``includeProperties=false`` drops the properties column).

    ``schema=auto`` fetches the topics' schema and types ``value`` by it (:mod:`pipelines.spark.schemas`).
    Raises OptionError for bad options.
    """
    opts = SourceOptions.from_spark(options)
    value: Any = BinaryType()
    if opts.schema_ == "auto":
        from pipelines.spark.schemas import value_type  # schema=auto only (see the module docstring)

        value = value_type(
            opts.client_settings(), TopicSelector.of(opts.topic, opts.topics, opts.topics_pattern)
        )
    fields = [
        StructField("key", BinaryType()),
        StructField("value", value),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("messageId", BinaryType()),
        StructField("ledgerId", LongType()),
        StructField("entryId", LongType()),
        StructField("batchIndex", IntegerType()),
        StructField("publishTime", TimestampType()),
        StructField("eventTime", TimestampType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("producerName", StringType()),
        StructField("sequenceId", LongType()),
    ]
    if not opts.include_properties:
        fields = [f for f in fields if f.name != "properties"]
    if opts.on_corrupt_message == "quarantine":
        fields += [StructField(CORRUPT_REASON, StringType()), StructField(CORRUPT_BYTES, BinaryType())]
    return StructType(fields)


# -- executor side ---------------------------------------------------------------------
@dataclass(frozen=True)
class ReadRange:
    """One topic-partition's messages in (start, end], read by one Spark task.

    Spark carries it as an ``InputPartition`` whose ``value`` is this object.
    """

    topic: str
    start: Position
    end: Position
    settings: ClientSettings
    fail_on_data_loss: bool
    poll_timeout_ms: int
    include_properties: bool
    receiver_queue_size: int
    value_schema: Any = None  # a pipelines.spark.schemas.ValueSchema under schema=auto: decodes ``value``
    on_corrupt: str = "fail"


def gap_after(start: Position, first: MessageId) -> bool:
    """True when the first entry delivered after ``start`` is not the one that follows it.

    Expected are the start entry itself (brokers deliver it again, as Pulsar reads every
    start id as a batch id, and the reader drops what it already had), the entry after it,
    or entry 0 of a later ledger (ledgers roll over; retention removes whole ledgers).
    """
    if start.is_earliest:
        return False
    here = (first.ledger_id, first.entry_id)
    if here == (start.ledger_id, start.entry_id):
        return False
    if here == (start.ledger_id, start.entry_id + 1):
        return False
    return not (first.ledger_id > start.ledger_id and first.entry_id == 0)


def _spark_batch(batch: Any, include_properties: bool, value_schema: Any = None) -> Any:
    """A bulk RecordBatch in the source's Spark schema (with ``corruptReason``/``corruptBytes``
    when the bulk reader made rows of corrupt entries)."""

    reasons = batch.column(BULK_REASON) if BULK_REASON in batch.schema.names else None
    corrupt = reasons is not None and reasons.null_count < len(reasons)
    arrays = []
    names = []
    for spark_name, bulk_name in _COLUMNS:
        if bulk_name == "properties" and not include_properties:
            continue
        col = batch.column(bulk_name)
        if bulk_name in ("publish_time", "event_time"):
            col = col.cast(pa.timestamp("us", tz="UTC"))
        elif bulk_name == "value":
            col = _with_corrupt(batch, reasons, value_schema) if corrupt else _decoded(batch, value_schema)
        arrays.append(col)
        names.append(spark_name)
    if reasons is not None:
        raw = batch.column("value")
        corrupt_bytes = _corrupt_bytes(raw, reasons) if corrupt else pa.nulls(len(raw), pa.binary())
        arrays += [reasons, corrupt_bytes]
        names += [CORRUPT_REASON, CORRUPT_BYTES]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _decoded(batch: Any, value_schema: Any) -> Any:
    """The ``value`` column of a batch without corrupt rows: as read, or decoded under schema=auto."""
    return batch.column("value") if value_schema is None else value_schema.decode(batch)


def _with_corrupt(batch: Any, reasons: Any, value_schema: Any) -> Any:
    """The ``value`` column of a batch with corrupt rows (a ``reasons`` entry each): null on them."""
    import pyarrow.compute as pc  # rows of corrupt entries only (see the module docstring)

    good = pc.is_null(reasons)
    if value_schema is None:
        raw = batch.column("value")
        return pc.if_else(good, raw, pa.scalar(None, raw.type))
    decoded = value_schema.decode(batch.filter(good))  # raises SchemaDecodeError naming the message
    slot = pc.subtract(pc.cumulative_sum(good.cast(pa.int64())), 1)  # each good row's place in it
    return decoded.take(pc.if_else(good, slot, pa.scalar(None, pa.int64())))


def _corrupt_bytes(raw: Any, reasons: Any) -> Any:
    """``corruptBytes``: the entry as the broker sent it on corrupt rows, null on the others."""
    import pyarrow.compute as pc  # rows of corrupt entries only (see the module docstring)

    return pc.if_else(pc.is_null(reasons), pa.scalar(None, pa.binary()), raw)


def read_range(r: ReadRange) -> Iterator[Any]:
    """The rows of ``r`` as Arrow batches in the source's Spark schema (runs on executors)."""
    p = partition_of(r.topic)
    seen_first = False

    def check(first: MessageId) -> None:
        nonlocal seen_first
        seen_first = True
        if gap_after(r.start, first):
            _data_loss(r, str(r.start), f"{first.ledger_id}:{first.entry_id}")

    client = r.settings.client()
    try:
        batches = client.read_arrow(
            r.topic,
            r.start.message_id(p),
            r.end.message_id(p),
            partition=p,
            batch_rows=10_000,
            receiver_queue_size=r.receiver_queue_size,
            idle_timeout=r.poll_timeout_ms / 1000,
            on_first=check,
            on_corrupt=_BULK_ON_CORRUPT[r.on_corrupt],
        )
        try:
            for batch in batches:
                yield _spark_batch(batch, r.include_properties, r.value_schema)
        except CorruptEntry as exc:
            raise CorruptMessageError(r.topic, str(exc.message_id), exc.reason) from exc
        except OperationTimeoutError:
            if seen_first:
                raise
            # The broker reported messages up to ``end`` but delivers none after ``start``:
            # everything in the range is gone (or the broker is too slow: raise pollTimeoutMs).
            _data_loss(r, str(r.start), f"{r.end} (nothing arrived within pollTimeoutMs)")
        finally:
            batches.close()  # before client.close(): closing it later blocks on the stopped loop
    finally:
        client.close()


def _data_loss(r: ReadRange, after: str, upto: str) -> None:
    if r.fail_on_data_loss:
        raise DataLossError(r.topic, after, upto, "; set failOnDataLoss=false to skip the gap")
    log.warning("%s: data loss, messages after %s up to %s are gone; continuing", r.topic, after, upto)


def _ranges(opts: SourceSettings, start: Offsets, end: Offsets) -> list[InputPartition]:
    """One InputPartition per topic-partition with data in (start, end], or more with
    ``minPartitions`` (:func:`pipelines.spark.split.split_ranges`)."""
    value_schema = None
    if opts.schema_mode == "auto":
        from pipelines.spark.schemas import value_schema_for  # schema=auto only (see the module docstring)

        value_schema = value_schema_for(opts)
    spans = {
        tp: (start.get(tp, Position.EARLIEST), e)
        for tp, e in end.items()
        if start.get(tp, Position.EARLIEST) < e and e.entry_id >= 0
    }
    return [
        InputPartition(
            ReadRange(
                topic=tp,
                start=s,
                end=e,
                settings=opts.settings,
                fail_on_data_loss=opts.fail_on_data_loss,
                poll_timeout_ms=opts.poll_timeout_ms,
                include_properties=opts.include_properties,
                receiver_queue_size=opts.receiver_queue_size,
                value_schema=value_schema,
                on_corrupt=opts.on_corrupt,
            )
        )
        for tp, s, e in split_ranges(spans, opts.min_partitions)
    ]


# -- batch ------------------------------------------------------------------------------
class PulsarBatchReader(DataSourceReader):
    """``spark.read.format("pulsarwire")``: a bounded read from startingOffsets to endingOffsets."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = SourceSettings.parse(options, streaming=False)

    def partitions(self) -> list[InputPartition]:
        start, end = bounds(self.opts)
        ranges = _ranges(self.opts, start, end)
        log.info("batch read of %d topic-partitions in %d Spark partitions", len(end), len(ranges))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if partition is None or partition.value is None:  # Spark reads one empty split when there are none
            return iter(())
        return read_range(partition.value)


# -- streaming --------------------------------------------------------------------------
class _PlanAhead:
    """One :meth:`Planner.advance` call run in a daemon thread; ``question`` is its arguments.

    The planner's blocking client is safe to share between threads; the driver's other calls
    (latest, backlog, release) go on meanwhile.
    """

    def __init__(self, planner: Planner, question: tuple[Offsets, Offsets, int | None, int | None]) -> None:
        self.question = question
        self._stop = threading.Event()
        self._answer: tuple[Offsets, int] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(planner,), name="pipelines-plan-ahead", daemon=True
        )
        self._thread.start()

    def _run(self, planner: Planner) -> None:
        try:
            self._answer = planner.advance(*self.question, stop=self._stop)
        except BaseException as exc:  # handed to the caller of result(), or dropped with cancel()
            self._error = exc

    def result(self) -> tuple[Offsets, int]:
        """The answer, once the scan has finished; raises what the scan raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._answer is not None
        return self._answer

    def cancel(self) -> None:
        """Stop the scan at its next RecordBatch and wait for the thread (its answer is dropped)."""
        self._stop.set()
        self._thread.join()
        if self._error is not None and not isinstance(self._error, PlanCancelled):
            log.debug("a plan made ahead was dropped: %s", self._error)


class PulsarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("pulsarwire")`` with admission control and Trigger.AvailableNow."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = SourceSettings.parse(options, streaming=True)
        self._planner: Planner | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past this
        self._first_call = True
        self._last_batch_at = time.monotonic()
        self._latest: Offsets | None = None
        self._ahead: _PlanAhead | None = None  # the next batch, planned while this one runs

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(
                self.opts.settings,
                self.opts.selector,
                subscription=self.opts.subscription,
                poll_timeout_ms=self.opts.poll_timeout_ms,
                on_corrupt=self.opts.scan_on_corrupt,
                wait_for_topics=self.opts.wait_for_topic,
            )
        return self._planner

    def _stored(self) -> Offsets | None:
        if self.opts.offset_store is None:
            return None

        assert self.opts.job is not None
        from pipelines.state.offsets import OffsetStore  # offsetStore only (see the module docstring)

        stored = OffsetStore(self.opts.offset_store).load(self.opts.job)
        return stored if len(stored) else None

    def _now(self) -> tuple[list[str], Offsets]:
        """The topic-partitions and the last message of each, asked of the broker.

        Under Trigger.AvailableNow, the end the query fixed when it started instead: nothing
        past it is read and no partition it lacks, so a trigger asks the broker nothing again.
        """
        if self._target is not None:
            return list(self._target), self._target
        parts = self.planner.partitions()
        return parts, self.planner.latest(parts)

    def initialOffset(self) -> dict[str, str]:
        parts, latest = self._now()
        stored = self._stored()
        if stored is not None:
            log.info("job %s resumes from the offset store: %s", self.opts.job, stored.to_json())
            stored = stored.updated(self._past_end(stored, latest, "stored"))
            start = Offsets({tp: stored.get(tp, Position.EARLIEST) for tp in parts}).updated(stored)
        else:
            start = resolve_start(self.planner, self.opts.starting, parts, latest)
        self.planner.release(start)
        return start.to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_rows is not None:
            return ReadMaxRows(self.opts.max_rows)
        if self.opts.max_bytes is not None:
            return ReadMaxBytes(self.opts.max_bytes)
        if self.opts.min_rows is not None:
            return ReadMinRows(self.opts.min_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        parts = self.planner.partitions()
        self._target = self.planner.latest(parts)
        log.info("availableNow: reading up to %s", self._target.to_json())

    def _on_restart(self, start: Offsets) -> None:
        """First batch of this run: what ``start`` says is committed; compare with the offset store."""
        self.planner.release(start)
        stored = self._stored()
        if stored is None:
            return
        for tp, pos in stored.items():
            here = start.get(tp)
            if here is None or here == pos:
                continue
            if pos > here:
                log.warning(
                    "%s: the offset store (%s) is ahead of the checkpoint (%s): the batch after the "
                    "checkpoint is replayed; idempotent sinks drop what was already written",
                    tp,
                    pos,
                    here,
                )
            else:
                log.warning(
                    "%s: the checkpoint (%s) is ahead of the offset store (%s): messages in between "
                    "were committed by Spark but not recorded in the store",
                    tp,
                    here,
                    pos,
                )

    def _past_end(self, start: Offsets, latest: Offsets, where: str) -> dict[str, Position]:
        """Partitions whose ``start`` is past their last message → EARLIEST (failOnDataLoss=false).

        With failOnDataLoss=true raises OffsetsAheadError for the first one instead.
        """
        ahead = {tp: pos for tp, pos in start.items() if tp in latest and pos > latest[tp]}
        for tp, pos in ahead.items():
            if self.opts.fail_on_data_loss:
                raise OffsetsAheadError(
                    tp,
                    str(pos),
                    str(latest[tp]),
                    where,
                    "; reset the job's positions (pipelines offsets reset JOB --to earliest --yes) or set "
                    "failOnDataLoss=false to read the partition again from its earliest message",
                )
            log.warning(
                "%s: the %s position %s is past the topic's end %s (data reset, another cluster or a "
                "recreated topic): reading this partition from its earliest message",
                tp,
                where,
                pos,
                latest[tp],
            )
        return {tp: Position.EARLIEST for tp in ahead}

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        begin = Offsets.from_dict(start, "offsets")
        if self._first_call:
            self._first_call = False
            self._on_restart(begin)
        _, latest = self._now()
        restart = self._past_end(begin, latest, "checkpointed")
        new = [tp for tp in latest if tp not in begin]
        if new:
            log.info("new topic-partitions, read from the earliest message: %s", ", ".join(new))
        full_start = Offsets({tp: begin.get(tp, Position.EARLIEST) for tp in latest}).updated(restart)
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            max_rows = self.opts.max_rows
            max_bytes = self.opts.max_bytes
            if isinstance(limit, ReadMaxRows):
                max_rows = limit.max_rows
            elif isinstance(limit, ReadMaxBytes):
                max_bytes = limit.max_bytes
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_rows
            if (
                min_rows is not None
                and self._target is None
                and not self._enough(full_start, latest, min_rows)
            ):
                return begin.updated(full_start).to_dict()
            end = self._advance(full_start, latest, max_rows, max_bytes)
        end = Offsets({tp: max(end[tp], full_start[tp]) for tp in end})
        if end != full_start:
            self._last_batch_at = time.monotonic()
        self._report_lag(end)
        return begin.updated(end).to_dict()

    def _advance(
        self, start: Offsets, latest: Offsets, max_rows: int | None, max_bytes: int | None
    ) -> Offsets:
        """The end of the batch after ``start`` within the limits (:meth:`Planner.advance`).

        Under Trigger.AvailableNow the end of the query never moves, so the batch after this
        one is known to start where this one ends: it is planned (the planner scans it) in the
        background while Spark runs this batch, and the next call takes it when it asks the
        same question. Scanning and reading then overlap instead of taking turns.
        """
        question = (start, latest, max_rows, max_bytes)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.question == question:
            end, _ = ahead.result()
        else:
            if ahead is not None:
                ahead.cancel()
            end, _ = self.planner.advance(*question)
        end = Offsets({tp: max(end[tp], start[tp]) for tp in end})
        if self._target is not None and end != latest:
            self._ahead = _PlanAhead(self.planner, (end, latest, max_rows, max_bytes))
        return end

    def _enough(self, start: Offsets, latest: Offsets, min_rows: int) -> bool:
        """minMessagesPerTrigger: enough rows waiting, or maxTriggerDelay passed since the last batch."""
        waited_ms = (time.monotonic() - self._last_batch_at) * 1000
        if waited_ms >= self.opts.max_trigger_delay_ms:
            return True
        _, rows = self.planner.advance(start, latest, min_rows, None)
        return rows >= min_rows

    def _report_lag(self, end: Offsets) -> None:
        """Log the uncommitted messages per partition (INFO): the broker is asked only when the
        line is logged, not on every trigger of a query whose INFO lines nobody sees."""
        if not log.isEnabledFor(logging.INFO):
            return
        try:
            backlog = self.planner.backlog()
        except Exception as exc:  # lag is informative; planning must not fail for it
            log.debug("backlog unavailable: %s", exc)
            return
        lo, avg, hi = Lag(backlog).summary
        log.info(
            "planned up to %s; uncommitted messages per partition min/avg/max %d/%.1f/%d",
            end.to_json(),
            lo,
            avg,
            hi,
        )

    def reportLatestOffset(self) -> dict[str, str] | None:
        return None if self._latest is None else self._latest.to_dict()

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[InputPartition]:
        begin, stop = Offsets.from_dict(start, "offsets"), Offsets.from_dict(end, "offsets")
        # a start past the end was let through by latestOffset (failOnDataLoss=false): read from earliest
        again = {tp: Position.EARLIEST for tp, pos in stop.items() if tp in begin and begin[tp] > pos}
        return _ranges(self.opts, begin.updated(again), stop)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if partition is None or partition.value is None:  # Spark reads one empty split when there are none
            return iter(())
        return read_range(partition.value)

    def commit(self, end: dict[str, str]) -> None:
        """Spark committed everything up to ``end``: release it on the durable subscription."""
        self.planner.release(Offsets.from_dict(end, "offsets"))

    def stop(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None
        if self._planner is not None:
            self._planner.close()
            self._planner = None
