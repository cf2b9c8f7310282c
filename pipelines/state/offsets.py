"""The Delta offset store: each job's cumulative ack position per topic-partition.

A job commits, after each micro-batch has landed in its sink, the position it has
taken up to in every topic-partition. The rows live in a Delta table keyed by
``(job, topic)``, so a job whose Spark checkpoint is lost resumes from the store,
and ``pipelines offsets`` can show and reset positions. Schema (see ``docs/offsets.md``)::

    job string, topic string, partition int, ledger_id long, entry_id long,
    batch_index int, message_id string, batch_id long, committed_at timestamp (UTC),
    checkpoint string (nullable), reset_epoch long (nullable: 0)

A stored position means: every message of that topic-partition up to and including it has
been written to the job's sink and committed there; it is three ordered integers whatever the
source (Pulsar's ``ledger:entry:batch``, an integer offset ``n`` as ``0:n:-1``:
:mod:`pipelines.state.positions`), so the store never knows the kind of source.

The job's **reset epoch** (the largest ``reset_epoch`` of its rows; 0 for tables written
before the column existed, which gain it on their next write) counts the job's resets.
:meth:`OffsetStore.reset` writes its rows with the next epoch; a run reads the epoch when it
starts, commits with it and writes it into each batch's commit metadata in the sink, so
recovery without a checkpoint applies only sink commits made after the last reset, and a
commit of an older epoch (a run that outlived a reset) never updates a row.

Every write is one MERGE whose source is a table of rows (an Arrow table for
delta-rs, a temp view of a DataFrame for delta-spark); user values never become
SQL text. :meth:`OffsetStore.commit` never moves a position backwards: its MERGE
updates a matched row only when the new position is ahead of the stored one (or
equal, with a batch id not older), so a batch replayed after a crash, or a slow
writer losing a race, cannot rewind the store; the check is inside the commit,
not a read-then-write. :meth:`OffsetStore.reset` overwrites unconditionally.

Two engines implement :class:`OffsetEngine`: :class:`DeltaRsEngine` (the
``deltalake`` package; no JVM) and :class:`DeltaSparkEngine` (Spark SQL MERGE,
needs the Delta jars). :func:`engine_for` picks one. Both retry a commit that
lost to a concurrent writer, with a bounded backoff, then raise OffsetStoreError.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Field
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.schema import PrimitiveType

from pipelines.errors import OffsetStoreError, StaleEpochError
from pipelines.state.delta import (
    CommitRetry,
    commit_attempts,
    delta_spark_available,
    is_table_name,
    spark_table_ref,
)
from pipelines.state.positions import Offsets, Position, partition_of

log = logging.getLogger("pipelines.state.offsets")

T = TypeVar("T")

COLUMNS = (
    "job",
    "topic",
    "partition",
    "ledger_id",
    "entry_id",
    "batch_index",
    "message_id",
    "batch_id",
    "committed_at",
    "checkpoint",
    "reset_epoch",
)

_SPARK_DDL = (
    "job STRING NOT NULL, topic STRING NOT NULL, partition INT NOT NULL, ledger_id BIGINT NOT NULL, "
    "entry_id BIGINT NOT NULL, batch_index INT NOT NULL, message_id STRING NOT NULL, "
    "batch_id BIGINT NOT NULL, committed_at TIMESTAMP NOT NULL, checkpoint STRING, reset_epoch BIGINT"
)

# s (the new row) is ahead of t (the stored row). A batch index < 0 means the whole entry,
# which sorts after every batch index of that entry (as Position does).
_AHEAD = (
    "(s.ledger_id > t.ledger_id OR (s.ledger_id = t.ledger_id AND (s.entry_id > t.entry_id"
    " OR (s.entry_id = t.entry_id AND s.batch_index <> t.batch_index"
    " AND (s.batch_index < 0 OR (t.batch_index >= 0 AND s.batch_index > t.batch_index))))))"
)
_SAME = "(s.ledger_id = t.ledger_id AND s.entry_id = t.entry_id AND s.batch_index = t.batch_index)"
_EPOCH_KEPT = "coalesce(s.reset_epoch, 0) >= coalesce(t.reset_epoch, 0)"
FORWARD_ONLY = f"({_EPOCH_KEPT}) AND ({_AHEAD} OR ({_SAME} AND s.batch_id >= t.batch_id))"
"""The MERGE condition under which :meth:`OffsetStore.commit` updates a stored row: the new row
is of the stored row's reset epoch or a later one, and ahead of it (or the same position with a
batch id that is not older)."""


def _retry(
    op: Callable[[], T], is_conflict: Callable[[BaseException], bool], policy: CommitRetry, what: str
) -> T:
    for attempt in commit_attempts(policy):
        try:
            return op()
        except Exception as exc:
            if not is_conflict(exc):
                raise
            if attempt == policy.attempts:
                raise OffsetStoreError(
                    f"{what}: gave up after {attempt} attempts lost to concurrent commits: {exc}"
                ) from exc
            log.debug("%s: concurrent commit, retry %d: %s", what, attempt, exc)
    raise AssertionError("unreachable")  # pragma: no cover


class OffsetEngine(Protocol):
    """Reads and writes offset rows (dicts with the keys in :data:`COLUMNS`)."""

    table: str

    def read(self, job: str) -> list[dict[str, Any]]:
        """The job's rows, ordered by topic; [] when the table does not exist."""
        ...

    def upsert(self, rows: Sequence[Mapping[str, Any]], *, forward_only: bool = False) -> None:
        """Insert or update rows by (job, topic); with ``forward_only`` a matched row is
        updated only under :data:`FORWARD_ONLY`. Creates the table when missing."""
        ...

    def delete(self, job: str, topics: Iterable[str] | None = None) -> None:
        """Delete the job's rows (only ``topics`` when given)."""
        ...


