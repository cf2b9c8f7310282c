"""The Pulsar sink of the ``pulsarwire`` data source: batch and streaming writes, exactly once by dedup.

Spark builds a :class:`PulsarBatchWriter` (``df.write``) or a :class:`PulsarStreamWriter`
(``df.writeStream``) on the driver. Its constructor validates the options and the input
columns (:func:`sink_settings`) before any task runs, and the writer is then pickled to the
executors. A task receives its rows as pyarrow RecordBatches, opens one client and, lazily,
one producer per target topic, and hands each RecordBatch, its columns checked and grouped by
target, to the producer's ``send_arrow``: batch entries are encoded straight from the Arrow
columns (no Python object per row) and the call returns when every receipt is in. The task
then returns a :class:`PulsarCommitMessage`. Any send error fails the task with
:class:`~pipelines.errors.SinkError` naming the rows; nothing is dropped silently.

**Exactly once** (option ``producerNamePrefix``) rests on broker deduplication: the broker
stores, per topic and producer name, the highest sequence id it has persisted and drops
anything at or below it. The producer of Spark partition ``p`` is named ``{prefix}-{p}`` and
row ``i`` of that task in batch ``b`` (the ``batchId`` option of a batch write, the micro-batch
id of a stream) gets sequence id ``b * 2**32 + i`` (so ``b < 2**31`` and fewer than ``2**32``
rows per task). When the producer connects the broker reports the highest sequence id stored
for its name, and rows at or below it are skipped here: a replayed batch sends only what is
missing, and no batched entry ever straddles the stored position (a broker judges a batched
entry as a whole, so straddling would drop or duplicate part of it). For a partitioned topic
the task produces to the partitions directly, each with its own deduplication state, and
routes deterministically: a keyed row to ``partition_for_key(key)`` (the client's hash), a
keyless one to partition ``p % partitions``. Replays must see the same rows in the same Spark
partitions in the same order (docs/sink.md states the contract).

On the driver, ``commit`` asks the broker (:func:`check_deduplication`) whether it really
remembers what the tasks wrote and logs a warning when it does not: without deduplication on
the topic or namespace a replay duplicates rows.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, DataType, MapType, StringType, StructType, TimestampType

from pipelines.errors import OptionError, SinkError, describe
from pipelines.options.client import ClientSettings
from pipelines.options.sink import MAX_BATCH_ID, SinkOptions
from pipelines.parallel import ParallelCalls
from pipelines.spark.planner import full_topic_name
from pulsarwire import CompressionType, HashingScheme, ProducerBusy, TopicName, partition_for_key

__all__ = [
    "MAX_BATCH_ID",
    "MAX_ROWS_PER_TASK",
    "PulsarBatchWriter",
    "PulsarCommitMessage",
    "PulsarStreamWriter",
    "SinkSettings",
    "TopicWrite",
    "check_deduplication",
    "full_topic_name",
    "producer_name",
    "sequence_id",
    "sink_settings",
]

log = logging.getLogger("pipelines.spark.sink")

#: sequence id = batch_id << ROW_BITS | row index within the task
ROW_BITS = 32
MAX_ROWS_PER_TASK = 2**ROW_BITS
#: how many producers of a task send at once
SEND_THREADS = 8
#: how long a task waits for its producer name while an earlier attempt of it still holds the name
PRODUCER_BUSY_WAIT_SECONDS = 120.0

#: the input columns the sink understands
COLUMNS = ("value", "key", "topic", "properties", "eventTime")

#: compressionType -> the producer's codec
_COMPRESSION = {
    "NONE": CompressionType.NONE,
    "LZ4": CompressionType.LZ4,
    "ZLIB": CompressionType.ZLib,
    "ZSTD": CompressionType.ZSTD,
    "SNAPPY": CompressionType.SNAPPY,
}

DEDUP_WARNING = (
    "pulsarwire sink: %s does not deduplicate: the broker reports last sequence id %d for producer "
    "%r, which just wrote up to %d. Exactly-once (producerNamePrefix) needs deduplication enabled on "
    "the topic or its namespace (pulsar-admin namespaces set-deduplication --enable <tenant/namespace>, "
    "or brokerDeduplicationEnabled=true); until then a replayed batch is published twice."
)


# -- settings (driver) ------------------------------------------------------------------


@dataclass(frozen=True)
class SinkSettings:
    """Everything a task needs, validated on the driver; picklable."""

    client: ClientSettings
    #: default topic for rows without a ``topic`` column value
    topic: str | None
    #: keyword arguments of ``Client.create_producer`` (ProducerConfig fields)
    producer_config: dict[str, Any]
    hashing_scheme: HashingScheme
    #: exactly-once mode when set
    producer_name_prefix: str | None
    #: the ``batchId`` option (batch writes in exactly-once mode)
    batch_id: int | None
    #: which of COLUMNS the input has
    columns: frozenset[str]

    @property
    def exactly_once(self) -> bool:
        return self.producer_name_prefix is not None


def _type_name(dt: DataType) -> str:
    return dt.simpleString()


def _check_columns(schema: StructType, ignore_extra: bool) -> frozenset[str]:

    fields = {f.name: f.dataType for f in schema.fields}
    allowed = ", ".join(COLUMNS)
    if "value" not in fields:
        have = ", ".join(fields) or "none"
        raise SinkError(
            f"column 'value' is required: the message payload, binary or string (the input has: {have})"
        )
    expected: dict[str, tuple[str, Any]] = {
        "value": ("binary or string", lambda t: isinstance(t, BinaryType | StringType)),
        "key": ("string or binary", lambda t: isinstance(t, StringType | BinaryType)),
        "topic": ("string", lambda t: isinstance(t, StringType)),
        "properties": (
            "map<string,string>",
            lambda t: (
                isinstance(t, MapType)
                and isinstance(t.keyType, StringType)
                and isinstance(t.valueType, StringType)
            ),
        ),
        "eventTime": ("timestamp", lambda t: isinstance(t, TimestampType)),
    }
    for name, (wanted, ok) in expected.items():
        if name in fields and not ok(fields[name]):
            raise SinkError(f"column {name!r} must be {wanted}, got {_type_name(fields[name])}")
    extra = [n for n in fields if n not in expected]
    if extra and not ignore_extra:
        names = ", ".join(repr(n) for n in extra)
        hint = ""
        lower = {c.lower(): c for c in COLUMNS}
        near = [f"{n!r} -> {lower[n.lower()]!r}" for n in extra if n.lower() in lower]
        if near:
            hint = f" (column names are case-sensitive: {', '.join(near)})"
        raise SinkError(
            f"unknown column(s) {names}: the sink writes only {allowed}{hint}; "
            "drop or rename them, or set ignoreExtraColumns=true"
        )
    return frozenset(n for n in fields if n in expected)


def sink_settings(options: Mapping[str, str], schema: StructType, *, streaming: bool) -> SinkSettings:
    """Validate the options (:class:`~pipelines.options.sink.SinkOptions`) and the input columns of a write.

    Raises OptionError (naming the option) for a missing, unknown or malformed option and
    SinkError for missing, mistyped or unknown input columns.
    """
    o = SinkOptions.from_spark(options, streaming=streaming)
    client = o.client_settings()
    columns = _check_columns(schema, o.ignore_extra_columns)
    if o.topic is None and "topic" not in columns:
        raise OptionError("topic", "required: give the topic option or a 'topic' column")
    config: dict[str, Any] = {
        "batching_enabled": o.batching,
        "batching_max_messages": o.batching_max_messages,
        "batching_max_publish_delay_ms": o.batching_max_publish_delay_ms,
        "max_pending_messages": o.max_pending_messages,
        "send_timeout_millis": o.send_timeout_ms,
        "compression_type": _COMPRESSION[o.compression],
    }
    return SinkSettings(
        client, o.topic, config, HashingScheme(o.hashing_scheme), o.producer_name_prefix, o.batch_id, columns
    )


# -- sequence ids and names -----------------------------------------------------------


def producer_name(prefix: str, partition_id: int) -> str:
    """The producer name of Spark partition ``partition_id`` in exactly-once mode."""
    return f"{prefix}-{partition_id}"


def sequence_id(batch_id: int, row: int) -> int:
    """``batch_id * 2**32 + row``; raises SinkError when either is out of range."""
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise SinkError(f"batch id {batch_id} is outside [0, {MAX_BATCH_ID}]: no sequence id for it")
    if not 0 <= row < MAX_ROWS_PER_TASK:
        raise SinkError(
            f"row {row} of a task: exactly-once writes allow at most {MAX_ROWS_PER_TASK} rows per Spark "
            "partition (repartition the input)"
        )
    return (batch_id << ROW_BITS) + row


def base_topic(topic: str) -> str:
    """``persistent://t/n/x-partition-3`` → ``persistent://t/n/x``."""
    return str(TopicName.parse(topic).partitioned_topic)


