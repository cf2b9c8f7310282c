"""The console connector: ``sink.console`` prints each micro-batch (``show``), for trying a job out.

It keeps no positions and needs no checkpoint of the job's own (the runner gives the stream one
under ``.run/``); a rerun prints again what it reads again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.connectors.base import Batch, JobContext
from pipelines.state.positions import Offsets

if TYPE_CHECKING:
    from pipelines.jobs.models import ConsoleSink

__all__ = ["ConsoleSinkConnector"]


class ConsoleSinkConnector:
    """``sink.console`` (:class:`pipelines.connectors.base.Sink`)."""

    key = "sink.console"
    keeps_positions = False

    def __init__(self, section: ConsoleSink, ctx: JobContext) -> None:
        self.section = section
        self.ctx = ctx

    def describe(self) -> str:
        return self.section.describe()

    def tables(self) -> list[tuple[str, str, bool]]:
        return []

    def close(self) -> None:
        pass

    def reach(self) -> list[str]:
        return []

    def check(self, df: Any) -> list[str]:
        return []

    def write(self, df: Any, batch: Batch) -> None:
        df.show(self.section.rows, truncate=self.section.truncate)

    def committed(self, epoch: int) -> Offsets | None:
        return None

    def summary(self) -> str:
        return ""
