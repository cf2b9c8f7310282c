"""Whether a run would read nothing, decided without Spark: then ``pipelines run`` says so and ends.

Starting Spark costs ~10-20 s; a job scheduled every few minutes mostly finds nothing new.
``pipelines run`` calls :func:`nothing_to_read` after its checks, holding the job's lock, and
when it answers a reason the run prints that one line and exits 0 without starting Spark. The
answer must be exactly right — whenever a Spark run would read a message, or would change the
job's state, Spark runs — so every case that is not certain answers None (run Spark):

* the trigger is ``availableNow`` or ``once`` (a processing-time trigger waits for data);
* **Pulsar source**: the local checkpoint's last batch is committed (``offsets/N`` and
  ``commits/N``; an ``offsets/N`` without ``commits/N`` is a batch Spark must finish), so the
  run resumes after it. A new checkpoint (none yet, moved aside by a reset, or remote) always
  runs Spark: its first batch records the start positions, even an empty one. Then for every
  topic-partition the source selects now (new ones start at their earliest message, as the
  source does): a position past the partition's end runs Spark (the source's data-loss rule
  decides), and between the position and the partition's last message (GET_LAST_MESSAGE_ID)
  there must be no message — counted by reading at most one message id, with the source's own
  scan (:meth:`~pipelines.spark.planner.Planner.scan`), since a position inside a batched
  entry may or may not have messages after it. The question is asked on the job's durable
  subscription, as the source asks it, so a partition that is new gets its subscription (which
  holds its backlog) as a Spark run would give it. A topic the job waits for
  (``wait_for_topic``) runs Spark. Any error while asking runs Spark (which reports it).
* **Delta source** (publish): the version last published (``<checkpoint>/published.json``) is
  the table's current version.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from pipelines.errors import PipelinesError
from pipelines.jobs.lock import checkpoint_of
from pipelines.jobs.models import Job
from pipelines.jobs.preflight import local_path
from pipelines.spark.planner import Planner, SourceSettings
from pipelines.state.exactly_once import batch_offsets
from pipelines.state.positions import Position
from pulsarwire import PulsarWireError

__all__ = ["last_committed", "last_published", "nothing_to_read"]

log = logging.getLogger("pipelines.jobs.idle")

#: the triggers that end once what is there now is read
BOUNDED_TRIGGERS = ("availableNow", "once")


def last_committed(checkpoint: Path) -> int | None:
    """The id of the checkpoint's last batch when Spark committed it; None when there is no batch
    or the last one is not committed (``offsets/N`` without ``commits/N``)."""

    def ids(name: str) -> list[int]:
        folder = checkpoint / name
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []

    offsets, commits = ids("offsets"), ids("commits")
    if not offsets or not commits or commits[-1] != offsets[-1]:
        return None
    return offsets[-1]


def last_published(job: Job) -> int:
    """The last table version a publish job (Delta → Pulsar) published: its checkpoint's
    ``published.json``, else the version before ``source.delta.starting_version`` (-1: none)."""
    assert job.source.delta is not None and job.checkpoint is not None
    marker = Path(job.checkpoint, "published.json")
    if marker.exists():
        return int(json.loads(marker.read_text())["version"])
    start = job.source.delta.starting_version
    return (start - 1) if start is not None else -1


def nothing_to_read(job: Job) -> str | None:
    """Why a run of ``job`` would read nothing (one line to print), or None: run Spark."""
    if job.trigger.kind not in BOUNDED_TRIGGERS:
        return None
    try:
        return _publish_idle(job) if job.source.delta is not None else _stream_idle(job)
    except (PipelinesError, PulsarWireError, DeltaError, OSError, ValueError, KeyError) as exc:
        log.info("job %s: cannot tell without Spark whether there is anything to read: %s", job.name, exc)
        return None


def _publish_idle(job: Job) -> str | None:
    assert job.source.delta is not None
    path = job.source.delta.path
    current = DeltaTable(path, storage_options=job.storage_options()).version()
    last = last_published(job)
    if last < current:
        return None
    return f"[{job.name}] {path} is at version {current}: nothing new to publish (Spark not started)"


def _stream_idle(job: Job) -> str | None:
    src = job.source.pulsar
    assert src is not None
    if src.wait_for_topic:
        return None
    checkpoint = local_path(checkpoint_of(job))
    batch = last_committed(checkpoint) if checkpoint is not None else None
    if checkpoint is None or batch is None:
        return None
    start = batch_offsets(str(checkpoint), batch)
    opts = SourceSettings.parse(job.source_options(), streaming=True)
    planner = Planner(
        opts.settings,
        opts.selector,
        subscription=opts.subscription,
        poll_timeout_ms=opts.poll_timeout_ms,
        on_corrupt=opts.scan_on_corrupt,
    )
    try:
        parts = planner.partitions()
        latest = planner.latest(parts)
        for tp in parts:
            pos = start.get(tp, Position.EARLIEST)
            if pos > latest[tp]:
                return None  # past the end: the source's failOnDataLoss rule decides
            if pos < latest[tp] and planner.scan(tp, pos, latest[tp], 1, None).rows:
                return None
    finally:
        planner.close()
    return (
        f"[{job.name}] nothing to read: batch {batch} of the checkpoint is committed and no message "
        f"came after it in {len(parts)} topic-partition(s); Spark not started"
    )
