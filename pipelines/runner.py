"""The runner: a validated :class:`~pipelines.models.Job` → a Spark query that runs to the end.

``run_job`` builds (or joins) the SparkSession the profile describes, registers the
``pulsarwire`` format and wires source → transform → sink:

* Pulsar → Delta: a stream whose ``foreachBatch`` is
  :func:`pipelines.exactly_once.write_delta_exactly_once` (idempotent Delta write, offset
  store, broker ack). Without a checkpoint the job first :func:`~pipelines.exactly_once.recover`\\ s
  and resumes from the offset store.
* Pulsar → Pulsar / console: a stream into :func:`pipelines.sink.write_pulsar_exactly_once`
  (producer names carry the query id, so a new checkpoint never collides with the sequence
  ids of the old one) or ``show``.
* Delta → Pulsar (publish): the table's versions after the last published one, each a batch
  with ``batchId`` = the version, so a replay is dropped by broker deduplication; the last
  published version is kept in ``<checkpoint>/published.json``. Only appends are published;
  a version that rewrote rows (MERGE, UPDATE, DELETE, OVERWRITE) stops the job with an error,
  and so does a version whose write failed (SinkError naming it and the task's cause).

A Pulsar source whose ``on_corrupt_message`` is ``skip`` or ``quarantine`` is read with
``onCorruptMessage=quarantine``: each micro-batch is split before the transform
(:mod:`pipelines.quarantine`), corrupt messages are logged and counted (skip) or appended to
the job's quarantine table (quarantine, idempotent per batch), and the transform and the sink
see only the good rows.

Each micro-batch prints one progress line (batch id, rows, corrupt messages skipped or
quarantined, uncommitted messages left on the subscription, duration) and the run ends with
a summary. ``backfill`` is a bounded batch read
written idempotently slice by slice (resumable, rows/ETA printed); ``offsets_command`` shows
or resets the stored positions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import PipelinesError, SinkError
from .exactly_once import ExactlyOnceJob, close_clients, query_id, recover, write_delta_exactly_once
from .models import Bound, Job
from .offsets import OffsetStore
from .planner import Planner
from .positions import Offsets, Position
from .source import bounds, lag_planner, subscription_lag

log = logging.getLogger("pipelines.runner")


def say(text: str) -> None:
    print(text, flush=True)


# -- session ---------------------------------------------------------------------------------
def session(job: Job) -> tuple[Any, bool]:
    """The SparkSession for ``job`` and whether this call created it (then the runner stops it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pipelines

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
        builder = SparkSession.builder.master(job.spark.master or "local[*]").appName(job.app_name)
        for key, value in job.spark.conf.items():
            builder = builder.config(key, str(value))
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        created = True
    pipelines.register(spark)
    return spark, created


def transform(job: Job, spark: Any, df: Any) -> Any:
    """Apply ``transform``: SQL statements over the view ``source`` in turn, or a Python function."""
    if job.transform is None:
        return df
    if job.transform.sql:
        for i, statement in enumerate(job.transform.sql):
            df.createOrReplaceTempView("source")
            try:
                df = spark.sql(statement)
            except Exception as exc:
                raise job.error(f"transform.sql[{i}]", str(exc).splitlines()[0]) from exc
        return df
    fn = job.transform_function()
    assert fn is not None
    return fn(df)


def checkpoint_exists(checkpoint: str) -> bool:
    return Path(checkpoint.removeprefix("file:"), "metadata").exists() if "://" not in checkpoint else True


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

    def lag(self) -> str:
        if self.lag_options is None:
            return "-"
        try:
            if self._planner is None:
                self._planner = lag_planner(self.lag_options)
            lo, avg, hi = subscription_lag(self.lag_options, self._planner).summary
        except Exception as exc:  # informative only
            log.debug("lag unavailable: %s", exc)
            return "?"
        return f"{hi}" if lo == hi else f"{lo}/{avg:.0f}/{hi}"

    def batch(self, batch_id: int, rows: int, seconds: float, corrupt: int = 0) -> None:
        self.batches += 1
        self.rows += rows
        self.corrupt += corrupt
        self.busy += seconds
        say(
            f"[{self.job.name}] batch {batch_id}: {rows} rows{self._corrupt_text(corrupt)} in "
            f"{seconds:.2f} s, uncommitted left {self.lag()}"
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
        say(
            f"[{self.job.name}] done: {self.batches} batches, {self.rows} rows"
            f"{self._corrupt_text(self.corrupt)} in {took:.1f} s "
            f"({rate:.0f} rows/s while in batches){extra}"
        )


def _counted(body: Callable[[Any, int], int | None], progress: Progress) -> Callable[[Any, int], None]:
    """foreachBatch wrapper: the batch is materialised once (cached), counted, then written.

    ``body`` returns how many of the rows were corrupt messages (skipped or quarantined), or None.
    """

    def run(df: Any, batch_id: int) -> None:
        t = time.monotonic()
        df = df.persist()
        try:
            rows = df.count()
            corrupt = body(df, batch_id) or 0
        finally:
            df.unpersist()
        progress.batch(batch_id, rows - corrupt, time.monotonic() - t, corrupt)

    return run


def _routing_corrupt(job: Job, spark: Any, checkpoint: str, body: Callable[[Any, int], None]) -> Any:
    """foreachBatch body of a job that skips or quarantines corrupt messages: split the raw
    batch, settle the corrupt rows, then transform the good ones and hand them to ``body``."""
    from . import quarantine

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


# -- run ---------------------------------------------------------------------------------------
def run_job(job: Job, args: Any = None) -> int:
    """``pipelines run``: run the job's trigger to its end; 0 on success, raises on failure.

    A publish (Delta → Pulsar) whose Spark job fails raises SinkError naming the job, the table
    version and the task's error; the versions before it stay recorded as published.
    """
    spark, created = session(job)
    try:
        if job.source.kind == "delta":
            return _publish(job, spark)
        return _stream(job, spark)
    finally:
        close_clients()
        if created:
            spark.stop()


def _stream(job: Job, spark: Any) -> int:
    source = job.source_options()
    progress = Progress(job, lag_options=source)
    assert job.checkpoint is not None or job.sink.console is not None
    checkpoint = job.checkpoint or str(Path(".run", "console-checkpoints", job.name))
    options = dict(source)
    extra = ""
    if job.sink.delta is not None:
        assert job.offsets is not None
        target = job.sink.delta.path
        eo = ExactlyOnceJob(
            job.name,
            checkpoint,
            job.offsets,
            source,
            mode=job.sink.delta.mode,
            partition_by=job.sink.delta.partition_by,
            merge_keys=job.sink.delta.merge_keys,
            storage_options=job.storage_options(),
        )
        if not checkpoint_exists(checkpoint):
            resumed = recover(eo, target)
            if len(resumed):
                say(f"[{job.name}] no checkpoint: resuming from the offset store {resumed.to_json()}")
        options.update(eo.stream_options())

        def body(df: Any, batch_id: int) -> None:
            write_delta_exactly_once(df, batch_id, target, eo)

    elif job.sink.pulsar is not None:
        sink = job.sink_options()

        def body(df: Any, batch_id: int) -> None:
            from .sink import write_pulsar_exactly_once

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
    df = reader.load() if routed else transform(job, spark, reader.load())
    run = _routing_corrupt(job, spark, checkpoint, body) if routed else body
    query = (
        df.writeStream.foreachBatch(_counted(run, progress))
        .option("checkpointLocation", checkpoint)
        .trigger(**job.trigger.spark_kwargs())
        .queryName(job.name)
        .start()
    )
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        say(f"[{job.name}] interrupted: stopping after the current batch")
        query.stop()
    finally:
        progress.close()
    if job.sink.delta is not None:
        extra = f"; {job.sink.delta.path} has {_delta_rows(job.sink.delta.path, job)} rows"
    progress.summary(extra)
    return 0


def _delta_rows(path: str, job: Job) -> int:
    import pyarrow as pa
    from deltalake import DeltaTable

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
    from deltalake import DeltaTable

    def files(v: int) -> dict[str, dict[str, Any]]:
        if v < 0:
            return {}
        import pyarrow as pa

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
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    dt = DeltaTable(path, version=version, storage_options=storage_options)
    schema = dt.schema().to_arrow()
    schema = pa.schema(schema) if not isinstance(schema, pa.Schema) else schema
    parts = dt.metadata().partition_columns
    root = dt.table_uri.removeprefix("file://")
    tables = []
    for add in adds:
        data_schema = pa.schema([f for f in schema if f.name not in parts])
        table = ds.dataset(os.path.join(root, add["path"]), schema=data_schema, format="parquet").to_table()
        for col in parts:
            value = add.get(f"partition.{col}")
            field_ = schema.field(col)
            table = table.append_column(field_, pa.array([value] * table.num_rows, type=field_.type))
        tables.append(table.select(schema.names))
    return pa.concat_tables(tables) if tables else schema.empty_table()


#: the error line a Python worker's traceback ends with, e.g. "pipelines.errors.SinkError: ..."
_TASK_ERROR = re.compile(r"^(?:pipelines|pulsarwire)\.errors\.(\w+): (.+)$", re.MULTILINE)


def _publish_failed(job: Job, path: str, version: int, exc: BaseException) -> SinkError:
    """The error of a publish whose Spark job failed: job, version and the task's own error."""
    causes = _TASK_ERROR.findall(str(exc))
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
    from deltalake import DeltaTable

    from .sink import write_pulsar_exactly_once

    assert job.source.delta is not None and job.checkpoint is not None
    path = job.source.delta.path
    storage = job.storage_options()
    progress = Progress(job)
    marker = _published_file(job.checkpoint)
    last = json.loads(marker.read_text())["version"] if marker.exists() else None
    if last is None:
        start = job.source.delta.starting_version
        last = (start - 1) if start is not None else -1
    current = DeltaTable(path, storage_options=storage).version()
    sink = job.sink_options()
    for version in range(last + 1, current + 1):
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
    if last >= current:
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


def backfill(job: Job, args: Any = None) -> int:
    """``pipelines backfill``: the range read as a batch, written idempotently slice by slice.

    Each slice is a Delta write keyed by (job, slice) — a rerun skips the slices already
    written — and its end positions are recorded in the offset store under
    ``<job>/backfill``. Prints rows done, estimated total, rate and ETA after each slice.
    """
    from .delta import write_idempotent

    assert job.sink.delta is not None, "backfill writes a delta sink"
    start = getattr(args, "start", None) or (job.backfill.start if job.backfill else None)
    end = getattr(args, "end", None) or (job.backfill.end if job.backfill else None)
    if start is None:
        raise job.error("backfill", "no range: give --from (and --to) or a backfill section")
    end = end or Bound.model_construct(kind="latest")
    if end.kind == "latest" and start.kind == "time":
        end = Bound.model_construct(kind="time", time_ms=int(time.time() * 1000))
    parts = list(slices(start, end, int(getattr(args, "slices", None) or 10)))
    spark, created = session(job)
    target = job.sink.delta.path
    progress = Progress(job)
    done_rows = 0
    t0 = time.monotonic()
    try:
        for i, part in enumerate(parts, 1):
            t = time.monotonic()
            opts = job.backfill_options(part.start, part.end)
            reader = spark.read.format("pulsarwire")
            for key, value in opts.items():
                reader = reader.option(key, value)
            df = transform(job, spark, _quarantined(job, reader.load(), part))
            from .delta import delta_spark_available

            data = df if delta_spark_available(spark) else df.toArrow()
            rows = data.count() if data is df else data.num_rows
            wrote = write_idempotent(
                data,
                target,
                f"pipelines/{job.name}/backfill/{part.key()}",
                0,
                mode=job.sink.delta.mode,
                partition_by=job.sink.delta.partition_by,
                merge_keys=job.sink.delta.merge_keys,
                spark=spark,
                storage_options=job.storage_options(),
            )
            if job.offsets is not None:
                positions = _end_positions(opts)
                if len(positions):
                    OffsetStore(job.offsets, storage_options=job.storage_options()).commit(
                        f"{job.name}/backfill", positions, i
                    )
            done_rows += rows
            elapsed = time.monotonic() - t0
            est_total = done_rows * len(parts) / i
            eta = elapsed / i * (len(parts) - i)
            say(
                f"[{job.name}] backfill slice {i}/{len(parts)}: {rows} rows"
                f"{'' if wrote else ' (already written, skipped)'} in {time.monotonic() - t:.1f} s; "
                f"{done_rows} of ~{est_total:.0f} rows, {done_rows / elapsed if elapsed else 0:.0f} rows/s, "
                f"ETA {eta:.0f} s"
            )
            progress.batches += 1
            progress.rows += rows
            progress.busy += time.monotonic() - t
    finally:
        close_clients()
        if created:
            spark.stop()
    progress.summary(f"; {target}")
    return 0


def _quarantined(job: Job, raw: Any, part: Slice) -> Any:
    """A backfill slice's rows without its corrupt messages, which go to the quarantine table
    first (``on_corrupt_message: quarantine``; skip leaves them out in the source already)."""
    src = job.source.pulsar
    if src is None or src.on_corrupt_message != "quarantine":
        return raw
    from . import quarantine

    assert src.quarantine_table is not None
    raw = raw.cache()  # read once: split twice
    good, bad = quarantine.split(raw)
    app_id = f"pipelines/{job.name}/backfill/{part.key()}/quarantine"
    quarantine.write_quarantine(bad, 0, src.quarantine_table, app_id, job.name, job.storage_options())
    return good


def _end_positions(opts: dict[str, str]) -> Offsets:
    """Where a bounded read with ``opts`` ended, per topic-partition."""
    from .source import SourceOptions

    return bounds(SourceOptions.parse(opts, streaming=False), ends_only=True)[1]


# -- offsets -----------------------------------------------------------------------------------
def offsets_command(job: Job, args: Any) -> int:
    """``pipelines offsets show|reset``."""
    assert job.offsets is not None
    store = OffsetStore(job.offsets, storage_options=job.storage_options())
    if args.action == "show":
        rows = store.rows(job.name)
        if not rows:
            say(f"job {job.name}: no stored positions in {job.offsets}")
            return 0
        say(f"job {job.name}: positions in {job.offsets}")
        for r in rows:
            say(f"  {r['topic']}  {r['message_id']}  batch {r['batch_id']}  at {r['committed_at']}")
        return 0
    position: Bound = args.position
    offsets = _positions_for(job, position)
    store.reset(job.name, offsets)
    say(f"job {job.name}: positions reset to {offsets.to_json()}")
    if job.checkpoint is not None and checkpoint_exists(job.checkpoint) and "://" not in job.checkpoint:
        aside = f"{job.checkpoint.rstrip('/')}.before-reset-{int(time.time())}"
        os.rename(job.checkpoint, aside)
        say(f"job {job.name}: checkpoint moved to {aside}; the next run starts from the reset positions")
    return 0


def _positions_for(job: Job, bound: Bound) -> Offsets:
    """The start positions ``bound`` names for every partition of the job's source."""
    if bound.kind == "offsets":
        return Offsets({k: Position.parse(v, "--to") for k, v in (bound.offsets or {}).items()})
    from .source import SourceOptions

    return bounds(SourceOptions.parse(job.backfill_options(start=bound), streaming=False))[0]
