"""The Delta connector: ``sink.delta`` (exactly once, and merges for backfills) and
``source.delta`` (the appended versions of a table, for publish jobs).

**Sink.** Each batch is written idempotently, keyed by ``pipelines/<job>/<query id>`` and the
batch id (:func:`pipelines.state.delta.write_idempotent`): a replay adds nothing. A stream's
commit also records the batch's end positions and the offset store's reset epoch in the commit's
metadata (:data:`OFFSETS_KEY`), which is what a run without checkpoint asks the sink
(:meth:`DeltaSinkConnector.committed`). Before the query reads anything, the transformed rows'
schema is checked against the settings (partition columns, merge keys) and the existing table
(:mod:`pipelines.jobs.sink_schema`). A backfill merges on the rows' position columns — or on the
sink's ``merge_keys``, updating what is there — so rows already ingested are not written again.

**Source.** Publishing reads with deltalake, not a Spark stream (which would need the Delta
jars): each table version after the last one published is one batch whose id is the version,
holding the files that version added. Only appends are published: a version that rewrote rows
(MERGE, UPDATE, DELETE, OVERWRITE) stops the job. The last published version is kept in
``<checkpoint>/published.json``.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from pipelines.connectors.base import Batch, Checked, JobContext, Opened, Resume
from pipelines.errors import PipelinesError, SinkError, task_errors
from pipelines.jobs.sink_schema import schema_problems, table_schema
from pipelines.state.delta import (
    commit_metadata,
    delta_spark_available,
    is_table_name,
    merge_new_rows,
    write_idempotent,
)
from pipelines.state.positions import Offsets

if TYPE_CHECKING:
    from pipelines.jobs.models import DeltaSink, DeltaSource

__all__ = ["OFFSETS_KEY", "DeltaSinkConnector", "DeltaSourceConnector", "committed_in_target"]

log = logging.getLogger("pipelines.connectors.delta")

#: the commit-metadata key of a batch's end positions and reset epoch
OFFSETS_KEY = "pipelines.state.offsets"


def committed_in_target(
    target: str, job: str, storage_options: dict[str, str] | None = None
) -> tuple[Offsets, int] | None:
    """The end offsets of the newest batch of ``job`` in ``target``'s commit metadata and the
    reset epoch it was written at (0 for batches written before epochs were recorded), if any."""
    for value in commit_metadata(target, OFFSETS_KEY, storage_options):
        try:
            entry = json.loads(value)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("job") == job:
            epoch = entry.get("epoch", 0)
            offsets = Offsets.from_dict(entry.get("offsets", {}), f"{target} commit metadata")
            return offsets, epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 0
    return None


class DeltaSinkConnector(Opened):
    """``sink.delta`` (:mod:`pipelines.connectors.base`: Sink and MergeSink)."""

    key = "sink.delta"
    keeps_positions = True
    section: DeltaSink

    def __init__(self, section: DeltaSink, ctx: JobContext) -> None:
        super().__init__(section, ctx)
        self.target = section.path

    def _partitions(self) -> list[str] | None:
        """The partition columns of the existing table (None when there is none yet)."""
        if is_table_name(self.target):
            return None
        try:
            table = DeltaTable(self.target, storage_options=self.ctx.storage_options)
            return list(table.metadata().partition_columns)
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            log.debug("%s: cannot read the table's metadata: %s", self.target, exc)
            return None

    def check(self, df: Any) -> list[str]:
        columns = list(df.columns)
        listed = ", ".join(columns)
        problems: list[str] = []
        for key in ("partition_by", "merge_keys"):
            for col in getattr(self.section, key) or []:
                if col not in columns:
                    problems.append(
                        self.ctx.line(
                            f"{self.key}.{key}",
                            f"column {col} is not in the transformed rows (columns: {listed})",
                        )
                    )
        existing = self._partitions()
        wanted = list(self.section.partition_by or [])
        if existing is not None and existing != wanted:
            problems.append(
                self.ctx.line(
                    f"{self.key}.partition_by",
                    f"{self.target} is partitioned by [{', '.join(existing)}], the job says "
                    f"[{', '.join(wanted)}]",
                )
            )
        table = table_schema(self.target, self.ctx.storage_options, df.sparkSession)
        return problems + schema_problems(self.ctx, self.section, df.schema.jsonValue(), table)

    def write(self, df: Any, batch: Batch) -> None:
        metadata = None
        if batch.ends is not None:
            entry = {"job": self.ctx.name, "batch": batch.batch_id, "offsets": batch.ends.to_dict()}
            metadata = {OFFSETS_KEY: json.dumps({**entry, "epoch": batch.epoch})}
        wrote = write_idempotent(
            df,
            self.target,
            f"pipelines/{self.ctx.name}/{batch.query_id}",
            batch.batch_id,
            mode=self.section.mode,
            partition_by=self.section.partition_by,
            merge_keys=self.section.merge_keys,
            spark=df.sparkSession,
            storage_options=self.ctx.storage_options,
            metadata=metadata,
            schema_mode=self.section.schema_mode,
        )
        if not wrote:
            log.info(
                "job %s: batch %d was already in %s (replay)", self.ctx.name, batch.batch_id, self.target
            )

    def committed(self, epoch: int) -> Offsets | None:
        """The positions of the newest batch of this job in the table's commit metadata, when it
        was written at ``epoch`` (an older one predates the last ``offsets reset``)."""
        found = committed_in_target(self.target, self.ctx.name, self.ctx.storage_options)
        if found is None:
            return None
        positions, at = found
        if at != epoch:
            log.info(
                "job %s: %s's newest batch predates the last offsets reset (epoch %d, now %d): ignored",
                self.ctx.name,
                self.target,
                at,
                epoch,
            )
            return None
        return positions

    def summary(self) -> str:
        dt = DeltaTable(self.target, storage_options=self.ctx.storage_options)
        actions = pa.table(dt.get_add_actions(flatten=True))
        rows = sum(int(n) for n in actions.column("num_records").to_pylist() if n)
        return f"; {self.target} has {rows} rows"

    # -- backfills
    def merge_keys(self, columns: Sequence[str], positions: tuple[str, ...]) -> tuple[list[str], bool]:
        """The keys a backfill merges on and whether matched rows are updated. Raises JobError
        when an ``append`` sink's rows lack the position columns (nothing to merge on)."""
        if self.section.mode == "merge":
            assert self.section.merge_keys is not None
            return list(self.section.merge_keys), True
        missing = [c for c in positions if c not in columns]
        if missing:
            raise self.ctx.error(
                f"{self.key}.mode",
                "a backfill must not duplicate rows already ingested: it merges on the message position "
                f"({', '.join(positions)}), but the transformed rows lack {', '.join(missing)}; keep "
                f"those columns, or set {self.key}.mode: merge with merge_keys that identify a row",
            )
        return list(positions), False

    @property
    def appends(self) -> bool:
        """Rows are appended (a backfill leaves what comes after the stream's position to it)."""
        return self.section.mode != "merge"

    def merge(self, df: Any, keys: list[str], update: bool) -> tuple[int, int]:
        spark = df.sparkSession
        data = df if delta_spark_available(spark) else df.toArrow()
        rows = data.count() if data is df else data.num_rows
        new = merge_new_rows(
            data,
            self.target,
            keys,
            update=update,
            partition_by=self.section.partition_by,
            spark=spark,
            storage_options=self.ctx.storage_options,
            schema_mode=self.section.schema_mode,
        )
        return rows, max(new, 0)


