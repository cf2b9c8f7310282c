"""Connectors: how a job reads its source and writes its sink, one module per kind.

A job file's ``source.<kind>`` and ``sink.<kind>`` sections (:mod:`pipelines.jobs.models`) each
open a connector (:mod:`pipelines.connectors.base`: the contracts) from a small job context;
the runner, preflight, the exactly-once commit and the offset store talk only to those
contracts. Built in: :mod:`~pipelines.connectors.pulsar` (source and sink),
:mod:`~pipelines.connectors.delta` (the sink, and the source of publish jobs),
:mod:`~pipelines.connectors.console` (a sink).

An installed package adds a kind with an entry point in the group :data:`GROUP`, named
``source.<kind>`` or ``sink.<kind>``, whose value is its section model (a subclass of
:class:`pipelines.connectors.section.ConnectorSection`)::

    [project.entry-points."pipelines.connectors"]
    "source.memory" = "my_package.memory:MemorySource"
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from pipelines.connectors.section import ConnectorSection
from pipelines.errors import PipelinesError

__all__ = ["GROUP", "plugin_sections"]

#: the entry-point group of installed connectors
GROUP = "pipelines.connectors"


def plugin_sections(side: str) -> dict[str, Any]:
    """kind → section model of the connectors installed for ``side`` (``source`` or ``sink``).

    Raises PipelinesError naming the entry point when one cannot be loaded or is not a section.
    """
    found: dict[str, Any] = {}
    for ep in entry_points(group=GROUP):
        where, _, kind = ep.name.partition(".")
        if where != side or not kind:
            continue
        try:
            model = ep.load()
        except Exception as exc:
            raise PipelinesError(
                f"the installed connector {ep.name} = {ep.value} cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(model, type) and issubclass(model, ConnectorSection)):
            raise PipelinesError(
                f"the installed connector {ep.name} = {ep.value} is not a "
                "pipelines.connectors.section.ConnectorSection"
            )
        found[kind] = model
    return found
