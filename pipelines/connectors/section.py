"""The base models of job-file sections: every section, a connector's, a profile's.

A connector's section (``source.<kind>``, ``sink.<kind>``) subclasses :class:`ConnectorSection`:
its fields are the job-file keys, its class flags what the job-level rules need to know, and
:meth:`ConnectorSection.open` builds the connector. This module loads no connector: an
installed connector's module imports it (not :mod:`pipelines.jobs.models`, which loads the
installed connectors).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from pipelines.connectors.base import JobContext
from pipelines.masking import mask_data

__all__ = ["ConnectorSection", "ProfileSection", "Section"]


class Section(BaseModel):
    """Base of every job section: unknown keys are errors, secrets never reach a repr."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        coerce_numbers_to_str=True,
        hide_input_in_errors=True,
    )

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, mask_data(value, key=name)


class ConnectorSection(Section):
    """A ``source.<kind>`` or ``sink.<kind>`` section: it opens its connector
    (:mod:`pipelines.connectors`) and says what the job-level rules need to know of it."""

    #: a source whose positions a job keeps (offset store); a sink that records them in its commits
    KEEPS_POSITIONS: ClassVar[bool] = False
    #: a source that ``pipelines backfill`` and ``offsets show/reset`` can read by ranges
    BOUNDED: ClassVar[bool] = False
    #: the sink needs the job's ``checkpoint``
    NEEDS_CHECKPOINT: ClassVar[bool] = True

    def describe(self) -> str:
        """``pulsar orders``, ``delta <path> (append)``: one line for ``pipelines list``."""
        raise NotImplementedError

    def tables(self) -> list[tuple[str, str, bool]]:
        """The Delta tables it reads or writes: (key below the section, path, written)."""
        return []

    def open(self, ctx: JobContext) -> Any:
        """The connector of this section for a job (:mod:`pipelines.connectors.base`)."""
        raise NotImplementedError

    def error_keys(self) -> dict[str, str]:
        """Error class name → the job key that fixes it, for errors its connector raises in Spark."""
        return {}


class ProfileSection(Section):
    """A profile's ``<kind>:`` section: defaults for the job's ``source.<kind>`` and ``sink.<kind>``."""
