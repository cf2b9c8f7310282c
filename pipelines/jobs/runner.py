"""The runner: a validated :class:`~pipelines.jobs.models.Job` → a Spark query that runs to the end.

``run_job`` builds (or joins) the SparkSession the profile describes, registers the
``pulsarwire`` format and wires source → transform → sink:

* Pulsar → Delta: a stream whose ``foreachBatch`` is
  :func:`pipelines.state.exactly_once.write_delta_exactly_once` (idempotent Delta write, offset
  store, broker ack). Without a checkpoint the job first :func:`~pipelines.state.exactly_once.recover`\\ s
  and resumes from the offset store.
* Pulsar → Pulsar / console: a stream into :func:`pipelines.spark.sink.write_pulsar_exactly_once`
  (producer names carry the query id, so a new checkpoint never collides with the sequence
  ids of the old one) or ``show``.
* Delta → Pulsar (publish): the table's versions after the last published one, each a batch
  with ``batchId`` = the version, so a replay is dropped by broker deduplication; the last
  published version is kept in ``<checkpoint>/published.json``. Only appends are published;
  a version that rewrote rows (MERGE, UPDATE, DELETE, OVERWRITE) stops the job with an error,
  and so does a version whose write failed (SinkError naming it and the task's cause).

A Pulsar source whose ``on_corrupt_message`` is ``skip`` or ``quarantine`` is read with
``onCorruptMessage=quarantine``: each micro-batch is split before the transform
(:mod:`pipelines.spark.quarantine`), corrupt messages are logged and counted (skip) or appended to
the job's quarantine table (quarantine, idempotent per batch), and the transform and the sink
see only the good rows.

Each micro-batch prints one progress line (batch id, rows, corrupt messages skipped or
quarantined, uncommitted messages left on the subscription, duration) and the run ends with
a summary. ``backfill`` is a bounded batch read
written idempotently slice by slice (resumable, rows/ETA printed); ``offsets_command`` shows
or resets the stored positions.

Before the query starts, the transformed rows' schema is checked against the sink's
settings (partition columns, merge keys, the Pulsar sink's columns): a mismatch is an error
naming the job key, raised before any data is read. Each micro-batch prints one progress
line (batch id, the messages it read — Spark's own ``numInputRows``, no extra Spark job —,
duration, messages not yet committed on the subscription and, once a rate is known, an ETA)
and the run ends with a summary. A first Ctrl-C / SIGTERM
(:mod:`pipelines.jobs.stopping`) stops the query once the batch in flight has committed.

``backfill`` is a bounded batch read written slice by slice by MERGE on the message position
(topic, partition, ledgerId, entryId, batchIndex) — or on the sink's ``merge_keys`` — so that
a window already ingested, or backfilled before, adds nothing ("0 new rows"); a window that
holds no messages is reported before Spark starts. ``offsets_command`` shows (with each
partition's end and backlog in messages) or resets the stored positions.

Spark's own logging is off unless ``-v`` (ERROR) or ``-vv`` (WARN): failures are reported by
the ``pipelines`` command in one line (:func:`pipelines.errors.short_error`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError
from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipelines import register
from pipelines.errors import (
    DataLossError,
    JobError,
    MissingTopicError,
    OffsetsAheadError,
    OffsetStoreError,
    OptionError,
    PipelinesError,
    SinkError,
    StaleEpochError,
    short_error,
    task_errors,
)
from pipelines.jobs.idle import last_published
from pipelines.jobs.jvm import start_context
from pipelines.jobs.lock import checkpoint_of
from pipelines.jobs.models import Job
from pipelines.jobs.preflight import checkpoint_offsets, stored_offsets
from pipelines.jobs.sink_schema import schema_problems, table_schema
from pipelines.jobs.stopping import STOP, reclaim
from pipelines.masking import mask
from pipelines.options.bound import Bound
from pipelines.options.client import client_settings
from pipelines.spark import quarantine
from pipelines.spark.planner import (
    Planner,
    SourceSettings,
    TopicSelector,
    bounds,
    lag_planner,
    resolve_start,
    subscription_lag,
)
from pipelines.spark.reader import source_schema
from pipelines.spark.sink import sink_settings, write_pulsar_exactly_once
from pipelines.state.delta import (
    DELTA_SPARK_CLASSES,
    ENGINE_CONF,
    delta_spark_available,
    is_table_name,
    merge_new_rows,
)
from pipelines.state.exactly_once import (
    ExactlyOnceJob,
    batch_offsets,
    checkpoint_file_exists,
    close_clients,
    move_aside,
    query_id,
    recover,
    write_delta_exactly_once,
)
from pipelines.state.offsets import OffsetStore
from pipelines.state.positions import Offsets, Position

log = logging.getLogger("pipelines.jobs.runner")


def say(text: str) -> None:
    print(mask(text), flush=True)


# -- session ---------------------------------------------------------------------------------
#: Spark's log4j2 configuration while ``pipelines`` is not verbose: nothing but our own lines
LOG4J_QUIET = Path(__file__).with_name("log4j2.properties")


def spark_log_level() -> str:
    """Spark's log level for the ``pipelines`` logger's level: OFF, ERROR (-v) or WARN (-vv)."""
    level = logging.getLogger("pipelines").getEffectiveLevel()
    return "WARN" if level <= logging.DEBUG else "ERROR" if level <= logging.INFO else "OFF"


#: pyspark's own Python loggers that print every failed query's message, plan and stack as JSON
#: on stderr (PySparkLogger, which does not propagate): kilobytes per AnalysisException
PYSPARK_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def quiet_pyspark_loggers(quiet: bool) -> None:
    """Switch pyspark's query-context loggers off (``quiet``: the command is not verbose and
    reports a failed statement itself in one line) or on again (-v)."""
    for name in PYSPARK_QUERY_LOGGERS:
        PySparkLogger.getLogger(name).disabled = quiet


def session(job: Job) -> tuple[Any, bool]:
    """The SparkSession for ``job`` and whether this call created it (then the runner stops it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    level = spark_log_level()
    quiet_pyspark_loggers(level == "OFF")
    conf = dict(job.spark.conf)
    java = conf.get("spark.driver.extraJavaOptions", "")
    if level == "OFF" and "log4j2.configurationFile" not in java:
        conf["spark.driver.extraJavaOptions"] = (
            f"{java} -Dlog4j2.configurationFile={LOG4J_QUIET.as_uri()}".strip()
        )
    active = SparkSession.getActiveSession()
    if job.spark.session == "existing" or active is not None:
        spark = active or SparkSession.builder.getOrCreate()
        for key, value in job.spark.conf.items():
            try:
                spark.conf.set(key, str(value))
            except Exception as exc:  # static conf of a running session: say so, keep going
                log.info("spark conf %s cannot be changed in a running session: %s", key, exc)
        created = False
    else:
        master = job.spark.master or "local[*]"
        start_context(master, job.app_name, {k: str(v) for k, v in conf.items()})  # JVM out of our group
        builder = SparkSession.builder.master(master).appName(job.app_name)
        for key, value in conf.items():
            builder = builder.config(key, str(value))
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel(level)
        created = True
    register(spark)
    reclaim()  # a new SparkContext took SIGINT for itself
    jvm = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if created and jvm is not None:  # a second Ctrl-C ends the JVM we started without its traces
        STOP.on_abort.append(jvm.kill)
    return spark, created


@contextmanager
def spark_session(job: Job) -> Iterator[Any]:
    """The job's SparkSession for one command: Spark's and Py4J's errors leave as one
    PipelinesError naming the job (:func:`run_error`); clients are closed and a session this
    call started is stopped on the way out."""
    spark, created = session(job)
    try:
        delta_engine(job, spark)  # refused before anything is read
        yield spark
    except PipelinesError:
        raise
    except Exception as exc:  # Spark's and Py4J's errors carry ours in their text
        raise run_error(job, exc) from exc
    finally:
        close_clients()
        if created:
            spark.stop()


def delta_engine(job: Job, spark: Any) -> str | None:
    """The engine that writes the job's Delta tables in ``spark`` (None when it writes none):
    ``spark.delta_engine`` recorded in the session, then honoured. Raises JobError when it says
    delta-spark and the session cannot (the classes or the extension are missing)."""
    if job.sink.delta is None and job.offsets is None:
        return None
    spark.conf.set(ENGINE_CONF, job.spark.delta_engine)
    if delta_spark_available(spark):
        return "delta-spark"
    if job.spark.delta_engine == "delta-spark":
        raise JobError(
            f"{job.source_file}: spark.delta_engine: delta-spark, but this Spark session cannot load "
            f"{' and '.join(DELTA_SPARK_CLASSES)} (or spark.sql.extensions lacks "
            "io.delta.sql.DeltaSparkSessionExtension): add the Delta jars (spark.jars.packages "
            "io.delta:delta-spark_2.13:<version>) and the extension, or set spark.delta_engine: auto"
        )
    return "deltalake (delta-rs)"


def say_engine(job: Job, spark: Any) -> None:
    """The first line of a run that writes Delta: which engine writes."""
    engine = delta_engine(job, spark)
    if engine is not None:
        say(f"[{job.name}] Delta tables written by {engine} (spark.delta_engine: {job.spark.delta_engine})")


def transform(job: Job, spark: Any, df: Any) -> Any:
    """Apply the ``transform`` steps in order: SQL statements over the view ``source`` in turn,
    a Python function; each step reads the previous one's result."""
    for key, step in job.transform_steps():
        if step.python is not None:
            df = job.step_function(key, step)(df)
            continue
        for i, statement in enumerate(step.sql or []):
            df.createOrReplaceTempView("source")
            try:
                df = spark.sql(statement)
            except Exception as exc:
                raise job.error(f"{key}.sql[{i}]", analysis_error(exc)) from exc
    return df


def analysis_error(exc: BaseException) -> str:
    """Spark's error about a statement in one line: its message without the JSON and plan it may
    carry (an AnalysisException's text can run to kilobytes)."""
    return short_error(exc, limit=300).rstrip(";")


def checkpoint_exists(checkpoint: str, spark: Any = None) -> bool:
    """Whether ``checkpoint`` holds a query's checkpoint; one given as a URI is asked through
    ``spark`` (and taken to exist without it)."""
    if "://" in checkpoint and spark is None:
        return True
    return checkpoint_file_exists(f"{checkpoint.rstrip('/')}/metadata", spark)


# -- progress --------------------------------------------------------------------------------
@dataclass
class Progress:
    """Per-batch lines and the final summary of a run."""

    job: Job
    lag_options: dict[str, str] | None = None
    _planner: Planner | None = None  # one connection for every lag figure of the run
    batches: int = 0
    rows: int = 0
    corrupt: int = 0  # messages skipped or quarantined (on_corrupt_message)
    busy: float = 0.0  # seconds spent in batches (the rest is Spark start-up and planning)
    started: float = field(default_factory=time.monotonic)
    in_batch: bool = False  # a batch is being written (a stop waits for it)
    ends: Callable[[int], Offsets] | None = None  # a batch's end positions (from the checkpoint)
    #: batches written and not yet reported: batch id → (seconds, corrupt rows, lag just after it)
    written: dict[int, tuple[float, int, int | None]] = field(default_factory=dict)

    def lag(self, batch_id: int | None = None) -> int | None:
        """Messages not yet committed, all partitions; None if unknown.

        The broker counts the messages of the entries not yet released on the subscription;
        a batch that ended inside a batched entry released only the entries before it, so the
        messages of that entry up to the batch's end are taken off.
        """
        if self.lag_options is None:
            return None
        try:
            if self._planner is None:
                self._planner = lag_planner(self.lag_options)
            backlog = subscription_lag(self.lag_options, self._planner).per_partition
            ends = self.ends(batch_id) if self.ends is not None and batch_id is not None else Offsets()
        except Exception as exc:  # informative only
            log.debug("lag unavailable: %s", exc)
            return None
        taken = {tp: pos.batch_index + 1 for tp, pos in ends.items() if pos.batch_index >= 0}
        return sum(max(0, n - taken.get(tp, 0)) for tp, n in backlog.items())

    def report(self, query: Any, *, final: bool = False) -> None:
        """One line per written batch whose progress Spark has reported (its ``numInputRows``:
        the messages the source read for it, counted by Spark as it reads). With ``final`` (the
        query has ended) a batch Spark reported nothing for counts 0 rows."""
        if not self.written:
            return
        rows: dict[int, int] = {}
        for p in query.recentProgress:  # dicts; idle updates repeat a batch id with 0 rows
            bid, n = int(p["batchId"]), int(p["numInputRows"])
            rows[bid] = max(n, rows.get(bid, 0))
        for batch_id in sorted(self.written):
            if batch_id not in rows and not final:
                break  # in order: later batches wait for this one's figure
            seconds, corrupt, lag = self.written.pop(batch_id)
            self.batch(batch_id, rows.get(batch_id, 0) - corrupt, seconds, corrupt, lag)

    def batch(
        self, batch_id: int, rows: int, seconds: float, corrupt: int = 0, lag: int | None = None
    ) -> None:
        """Print a batch's line; ``lag``: the messages left when it was written (None: unknown)."""
        self.batches += 1
        self.rows += rows
        self.corrupt += corrupt
        self.busy += seconds
        rate = self.rows / self.busy if self.busy > 0 else 0.0
        left = "" if lag is None else f", {lag} messages left"
        eta = f", ETA {_duration(lag / rate)}" if lag and rate > 0 else ""
        say(
            f"[{self.job.name}] batch {batch_id}: {rows} rows{self._corrupt_text(corrupt)} in "
            f"{seconds:.2f} s{left}{eta}"
        )

    def _corrupt_text(self, n: int) -> str:
        if not n:
            return ""
        src = self.job.source.pulsar
        done = "quarantined" if src is not None and src.on_corrupt_message == "quarantine" else "skipped"
        return f", {n} corrupt {'message' if n == 1 else 'messages'} {done}"

    def close(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    def summary(self, extra: str = "") -> None:
        self.close()
        took = time.monotonic() - self.started
        rate = self.rows / self.busy if self.busy > 0 else 0.0
        how = "stopped (rerun to continue)" if STOP.requested else "done"
        say(
            f"[{self.job.name}] {how}: {self.batches} batches, {self.rows} rows"
            f"{self._corrupt_text(self.corrupt)} in {took:.1f} s "
            f"({rate:.0f} rows/s while in batches){extra}"
        )


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s} s" if s < 120 else f"{s // 60} min {s % 60} s" if s < 7200 else f"{s / 3600:.1f} h"


def _counted(body: Callable[[Any, int], int | None], progress: Progress) -> Callable[[Any, int], None]:
    """foreachBatch wrapper: times the batch and notes how many of its rows were corrupt.

    ``body`` returns how many rows were corrupt messages (skipped or quarantined), or None. The
    batch's row count is not computed here (a count would be one more Spark job per batch): it
    is the ``numInputRows`` Spark reports in the query's progress, read by :meth:`Progress.report`.
    The lag is taken here, just after the batch: its line may be printed after later batches.
    """

    def run(df: Any, batch_id: int) -> None:
        t = time.monotonic()
        progress.in_batch = True
        try:
            corrupt = body(df, batch_id) or 0
        finally:
            progress.in_batch = False
        seconds = time.monotonic() - t
        progress.written[batch_id] = (seconds, corrupt, progress.lag(batch_id))

    return run


def _routing_corrupt(job: Job, spark: Any, checkpoint: str, body: Callable[[Any, int], None]) -> Any:
    """foreachBatch body of a job that skips or quarantines corrupt messages: split the raw
    batch, settle the corrupt rows, then transform the good ones and hand them to ``body``."""

    src = job.source.pulsar
    assert src is not None

    def run(df: Any, batch_id: int) -> int:
        good, bad = quarantine.split(df)
        if src.on_corrupt_message == "quarantine":
            assert src.quarantine_table is not None
            app_id = f"pipelines/{job.name}/{query_id(checkpoint, spark)}/quarantine"
            corrupt = quarantine.write_quarantine(
                bad, batch_id, src.quarantine_table, app_id, job.name, job.storage_options()
            )
        else:
            corrupt = quarantine.log_skipped(bad, job.name, batch_id)
        body(transform(job, df.sparkSession, good), batch_id)  # the batch's own (cloned) session
        return corrupt

    return run


def _await(query: Any, progress: Progress) -> None:
    """Wait for the query to end, printing each batch's line as Spark reports its progress; on a
    stop request, stop it once the batch in flight committed.

    A batch Spark starts between that moment and the stop is interrupted before it writes, or
    rolled back by the sink's idempotence; the next run replays it from the checkpoint.
    """
    try:
        while not query.awaitTermination(0.5):
            progress.report(query)
            if STOP.requested:
                while progress.in_batch and query.isActive:
                    time.sleep(0.1)
                query.stop()
                break
    except KeyboardInterrupt:  # no signal handler installed (a job run from Python)
        say(f"[{progress.job.name}] interrupted: stopping after the current batch")
        query.stop()
    progress.report(query, final=True)


# -- run ---------------------------------------------------------------------------------------
def run_job(job: Job, again: Offsets | None = None) -> int:
    """``pipelines run``: run the job's trigger to its end; 0 on success, raises on failure.

    ``again``: partitions whose data was lost (``fail_on_data_loss: false``, found by
    :func:`pipelines.jobs.preflight.check`), repositioned at these positions first.
    A publish (Delta → Pulsar) whose Spark job fails raises SinkError naming the job, the table
    version and the task's error; the versions before it stay recorded as published.
    """
    with spark_session(job) as spark:
        if job.source.kind == "delta":
            return _publish(job, spark)
        if again:
            reposition(job, again, "set to read again after data loss:", spark)
        return _stream(job, spark)


#: errors raised in the source or sink while a job runs → the job key a user changes to fix it
_ERROR_KEYS: dict[type[PipelinesError], str] = {
    MissingTopicError: "source.pulsar.topic",
    OffsetsAheadError: "checkpoint",
    DataLossError: "source.pulsar.fail_on_data_loss",
    StaleEpochError: "offsets",
    OffsetStoreError: "offsets",
}


def run_error(job: Job, exc: BaseException) -> PipelinesError:
    """A Spark (or Py4J) error that failed a running job as one PipelinesError naming the job
    file and, when the error it carries is one of ours with a key to fix, that key."""
    for name, message in reversed(task_errors(str(exc))):
        for cls, key in _ERROR_KEYS.items():
            if cls.__name__ == name:
                return PipelinesError(f"{job.source_file}: {key}: {message}")
    return PipelinesError(f"{job.source_file}: {short_error(exc)}")


# -- checking the transformed rows against the sink ----------------------------------------------
POSITION_COLUMNS = ("topic", "partition", "ledgerId", "entryId", "batchIndex")


def check_output(job: Job, df: Any) -> None:
    """The transformed rows (``df``'s schema; no data is read) fit the sink's settings.

    Raises JobError naming the key: a Delta partition column or merge key the rows lack, a
    partitioning other than the existing table's, columns that differ from the existing
    table's (:mod:`pipelines.jobs.sink_schema`), rows the Pulsar sink cannot write.
    """
    columns = list(df.columns)
    listed = ", ".join(columns)
    problems: list[str] = []
    delta = job.sink.delta
    if delta is not None:
        for key in ("partition_by", "merge_keys"):
            for col in getattr(delta, key) or []:
                if col not in columns:
                    problems.append(
                        f"{job.source_file}: sink.delta.{key}: column {col} is not in the transformed rows "
                        f"(columns: {listed})"
                    )
        existing = _table_partitions(delta.path, job)
        wanted = list(delta.partition_by or [])
        if existing is not None and existing != wanted:
            problems.append(
                f"{job.source_file}: sink.delta.partition_by: {delta.path} is partitioned by "
                f"[{', '.join(existing)}], the job says [{', '.join(wanted)}]"
            )
        problems += schema_problems(job, df.schema.jsonValue(), table_schema(job, df.sparkSession))
    if job.sink.pulsar is not None:
        try:
            sink_settings(job.sink_options(), df.schema, streaming=True)
        except (SinkError, OptionError) as exc:
            problems.append(f"{job.source_file}: sink.pulsar: the transformed rows do not fit: {exc}")
    if problems:
        raise JobError(problems)


def _table_partitions(path: str, job: Job) -> list[str] | None:
    """The partition columns of the Delta table at ``path`` (None when there is none yet)."""

    if is_table_name(path):
        return None

    try:
        return list(DeltaTable(path, storage_options=job.storage_options()).metadata().partition_columns)
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        log.debug("%s: cannot read the table's metadata: %s", path, exc)
        return None


def _stream(job: Job, spark: Any) -> int:
    source = job.source_options()
    progress = Progress(job, lag_options=source)
    assert job.checkpoint is not None or job.sink.console is not None
    checkpoint = checkpoint_of(job)
    options = dict(source)
    extra = ""
    if job.sink.delta is not None:
        eo = exactly_once_job(job)
        target = job.sink.delta.path
        if not checkpoint_exists(checkpoint, spark):  # a URI asked through Spark
            resumed = recover(eo, target)
            if len(resumed):
                say(f"[{job.name}] no checkpoint: resuming from the offset store {resumed.to_json()}")
        options.update(eo.stream_options())

        def body(df: Any, batch_id: int) -> None:
            write_delta_exactly_once(df, batch_id, target, eo)

    elif job.sink.pulsar is not None:
        sink = job.sink_options()

        def body(df: Any, batch_id: int) -> None:

            opts = dict(sink)
            if "producerNamePrefix" in opts:  # a new checkpoint is a new query: new producer names
                opts["producerNamePrefix"] += "-" + query_id(checkpoint, spark)[:8]
            write_pulsar_exactly_once(df, batch_id, opts)

    else:
        console = job.sink.console
        assert console is not None

        def body(df: Any, batch_id: int) -> None:
            df.show(console.rows, truncate=console.truncate)

    routed = job.source.pulsar is not None and job.source.pulsar.on_corrupt_message != "fail"
    if routed:  # corrupt messages come as rows; _routing_corrupt settles them before the transform
        options["onCorruptMessage"] = "quarantine"
    reader = spark.readStream.format("pulsarwire")
    for key, value in options.items():
        reader = reader.option(key, value)
    if routed:  # the transform runs per batch on the good rows; its schema is checked on them now
        df = reader.load()
        check_output(job, transform(job, spark, quarantine.split(df)[0]))
    else:
        df = transform(job, spark, reader.load())
        check_output(job, df)
    run = _routing_corrupt(job, spark, checkpoint, body) if routed else body
    progress.ends = lambda batch_id: batch_offsets(checkpoint, batch_id, spark)
    if STOP.requested:
        progress.summary(" before the first batch")
        return 0
    say_engine(job, spark)
    query = (
        df.writeStream.foreachBatch(_counted(run, progress))
        .option("checkpointLocation", checkpoint)
        .trigger(**job.trigger.spark_kwargs())
        .queryName(job.name)
        .start()
    )
    try:
        _await(query, progress)
    finally:
        progress.close()
    if job.sink.delta is not None:
        extra = f"; {job.sink.delta.path} has {_delta_rows(job.sink.delta.path, job)} rows"
    progress.summary(extra)
    return 0


def _delta_rows(path: str, job: Job) -> int:

    dt = DeltaTable(path, storage_options=job.storage_options())
    actions = pa.table(dt.get_add_actions(flatten=True))
    return sum(int(n) for n in actions.column("num_records").to_pylist() if n)


# -- publish: Delta → Pulsar ---------------------------------------------------------------------
def _published_file(checkpoint: str) -> Path:
    return Path(checkpoint, "published.json")


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
        rows = pa.table(actions).to_pylist()
        return {r["path"]: r for r in rows}

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
    schema = dt.schema().to_arrow()
    schema = pa.schema(schema) if not isinstance(schema, pa.Schema) else schema
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


def _check_publish_output(job: Job, spark: Any, path: str, storage: dict[str, str] | None) -> None:
    """The transform of a publish applied to no rows of the table's schema fits the sink."""

    schema = DeltaTable(path, storage_options=storage).schema().to_arrow()
    schema = pa.schema(schema) if not isinstance(schema, pa.Schema) else schema
    check_output(job, transform(job, spark, spark.createDataFrame(schema.empty_table())))


def _publish_failed(job: Job, path: str, version: int, exc: BaseException) -> SinkError:
    """The error of a publish whose Spark job failed: job, version and the task's own error."""
    causes = task_errors(str(exc))
    cause = f"{causes[-1][0]}: {causes[-1][1]}" if causes else str(exc).strip().splitlines()[0]
    if "TopicTerminatedError" in cause:
        advice = "a terminated topic takes no more messages: point the job at another topic"
    else:
        advice = "rerun the job: it publishes this version again and rows already stored are skipped"
    return SinkError(
        f"[{job.name}] version {version} of {path} was not published: {cause}; "
        f"versions before it are published; {advice}"
    )


def _publish(job: Job, spark: Any) -> int:

    assert job.source.delta is not None and job.checkpoint is not None
    path = job.source.delta.path
    storage = job.storage_options()
    progress = Progress(job)
    marker = _published_file(job.checkpoint)
    last = last_published(job)
    current = DeltaTable(path, storage_options=storage).version()
    sink = job.sink_options()
    _check_publish_output(job, spark, path, storage)
    for version in range(last + 1, current + 1):
        if STOP.requested:
            current = version - 1
            break
        t = time.monotonic()
        adds = appended_files(path, version, storage)
        table = read_files(path, version, adds, storage)
        if table.num_rows:
            df = transform(job, spark, spark.createDataFrame(table))
            try:
                write_pulsar_exactly_once(df, version, sink)
            except PipelinesError:
                raise
            except Exception as exc:  # a failed Spark task: name the cause, not the JVM stack
                raise _publish_failed(job, path, version, exc) from exc
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"version": version, "table": path}))
        progress.batch(version, table.num_rows, time.monotonic() - t)
    if last >= current and not STOP.requested:
        say(f"[{job.name}] {path} is at version {current}: nothing new to publish")
    progress.summary(f"; published through version {current}")
    return 0