# -- commit messages ------------------------------------------------------------------


@dataclass(frozen=True)
class TopicWrite:
    """What one task did on one topic (a partition, in exactly-once mode on a partitioned topic)."""

    producer_name: str
    #: messages published (acknowledged by the broker)
    rows: int
    #: the producer's last sequence id after the flush (-1: none)
    last_sequence_id: int
    #: rows not sent because the broker already stored them (a replay)
    skipped: int = 0
    #: the last sequence id the broker had stored for the name when the task started (-1: none)
    stored_before: int = -1


@dataclass(frozen=True)
class PulsarCommitMessage(WriterCommitMessage):
    partition_id: int
    batch_id: int | None
    topics: dict[str, TopicWrite]


# -- the task ---------------------------------------------------------------------------


class _Output:
    """One producer of a task, with what was sent through it."""

    __slots__ = ("last_sent", "name", "producer", "sent", "skipped", "stored", "topic")

    def __init__(self, topic: str, producer: Any, stored: int):
        self.topic = topic
        self.producer = producer
        self.name: str = producer.producer_name()
        #: the broker's last stored sequence id for this name (exactly-once), else -1
        self.stored = stored
        #: messages stored (every receipt in)
        self.sent = 0
        self.skipped = 0
        self.last_sent = -1


class _Target:
    """A topic as named by the rows: its partitions (exactly-once) and the producers opened on it."""

    __slots__ = ("outputs", "partitions", "topic")

    def __init__(self, topic: str, partitions: list[str] | None) -> None:
        self.topic = topic
        self.partitions = partitions
        self.outputs: dict[int, _Output] = {}


