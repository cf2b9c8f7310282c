"""Whether a run would read nothing, decided without Spark: then ``pipelines run`` says so and ends.

Starting Spark costs ~10-20 s; a job scheduled every few minutes mostly finds nothing new.
``pipelines run`` calls :func:`nothing_to_read` after its checks, holding the job's lock, and
when it answers a reason the run prints that one line and exits 0 without starting Spark. The
answer must be exactly right — whenever a Spark run would read a message, or would change the
job's state, Spark runs — so every case that is not certain answers None (run Spark):

* the trigger is ``availableNow`` or ``once`` (a processing-time trigger waits for data);
* the source answers (:meth:`idle` of its connector), given the checkpoint's last batch when Spark
  committed it (``offsets/N`` and ``commits/N``; an ``offsets/N`` without ``commits/N`` is a batch
  Spark must finish) and its end positions. The built-in ones answer so:
* **Pulsar source**: a new checkpoint (none yet, moved aside by a reset, or remote) always
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

import logging

from deltalake.exceptions import DeltaError

from pipelines.errors import PipelinesError
from pipelines.jobs.lock import checkpoint_of
from pipelines.jobs.models import Job
from pipelines.state.checkpoint import batch_offsets, last_batch, local_path
from pulsarwire import PulsarWireError

__all__ = ["nothing_to_read"]

log = logging.getLogger("pipelines.jobs.idle")

#: the triggers that end once what is there now is read
BOUNDED_TRIGGERS = ("availableNow", "once")


def nothing_to_read(job: Job) -> str | None:
    """Why a run of ``job`` would read nothing (one line to print), or None: run Spark."""
    if job.trigger.kind not in BOUNDED_TRIGGERS:
        return None
    source = job.source.section.open(job.context())
    try:
        checkpoint = local_path(checkpoint_of(job))
        batch = last_batch(checkpoint, committed=True) if checkpoint is not None else None
        committed = None if batch is None else (batch, batch_offsets(str(checkpoint), batch))
        answer: str | None = source.idle(committed)
        return answer
    except (PipelinesError, PulsarWireError, DeltaError, OSError, ValueError, KeyError) as exc:
        log.info("job %s: cannot tell without Spark whether there is anything to read: %s", job.name, exc)
        return None
    finally:
        source.close()
