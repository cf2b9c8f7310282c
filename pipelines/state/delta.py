"""Idempotent Delta writes keyed by (app id, version), with delta-rs or delta-spark.

Delta's commit log can carry *app transactions*: a ``txn`` action saying
"application ``app_id`` has committed its version ``N``". A streaming job uses
its query id (or job name) as the app id and the micro-batch id as the version,
so a batch replayed after a crash finds its version already in the log and is
skipped instead of being written twice.

:func:`write_idempotent` writes one batch that way and tells the caller whether
it wrote. Two engines do the work:

* **deltalake (delta-rs)**, the default and the one that runs everywhere: read
  the table's last version for ``app_id`` from a snapshot, skip if ``version``
  is not newer, else write (``write_deltalake``, or ``DeltaTable.merge`` for
  ``mode="merge"``) *from that same snapshot* with the ``txn`` action in the
  commit properties. delta-rs itself does not refuse a version that is not
  newer; the check is ours. Writing from the snapshot that was checked makes the
  check atomic: if another writer commits the same app id meanwhile, delta-rs
  fails the commit ("Concurrent transaction failed"), and we look again.
* **delta-spark**, when ``data`` is a Spark DataFrame and the session has the
  Delta jars and ``DeltaSparkSessionExtension``: ``df.write.format("delta")``
  with ``txnAppId``/``txnVersion``, which Delta skips by itself when the version
  is not newer. A Spark DataFrame without delta-spark is converted with
  ``toArrow()`` and written by delta-rs.

A target is a path/URI, or (delta-spark only) a catalog table name: anything
with no ``/``, ``\\`` and no ``scheme://`` is taken as a name.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from pipelines.errors import OptionError, PipelinesError

log = logging.getLogger("pipelines.state.delta")

Mode = Literal["append", "overwrite", "merge"]
#: ``"merge"``: a write may add columns to the table (schema evolution); None: it must match
SchemaMode = Literal["merge"] | None
_MODES = ("append", "overwrite", "merge")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_DELTA_EXTENSION = "DeltaSparkSessionExtension"
_DELTA_CLASS = "io.delta.tables.DeltaTable"
_spark_conf_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class CommitRetry:
    """How a Delta commit that lost to a concurrent writer is retried: up to ``attempts`` tries,
    exponential backoff from ``initial_backoff`` capped at ``max_backoff`` seconds, full jitter."""

    attempts: int = 12
    initial_backoff: float = 0.02
    max_backoff: float = 1.0

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt number ``attempt`` (1-based)."""
        return random.uniform(0, min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1)))


def commit_attempts(policy: CommitRetry) -> Iterator[int]:
    """Attempt numbers 1 .. ``policy.attempts``, sleeping the backoff before each retry.

    The one retry loop of the Delta writes (data and offset store)::

        for attempt in commit_attempts(policy):
            try:
                return commit()
            except CommitFailedError:
                if attempt == policy.attempts:
                    raise ...
    """
    for attempt in range(1, policy.attempts + 1):
        if attempt > 1:
            time.sleep(policy.delay(attempt - 1))
        yield attempt


def is_table_name(target: str | Path) -> bool:
    """True when ``target`` is a catalog table name rather than a path or URI."""
    if isinstance(target, Path):
        return False
    return "/" not in target and "\\" not in target and not _SCHEME.match(target)


def is_spark_dataframe(data: object) -> bool:
    """True for a (classic or Connect) pyspark DataFrame, without importing pyspark."""
    return all(hasattr(data, a) for a in ("toArrow", "write", "sparkSession"))


#: the session conf a job's ``spark.delta_engine`` is recorded in (``deltalake`` turns delta-spark off)
ENGINE_CONF = "pipelines.delta.engine"
#: what the delta-spark engine needs on the driver's classpath
DELTA_SPARK_CLASSES = ("io.delta.tables.DeltaTable", "io.delta.sql.DeltaSparkSessionExtension")