# --------------------------------------------------------------------------- delta-rs


class DeltaRsEngine:
    """The offset table through ``deltalake`` (delta-rs): no JVM, any object store it supports."""

    def __init__(
        self,
        path: str | Path,
        storage_options: dict[str, str] | None = None,
        *,
        retry: CommitRetry | None = None,
    ) -> None:
        self.table = str(path)
        self._storage_options = storage_options
        self._retry = retry or CommitRetry()

    @staticmethod
    def schema() -> Any:

        return pa.schema(
            [
                pa.field("job", pa.string(), nullable=False),
                pa.field("topic", pa.string(), nullable=False),
                pa.field("partition", pa.int32(), nullable=False),
                pa.field("ledger_id", pa.int64(), nullable=False),
                pa.field("entry_id", pa.int64(), nullable=False),
                pa.field("batch_index", pa.int32(), nullable=False),
                pa.field("message_id", pa.string(), nullable=False),
                pa.field("batch_id", pa.int64(), nullable=False),
                pa.field("committed_at", pa.timestamp("us", tz="UTC"), nullable=False),
                pa.field("checkpoint", pa.string(), nullable=True),
                pa.field("reset_epoch", pa.int64(), nullable=True),
            ]
        )

    def _guard(self, op: Callable[[], T], doing: str) -> T:
        """Run ``op`` with conflict retries; every other failure becomes an OffsetStoreError."""

        def conflict(exc: BaseException) -> bool:
            return isinstance(exc, CommitFailedError)

        try:
            return _retry(op, conflict, self._retry, f"offset table {self.table}")
        except OffsetStoreError:
            raise
        except (DeltaError, OSError, pa.ArrowException, ValueError) as exc:
            raise OffsetStoreError(f"offset table {self.table}: {doing} failed: {exc}") from exc

    def _open(self) -> Any:

        try:
            return DeltaTable(self.table, storage_options=self._storage_options)
        except TableNotFoundError:
            return None

    def _open_or_create(self) -> Any:

        dt = self._open()
        if dt is None:
            # mode="ignore": a writer that raced us to create it wins; a conflict is retried
            dt = DeltaTable.create(
                self.table, self.schema(), mode="ignore", storage_options=self._storage_options
            )
        return dt

    def read(self, job: str) -> list[dict[str, Any]]:

        def op() -> list[dict[str, Any]]:
            dt = self._open()
            if dt is None:
                return []
            # Filter after reading: deltalake 1.6's scan filters fail on string columns
            # (string vs string_view kernels), and the table is small.
            present = {f.name for f in dt.schema().fields}
            data = dt.to_pyarrow_table(columns=[c for c in COLUMNS if c in present])
            rows: list[dict[str, Any]] = data.filter(pc.field("job") == job).sort_by("topic").to_pylist()
            return [_complete(r) for r in rows]

        return self._guard(op, "reading")

    def upsert(self, rows: Sequence[Mapping[str, Any]], *, forward_only: bool = False) -> None:

        if not rows:
            return
        source = pa.Table.from_pylist([dict(r) for r in rows], schema=self.schema())

        def op() -> None:
            dt = self._open_or_create()
            if "reset_epoch" not in {f.name for f in dt.schema().fields}:  # written before the column
                dt.alter.add_columns([Field("reset_epoch", PrimitiveType("long"), nullable=True)])
            merge = dt.merge(
                source,
                "t.job = s.job AND t.topic = s.topic",
                source_alias="s",
                target_alias="t",
                # a materialised source lets delta-rs prune by the source's job/topic range,
                # so commits of other jobs do not conflict with this one
                streamed_exec=False,
            )
            merge.when_matched_update_all(predicate=FORWARD_ONLY if forward_only else None)
            merge.when_not_matched_insert_all().execute()

        self._guard(op, "commit")

    def delete(self, job: str, topics: Iterable[str] | None = None) -> None:

        if topics is None:
            source = pa.table({"job": pa.array([job], pa.string())})
            predicate = "t.job = s.job"
        else:
            names = sorted(set(topics))
            if not names:
                return
            source = pa.table({"job": [job] * len(names), "topic": names})
            predicate = "t.job = s.job AND t.topic = s.topic"

        def op() -> None:
            dt = self._open()
            if dt is None:
                return
            dt.merge(
                source, predicate, source_alias="s", target_alias="t", streamed_exec=False
            ).when_matched_delete().execute()

        self._guard(op, "delete")


