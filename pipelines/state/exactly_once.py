"""Exactly once from Pulsar into Delta: the foreachBatch helper and recovery.

A micro-batch of the ``pulsarwire`` source covers fixed, replayable ranges: Spark
writes the batch's end offsets into the checkpoint's offset log
(``<checkpoint>/offsets/<batch id>``) before running it, and a replayed batch
reads exactly the same messages. :func:`write_delta_exactly_once` then does, in
this order:

1. write the batch to the target Delta table idempotently, keyed by
   ``(app id, batch id)`` (``pipelines.state.delta.write_idempotent``). The app id
   includes the Spark query id from ``<checkpoint>/metadata``: a new checkpoint
   is a new query with batch ids from 0 again, so it must not collide with the
   versions of the old one. The commit also records the batch's end offsets and
   the run's reset epoch in its metadata (``pipelines.state.offsets``);
2. acknowledge the durable subscription cumulatively up to them, so the broker
   may release that backlog — only now that it is committed downstream. A failed
   acknowledgement fails the batch (Spark replays it: step 1 is then skipped);
3. upsert the end offsets into the offset store (positions never move back; a
   run that outlived an ``offsets reset`` is refused, see
   :meth:`~pipelines.state.offsets.OffsetStore.commit`).

Acknowledging before storing keeps one invariant: the job's subscription is
acknowledged up to (the entry of) every position the store holds. A subscription
acknowledged less than that was created again — the broker lost its data, or the
topic was recreated — and :func:`pipelines.jobs.preflight.lost_positions` finds it before a run resumes
at positions that no longer mean what they meant.

A crash between any two steps is repaired by the replay Spark does from its
checkpoint: step 1 is skipped (same app id and version), steps 2 and 3 are
idempotent. A job started without its checkpoint (deleted, new location,
disaster recovery) calls :func:`recover` first: positions found in the target's
commit metadata that the store lacks (a crash after step 1) are acknowledged and
put into the store, and the source resumes from the store — so nothing committed
is written again and nothing is skipped. Only commits of the store's current reset
epoch count: after ``pipelines offsets reset`` the target's older batches are the
reset's past, and the store says where the job starts.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.errors import PipelinesError
from pipelines.options.client import CLIENT_PREFIX, client_settings
from pipelines.spark.planner import Planner, TopicSelector
from pipelines.state.delta import SchemaMode, commit_metadata, write_idempotent
from pipelines.state.offsets import OffsetStore
from pipelines.state.positions import Offsets

log = logging.getLogger("pipelines.state.exactly_once")

OFFSETS_KEY = "pipelines.state.offsets"

#: fault hook points, in the order they are passed
FAULT_POINTS = ("after_write", "after_ack", "after_offsets")


@dataclass(frozen=True)
class ExactlyOnceJob:
    """What the helper needs to know about the job whose batch it commits.

    ``source_options`` are the options of the ``pulsarwire`` source (service URL,
    ``pulsar.client.*``, ``subscriptionName``); :meth:`stream_options` gives the
    options the source needs to resume from the offset store. ``fault`` is a test
    hook called with a point of :data:`FAULT_POINTS` and the batch id.
    """

    name: str
    checkpoint: str
    offsets: str
    source_options: Mapping[str, str]
    mode: str = "append"
    partition_by: Sequence[str] | None = None
    merge_keys: Sequence[str] | None = None
    storage_options: dict[str, str] | None = None
    #: the offset store's reset epoch when the run started (OffsetStore.epoch)
    epoch: int = 0
    schema_mode: SchemaMode = None  # "merge": a batch may add columns to the table
    fault: Callable[[str, int], None] | None = field(default=None, compare=False)

    @property
    def subscription(self) -> str | None:
        return self.source_options.get("subscriptionName")

    def stream_options(self) -> dict[str, str]:
        """Options to add to the source so a run without checkpoint resumes from the store."""
        return {"offsetStore": self.offsets, "job": self.name}

    def _hit(self, point: str, batch_id: int) -> None:
        if self.fault is not None:
            self.fault(point, batch_id)


# -- reading the checkpoint ----------------------------------------------------------------
def _read_text(path: str, spark: Any) -> str | None:
    """A checkpoint file's text: local paths directly, others through Spark's Hadoop FileSystem."""
    local = path[len("file:") :] if path.startswith("file:") else path
    if "://" not in local:
        p = Path(local)
        return p.read_text() if p.exists() else None
    if spark is None:
        raise PipelinesError(f"{path}: reading a remote checkpoint needs the SparkSession")
    fs, hpath = _hadoop_path(path, spark)
    if not fs.exists(hpath):
        return None
    stream = fs.open(hpath)
    try:
        return str(spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def _hadoop_path(path: str, spark: Any) -> tuple[Any, Any]:
    """(FileSystem, Path) of a remote ``path`` through Spark's Hadoop configuration."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def _local(path: str) -> Path:
    """A plain path or ``file:`` URI as a local path."""
    rest = path[len("file:") :] if path.startswith("file:") else path
    return Path(rest[2:] if rest.startswith("//") else rest)


