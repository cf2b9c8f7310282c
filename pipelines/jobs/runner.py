"""The runner: a validated :class:`~pipelines.jobs.models.Job` → a Spark query that runs to the end.

``run_job`` joins the command's SparkSession (:mod:`pipelines.jobs.session`), opens the job's
source and sink (:mod:`pipelines.connectors`; it never asks which kinds they are) and wires
source → transform → sink:

* a stream source: a Spark stream whose ``foreachBatch`` splits off undecodable rows (the
  source settles them), transforms the rest and writes them. Into a sink that keeps positions
  the write is :func:`pipelines.state.exactly_once.commit_batch` (idempotent sink write, release
  upstream, offset store); without a checkpoint the run first
  :func:`~pipelines.state.exactly_once.recover`\\ s from the sink. Other sinks write each batch
  idempotently by query and batch id.
* a version source (publish jobs): each new version one batch, its id the version, recorded as
  done by the source once written.

The transformed rows' schema is checked against the sink before anything is read. Each batch
prints one progress line (batch id, the rows Spark counted for it — ``numInputRows``, no extra
Spark job —, rows split off, duration, the source's lag and an ETA) and the run ends with a
summary. A first Ctrl-C / SIGTERM (:mod:`pipelines.jobs.stopping`) stops the query once the
batch in flight has committed.

``backfill`` reads a bounded source's range slice by slice and merges it into the sink on the
rows' position columns (or the sink's merge keys): a window already ingested adds nothing ("0
new rows"); into an appending sink what follows the stream's position is left to the stream.
``show_offsets`` / ``reset_offsets`` show (with each partition's end and backlog) or reset the
stored positions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pipelines.connectors.base import Batch, BoundedSource, MergeSink, Sink, StreamSource, VersionSource
from pipelines.errors import JobError, PipelinesError, short_error
from pipelines.jobs.lock import checkpoint_of
from pipelines.jobs.models import Job
from pipelines.jobs.preflight import stored_offsets
from pipelines.jobs.session import say, say_engine, spark_session, transform
from pipelines.jobs.stopping import STOP
from pipelines.options.bound import Bound, bound_text, time_slices
from pipelines.state.checkpoint import batch_offsets, checkpoint_exists, last_offsets, move_aside, query_id
from pipelines.state.exactly_once import ExactlyOnce, commit_batch, recover
from pipelines.state.offsets import OffsetStore, position_of
from pipelines.state.positions import Offsets, Position

log = logging.getLogger("pipelines.jobs.runner")


# -- progress --------------------------------------------------------------------------------
@dataclass
class Progress:
    """Per-batch lines and the final summary of a run."""

    job: Job
    source: Any = None  # the stream source: its lag after each batch and what it splits off
    batches: int = 0
    rows: int = 0
    corrupt: int = 0  # rows split off as undecodable (skipped or quarantined)
    busy: float = 0.0  # seconds spent in batches (the rest is Spark start-up and planning)
    started: float = field(default_factory=time.monotonic)
    in_batch: bool = False  # a batch is being written (a stop waits for it)
    ends: Callable[[int], Offsets] | None = None  # a batch's end positions (from the checkpoint)
    #: batches written and not yet reported: batch id → (seconds, corrupt rows, lag just after it)
    written: dict[int, tuple[float, int, int | None]] = field(default_factory=dict)

    def lag(self, batch_id: int | None = None) -> int | None:
        """What the source has not yet committed after ``batch_id``; None if unknown."""
        if not isinstance(self.source, StreamSource):
            return None
        try:
            ends = self.ends(batch_id) if self.ends is not None and batch_id is not None else Offsets()
        except Exception as exc:  # informative only
            log.debug("lag unavailable: %s", exc)
            return None
        return self.source.lag(ends)

    def report(self, query: Any, *, final: bool = False) -> None:
        """One line per written batch whose progress Spark has reported (its ``numInputRows``:
        the rows the source read for it, counted by Spark as it reads). With ``final`` (the
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
        done = getattr(self.source, "corrupt_word", "skipped")
        return f", {n} corrupt {'message' if n == 1 else 'messages'} {done}"

    def summary(self, extra: str = "") -> None:
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


def _counted(body: Callable[[Any, int], int], progress: Progress) -> Callable[[Any, int], None]:
    """foreachBatch wrapper: times the batch and notes how many of its rows were split off.

    The batch's row count is not computed here (a count would be one more Spark job per batch): it
    is the ``numInputRows`` Spark reports in the query's progress, read by :meth:`Progress.report`.
    The lag is taken here, just after the batch: its line may be printed after later batches.
    """

    def run(df: Any, batch_id: int) -> None:
        t = time.monotonic()
        progress.in_batch = True
        try:
            corrupt = body(df, batch_id)
        finally:
            progress.in_batch = False
        progress.written[batch_id] = (time.monotonic() - t, corrupt, progress.lag(batch_id))

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
@contextmanager
def connectors(job: Job) -> Iterator[tuple[Any, Any]]:
    """The job's source and sink connectors, closed on the way out."""
    ctx = job.context()
    source, sink = job.source.section.open(ctx), job.sink.section.open(ctx)
    try:
        yield source, sink
    finally:
        source.close()
        sink.close()


def run_job(job: Job, again: Offsets | None = None) -> int:
    """``pipelines run``: run the job's trigger to its end; 0 on success, raises on failure.

    ``again``: partitions whose data was lost (found by :func:`pipelines.jobs.preflight.check`
    under a tolerant setting), repositioned at these positions first.
    """
    with spark_session(job) as spark, connectors(job) as (source, sink):
        if isinstance(source, VersionSource):
            return _versions(job, spark, source, sink)
        if again:
            reposition(job, source, sink, again, "set to read again after data loss:", spark)
        return _stream(job, spark, source, sink)


def check_output(sink: Sink, df: Any) -> None:
    """The transformed rows (``df``'s schema; no data is read) fit the sink: raises JobError."""
    problems = sink.check(df)
    if problems:
        raise JobError(problems)


def _stream(job: Job, spark: Any, source: StreamSource, sink: Sink) -> int:
    progress = Progress(job, source)
    assert job.checkpoint is not None or not job.sink.section.NEEDS_CHECKPOINT
    checkpoint = checkpoint_of(job)
    eo = exactly_once(job, source, sink) if sink.keeps_positions else None
    if eo is not None and not checkpoint_exists(checkpoint, spark):  # a URI asked through Spark
        resumed = recover(eo)
        if len(resumed):
            say(f"[{job.name}] no checkpoint: resuming from the offset store {resumed.to_json()}")
    df = source.stream(spark, keep_positions=eo is not None)
    split = source.split(df)
    check_output(sink, transform(job, spark, split[0] if split is not None else df))

    def body(raw: Any, batch_id: int) -> int:
        corrupt, good, batch = 0, raw, Batch(batch_id, query_id(checkpoint, spark))
        parts = source.split(raw)
        if parts is not None:
            good, bad = parts
            corrupt = source.settle(bad, batch)
        rows = transform(job, raw.sparkSession, good)  # the batch's own (cloned) session
        if eo is not None:
            commit_batch(rows, batch_id, eo)
        else:
            sink.write(rows, batch)
        return corrupt

    progress.ends = lambda batch_id: batch_offsets(checkpoint, batch_id, spark)
    if STOP.requested:
        progress.summary(" before the first batch")
        return 0
    say_engine(job, spark)
    query = (
        df.writeStream.foreachBatch(_counted(body, progress))
        .option("checkpointLocation", checkpoint)
        .trigger(**job.trigger.spark_kwargs())
        .queryName(job.name)
        .start()
    )
    _await(query, progress)
    progress.summary(sink.summary())
    return 0


def _versions(job: Job, spark: Any, source: VersionSource, sink: Sink) -> int:
    """A version source: each new version one batch, its id the version, recorded once written."""
    progress = Progress(job)
    check_output(sink, transform(job, spark, source.empty(spark)))
    wrote = False
    for batch_id, rows, count in source.batches(spark):
        if STOP.requested:
            break
        t = time.monotonic()
        if rows is not None:
            try:
                sink.write(transform(job, spark, rows), Batch(batch_id, ""))
            except PipelinesError:
                raise
            except Exception as exc:  # a failed Spark task: name the cause, not the JVM stack
                raise source.failed(batch_id, exc) from exc
        source.done(batch_id)
        wrote = True
        progress.batch(batch_id, count, time.monotonic() - t)
    if not wrote and not STOP.requested:
        say(source.nothing_new())
    progress.summary(source.through())
    return 0


# -- the offset store ------------------------------------------------------------------------------
def _offset_store(job: Job) -> OffsetStore:
    assert job.offsets is not None, "the CLI refuses offsets commands for a job without a store"
    return OffsetStore(job.offsets, storage_options=job.storage_options())


def exactly_once(job: Job, source: StreamSource, sink: Sink) -> ExactlyOnce:
    """The exactly-once step of a job whose sink keeps positions, at the store's reset epoch now."""
    store = _offset_store(job)
    return ExactlyOnce(job.name, job.checkpoint or "", store, source, sink, epoch=store.epoch(job.name))


def reposition(
    job: Job, source: StreamSource, sink: Sink, offsets: Offsets, why: str, spark: Any = None
) -> None:
    """Make ``offsets`` where the job resumes in their topic-partitions, authoritatively.

    In this order: what the sink already holds of the current reset epoch is brought into the
    store (:func:`~pipelines.state.exactly_once.recover`: the other partitions keep their
    committed positions); the store takes ``offsets`` at the next reset epoch, so that sink
    commits from before no longer count; the source rewinds upstream to them (a subscription
    acknowledged exactly up to them, back too); the checkpoint, which would resume from its own
    positions, is moved aside (``spark`` moves a remote one).
    """
    if sink.keeps_positions:
        recover(exactly_once(job, source, sink))
    epoch = _offset_store(job).reset(job.name, offsets)
    say(f"job {job.name}: positions {why} {offsets.to_json()} (reset epoch {epoch})")
    source.rewind(offsets)
    if job.checkpoint is not None and checkpoint_exists(job.checkpoint, spark):
        aside = move_aside(job.checkpoint, f".before-reset-{int(time.time())}", spark)
        say(f"job {job.name}: checkpoint moved to {aside}; the next run starts from these positions")


def show_offsets(job: Job) -> int:
    """``pipelines offsets show``: each stored position with the partition's end and the backlog
    between them (asked of the source; "end unknown" with the reason when it cannot say)."""
    rows = _offset_store(job).rows(job.name)
    if not rows:
        say(f"job {job.name}: no stored positions in {job.offsets}")
        return 0
    stored = Offsets({r["topic"]: position_of(r) for r in rows})
    with connectors(job) as (source, _):
        try:
            notes = source.backlog(stored) if isinstance(source, BoundedSource) else {}
        except Exception as exc:  # the positions are still worth showing
            notes = dict.fromkeys(stored, f"end unknown ({short_error(exc)})")
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
    with connectors(job) as (source, sink):
        offsets = source.resolve(position)
        if job.checkpoint is not None and "://" in job.checkpoint:  # moved aside through Spark
            with spark_session(job) as spark:
                reposition(job, source, sink, offsets, "reset to", spark)
        else:
            reposition(job, source, sink, offsets, "reset to")
    return 0


# -- backfill ----------------------------------------------------------------------------------
#: how many time slices a backfill's window is cut into (progress and ETA after each)
BACKFILL_SLICES = 10


def backfill(job: Job, start: Bound | None = None, end: Bound | None = None) -> int:
    """``pipelines backfill``: the range read as a batch and merged into the sink slice by slice.

    Every slice is merged on the rows' position columns (for a sink with its own merge keys, on
    those, updating what is there): rows already in the sink — written by the stream or an
    earlier backfill — are not written again, so a rerun says "0 new rows". A slice's end
    positions are recorded in the offset store under ``<job>/backfill``. A window with no rows is
    reported without starting Spark. Prints rows read, rows new, and ETA.

    ``start`` and ``end`` (``--from`` / ``--to``) override the job's ``backfill`` section.
    """
    start, end = job.backfill_window(start, end)
    if end.kind == "latest" and start.kind == "time":
        end = Bound.model_construct(kind="time", time_ms=int(time.time() * 1000))
    window = f"{bound_text(start)} .. {bound_text(end)}"
    with connectors(job) as (source, sink):
        assert isinstance(source, BoundedSource), "the CLI refuses a backfill of a source without ranges"
        if not isinstance(sink, MergeSink):
            raise job.error("sink", f"a backfill merges into its sink, and {sink.describe()} cannot merge")
        first, last = source.bounds(start, end)
        todo = [tp for tp, e in last.items() if first.get(tp, Position.EARLIEST) < e and e.entry_id >= 0]
        if not todo:
            say(
                f"[{job.name}] backfill {window}: no messages in this window "
                f"({len(last)} topic-partition(s)); nothing to do"
            )
            return 0
        clip, whose = stream_start(job, source) if sink.appends else (None, "")
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
        _merge_slices(job, source, sink, list(time_slices(start, end, BACKFILL_SLICES)), clip)
    return 0


def _merge_slices(
    job: Job, source: BoundedSource, sink: MergeSink, parts: list[tuple[Bound, Bound]], clip: Offsets | None
) -> None:
    progress = Progress(job)
    read_rows = new_rows = 0
    t0 = time.monotonic()
    with spark_session(job) as spark:
        df = transform(job, spark, spark.createDataFrame([], source.schema()))
        keys, update = sink.merge_keys(list(df.columns), source.position_columns)
        check_output(sink, df)
        say_engine(job, spark)
        for i, (first, last) in enumerate(parts, 1):
            if STOP.requested:
                break
            t = time.monotonic()
            rows_in = source.read(spark, first, last)
            if clip is not None:
                rows_in = rows_in.where(source.taken_by(clip))
            rows, new = sink.merge(transform(job, spark, rows_in), keys, update)
            if job.offsets is not None:
                ends = source.ends(first, last)
                if len(ends):
                    _offset_store(job).commit(f"{job.name}/backfill", ends, i)
            read_rows += rows
            new_rows += new
            elapsed = time.monotonic() - t0
            eta = f", ETA ~{_duration(elapsed / i * (len(parts) - i))}" if i < len(parts) else ""
            say(
                f"[{job.name}] backfill slice {i}/{len(parts)}: {rows} rows read, {new} new "
                f"in {time.monotonic() - t:.1f} s{eta}"
            )
            progress.batches += 1
            progress.rows += rows
            progress.busy += time.monotonic() - t
    already = " (everything was already there)" if read_rows and not new_rows else ""
    progress.summary(f"; {new_rows} new rows in {sink.target}{already}")


def stream_start(job: Job, source: BoundedSource) -> tuple[Offsets, str]:
    """Where the job's stream resumes (or first starts): everything up to these positions is the
    stream's past, everything after its future. For a backfill into an appending sink the
    future is the stream's to write: backfilling it too would append those rows twice.

    The last batch the checkpoint committed, else the offset store, else the stream's
    starting position resolved now.
    """
    found = last_offsets(job.checkpoint, committed=True)
    if found is not None:
        return found, "its checkpoint"
    found = stored_offsets(job)
    if found is not None:
        return found, f"the offset store {job.offsets}"
    return source.start_now(), "it has not run yet and starts there"