# --------------------------------------------------------------------------- delta-spark


class DeltaSparkEngine:
    """The offset table through Spark SQL ``MERGE INTO`` (delta-spark; needs the Delta jars).

    ``table`` is a path/URI (used as ``delta.`path```) or a catalog table name.
    """

    def __init__(self, spark: Any, table: str | Path, *, retry: CommitRetry | None = None) -> None:
        self.table = str(table)
        self._spark = spark
        self._ref = spark_table_ref(table)
        self._is_name = is_table_name(table)
        self._retry = retry or CommitRetry()

    @staticmethod
    def _conflict(exc: BaseException) -> bool:
        text = f"{type(exc).__name__} {exc}"
        return "Concurrent" in type(exc).__name__ or bool(
            re.search(r"Concurrent\w*Exception|DELTA_CONCURRENT", text)
        )

    def _guard(self, op: Callable[[], T], doing: str) -> T:
        try:
            return _retry(op, self._conflict, self._retry, f"offset table {self.table}")
        except OffsetStoreError:
            raise
        except Exception as exc:
            raise OffsetStoreError(f"offset table {self.table}: {doing} failed: {exc}") from exc

    def _exists(self) -> bool:
        if self._is_name:
            return bool(self._spark.catalog.tableExists(self.table))
        from delta.tables import DeltaTable as SparkDeltaTable

        return bool(SparkDeltaTable.isDeltaTable(self._spark, self.table))

    def _frame(self) -> Any:
        if self._is_name:
            return self._spark.read.table(self.table)
        return self._spark.read.format("delta").load(self.table)

    def _source(self, rows: Sequence[Mapping[str, Any]], ddl: str) -> str:
        """Register ``rows`` as a uniquely named temp view and return its name."""
        name = f"pulsarwire_offsets_{uuid.uuid4().hex}"
        self._spark.createDataFrame([tuple(r.values()) for r in rows], schema=ddl).createOrReplaceTempView(
            name
        )
        return name

    def read(self, job: str) -> list[dict[str, Any]]:
        from pyspark.sql import functions as F

        def op() -> list[dict[str, Any]]:
            if not self._exists():
                return []
            frame = self._frame()
            columns = [c for c in COLUMNS if c in frame.columns]
            found = frame.where(F.col("job") == F.lit(job)).select(*columns).orderBy("topic").collect()
            rows = [_complete(r.asDict()) for r in found]
            for r in rows:  # pyspark returns naive local-time datetimes
                ts = r["committed_at"]
                if isinstance(ts, datetime) and ts.tzinfo is None:
                    r["committed_at"] = ts.astimezone(UTC)
            return rows

        return self._guard(op, "reading")

    def upsert(self, rows: Sequence[Mapping[str, Any]], *, forward_only: bool = False) -> None:
        if not rows:
            return
        ordered = [{c: r[c] for c in COLUMNS} for r in rows]
        when = f" AND ({FORWARD_ONLY})" if forward_only else ""

        def op() -> None:
            self._spark.sql(f"CREATE TABLE IF NOT EXISTS {self._ref} ({_SPARK_DDL}) USING delta")
            if "reset_epoch" not in self._frame().columns:  # a table written before the column
                self._spark.sql(f"ALTER TABLE {self._ref} ADD COLUMNS (reset_epoch BIGINT)")
            view = self._source(ordered, _SPARK_DDL)
            try:
                self._spark.sql(
                    f"MERGE INTO {self._ref} t USING {view} s ON t.job = s.job AND t.topic = s.topic "
                    f"WHEN MATCHED{when} THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
                )
            finally:
                self._spark.catalog.dropTempView(view)

        self._guard(op, "commit")

    def delete(self, job: str, topics: Iterable[str] | None = None) -> None:
        if topics is None:
            rows: list[dict[str, Any]] = [{"job": job}]
            ddl, on = "job STRING", "t.job = s.job"
        else:
            rows = [{"job": job, "topic": t} for t in sorted(set(topics))]
            ddl, on = "job STRING, topic STRING", "t.job = s.job AND t.topic = s.topic"
            if not rows:
                return

        def op() -> None:
            if not self._exists():
                return
            view = self._source(rows, ddl)
            try:
                self._spark.sql(f"MERGE INTO {self._ref} t USING {view} s ON {on} WHEN MATCHED THEN DELETE")
            finally:
                self._spark.catalog.dropTempView(view)

        self._guard(op, "delete")


