"""Calls made at once from a few threads: a driver's per-partition questions, a task's sends.

:class:`ParallelCalls` runs a function over a list of items on a small thread pool, created on
first use (a single item is called on the caller's thread), and returns the results in the
items' order. Every call ends before the first failure is raised, so nothing is still running
behind the error. Used where each call mostly waits on the broker through one thread-safe
client: the planner's questions about every partition, and the sink's ``send_arrow`` to several
producers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class ParallelCalls:
    """``[fn(x) for x in items]`` with the calls made at once (see the module docstring)."""

    def __init__(self, threads: int, name: str) -> None:
        self.threads = threads
        self.name = name
        self._pool: ThreadPoolExecutor | None = None

    def each(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """The results of ``fn`` over ``items``, in order. Raises what the first failing call
        raised (in the order of ``items``), after every call has ended."""
        todo = list(items)
        if len(todo) <= 1:
            return [fn(x) for x in todo]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.name)
        futures = [self._pool.submit(fn, x) for x in todo]
        errors = [f.exception() for f in futures]  # waits for all: none is left running
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]

    @property
    def started(self) -> bool:
        """Whether the threads exist (from the first call of more than one item until :meth:`close`)."""
        return self._pool is not None

    def close(self) -> None:
        """Wait for the threads to end; the next call starts new ones."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