# -- the source: a table's appended versions ----------------------------------------------------
def appended_files(
    path: str, version: int, storage_options: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The data files ``version`` of a Delta table added, with their partition values.

    Raises PipelinesError when the version removed files (it rewrote rows): publishing
    follows appends only.
    """

    def files(v: int) -> dict[str, dict[str, Any]]:
        if v < 0:
            return {}
        actions = DeltaTable(path, version=v, storage_options=storage_options).get_add_actions(flatten=True)
        return {r["path"]: r for r in pa.table(actions).to_pylist()}

    now, before = files(version), files(version - 1)
    removed = set(before) - set(now)
    if removed:
        history = {
            c.get("version"): c.get("operation")
            for c in DeltaTable(path, storage_options=storage_options).history()
        }
        raise PipelinesError(
            f"{path}: version {version} ({history.get(version, '?')}) removed {len(removed)} file(s); "
            "publishing follows appends only — republish deliberately with a new job name"
        )
    return [now[p] for p in sorted(set(now) - set(before))]


def read_files(
    path: str, version: int, adds: list[dict[str, Any]], storage_options: dict[str, str] | None
) -> Any:
    """The rows of the given data files (partition columns filled in), in file order."""
    dt = DeltaTable(path, version=version, storage_options=storage_options)
    schema = _arrow_schema(dt)
    parts = dt.metadata().partition_columns
    root = dt.table_uri.removeprefix("file://")
    tables = []
    for add in adds:
        data_schema = pa.schema([f for f in schema if f.name not in parts])
        # the Delta log stores paths URI-encoded (a partition value with a space is %20)
        file = os.path.join(root, urllib.parse.unquote(add["path"]))
        table = ds.dataset(file, schema=data_schema, format="parquet").to_table()
        for col in parts:
            value = add.get(f"partition.{col}")
            field_ = schema.field(col)
            table = table.append_column(field_, pa.array([value] * table.num_rows, type=field_.type))
        tables.append(table.select(schema.names))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _arrow_schema(dt: Any) -> pa.Schema:
    schema = dt.schema().to_arrow()
    return pa.schema(schema) if not isinstance(schema, pa.Schema) else schema


class DeltaSourceConnector(Opened):
    """``source.delta`` (:mod:`pipelines.connectors.base`: VersionSource)."""

    key = "source.delta"
    section: DeltaSource

    def __init__(self, section: DeltaSource, ctx: JobContext) -> None:
        super().__init__(section, ctx)
        self.path = section.path
        self._last: int | None = None

    def preflight(self, command: str, resume: Resume, acked: Resume) -> Checked:
        return Checked([], Offsets({}))

    def plan(self, resume: Resume) -> list[str]:
        return [f"reads the Delta table {self.path} (versions after the last one published)"]

    def _marker(self) -> Path:
        assert self.ctx.checkpoint is not None
        return Path(self.ctx.checkpoint, "published.json")

    def last_published(self) -> int:
        """The last version published: ``published.json``, else the version before
        ``starting_version`` (-1: none)."""
        marker = self._marker()
        if marker.exists():
            return int(json.loads(marker.read_text())["version"])
        start = self.section.starting_version
        return (start - 1) if start is not None else -1

    def _current(self) -> int:
        return int(DeltaTable(self.path, storage_options=self.ctx.storage_options).version())

    def idle(self, committed: tuple[int, Offsets] | None) -> str | None:
        current = self._current()
        if self.last_published() < current:
            return None
        return (
            f"[{self.ctx.name}] {self.path} is at version {current}: nothing new to publish "
            "(Spark not started)"
        )

    def empty(self, spark: Any) -> Any:
        table = DeltaTable(self.path, storage_options=self.ctx.storage_options)
        return spark.createDataFrame(_arrow_schema(table).empty_table())

    def batches(self, spark: Any) -> Iterator[tuple[int, Any, int]]:
        storage = self.ctx.storage_options
        self._last = last = self.last_published()
        for version in range(last + 1, self._current() + 1):
            table = read_files(self.path, version, appended_files(self.path, version, storage), storage)
            yield version, (spark.createDataFrame(table) if table.num_rows else None), table.num_rows

    def done(self, batch_id: int) -> None:
        marker = self._marker()
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"version": batch_id, "table": self.path}))
        self._last = batch_id

    def nothing_new(self) -> str:
        return f"[{self.ctx.name}] {self.path} is at version {self._last}: nothing new to publish"

    def through(self) -> str:
        return f"; published through version {self._last}"

    def failed(self, batch_id: int, exc: BaseException) -> SinkError:
        """The error of a version whose write failed: job, version and the task's own error."""
        causes = task_errors(str(exc))
        cause = f"{causes[-1][0]}: {causes[-1][1]}" if causes else str(exc).strip().splitlines()[0]
        if "TopicTerminatedError" in cause:
            advice = "a terminated topic takes no more messages: point the job at another topic"
        else:
            advice = "rerun the job: it publishes this version again and rows already stored are skipped"
        return SinkError(
            f"[{self.ctx.name}] version {batch_id} of {self.path} was not published: {cause}; "
            f"versions before it are published; {advice}"
        )
