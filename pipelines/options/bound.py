"""Where a bounded read starts or ends: the one :class:`Bound` of the source, the CLI and job files.

``earliest`` | ``latest`` | a publish time (milliseconds or ISO-8601) | a mapping (or its JSON
text) of topic-partition → ``ledger:entry:batch``. The Spark source builds one from
``startingOffsets``/``startingTime`` (``ending*``) and resolves it on the driver; ``pipelines
backfill --from/--to``, ``offsets reset --to`` and a job's ``backfill:`` section parse theirs with
:func:`parse_bound` and hand the source :meth:`Bound.options`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer, model_validator

from pipelines.options.grammar import GrammarError, Spec, position_spec, show, time_ms
from pipelines.options.model import Loc, offsets_value, problem
from pulsarwire import TopicName

__all__ = ["Bound", "BoundError", "bound_text", "end_problem", "format_path", "parse_bound", "time_slices"]


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_path(parts: Loc) -> str:
    """``("spark", "conf", "spark.ui.enabled")`` → ``spark.conf["spark.ui.enabled"]``; ints → ``[0]``."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _PLAIN_KEY.fullmatch(p):
            out += f".{p}" if out else p
        else:
            out += "[" + json.dumps(p) + "]"
    return out


class BoundError(ValueError):
    """A ``--from``/``--to`` value or a ``backfill`` bound is not a position, time or offsets mapping."""


class Bound(BaseModel):
    """Where a bounded read starts or ends: earliest, latest, a time, or per-partition positions.

    Written as ``earliest`` | ``latest`` | milliseconds | an ISO-8601 time | a mapping (or its
    JSON text) of topic-partition → ``ledger:entry:batch``. Build one with :func:`parse_bound`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    kind: Literal["earliest", "latest", "time", "offsets"]
    time_ms: int | None = None
    offsets: dict[str, str] | None = None
    text: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, data: Any) -> Any:
        if isinstance(data, Bound):
            return data
        if isinstance(data, str) and data.strip().lower() in ("earliest", "latest"):
            return {"kind": data.strip().lower()}
        if isinstance(data, dict) or (isinstance(data, str) and data.strip().startswith("{")):
            return {"kind": "offsets", "offsets": offsets_value(data)}
        try:
            return {"kind": "time", "time_ms": time_ms(data), "text": str(data)}
        except GrammarError:
            raise problem(
                "expected earliest, latest, a time (milliseconds or ISO-8601) or a mapping of "
                f"topic-partition to 'ledger:entry:batch', got {show(data)}"
            ) from None

    @model_serializer(mode="plain")
    def _dump(self) -> Any:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "time":
            return self.text if self.text is not None else self.time_ms
        return dict(self.offsets or {})

    def positions(self) -> dict[str, Spec]:
        """An ``offsets`` bound's positions by full topic-partition name (``x`` →
        ``persistent://public/default/x``); ``earliest``/``latest`` stay words."""
        return {str(TopicName.parse(k.strip())): position_spec(v) for k, v in (self.offsets or {}).items()}

    def options(self, end: bool = False) -> dict[str, str]:
        """``startingOffsets``/``startingTime`` (``ending*`` with ``end``) for the source."""
        prefix = "ending" if end else "starting"
        if self.kind == "time":
            return {f"{prefix}Time": str(self.time_ms)}
        if self.kind == "offsets":
            return {f"{prefix}Offsets": json.dumps(self.offsets, separators=(",", ":"))}
        return {f"{prefix}Offsets": self.kind}


def parse_bound(value: Any, *, end: bool = False) -> Bound:
    """A :class:`Bound` from a CLI string or YAML value; ``end`` refuses ``earliest``.

    A string starting with ``{`` is JSON. Raises :class:`BoundError` with a short message.
    """
    try:
        bound = Bound.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        found = (err.get("ctx") or {}).get("problems")
        if found:
            where, message = found[0]
            raise BoundError(f"{format_path(where)}: {message}" if where else message) from None
        raise BoundError(err["msg"]) from None
    if end and (why := end_problem(bound)):
        raise BoundError(why)
    return bound


def end_problem(bound: Bound) -> str | None:
    """Why ``bound`` cannot end a range (the one place of this rule), None when it can."""
    return "earliest is not a valid end" if bound.kind == "earliest" else None


def time_slices(start: Bound, end: Bound, count: int) -> Iterator[tuple[Bound, Bound]]:
    """Equal time slices of a time range; other ranges are one slice."""
    if start.kind != "time" or end.kind != "time" or count <= 1:
        yield start, end
        return
    t0, t1 = start.time_ms or 0, end.time_ms or 0
    step = max(1, -(-(t1 - t0) // count))
    t = t0
    while t < t1:
        u = min(t + step, t1)
        yield Bound.model_construct(kind="time", time_ms=t), Bound.model_construct(kind="time", time_ms=u)
        t = u


def bound_text(bound: Bound) -> str:
    """A bound as a person reads it: a time in ISO-8601 UTC, positions as JSON."""
    if bound.kind == "time":
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((bound.time_ms or 0) / 1000))
    return bound.kind if bound.kind != "offsets" else json.dumps(bound.offsets)