#: row positions within one Arrow batch (ascending), or None: all of them
_Rows: TypeAlias = "pa.Array | None"


class _TaskWriter:
    """The rows of one Spark task, Arrow batch by Arrow batch, through ``send_arrow``.

    Each batch's columns are checked and renamed to what ``send_arrow`` reads (value, key,
    properties, event_time), its rows grouped by target topic (and, exactly once on a
    partitioned topic, by partition), rows already stored skipped, and each group sent with
    its sequence ids in one ``send_arrow`` call, which returns when every receipt is in (the
    calls to several producers run at once, in a small thread pool).
    """

    def __init__(self, settings: SinkSettings, partition_id: int, batch_id: int | None) -> None:
        self.settings = settings
        self.partition_id = partition_id
        self.batch_id = batch_id
        self.name: str | None = None
        self.base: int | None = None
        if settings.producer_name_prefix is not None:
            if batch_id is None:
                raise SinkError("exactly-once write without a batch id")
            self.name = producer_name(settings.producer_name_prefix, partition_id)
            self.base = sequence_id(batch_id, 0)
        self.client: Any = None
        self.targets: dict[str, _Target] = {}
        self.outputs: list[_Output] = []
        self.rows = 0
        #: sends to several producers at once (a topic column, or partitions routed here)
        self.calls = ParallelCalls(SEND_THREADS, "pulsarwire-sink")

    # -- producers --------------------------------------------------------------
    def _client(self) -> Any:
        if self.client is None:
            try:
                self.client = self.settings.client.client()
            except Exception as exc:
                raise SinkError(f"cannot create a Pulsar client: {describe(exc)}") from exc
        return self.client

    def _target(self, full: str) -> _Target:
        target = self.targets.get(full)
        if target is None:
            partitions = None
            if self.settings.exactly_once:
                try:
                    partitions = self._client().get_topic_partitions(full)
                except Exception as exc:
                    raise SinkError(f"cannot look up topic {full}: {describe(exc)}") from exc
            target = self.targets[full] = _Target(full, partitions)
        return target

    def _open(self, topic: str) -> _Output:
        client = self._client()
        deadline = time.monotonic() + PRODUCER_BUSY_WAIT_SECONDS
        delay = 0.1
        while True:
            try:
                producer = client.create_producer(
                    topic,
                    self.name,
                    hashing_scheme=self.settings.hashing_scheme,
                    block_if_queue_full=True,
                    **self.settings.producer_config,
                )
                break
            except ProducerBusy as exc:
                # an earlier attempt of this task (or a speculative copy) still holds the name
                if time.monotonic() >= deadline:
                    raise SinkError(
                        f"producer {self.name!r} on {topic} is still held by another writer after "
                        f"{PRODUCER_BUSY_WAIT_SECONDS:.0f} s (two queries with one producerNamePrefix?)"
                    ) from exc
                log.info("producer %s on %s is busy; retrying in %.1f s", self.name, topic, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except Exception as exc:
                raise SinkError(f"cannot create a producer on {topic}: {describe(exc)}") from exc
        stored = producer.last_sequence_id() if self.name is not None else -1
        out = _Output(topic, producer, stored)
        self.outputs.append(out)
        return out

    def _output(self, target: _Target, index: int) -> _Output:
        out = target.outputs.get(index)
        if out is None:
            name = target.topic if target.partitions is None else target.partitions[index]
            out = target.outputs[index] = self._open(name)
        return out

    # -- rows ---------------------------------------------------------------------
    def _fail_row(self, row: int, message: str) -> SinkError:
        return SinkError(f"row {row} of Spark partition {self.partition_id}: {message}")

    def write_batch(self, rb: pa.RecordBatch) -> None:
        n = rb.num_rows
        if n == 0:
            return
        start = self.rows
        if self.batch_id is not None and self.base is not None:
            sequence_id(self.batch_id, start + n - 1)  # the last row must have a sequence id too
        self.rows += n
        send = self._columns(rb, start)
        groups = [
            (self._output(target, index), part)
            for topic, rows in self._by_topic(rb, start)
            for target in (self._target(topic),)
            for index, part in self._by_partition(target, send, rows)
        ]
        # one send per producer, all at once (each waits for its receipts); every one ends
        # before the first failure is raised, so nothing is still sending after it
        self.calls.each(lambda group: self._send(group[0], send, group[1], start), groups)

    def _by_topic(self, rb: pa.RecordBatch, start: int) -> list[tuple[str, _Rows]]:
        """The rows of ``rb`` by target topic (full name, however the rows spell it), in order of
        first appearance."""
        default = self.settings.topic
        if "topic" not in self.settings.columns:
            if default is None:  # sink_settings refuses this
                raise SinkError("no topic option and no 'topic' column")
            return [(full_topic_name(default), None)]
        col = rb.column("topic")
        if col.null_count:
            if default is None:
                first = pc.index(pc.is_null(col), True).as_py()
                raise self._fail_row(start + first, "topic is null and there is no topic option")
            col = col.fill_null(default)
        spellings: dict[str, list[str]] = {}
        for name in pc.unique(col).to_pylist():
            spellings.setdefault(full_topic_name(name), []).append(name)
        if len(spellings) == 1:
            return [(next(iter(spellings)), None)]
        return [
            (full, pc.indices_nonzero(pc.is_in(col, value_set=pa.array(names, col.type))))
            for full, names in spellings.items()
        ]

    def _by_partition(self, target: _Target, send: pa.RecordBatch, rows: _Rows) -> list[tuple[int, _Rows]]:
        """``rows`` by the partition (index) they go to: all to 0 unless the task routes itself
        (exactly once on a partitioned topic), then a keyed row to its key's partition and a
        keyless one to partition ``spark partition % partitions``."""
        parts = target.partitions
        if parts is None or len(parts) == 1:
            return [(0, rows)]
        n = len(parts)
        count = send.num_rows if rows is None else len(rows)
        keyless = self.partition_id % n
        if "key" in send.schema.names:
            col = send.column("key")
            keys = (col if rows is None else col.take(rows)).dictionary_encode()  # each key hashed once
            scheme = self.settings.hashing_scheme
            where = [partition_for_key(k, n, scheme) for k in keys.dictionary.to_pylist()]
            chosen = pc.take(pa.array(where, pa.int64()), keys.indices).fill_null(keyless)
        else:
            chosen = pa.array([keyless] * count, pa.int64())
        out: list[tuple[int, _Rows]] = []
        for index in sorted(pc.unique(chosen).to_pylist()):
            picked = pc.indices_nonzero(pc.equal(chosen, index))
            out.append((index, picked if rows is None else rows.take(picked)))
        return out

    def _send(self, out: _Output, send: pa.RecordBatch, rows: _Rows, start: int) -> None:
        """Send ``rows`` of ``send`` through ``out``: those the broker already stored skipped
        (exactly once), the rest with their sequence ids; returns when all are stored."""
        total = send.num_rows if rows is None else len(rows)
        skip = 0
        if self.base is not None and out.stored >= self.base + start:
            # what an earlier attempt stored is a prefix of the rows (ids increase with rows)
            below = out.stored - self.base - start  # positions at or below it are stored
            if rows is None:
                skip = min(total, below + 1)
            else:
                skip = int(pc.sum(pc.less_equal(rows, below)).as_py() or 0)
            out.skipped += skip
        if skip == total:
            return
        kw: dict[str, Any] = {}
        if rows is None:
            batch = send.slice(skip)
            first = skip
            if self.base is not None:
                kw["first_sequence_id"] = self.base + start + skip
        else:
            rows = rows.slice(skip)
            batch = send.take(rows)
            first = rows[0].as_py()
            if self.base is not None:
                batch = batch.append_column(
                    "sequence_id", pc.add(rows, pa.scalar(self.base + start, pa.int64()))
                )
        last = start + (total - 1 if rows is None else rows[-1].as_py())  # the task's last row sent
        try:
            result = out.producer.send_arrow(batch, **kw)
        except Exception as exc:
            raise SinkError(
                f"rows {start + first} to {last} could not be sent (Spark partition {self.partition_id}) "
                f"to {out.topic}: {describe(exc)}"
            ) from exc
        out.sent += result.count
        if self.base is not None:
            out.last_sent = self.base + last

    def _columns(self, rb: pa.RecordBatch, start: int) -> pa.RecordBatch:
        """The checked columns of ``rb`` under ``send_arrow``'s names: value, key (a string),
        properties, event_time (ms since the epoch); raises SinkError naming the first bad row."""

        cols = self.settings.columns
        value = rb.column("value")
        if value.null_count:
            first = pc.index(pc.is_null(value), True).as_py()
            raise self._fail_row(start + first, "value is null (filter the row out or give it a payload)")
        names, arrays = ["value"], [value]
        if "key" in cols:
            key = rb.column("key")
            if pa.types.is_binary(key.type) or pa.types.is_large_binary(key.type):
                try:
                    key = key.cast(pa.string() if pa.types.is_binary(key.type) else pa.large_string())
                except pa.ArrowInvalid as exc:
                    raise SinkError(
                        f"Spark partition {self.partition_id}: a binary key is not valid UTF-8 "
                        f"(Pulsar keys are strings): {exc}"
                    ) from exc
            names.append("key")
            arrays.append(key)
        if "properties" in cols:
            props = rb.column("properties")
            lo, hi = props.offsets[0].as_py(), props.offsets[-1].as_py()
            items = props.items.slice(lo, hi - lo)  # the map's children ignore a slice; its offsets do not
            if items.null_count:
                bad = lo + pc.index(pc.is_null(items), True).as_py()
                row = bisect.bisect_right(props.offsets.to_pylist(), bad) - 1
                name = props.keys[bad].as_py()
                raise self._fail_row(
                    start + row, f"property {name!r} is null (Pulsar properties are strings)"
                )
            names.append("properties")
            arrays.append(props)
        if "eventTime" in cols:
            ms = pc.divide(rb.column("eventTime").cast(pa.int64()), 1000)
            early = pc.less_equal(ms, 0)
            if pc.any(early).as_py():
                first = pc.index(early, True).as_py()
                raise self._fail_row(start + first, "eventTime must be after 1970-01-01T00:00:00.000Z")
            names.append("event_time")
            arrays.append(ms)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    # -- end of task ----------------------------------------------------------------
    def finish(self) -> PulsarCommitMessage:
        for out in self.outputs:
            try:
                out.producer.flush()
            except Exception as exc:
                raise SinkError(f"flushing to {out.topic} failed: {describe(exc)}") from exc
        topics: dict[str, TopicWrite] = {}
        for out in self.outputs:
            last = out.producer.last_sequence_id()
            if self.base is not None and out.sent:
                last = out.last_sent
            topics[out.producer.topic()] = TopicWrite(out.name, out.sent, last, out.skipped, out.stored)
            if out.skipped:
                log.info(
                    "%s: %d row(s) of Spark partition %d were already stored (replay), %d sent",
                    out.topic,
                    out.skipped,
                    self.partition_id,
                    out.sent,
                )
        return PulsarCommitMessage(self.partition_id, self.batch_id, topics)

    def close(self) -> None:
        self.calls.close()
        if self.client is None:
            return
        try:
            self.client.close()
        except Exception as exc:  # the task's own outcome (commit message or error) matters more
            log.warning("closing the Pulsar client of Spark partition %d: %s", self.partition_id, exc)


def _write_task(
    settings: SinkSettings, batches: Iterable[pa.RecordBatch], partition_id: int, batch_id: int | None
) -> PulsarCommitMessage:
    task = _TaskWriter(settings, partition_id, batch_id)
    try:
        for rb in batches:
            task.write_batch(rb)
        return task.finish()
    finally:
        task.close()


def _task_context() -> Any:

    ctx = TaskContext.get()
    if ctx is None:
        raise SinkError("the pulsarwire writer's write() runs only inside a Spark task")
    return ctx


# -- driver: commit, abort, dedup check ------------------------------------------------


def last_stored_sequence_id(settings: ClientSettings, topic: str, producer_name: str) -> int:
    """The last sequence id the broker reports for ``producer_name`` on ``topic`` (-1: none or no dedup).

    Opens (and closes) a producer with that name; raises what the client raises (e.g.
    ProducerBusy when a writer still holds the name).
    """
    client = settings.client()
    try:
        producer = client.create_producer(topic, producer_name, batching_enabled=False)
        try:
            return int(producer.last_sequence_id())
        finally:
            producer.close()
    finally:
        client.close()


def check_deduplication(
    settings: ClientSettings, topic: str, producer_name: str, expected_last_seq: int
) -> bool:
    """Whether the broker deduplicates ``topic``: it remembers ``expected_last_seq`` for ``producer_name``.

    With deduplication on, a producer that connects with a known name learns the highest
    sequence id stored for it; with it off the broker always reports -1. Call it after a write
    that stored ``expected_last_seq >= 0``. Raises what the client raises when the broker cannot
    be reached or the name is held by a connected producer.
    """
    return last_stored_sequence_id(settings, topic, producer_name) >= expected_last_seq


def _writes(messages: Iterable[WriterCommitMessage | None]) -> list[tuple[str, TopicWrite]]:
    return [(t, w) for m in messages if isinstance(m, PulsarCommitMessage) for t, w in m.topics.items()]


Messages = Iterable[WriterCommitMessage | None]


def _commit(settings: SinkSettings, messages: Messages, batch_id: int | None) -> None:
    writes = _writes(messages)
    sent = sum(w.rows for _, w in writes)
    skipped = sum(w.skipped for _, w in writes)
    log.info(
        "pulsarwire sink: batch %s committed: %d row(s) published to %d topic(s), %d already stored",
        batch_id,
        sent,
        len({base_topic(t) for t, _ in writes}),
        skipped,
    )
    if not settings.exactly_once:
        return
    stale = [(t, w) for t, w in writes if batch_id is not None and w.stored_before >> ROW_BITS > batch_id]
    if stale:
        topic, w = stale[0]
        log.warning(
            "pulsarwire sink: batch id %d is older than batch %d, already stored by producer %r on %s: "
            "%d row(s) of this write were taken as already published and skipped; a new version of the "
            "data needs a higher batchId",
            batch_id,
            w.stored_before >> ROW_BITS,
            w.producer_name,
            topic,
            sum(w.skipped for _, w in stale),
        )
    checked: set[str] = set()
    for topic, w in writes:
        if w.rows == 0 or base_topic(topic) in checked:
            continue
        checked.add(base_topic(topic))
        try:
            reported = last_stored_sequence_id(settings.client, topic, w.producer_name)
        except Exception as exc:
            log.warning(
                "pulsarwire sink: could not check that %s deduplicates (producer %r): %s: %s",
                topic,
                w.producer_name,
                type(exc).__name__,
                exc,
            )
            continue
        if reported < w.last_sequence_id:
            log.warning(DEDUP_WARNING, topic, reported, w.producer_name, w.last_sequence_id)


def _abort(settings: SinkSettings, messages: Messages, batch_id: int | None) -> None:
    sent = sum(w.rows for _, w in _writes(messages))
    if settings.exactly_once:
        advice = "rerun it with the same producerNamePrefix and batch id: stored rows are skipped"
    else:
        advice = "a rerun publishes them again (set producerNamePrefix for exactly-once writes)"
    log.warning(
        "pulsarwire sink: batch %s failed; %d row(s) from tasks that finished are already in Pulsar; %s",
        batch_id,
        sent,
        advice,
    )


class PulsarBatchWriter(DataSourceArrowWriter):
    """``df.write.format("pulsarwire")``: append the rows to Pulsar (mode append only).

    Raises OptionError / SinkError from the constructor for bad options or columns.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("mode", "overwrite is not supported: Pulsar topics are append-only; use append")
        self.settings = sink_settings(options, schema, streaming=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PulsarCommitMessage:
        ctx = _task_context()
        return _write_task(self.settings, iterator, ctx.partitionId(), self.settings.batch_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.settings, messages, self.settings.batch_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.settings, messages, self.settings.batch_id)


class PulsarStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pulsarwire")``: each micro-batch's rows, exactly once with a prefix.

    In complete output mode every micro-batch appends the whole result table. Raises
    OptionError / SinkError from the constructor for bad options or columns.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.settings = sink_settings(options, schema, streaming=True)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PulsarCommitMessage:
        ctx = _task_context()
        raw = ctx.getLocalProperty("streaming.sql.batchId")
        batch_id: int | None = None
        if raw is not None:
            try:
                batch_id = int(raw)
            except ValueError:
                raise SinkError(f"unexpected micro-batch id {raw!r}") from None
        elif self.settings.exactly_once:
            raise SinkError("no micro-batch id (streaming.sql.batchId) in the task: no exactly-once write")
        return _write_task(self.settings, iterator, ctx.partitionId(), batch_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit(self.settings, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.settings, messages, batchId)


def write_pulsar_exactly_once(batch_df: Any, batch_id: int, options: Mapping[str, str]) -> None:
    """foreachBatch body for Delta/DataFrame → Pulsar: the micro-batch written as ``batchId``.

    ``options`` are the sink's options and must hold ``producerNamePrefix``: then a batch
    Spark replays after a failure is dropped by broker deduplication (see the module
    docstring). Raises OptionError without it, SinkError when a send fails.
    """
    if not options.get("producerNamePrefix"):
        raise OptionError("producerNamePrefix", "required for exactly-once writes from foreachBatch")
    writer = batch_df.write.format("pulsarwire").mode("append").option("batchId", str(batch_id))
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()
