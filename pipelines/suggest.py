""" "Did you mean …?": the closest known names to a mistyped one, for every error listing choices.

:func:`closest` compares case-insensitively by default (``key``) with difflib's similarity ratio
and returns the choices in their own spelling, best first; :func:`did_you_mean` is the hint
appended to an error message. Job keys and values, Spark option names and topic names (compared
by their short name) all go through here, so every such hint reads the same.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

__all__ = ["closest", "did_you_mean"]


def closest(
    value: str,
    choices: Iterable[str],
    *,
    n: int = 1,
    cutoff: float = 0.6,
    key: Callable[[str], str] = str.lower,
) -> list[str]:
    """Up to ``n`` of ``choices`` whose ``key`` is at least ``cutoff`` similar to ``key(value)``."""
    by_key: dict[str, str] = {}
    for choice in choices:
        by_key.setdefault(key(choice), choice)
    return [by_key[k] for k in difflib.get_close_matches(key(value), list(by_key), n=n, cutoff=cutoff)]


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest choice, or ``""`` when none is close."""
    near = closest(value, choices)
    return f" (did you mean {near[0]}?)" if near else ""