def delta_spark_available(spark: Any) -> bool:
    """Whether ``spark`` writes Delta through delta-spark: the session extension is configured,
    its jars load, and the session's :data:`ENGINE_CONF` is not ``deltalake``.

    The extension is looked up in ``spark.sql.extensions``; the jars are checked by
    loading ``io.delta.tables.DeltaTable`` through the driver JVM. A session whose JVM
    cannot be reached (Spark Connect) is trusted on its configuration alone.
    """
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        engine = spark.conf.get(ENGINE_CONF, "auto") or "auto"
    except Exception:  # a stopped session or a Connect server that refuses conf reads
        return False
    if _DELTA_EXTENSION not in extensions or engine == "deltalake":
        return False
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return True
    try:
        jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(_DELTA_CLASS)
    except Exception:
        return False
    return True


def _quote(name: str) -> str:
    """A column or table name as a backtick-quoted SQL identifier (Spark and delta-rs agree on this)."""
    return "`" + name.replace("`", "``") + "`"


def spark_table_ref(target: str | Path) -> str:
    """How Spark SQL names ``target``: the catalog name as given, or ``delta.`path```."""
    text = str(target)
    return text if is_table_name(target) else f"delta.{_quote(text)}"


# --------------------------------------------------------------------------- last version


def last_version(
    target: str | Path,
    app_id: str,
    spark: Any = None,
    *,
    storage_options: dict[str, str] | None = None,
) -> int | None:
    """The last version committed by ``app_id`` to the Delta table at ``target``.

    Returns None when the table does not exist or ``app_id`` never committed. With a
    delta-spark ``spark`` session a catalog name is resolved to its location (``DESCRIBE
    DETAIL``) and the log is read with deltalake either way.

    Raises PipelinesError when the table cannot be read, or when ``target`` is a catalog
    name and ``spark`` has no delta-spark.
    """
    location = _location(target, spark)
    snapshot = _snapshot(location, storage_options)
    return None if snapshot is None else snapshot.transaction_version(app_id)


def _location(target: str | Path, spark: Any) -> str:
    if not is_table_name(target):
        return str(target)
    if spark is None or not delta_spark_available(spark):
        raise PipelinesError(
            f"{target}: a catalog table name needs a SparkSession with delta-spark "
            "(Delta jars and DeltaSparkSessionExtension); give a path or URI to use deltalake"
        )
    try:
        row = spark.sql(f"DESCRIBE DETAIL {spark_table_ref(target)}").select("location").first()
    except Exception as exc:
        raise PipelinesError(f"{target}: cannot resolve the table's location: {exc}") from exc
    if row is None or not row[0]:
        raise PipelinesError(f"{target}: the catalog reports no location for this table")
    return str(row[0])


def _snapshot(location: str, storage_options: dict[str, str] | None) -> Any:
    """A deltalake DeltaTable at ``location``, or None when there is no table there yet."""

    try:
        return DeltaTable(location, storage_options=storage_options)
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        raise PipelinesError(f"{location}: cannot read the Delta table: {exc}") from exc


# --------------------------------------------------------------------------- writes


