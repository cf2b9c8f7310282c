"""Pulsar → Delta exactly once in a query written by hand (no job file): the ``foreachBatch`` body.

``write_delta_exactly_once(batch_df, batch_id, target, job)`` is what ``pipelines run`` does for
a job whose source is Pulsar and whose sink is Delta: the Pulsar source and Delta sink
connectors under :func:`pipelines.state.exactly_once.commit_batch` (Delta write, then the
subscription acknowledged, then the offset store). :class:`ExactlyOnceJob` names the job, its
checkpoint and offset store and the ``pulsarwire`` source's options; before a run without
checkpoint call :func:`recover`, and :func:`close_clients` at the end::

    job = ExactlyOnceJob("orders", "/chk/orders", "/tables/offsets", source_options)
    spark.readStream.format("pulsarwire").options(**source_options, **job.stream_options())...
        .writeStream.foreachBatch(lambda df, i: write_delta_exactly_once(df, i, target, job))
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pipelines.connectors.base import JobContext
from pipelines.jobs.models import DeltaSink, PulsarSource
from pipelines.state.exactly_once import ExactlyOnce, commit_batch
from pipelines.state.exactly_once import recover as recover_step
from pipelines.state.offsets import OffsetStore
from pipelines.state.positions import Offsets

__all__ = ["ExactlyOnceJob", "close_clients", "recover", "write_delta_exactly_once"]

_opened: dict[tuple[Any, ...], ExactlyOnce] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class ExactlyOnceJob:
    """A hand-written Pulsar → Delta query's exactly-once settings. ``source_options`` are the
    ``pulsarwire`` source's (service URL, ``pulsar.client.*``, ``subscriptionName``); ``epoch`` is
    the offset store's reset epoch when the run started; ``fault`` a test hook called with a point
    of :data:`pipelines.state.exactly_once.FAULT_POINTS` and the batch id."""

    name: str
    checkpoint: str
    offsets: str
    source_options: Mapping[str, str]
    mode: Literal["append", "merge"] = "append"
    partition_by: Sequence[str] | None = None
    merge_keys: Sequence[str] | None = None
    storage_options: dict[str, str] | None = None
    epoch: int = 0
    schema_mode: Literal["merge"] | None = None
    fault: Callable[[str, int], None] | None = field(default=None, compare=False)

    def stream_options(self) -> dict[str, str]:
        """Options to add to the source so a run without checkpoint resumes from the store."""
        return {"offsetStore": self.offsets, "job": self.name}


def _step(job: ExactlyOnceJob, target: str) -> ExactlyOnce:
    """The exactly-once step of ``job`` into ``target`` (opened once: one client per query)."""
    with _lock:
        key = (id(job), job.name, job.checkpoint, job.offsets, target)
        if key not in _opened:
            ctx = JobContext(job.name, job.name, job.checkpoint, job.offsets, job.storage_options, {})
            source = PulsarSource.from_spark(job.source_options, streaming=True).open(ctx)
            sink = DeltaSink(
                path=target,
                mode=job.mode,
                partition_by=list(job.partition_by) if job.partition_by else None,
                merge_keys=list(job.merge_keys) if job.merge_keys else None,
                schema_mode=job.schema_mode,
            ).open(ctx)
            store = OffsetStore(job.offsets, storage_options=job.storage_options)
            _opened[key] = ExactlyOnce(job.name, job.checkpoint, store, source, sink, job.epoch, job.fault)
        return _opened[key]


def write_delta_exactly_once(batch_df: Any, batch_id: int, target: str, job: ExactlyOnceJob) -> None:
    """foreachBatch body: Delta write, subscription acknowledged, offset store. Raises when one
    of them fails: the batch fails and Spark replays it."""
    commit_batch(batch_df, batch_id, _step(job, target))


def recover(job: ExactlyOnceJob, target: str) -> Offsets:
    """Before a run without checkpoint: the store brought up to what ``target`` committed; the
    positions the source resumes from."""
    return recover_step(_step(job, target))


def close_clients() -> None:
    """Close the clients the steps opened (call it when the query has ended)."""
    with _lock:
        for step in _opened.values():
            step.source.close()  # type: ignore[attr-defined]
        _opened.clear()
