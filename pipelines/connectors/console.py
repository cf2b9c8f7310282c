"""The console connector: ``sink.console`` prints each micro-batch (``show``), for trying a job out.

It keeps no positions and needs no checkpoint of the job's own (the runner gives the stream one
under ``.run/``); a rerun prints again what it reads again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.connectors.base import Batch, PlainSink

if TYPE_CHECKING:
    from pipelines.jobs.models import ConsoleSink

__all__ = ["ConsoleSinkConnector"]


class ConsoleSinkConnector(PlainSink):
    """``sink.console`` (:class:`pipelines.connectors.base.Sink`)."""

    key = "sink.console"
    section: ConsoleSink

    def write(self, df: Any, batch: Batch) -> None:
        df.show(self.section.rows, truncate=self.section.truncate)
