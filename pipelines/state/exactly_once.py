"""Exactly once from any stream source into a sink that records positions: the batch commit
and recovery, kind-free.

A micro-batch of a stream source covers fixed, replayable ranges: Spark writes the batch's
end positions into the checkpoint's offset log before running it
(:func:`pipelines.state.checkpoint.batch_offsets`), and a replayed batch reads exactly the same
rows. :func:`commit_batch` then does, in this order:

1. the sink writes the batch idempotently, keyed by the query id (from the checkpoint: a new
   checkpoint is a new query with batch ids from 0 again) and the batch id, and records the
   batch's end positions and the run's reset epoch in its commit;
2. the source releases upstream up to those positions (a Pulsar subscription is acknowledged
   cumulatively), only now that they are committed downstream. A failed release fails the
   batch (Spark replays it: step 1 is then skipped);
3. the offset store takes the end positions (never moving back; a run that outlived an
   ``offsets reset`` is refused, :meth:`~pipelines.state.offsets.OffsetStore.commit`).

Releasing before storing keeps one invariant: upstream is released up to every position the
store holds. A source that finds itself released less than that (a subscription created
again: the broker lost its data, the topic was recreated) tells preflight, which refuses to
resume at positions that no longer mean what they meant.

A crash between any two steps is repaired by the replay Spark does from its checkpoint: step 1
is skipped, steps 2 and 3 are idempotent. A run without its checkpoint calls :func:`recover`
first: positions the sink committed that the store lacks (a crash after step 1) are released
and stored, and the source resumes from the store — nothing committed is written again and
nothing is skipped. Only sink commits of the store's current reset epoch count: after
``pipelines offsets reset`` the sink's older batches are the reset's past.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipelines.connectors.base import Batch
from pipelines.state.checkpoint import batch_offsets, query_id
from pipelines.state.offsets import OffsetStore
from pipelines.state.positions import Offsets

__all__ = ["FAULT_POINTS", "ExactlyOnce", "commit_batch", "recover"]

log = logging.getLogger("pipelines.state.exactly_once")

#: fault hook points, in the order they are passed
FAULT_POINTS = ("after_write", "after_ack", "after_offsets")


class Releases(Protocol):
    def release(self, ends: Offsets) -> None: ...


class Commits(Protocol):
    def write(self, df: Any, batch: Batch) -> None: ...

    def committed(self, epoch: int) -> Offsets | None: ...


@dataclass(frozen=True)
class ExactlyOnce:
    """A job's exactly-once step: its name, checkpoint and offset store, the source it
    releases, the sink it writes, and the store's reset epoch when the run started.
    ``fault`` is a test hook called with a point of :data:`FAULT_POINTS` and the batch id."""

    name: str
    checkpoint: str
    store: OffsetStore
    source: Releases
    sink: Commits
    epoch: int = 0
    fault: Callable[[str, int], None] | None = field(default=None, compare=False)

    def _hit(self, point: str, batch_id: int) -> None:
        if self.fault is not None:
            self.fault(point, batch_id)


def commit_batch(df: Any, batch_id: int, eo: ExactlyOnce) -> None:
    """foreachBatch body: sink write, release upstream, store the positions (module docstring).

    Raises when the write, the release or the store fails: the batch fails and Spark replays it.
    """
    spark = df.sparkSession
    ends = batch_offsets(eo.checkpoint, batch_id, spark)
    eo.sink.write(df, Batch(batch_id, query_id(eo.checkpoint, spark), ends, eo.epoch))
    eo._hit("after_write", batch_id)
    eo.source.release(ends)
    eo._hit("after_ack", batch_id)
    eo.store.commit(eo.name, ends, batch_id, eo.checkpoint, epoch=eo.epoch)
    eo._hit("after_offsets", batch_id)


def recover(eo: ExactlyOnce) -> Offsets:
    """Before a run without checkpoint: bring the store up to what the sink committed at the
    run's reset epoch; returns the positions the source resumes from."""
    stored = eo.store.load(eo.name)
    in_sink = eo.sink.committed(eo.epoch)
    if in_sink is None:
        return stored
    ahead = Offsets({tp: pos for tp, pos in in_sink.items() if tp not in stored or pos > stored[tp]})
    if ahead:
        log.warning(
            "job %s: the sink holds batches the offset store lacks (a crash after the write): %s",
            eo.name,
            ahead.to_json(),
        )
        eo.source.release(ahead)
        eo.store.commit(eo.name, ahead, -1, eo.checkpoint, epoch=eo.epoch)
        stored = stored.updated(ahead)
    return stored