def checkpoint_file_exists(path: str, spark: Any = None) -> bool:
    """Whether a checkpoint file exists: a URI (``file://`` too) through ``spark``'s Hadoop
    FileSystem, the same calls as for ``s3a://`` or ``abfss://``; a plain path directly."""
    if "://" not in path:
        return _local(path).exists()
    if spark is None:
        raise PipelinesError(f"{path}: looking into a checkpoint given as a URI needs the SparkSession")
    fs, hpath = _hadoop_path(path, spark)
    return bool(fs.exists(hpath))


def move_aside(checkpoint: str, suffix: str, spark: Any = None) -> str:
    """Rename the checkpoint directory to ``<checkpoint><suffix>`` (one given as a URI through
    ``spark``'s Hadoop FileSystem) and return the new location. Raises PipelinesError when it
    cannot."""
    aside = checkpoint.rstrip("/") + suffix
    if "://" not in checkpoint:
        try:
            _local(checkpoint.rstrip("/")).rename(_local(aside))
        except OSError as exc:
            raise PipelinesError(f"{checkpoint}: cannot move the checkpoint aside: {exc}") from exc
        return aside
    if spark is None:
        raise PipelinesError(f"{checkpoint}: moving a checkpoint given as a URI needs the SparkSession")
    fs, hpath = _hadoop_path(checkpoint.rstrip("/"), spark)
    if not fs.rename(hpath, spark.sparkContext._jvm.org.apache.hadoop.fs.Path(aside)):
        raise PipelinesError(
            f"{checkpoint}: the storage refused to rename the checkpoint to {aside}: delete it or point "
            "checkpoint at a new location before the next run"
        )
    return aside


def query_id(checkpoint: str, spark: Any = None) -> str:
    """The id Spark gave the query that owns ``checkpoint`` (stable across restarts)."""
    text = _read_text(checkpoint.rstrip("/") + "/metadata", spark)
    if text is None:
        raise PipelinesError(f"{checkpoint}: no metadata file; is this the query's checkpointLocation?")
    try:
        return str(json.loads(text)["id"])
    except (ValueError, KeyError) as exc:
        raise PipelinesError(f"{checkpoint}/metadata: not a Spark checkpoint metadata file ({exc})") from None


def batch_offsets(checkpoint: str, batch_id: int, spark: Any = None) -> Offsets:
    """The ``pulsarwire`` source's end offsets of ``batch_id``, from the checkpoint's offset log.

    The log holds a version line, a metadata line, then one line per source; the job has
    exactly one ``pulsarwire`` source.
    """
    path = f"{checkpoint.rstrip('/')}/offsets/{batch_id}"
    text = _read_text(path, spark)
    if text is None:
        raise PipelinesError(f"{path}: no offset log entry for batch {batch_id}")
    lines = text.splitlines()
    sources = [line for line in lines[2:] if line.strip()]
    if len(sources) != 1:
        raise PipelinesError(f"{path}: expected one source in the offset log, found {len(sources)}")
    return Offsets.from_json(sources[0], path)


# -- acknowledging ---------------------------------------------------------------------------
_planners: dict[tuple[Any, ...], Planner] = {}
_planners_lock = threading.Lock()


