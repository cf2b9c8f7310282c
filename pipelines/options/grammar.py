"""Option grammar shared by the ``pulsarwire`` source, sink and job files.

Spark hands a data source its options as a case-insensitive map of strings; a job file's
YAML values arrive typed. The value grammar lives here once: durations (``500ms``, ``30s``,
``15m``), publish times (milliseconds or ISO-8601), positions and offsets mappings
(``{"topic-partition": "ledger:entry:batch" | "earliest" | "latest"}``) for both, and
booleans and integers written as text. A grammar function raises :class:`GrammarError`
with a message that names no place; the option models (:mod:`pipelines.options.model`) use
these functions as validators and put the place in front: an
:class:`~pipelines.errors.OptionError` naming the Spark option, or a job file's
``file: key.path: message``. This module does not import Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from pipelines.errors import OptionError
from pipelines.state.positions import Position


# -- messages ---------------------------------------------------------------------------------
def kind_of(value: object) -> str:
    """The YAML name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def show(value: object, limit: int = 80) -> str:
    """A short quoted rendering of a user value for a message."""
    if isinstance(value, dict | list):
        return kind_of(value)
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GrammarError(ValueError):
    """A value does not follow its grammar. The callers turn it into their own error.

    ``problems`` are ``(key, message)`` pairs: ``key`` is ``()`` for the value itself and
    ``(topic-partition,)`` for one entry of an offsets mapping.
    """

    def __init__(self, message: str, problems: list[tuple[tuple[str, ...], str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems if problems is not None else [((), message)]


# -- the grammar --------------------------------------------------------------------------------
def boolean(value: str) -> bool:
    """``true``/``1``/``yes`` or ``false``/``0``/``no`` (any case). Raises GrammarError."""
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise GrammarError(f"expected true or false, got {show(value)}")


def integer(value: str, minimum: int | None = None) -> int:
    """A decimal integer, at least ``minimum``. Raises GrammarError."""
    try:
        n = int(value.strip())
    except ValueError:
        raise GrammarError(f"expected an integer, got {show(value)}") from None
    if minimum is not None and n < minimum:
        raise GrammarError(f"must be >= {minimum}, got {n}")
    return n


_DURATION = re.compile(r"(?P<n>\d+)\s*(?P<unit>ms|s|m|min|h|d)?")
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(value: object) -> int:
    """``500ms``, ``30s``, ``15m``/``15min``, ``2h``, ``1d`` (a bare number is ms) → milliseconds.

    Raises GrammarError.
    """
    m = _DURATION.fullmatch(str(value).strip().lower())
    if not m:
        raise GrammarError(f"expected a duration such as 500ms, 30s, 15m, got {show(value)}")
    return int(m.group("n")) * _UNIT_MS[m.group("unit")]


_TIME_HELP = "expected milliseconds since the epoch or an ISO-8601 time"


def time_ms(value: object) -> int:
    """Milliseconds since the epoch from an integer (or its text) or an ISO-8601 time (naive = UTC).

    Raises GrammarError.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise GrammarError(f"{_TIME_HELP}, got {kind_of(value)}")
    if isinstance(value, int) or re.fullmatch(r"\s*-?\d+\s*", value):
        ms = int(value)
        if ms < 0:
            raise GrammarError(f"must be >= 0, got {ms}")
        return ms
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise GrammarError(f"{_TIME_HELP}, got {show(value)}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


#: one partition's start or end: a position, or "earliest" / "latest"
Spec = str | Position

_POSITION_HELP = "expected 'ledger:entry:batch', earliest or latest"
_OFFSETS_HELP = "expected earliest, latest or a mapping of topic-partition to position"


def position_spec(value: object) -> Spec:
    """``"earliest"``/``-2``, ``"latest"``/``-1`` or ``"ledger:entry:batch"``. Raises GrammarError."""
    if not isinstance(value, bool):
        if value in (-2, "earliest"):
            return "earliest"
        if value in (-1, "latest"):
            return "latest"
    if isinstance(value, str):
        try:
            return Position.parse(value)
        except OptionError:
            pass
    if isinstance(value, list) and value and all(isinstance(b, int) for b in value):
        raise GrammarError(
            "a serialized message id (StreamNative's connector's form) is not taken here: write "
            "'ledger:entry:batch' (the id's str()); reading starts after it"
        )
    raise GrammarError(f"{_POSITION_HELP}, got {show(value)}")


def offsets_spec(value: object) -> str | dict[str, Spec]:
    """``earliest`` | ``latest`` | a mapping (or its JSON text) of topic-partition → :func:`position_spec`.

    Raises GrammarError; a mapping's bad entries are all reported, each under its key.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("earliest", "latest"):
            return text.lower()
        if not text.startswith("{"):
            raise GrammarError(f"{_OFFSETS_HELP}, got {show(value)}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GrammarError(f"not valid JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(value, dict):
        raise GrammarError(f"expected a mapping of topic-partition to position, got {kind_of(value)}")
    if not value:
        raise GrammarError("expected a mapping of topic-partition to position, got an empty mapping")
    out: dict[str, Spec] = {}
    found: list[tuple[tuple[str, ...], str]] = []
    for k, v in value.items():
        try:
            out[str(k)] = position_spec(v)
        except GrammarError as exc:
            found.append(((str(k),), str(exc)))
    if found:
        raise GrammarError("; ".join(m for _, m in found), found)
    return out