def write_idempotent(
    data: Any,
    target: str | Path,
    app_id: str,
    version: int,
    *,
    mode: Mode = "append",
    partition_by: Sequence[str] | None = None,
    merge_keys: Sequence[str] | None = None,
    spark: Any = None,
    storage_options: dict[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
    schema_mode: SchemaMode = None,
) -> bool:
    """Write ``data`` to the Delta table ``target`` once per ``(app_id, version)``.

    ``metadata`` is stored in the commit itself (delta-rs custom metadata; delta-spark
    ``userMetadata`` as JSON) and read back with :func:`commit_metadata`.

    ``data`` is a pyarrow Table or RecordBatchReader, or a Spark DataFrame. ``mode`` is
    ``"append"``, ``"overwrite"`` or ``"merge"`` (upsert by ``merge_keys``: matching rows
    are updated, others inserted). The table is created on the first write, partitioned
    by ``partition_by``. Returns True when it wrote, False when ``app_id`` had already
    committed ``version`` or a later one (a replayed batch). ``schema_mode="merge"`` adds the
    columns ``data`` has and the table lacks (and writes null to the ones it lacks):
    delta-rs's ``schema_mode="merge"`` / ``merge_schema=True``, delta-spark's ``mergeSchema`` /
    ``withSchemaEvolution()``; without it such a write fails.

    With delta-spark a replay is also skipped by Delta itself (``txnAppId``); True/False
    then comes from reading the log beforehand, and if that read fails the write is left
    to Delta's own check and True is returned.

    Raises OptionError for a bad argument, PipelinesError when the write fails (a
    concurrent commit that cannot be retried included).
    """
    _check_args(app_id, version, mode, merge_keys)
    keys = list(merge_keys or [])
    parts = list(partition_by) if partition_by else None
    if is_spark_dataframe(data):
        session = spark if spark is not None else data.sparkSession
        if delta_spark_available(session):
            return _spark_write(
                data,
                target,
                app_id,
                version,
                mode,
                parts,
                keys,
                session,
                storage_options,
                metadata,
                schema_mode,
            )
        if is_table_name(target):
            raise PipelinesError(
                f"{target}: a catalog table name needs delta-spark (Delta jars and "
                "DeltaSparkSessionExtension) in the session; give a path or URI to use deltalake"
            )
        data = data.toArrow()
    elif is_table_name(target):
        raise PipelinesError(f"{target}: deltalake writes need a path or URI, not a catalog table name")
    return _rs_write(
        data, str(target), app_id, version, mode, parts, keys, storage_options, metadata, schema_mode
    )


def merge_new_rows(
    data: Any,
    target: str | Path,
    keys: Sequence[str],
    *,
    update: bool = False,
    partition_by: Sequence[str] | None = None,
    spark: Any = None,
    storage_options: dict[str, str] | None = None,
    schema_mode: SchemaMode = None,
) -> int:
    """MERGE ``data`` into ``target`` on ``keys``: insert the rows not there yet; returns how many.

    With ``update`` the rows already there are updated too (an upsert); without it they are
    left alone, so merging the same rows again changes nothing (and commits nothing). The
    table is created, partitioned by ``partition_by``, when missing. ``data`` is a pyarrow
    Table or a Spark DataFrame (delta-spark when the session has it, else converted to Arrow).
    ``schema_mode`` as for :func:`write_idempotent`.

    Raises OptionError for bad keys, PipelinesError when the write fails.
    """
    _check_args("merge", 0, "merge", keys)
    parts = list(partition_by) if partition_by else None
    predicate = " AND ".join(f"t.{_quote(k)} = s.{_quote(k)}" for k in keys)
    if is_spark_dataframe(data):
        session = spark if spark is not None else data.sparkSession
        if delta_spark_available(session):
            return _spark_merge_new(data, target, predicate, update, parts, session, schema_mode)
        data = data.toArrow()

    target = str(target)
    try:
        snapshot = _snapshot(target, storage_options)
        if snapshot is None:
            snapshot = _create(target, data.schema, parts, storage_options)
        merge = snapshot.merge(
            data, predicate, source_alias="s", target_alias="t", merge_schema=schema_mode == "merge"
        )
        if update:
            merge = merge.when_matched_update_all()
        metrics = merge.when_not_matched_insert_all().execute()
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise PipelinesError(f"{target}: merging on {', '.join(keys)} failed: {exc}") from exc
    return int(metrics.get("num_target_rows_inserted", 0))


def _spark_merge_new(
    df: Any,
    target: str | Path,
    predicate: str,
    update: bool,
    parts: list[str] | None,
    spark: Any,
    schema_mode: SchemaMode = None,
) -> int:
    """delta-spark: needs the Delta jars, so it is exercised only where they are present."""
    from delta.tables import DeltaTable as SparkDeltaTable

    try:
        if not _spark_table_exists(spark, target):
            rows = int(df.count())
            writer = df.write.format("delta").mode("append")
            if parts:
                writer = writer.partitionBy(*parts)
            if is_table_name(target):
                writer.saveAsTable(str(target))
            else:
                writer.save(str(target))
            return rows
        table = (
            SparkDeltaTable.forName(spark, str(target))
            if is_table_name(target)
            else SparkDeltaTable.forPath(spark, str(target))
        )
        merge = table.alias("t").merge(df.alias("s"), predicate)
        if schema_mode == "merge":
            merge = merge.withSchemaEvolution()
        if update:
            merge = merge.whenMatchedUpdateAll()
        merge.whenNotMatchedInsertAll().execute()
        metrics = table.history(1).select("operationMetrics").first()
    except Exception as exc:
        raise PipelinesError(f"{target}: merge failed: {exc}") from exc
    return int((metrics[0] or {}).get("numTargetRowsInserted", -1)) if metrics else -1


def commit_metadata(target: str | Path, key: str, storage_options: dict[str, str] | None = None) -> list[str]:
    """Values stored under ``key`` by :func:`write_idempotent` (``metadata=``), newest commit first.

    Works on tables written by either engine; an absent table gives [].
    """

    try:
        history = DeltaTable(str(target), storage_options=storage_options).history()
    except TableNotFoundError:
        return []
    found = []
    for commit in sorted(history, key=lambda c: c.get("version", -1), reverse=True):
        if key in commit:
            found.append(str(commit[key]))
            continue
        user = commit.get("userMetadata")
        if isinstance(user, str):
            try:
                value = json.loads(user).get(key)
            except (ValueError, AttributeError):
                value = None
            if value is not None:
                found.append(str(value))
    return found


def _check_args(app_id: str, version: int, mode: str, merge_keys: Sequence[str] | None) -> None:
    if not isinstance(app_id, str) or not app_id:
        raise OptionError("app_id", f"expected a non-empty string, got {app_id!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise OptionError("version", f"expected an integer >= 0, got {version!r}")
    if mode not in _MODES:
        raise OptionError("mode", f"expected one of {', '.join(_MODES)}, got {mode!r}")
    if mode == "merge" and not merge_keys:
        raise OptionError("merge_keys", "mode 'merge' needs at least one key column")
    if mode != "merge" and merge_keys:
        raise OptionError("merge_keys", f"only used with mode 'merge', not {mode!r}")
    for key in merge_keys or ():
        if not isinstance(key, str) or not key or "`" in key:
            # delta-rs's SQL parser has no escape for a backtick inside a quoted name
            raise OptionError("merge_keys", f"not a usable column name: {key!r} (empty, or contains '`')")


def _create(
    target: str, schema: Any, partition_by: list[str] | None, storage_options: dict[str, str] | None
) -> Any:
    """Create an empty table and return its snapshot.

    Writing the first batch *into* a missing table is not safe: two writers creating it
    at once both commit, and delta-rs cannot see the other's app transaction (it had no
    snapshot to check against). Creating first (racing creates are harmless) and then
    writing from a snapshot keeps the check atomic.
    """

    DeltaTable.create(
        target, schema, mode="ignore", partition_by=partition_by, storage_options=storage_options
    )
    return DeltaTable(target, storage_options=storage_options)


def _rs_write(
    data: Any,
    target: str,
    app_id: str,
    version: int,
    mode: str,
    partition_by: list[str] | None,
    merge_keys: list[str],
    storage_options: dict[str, str] | None,
    metadata: Mapping[str, str] | None = None,
    schema_mode: SchemaMode = None,
) -> bool:

    if not isinstance(data, (pa.Table, pa.RecordBatchReader)):
        if not hasattr(data, "__arrow_c_stream__"):
            raise OptionError(
                "data", f"expected a pyarrow Table or RecordBatchReader, got {type(data).__name__}"
            )
        data = pa.RecordBatchReader.from_stream(data)
    replayable = isinstance(data, pa.Table)  # a RecordBatchReader is consumed by the first try
    props = CommitProperties(
        custom_metadata=dict(metadata) if metadata else None,
        app_transactions=[Transaction(app_id=app_id, version=version)],
    )
    policy = CommitRetry()
    for attempt in commit_attempts(policy):
        consumed = False
        try:
            snapshot = _snapshot(target, storage_options)
            if snapshot is None:
                snapshot = _create(target, data.schema, partition_by, storage_options)
            committed = snapshot.transaction_version(app_id)
            if committed is not None and version <= committed:
                log.info(
                    "%s: %s version %d already committed (last %d); skipped",
                    target,
                    app_id,
                    version,
                    committed,
                )
                return False
            consumed = True
            if mode == "merge":
                predicate = " AND ".join(f"t.{_quote(k)} = s.{_quote(k)}" for k in merge_keys)
                snapshot.merge(
                    data,
                    predicate,
                    source_alias="s",
                    target_alias="t",
                    merge_schema=schema_mode == "merge",
                    commit_properties=props,
                ).when_matched_update_all().when_not_matched_insert_all().execute()
            else:
                write_deltalake(
                    snapshot,
                    data,
                    mode="overwrite" if mode == "overwrite" else "append",
                    partition_by=partition_by,
                    schema_mode=schema_mode,
                    storage_options=storage_options,
                    commit_properties=props,
                )
            return True
        except CommitFailedError as exc:
            if (consumed and not replayable) or attempt == policy.attempts:
                again = last_version(target, app_id, storage_options=storage_options)
                if again is not None and version <= again:
                    log.info("%s: %s version %d committed concurrently; skipped", target, app_id, version)
                    return False
                raise PipelinesError(
                    f"{target}: commit of {app_id} version {version} failed after {attempt} attempt(s): {exc}"
                ) from exc
            log.debug("%s: commit conflict for %s version %d, retrying: %s", target, app_id, version, exc)
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise PipelinesError(f"{target}: writing {app_id} version {version} failed: {exc}") from exc
    raise AssertionError("unreachable")  # pragma: no cover


def _spark_write(
    df: Any,
    target: str | Path,
    app_id: str,
    version: int,
    mode: str,
    partition_by: list[str] | None,
    merge_keys: list[str],
    spark: Any,
    storage_options: dict[str, str] | None,
    metadata: Mapping[str, str] | None = None,
    schema_mode: SchemaMode = None,
) -> bool:
    """delta-spark: needs the Delta jars, so it is exercised only where they are present."""
    try:
        committed = last_version(target, app_id, spark, storage_options=storage_options)
    except PipelinesError as exc:
        log.warning(
            "%s: cannot read the last version of %s (%s); relying on Delta's txnAppId", target, app_id, exc
        )
        committed = None
    if committed is not None and version <= committed:
        log.info("%s: %s version %d already committed (last %d); skipped", target, app_id, version, committed)
        return False
    exists = _spark_table_exists(spark, target)
    try:
        if mode == "merge" and exists:
            key = "spark.databricks.delta.commitInfo.userMetadata"  # MERGE takes no writer options
            if metadata:
                spark.conf.set(key, json.dumps(dict(metadata)))
            try:
                _spark_merge(df, target, app_id, version, merge_keys, spark, schema_mode)
            finally:
                if metadata:
                    spark.conf.unset(key)
            return True
        writer = (
            df.write.format("delta")
            .mode("overwrite" if mode == "overwrite" else "append")
            .option("txnAppId", app_id)
            .option("txnVersion", version)
        )
        if metadata:
            writer = writer.option("userMetadata", json.dumps(dict(metadata)))
        if schema_mode == "merge":
            writer = writer.option("mergeSchema", "true")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        if is_table_name(target):
            writer.saveAsTable(str(target))
        else:
            writer.save(str(target))
    except Exception as exc:
        raise PipelinesError(f"{target}: writing {app_id} version {version} failed: {exc}") from exc
    return True


def _spark_table_exists(spark: Any, target: str | Path) -> bool:
    if is_table_name(target):
        return bool(spark.catalog.tableExists(str(target)))
    from delta.tables import DeltaTable as SparkDeltaTable

    return bool(SparkDeltaTable.isDeltaTable(spark, str(target)))


def _spark_merge(
    df: Any,
    target: str | Path,
    app_id: str,
    version: int,
    keys: list[str],
    spark: Any,
    schema_mode: SchemaMode = None,
) -> None:
    """MERGE with the session-wide txn confs Delta reads for DML (set and cleared under a lock)."""
    from delta.tables import DeltaTable as SparkDeltaTable

    table = (
        SparkDeltaTable.forName(spark, str(target))
        if is_table_name(target)
        else SparkDeltaTable.forPath(spark, str(target))
    )
    condition = " AND ".join(f"t.{_quote(k)} = s.{_quote(k)}" for k in keys)
    with _spark_conf_lock:
        spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
        try:
            merge = table.alias("t").merge(df.alias("s"), condition)
            if schema_mode == "merge":
                merge = merge.withSchemaEvolution()
            merge.whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")