def _planner(job: ExactlyOnceJob) -> Planner:
    opts = {
        k: v
        for k, v in job.source_options.items()
        if k == "service.url" or k.lower().startswith(CLIENT_PREFIX)
    }
    key = (job.subscription, tuple(sorted(opts.items())))
    with _planners_lock:
        planner = _planners.get(key)
        if planner is None:
            planner = Planner(client_settings(opts), TopicSelector(), subscription=job.subscription)
            _planners[key] = planner
        return planner


def release(job: ExactlyOnceJob, offsets: Offsets) -> None:
    """Acknowledge the job's durable subscription up to ``offsets`` (committed downstream).

    Raises PipelinesError when the broker cannot be told: the positions are then not stored
    either (the batch fails and is replayed), so the subscription is never acknowledged less
    than the store says.
    """
    if job.subscription is None:
        return
    try:
        _planner(job).release(offsets)
    except Exception as exc:
        raise PipelinesError(
            f"job {job.name}: acknowledging subscription {job.subscription!r} up to "
            f"{offsets.to_json()} failed ({exc}); the batch is replayed"
        ) from exc


def close_clients() -> None:
    """Close the clients :func:`release` opened (the runner calls it at the end of a job)."""
    with _planners_lock:
        for planner in _planners.values():
            planner.close()
        _planners.clear()


# -- the helper --------------------------------------------------------------------------------
def _store(job: ExactlyOnceJob) -> OffsetStore:
    return OffsetStore(job.offsets, storage_options=job.storage_options)


def write_delta_exactly_once(batch_df: Any, batch_id: int, target: str, job: ExactlyOnceJob) -> bool:
    """foreachBatch body: Delta write, then offsets, then the broker ack (see the module docstring).

    Returns False when the batch had already been written (a replay). Raises PipelinesError
    when the write or the offset store fails — the batch then fails and Spark replays it.
    """
    spark = batch_df.sparkSession
    end = batch_offsets(job.checkpoint, batch_id, spark)
    app_id = f"pipelines/{job.name}/{query_id(job.checkpoint, spark)}"
    entry = {"job": job.name, "batch": batch_id, "offsets": end.to_dict(), "epoch": job.epoch}
    metadata = {OFFSETS_KEY: json.dumps(entry)}
    wrote = write_idempotent(
        batch_df,
        target,
        app_id,
        batch_id,
        mode=job.mode,  # type: ignore[arg-type]
        partition_by=job.partition_by,
        merge_keys=job.merge_keys,
        spark=spark,
        storage_options=job.storage_options,
        metadata=metadata,
        schema_mode=job.schema_mode,
    )
    if not wrote:
        log.info("job %s: batch %d was already in %s (replay)", job.name, batch_id, target)
    job._hit("after_write", batch_id)
    release(job, end)
    job._hit("after_ack", batch_id)
    _store(job).commit(job.name, end, batch_id, job.checkpoint, epoch=job.epoch)
    job._hit("after_offsets", batch_id)
    return wrote


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


def recover(job: ExactlyOnceJob, target: str) -> Offsets:
    """Before a run without checkpoint: bring the store up to what the target already holds of
    the run's reset epoch (``job.epoch``, read from the store when the run started).

    Returns the positions the source will resume from. A newest batch written at an older
    epoch is from before the last ``offsets reset``: the store's positions stand.
    """
    stored = _store(job).load(job.name)
    found = committed_in_target(target, job.name, job.storage_options)
    if found is None:
        return stored
    in_target, epoch = found
    if epoch != job.epoch:
        log.info(
            "job %s: %s's newest batch predates the last offsets reset (epoch %d, now %d): ignored",
            job.name,
            target,
            epoch,
            job.epoch,
        )
        return stored
    ahead = Offsets({tp: pos for tp, pos in in_target.items() if tp not in stored or pos > stored[tp]})
    if ahead:
        log.warning(
            "job %s: %s holds batches the offset store lacks (a crash after the write): %s",
            job.name,
            target,
            ahead.to_json(),
        )
        release(job, ahead)
        _store(job).commit(job.name, ahead, -1, job.checkpoint, epoch=job.epoch)
        stored = stored.updated(ahead)
    return stored