def engine_for(
    table: str | Path,
    spark: Any = None,
    *,
    storage_options: dict[str, str] | None = None,
) -> OffsetEngine:
    """delta-spark when ``spark`` is given and has Delta, else deltalake.

    Raises OffsetStoreError for a catalog table name (no ``/`` and no scheme) when
    delta-spark is not available: deltalake only knows paths and URIs.
    """
    if spark is not None and delta_spark_available(spark):
        return DeltaSparkEngine(spark, table)
    if is_table_name(table):
        why = "no SparkSession was given" if spark is None else "the SparkSession has no delta-spark"
        raise OffsetStoreError(
            f"offset table {table!s}: looks like a catalog table name, which needs delta-spark "
            f"(Delta jars and DeltaSparkSessionExtension), but {why}; give a path or URI instead"
        )
    return DeltaRsEngine(table, storage_options)


# --------------------------------------------------------------------------- the store


class OffsetStore:
    """Jobs' positions in a Delta table: load, commit (monotonic), reset, delete."""

    def __init__(
        self,
        table: str | Path,
        engine: OffsetEngine | None = None,
        spark: Any = None,
        *,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.table = str(table)
        self.engine = (
            engine if engine is not None else engine_for(table, spark, storage_options=storage_options)
        )

    def rows(self, job: str) -> list[dict[str, Any]]:
        """The job's raw rows, ordered by topic (for display). Raises OffsetStoreError."""
        return self.engine.read(_job(job))

    def load(self, job: str) -> Offsets:
        """The job's positions; empty when the table or the job has none. Raises OffsetStoreError."""
        return self.state(job)[0]

    def epoch(self, job: str) -> int:
        """The job's reset epoch: how many times its positions were reset (0: never, or no rows)."""
        return self.state(job)[1]

    def state(self, job: str) -> tuple[Offsets, int]:
        """The job's positions and reset epoch, read together. Raises OffsetStoreError."""
        rows = self.rows(job)
        return Offsets({r["topic"]: position_of(r) for r in rows}), max(
            (r["reset_epoch"] for r in rows), default=0
        )

    def commit(
        self, job: str, offsets: Offsets, batch_id: int, checkpoint: str | None = None, *, epoch: int = 0
    ) -> None:
        """Record that ``job`` has taken ``offsets`` in batch ``batch_id`` of a run that started at
        reset epoch ``epoch``.

        A topic whose stored position is ahead of the new one keeps the stored row (a
        replayed batch) and a warning is logged; the rule is enforced inside the MERGE,
        so it also holds against a concurrent writer. Raises StaleEpochError, before writing,
        when the job's positions were reset after the run started (``epoch`` is older than the
        store's): the run must stop, and the next one starts from the reset positions; the MERGE
        refuses such a row too. Raises OffsetStoreError.
        """
        job = _job(job)
        if not offsets:
            return
        rows = self.engine.read(job)
        current = max((r["reset_epoch"] for r in rows), default=0)
        if epoch < current:
            raise StaleEpochError(
                f"offset table {self.table}: the positions of job {job!r} were reset while this run "
                f"was running (reset epoch {current}, the run started at {epoch}); batch {batch_id} "
                "is not recorded: run the job again to start from the reset positions"
            )
        stored = {r["topic"]: position_of(r) for r in rows}
        for topic, new in offsets.items():
            old = stored.get(topic)
            if old is not None and old > new:
                log.warning(
                    "offset store %s: job %r batch %d would move %s back from %s to %s; keeping %s",
                    self.table,
                    job,
                    batch_id,
                    topic,
                    old,
                    new,
                    old,
                )
        self.engine.upsert(_rows(job, offsets, batch_id, checkpoint, epoch), forward_only=True)

    def reset(self, job: str, offsets: Offsets, batch_id: int = -1, checkpoint: str | None = None) -> int:
        """Set the positions of ``offsets``' topics, backwards too, at the job's next reset epoch,
        which is returned; other topics keep their positions (``delete`` first to replace the
        whole set). Sink commits and runs of an earlier epoch no longer count (see the module
        docstring). Raises OffsetStoreError."""
        job = _job(job)
        epoch = self.epoch(job) + 1
        if offsets:
            self.engine.upsert(_rows(job, offsets, batch_id, checkpoint, epoch), forward_only=False)
        return epoch

    def delete(self, job: str, topics: Iterable[str] | None = None) -> None:
        """Remove the job's rows (only ``topics`` when given). Raises OffsetStoreError."""
        self.engine.delete(_job(job), None if topics is None else list(topics))


def _job(job: str) -> str:
    if not isinstance(job, str) or not job:
        raise OffsetStoreError(f"job must be a non-empty string, got {job!r}")
    return job


def position_of(row: Mapping[str, Any]) -> Position:
    """The position a stored row holds."""
    return Position(int(row["ledger_id"]), int(row["entry_id"]), int(row["batch_index"]))


def _complete(row: dict[str, Any]) -> dict[str, Any]:
    """A row as read, with ``reset_epoch`` 0 where the table (written before it) or the row lacks it."""
    if row.get("reset_epoch") is None:
        row["reset_epoch"] = 0
    return row


def _rows(
    job: str, offsets: Offsets, batch_id: int, checkpoint: str | None, epoch: int
) -> list[dict[str, Any]]:
    if not isinstance(offsets, Offsets):
        raise OffsetStoreError(f"offsets must be an Offsets mapping, got {type(offsets).__name__}")
    if isinstance(batch_id, bool) or not isinstance(batch_id, int):
        raise OffsetStoreError(f"batch_id must be an integer, got {batch_id!r}")
    now = datetime.now(UTC)
    return [
        {
            "job": job,
            "topic": topic,
            "partition": partition_of(topic),
            "ledger_id": pos.ledger_id,
            "entry_id": pos.entry_id,
            "batch_index": pos.batch_index,
            "message_id": str(pos),
            "batch_id": batch_id,
            "committed_at": now,
            "checkpoint": checkpoint,
            "reset_epoch": epoch,
        }
        for topic, pos in offsets.items()
    ]