# -- backfill ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Slice:
    start: Bound
    end: Bound

    def key(self) -> str:
        return hashlib.sha1(
            json.dumps([self.start.options(), self.end.options(end=True)]).encode()
        ).hexdigest()[:16]


#: how many time slices a backfill's window is cut into (progress and ETA after each)
BACKFILL_SLICES = 10


def slices(start: Bound, end: Bound, count: int) -> Iterator[Slice]:
    """Equal time slices of a time range; other bounds are one slice."""
    if start.kind != "time" or end.kind != "time" or count <= 1:
        yield Slice(start, end)
        return
    t0, t1 = start.time_ms or 0, end.time_ms or 0
    step = max(1, -(-(t1 - t0) // count))
    t = t0
    while t < t1:
        u = min(t + step, t1)
        yield Slice(
            Bound.model_construct(kind="time", time_ms=t), Bound.model_construct(kind="time", time_ms=u)
        )
        t = u


def backfill(job: Job, start: Bound | None = None, end: Bound | None = None) -> int:
    """``pipelines backfill``: the range read as a batch and merged into the sink slice by slice.

    Every slice is merged on the message position (``POSITION_COLUMNS``; for a ``merge`` sink
    on its ``merge_keys``, updating what is there): rows already in the table — written by the
    stream or an earlier backfill — are not written again, so a rerun says "0 new rows". A
    slice's end positions are recorded in the offset store under ``<job>/backfill``. A window
    with no messages is reported without starting Spark. Prints rows read, rows new, and ETA.

    ``start`` and ``end`` (``--from`` / ``--to``) override the job's ``backfill`` section.

    Raises JobError before reading when an ``append`` sink's transformed rows lack the
    position columns (nothing to merge on).
    """
    assert job.sink.delta is not None, "backfill writes a delta sink"
    start = start or (job.backfill.start if job.backfill else None)
    end = end or (job.backfill.end if job.backfill else None)
    if start is None:
        raise job.error("backfill", "no range: give --from (and --to) or a backfill section")
    end = end or Bound.model_construct(kind="latest")
    if end.kind == "latest" and start.kind == "time":
        end = Bound.model_construct(kind="time", time_ms=int(time.time() * 1000))
    window = f"{_bound_text(start)} .. {_bound_text(end)}"
    first, last = bounds(SourceSettings.parse(job.backfill_options(start, end), streaming=False))
    todo = [tp for tp, e in last.items() if first.get(tp, Position.EARLIEST) < e and e.entry_id >= 0]
    if not todo:
        say(
            f"[{job.name}] backfill {window}: no messages in this window "
            f"({len(last)} topic-partition(s)); nothing to do"
        )
        return 0
    clip, whose = (None, "") if job.sink.delta.mode == "merge" else stream_start(job)
    if clip is not None:
        left = [tp for tp in todo if clip.get(tp, Position.EARLIEST) < last[tp]]
        if left:
            say(
                f"[{job.name}] backfill: messages after the stream's position ({whose}) in "
                f"{len(left)} topic-partition(s) are left to the stream, which appends them itself"
            )
        todo = [tp for tp in todo if first.get(tp, Position.EARLIEST) < clip.get(tp, Position.EARLIEST)]
        if not todo:
            say(f"[{job.name}] backfill {window}: nothing before the stream's position to backfill")
            return 0
    parts = list(slices(start, end, BACKFILL_SLICES))
    sink = job.sink.delta
    target = sink.path
    progress = Progress(job)
    read_rows = new_rows = 0
    t0 = time.monotonic()
    with spark_session(job) as spark:
        keys, update = _backfill_keys(job, spark)
        say_engine(job, spark)
        for i, part in enumerate(parts, 1):
            if STOP.requested:
                break
            t = time.monotonic()
            opts = job.backfill_options(part.start, part.end)
            reader = spark.read.format("pulsarwire")
            for key, value in opts.items():
                reader = reader.option(key, value)
            rows_in = _quarantined(job, reader.load(), part)
            if clip is not None:
                rows_in = rows_in.where(taken_by(clip))
            df = transform(job, spark, rows_in)
            data = df if delta_spark_available(spark) else df.toArrow()
            rows = data.count() if data is df else data.num_rows
            new = merge_new_rows(
                data,
                target,
                keys,
                update=update,
                partition_by=sink.partition_by,
                spark=spark,
                storage_options=job.storage_options(),
                schema_mode=sink.schema_mode,
            )
            if job.offsets is not None:
                positions = _end_positions(opts)
                if len(positions):
                    OffsetStore(job.offsets, storage_options=job.storage_options()).commit(
                        f"{job.name}/backfill", positions, i
                    )
            read_rows += rows
            new_rows += max(new, 0)
            elapsed = time.monotonic() - t0
            eta = f", ETA ~{_duration(elapsed / i * (len(parts) - i))}" if i < len(parts) else ""
            say(
                f"[{job.name}] backfill slice {i}/{len(parts)}: {rows} rows read, {max(new, 0)} new "
                f"in {time.monotonic() - t:.1f} s{eta}"
            )
            progress.batches += 1
            progress.rows += rows
            progress.busy += time.monotonic() - t
    already = " (everything was already there)" if read_rows and not new_rows else ""
    progress.summary(f"; {new_rows} new rows in {target}{already}")
    return 0


def _quarantined(job: Job, raw: Any, part: Slice) -> Any:
    """A backfill slice's rows without its corrupt messages, which go to the quarantine table
    first (``on_corrupt_message: quarantine``; skip leaves them out in the source already)."""
    src = job.source.pulsar
    if src is None or src.on_corrupt_message != "quarantine":
        return raw

    assert src.quarantine_table is not None
    raw = raw.cache()  # read once: split twice
    good, bad = quarantine.split(raw)
    app_id = f"pipelines/{job.name}/backfill/{part.key()}/quarantine"
    quarantine.write_quarantine(bad, 0, src.quarantine_table, app_id, job.name, job.storage_options())
    return good


def stream_start(job: Job) -> tuple[Offsets, str]:
    """Where the job's stream resumes (or first starts): everything up to these positions is the
    stream's past, everything after its future. For a backfill into an ``append`` sink the
    future is the stream's to write: backfilling it too would append those rows twice.

    The last batch the checkpoint committed, else the offset store, else the stream's
    starting position resolved now.
    """

    found = checkpoint_offsets(job.checkpoint, committed=True)
    if found is not None:
        return found, "its checkpoint"
    found = stored_offsets(job)
    if found is not None:
        return found, f"the offset store {job.offsets}"
    opts = SourceSettings.parse(job.source_options(), streaming=True)
    planner = Planner(opts.settings, opts.selector)
    try:
        parts = planner.partitions()
        start = resolve_start(planner, opts.starting, parts, planner.latest(parts))
    finally:
        planner.close()
    return start, "it has not run yet and starts there"


def taken_by(positions: Offsets) -> Any:
    """A Spark condition on source rows: the row is at or before its partition's position."""

    ledger, entry, index = F.col("ledgerId"), F.col("entryId"), F.col("batchIndex")
    condition = F.lit(False)
    for tp, pos in positions.items():
        if pos.is_earliest:
            continue
        if pos.entry_id < 0:  # L:-1:-1, everything before ledger L
            upto = ledger < pos.ledger_id
        else:
            same = (ledger == pos.ledger_id) & (entry == pos.entry_id)
            if pos.batch_index >= 0:
                same = same & (index <= pos.batch_index)
            upto = (ledger < pos.ledger_id) | ((ledger == pos.ledger_id) & (entry < pos.entry_id)) | same
        condition = condition | ((F.col("topic") == tp) & upto)
    return condition


def _bound_text(bound: Bound) -> str:
    if bound.kind == "time":
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((bound.time_ms or 0) / 1000))
    return bound.kind if bound.kind != "offsets" else json.dumps(bound.offsets)


def _backfill_keys(job: Job, spark: Any) -> tuple[list[str], bool]:
    """The keys a backfill merges on, and whether matched rows are updated; checked on the
    transformed schema (no data read). Raises JobError when there is nothing to merge on."""

    sink = job.sink.delta
    assert sink is not None
    schema: StructType = source_schema(job.backfill_options(Bound.model_construct(kind="earliest")))
    df = transform(job, spark, spark.createDataFrame([], schema))
    missing = [c for c in POSITION_COLUMNS if c not in df.columns] if sink.mode != "merge" else []
    if missing:  # the backfill's own rule first: without these columns nothing else matters
        raise job.error(
            "sink.delta.mode",
            "a backfill must not duplicate rows already ingested: it merges on the message position "
            f"({', '.join(POSITION_COLUMNS)}), but the transformed rows lack {', '.join(missing)}; keep "
            "those columns, or set sink.delta.mode: merge with merge_keys that identify a row",
        )
    check_output(job, df)
    if sink.mode == "merge":
        assert sink.merge_keys is not None
        return list(sink.merge_keys), True
    return list(POSITION_COLUMNS), False


def _end_positions(opts: dict[str, str]) -> Offsets:
    """Where a bounded read with ``opts`` ended, per topic-partition."""

    return bounds(SourceSettings.parse(opts, streaming=False), ends_only=True)[1]


# -- offsets -----------------------------------------------------------------------------------
#: ``offsets show`` counts a backlog by reading message ids up to this many per partition
BACKLOG_SCAN_LIMIT = 1_000_000


def _offset_store(job: Job) -> OffsetStore:
    assert job.offsets is not None, "the CLI refuses offsets commands for a job without a store"
    return OffsetStore(job.offsets, storage_options=job.storage_options())


def show_offsets(job: Job) -> int:
    """``pipelines offsets show``: each stored position with the partition's end and the backlog
    between them in messages (batched entries count every message; read from the broker, at
    most :data:`BACKLOG_SCAN_LIMIT` per partition, "≥ N" beyond)."""
    rows = _offset_store(job).rows(job.name)
    if not rows:
        say(f"job {job.name}: no stored positions in {job.offsets}")
        return 0
    notes = _end_notes(job, {r["topic"]: _position_of(r) for r in rows})
    say(f"job {job.name}: positions in {job.offsets}")
    for r in rows:
        say(
            f"  {r['topic']}  {r['message_id']}  batch {r['batch_id']}  at {r['committed_at']}"
            f"  {notes.get(r['topic'], '')}"
        )
    return 0


def reset_offsets(job: Job, position: Bound) -> int:
    """``pipelines offsets reset --to POSITION``: every topic-partition's stored position set to
    ``position`` (:func:`reposition`); the next run starts there."""
    offsets = _positions_for(job, position)
    if job.checkpoint is not None and "://" in job.checkpoint:  # moved aside through Spark's FileSystem
        with spark_session(job) as spark:
            reposition(job, offsets, "reset to", spark)
    else:
        reposition(job, offsets, "reset to")
    return 0


def exactly_once_job(job: Job) -> ExactlyOnceJob:
    """The exactly-once settings of a job with a Delta sink, at the store's reset epoch now."""
    assert job.sink.delta is not None and job.offsets is not None
    return ExactlyOnceJob(
        job.name,
        job.checkpoint or "",
        job.offsets,
        job.source_options(),
        mode=job.sink.delta.mode,
        partition_by=job.sink.delta.partition_by,
        merge_keys=job.sink.delta.merge_keys,
        storage_options=job.storage_options(),
        epoch=_offset_store(job).epoch(job.name),
        schema_mode=job.sink.delta.schema_mode,
    )


def reposition(job: Job, offsets: Offsets, why: str, spark: Any = None) -> None:
    """Make ``offsets`` where the job resumes in their topic-partitions, authoritatively.

    In this order: what the sink already holds of the current reset epoch is brought into the
    store (:func:`~pipelines.state.exactly_once.recover`: the other partitions keep their
    committed positions); the store takes ``offsets`` at the next reset epoch, so that sink
    commits from before no longer count; the job's durable subscription is moved to them
    (back too), so that it is acknowledged exactly up to them; the checkpoint, which would
    resume from its own positions, is moved aside (``spark`` moves a remote one).
    """
    store = _offset_store(job)
    if job.sink.delta is not None:
        recover(exactly_once_job(job), job.sink.delta.path)
    epoch = store.reset(job.name, offsets)
    say(f"job {job.name}: positions {why} {offsets.to_json()} (reset epoch {epoch})")
    if job.source.pulsar is not None:
        opts = SourceSettings.parse(job.source_options(), streaming=True)
        planner = Planner(opts.settings, opts.selector, subscription=job.subscription)
        try:
            planner.rewind(offsets)
        finally:
            planner.close()
    if job.checkpoint is not None and checkpoint_exists(job.checkpoint, spark):
        aside = move_aside(job.checkpoint, f".before-reset-{int(time.time())}", spark)
        say(f"job {job.name}: checkpoint moved to {aside}; the next run starts from these positions")


def _position_of(row: dict[str, Any]) -> Position:
    return Position(int(row["ledger_id"]), int(row["entry_id"]), int(row["batch_index"]))


def _end_notes(job: Job, stored: dict[str, Position]) -> dict[str, str]:
    """topic-partition → "end L:E:B  backlog N messages" after its stored position."""
    if job.source.pulsar is None:
        return {}

    planner = Planner(client_settings(job.source_options()), TopicSelector())
    out: dict[str, str] = {}
    try:
        latest = planner.latest(list(stored))
        for tp, pos in stored.items():
            end = latest[tp]
            if pos > end:
                out[tp] = f"end {end}  PAST THE END (data reset, another cluster or a recreated topic)"
                continue
            scan = planner.scan(tp, pos, end, BACKLOG_SCAN_LIMIT, None)
            out[tp] = f"end {end}  backlog {'≥ ' if scan.more else ''}{scan.rows} messages"
    except Exception as exc:  # the positions are still worth showing
        reason = short_error(exc)
        return {tp: f"end unknown ({reason})" for tp in stored}
    finally:
        planner.close()
    return out


def _positions_for(job: Job, bound: Bound) -> Offsets:
    """The start positions ``bound`` names for every partition of the job's source."""
    if bound.kind == "offsets":
        return Offsets({k: Position.parse(v, "--to") for k, v in (bound.offsets or {}).items()})

    return bounds(SourceSettings.parse(job.backfill_options(start=bound), streaming=False))[0]
