"""Stopping a run on Ctrl-C or SIGTERM: after the current batch, or at once on a second signal.

``pipelines run`` and ``backfill`` run inside :func:`installed` from before anything slow happens. The
first SIGINT or SIGTERM prints one line and sets :data:`STOP`; the runner looks at it between
batches (:meth:`StopRequest.requested`) and stops the query once the batch in flight has
committed, so the run ends where a rerun continues exactly once. A second signal ends the
process at once (``os._exit``): the batch in flight is rolled back by the sink's idempotence
(a Delta commit keyed by the batch id, broker deduplication) and replayed by the next run.
Neither prints a traceback. The exit status is 128 + the signal number: 130 for SIGINT,
143 for SIGTERM, as shells report them.

Ctrl-C in a terminal signals the whole process group, and so may a supervisor or ``kill -TERM
-PGID``; ``kill``, ``docker stop`` and Kubernetes signal this process alone. Either way only this
process acts on it: Spark's JVM and its Python workers run in a process session of their own
(:mod:`pipelines.jobs.jvm`), so a signal to the group does not reach them, and this process
stops Spark after the batch in flight.

Outside :func:`installed` (a job run from Python, the tests) nothing changes: Ctrl-C raises
KeyboardInterrupt as usual.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["STOP", "StopRequest", "installed", "reclaim"]


class StopRequest:
    """Whether a signal asked the run to stop, and which."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.label = "pipelines"
        self.active = False  # the handlers are installed
        #: called on the second signal, before the process ends (the runner kills Spark's JVM)
        self.on_abort: list[Callable[[], object]] = []
        self._event = threading.Event()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    @property
    def exit_code(self) -> int:
        """128 + the signal number (0 when no signal came)."""
        return 128 + self.signum if self.signum is not None else 0

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds or until a stop is requested; True when it is."""
        return self._event.wait(timeout)

    def request(self, signum: int) -> None:
        """What the first signal does (callable directly, e.g. from tests)."""
        self.signum = signum
        self._event.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            _say(
                f"[{self.label}] {name} again: stopping now; the batch in flight is replayed by the next run"
            )
            for abort in self.on_abort:  # the JVM first: it would print its threads' dying words
                with contextlib.suppress(Exception):
                    abort()
            os._exit(128 + signum)
        self.request(signum)
        again = "Ctrl-C" if signum == signal.SIGINT else "send it"
        _say(f"[{self.label}] {name}: stopping after the current batch ({again} again to stop at once)")


def _say(text: str) -> None:
    sys.stdout.flush()
    print(text, file=sys.stderr, flush=True)


#: the stop request of this process
STOP = StopRequest()


@contextmanager
def installed(label: str) -> Iterator[StopRequest]:
    """Handle SIGINT and SIGTERM as described above while the block runs (main thread only;
    elsewhere nothing changes); yields :data:`STOP`, reset for this run."""
    STOP.label = label
    STOP.signum = None
    STOP._event.clear()
    STOP.on_abort.clear()
    main = threading.current_thread() is threading.main_thread()
    saved = {}
    if main:
        for signum in _SIGNALS:
            saved[signum] = signal.signal(signum, STOP._handle)
    STOP.active = main
    try:
        yield STOP
    finally:
        STOP.active = False
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def reclaim() -> None:
    """Take the signals back after something replaced the handlers: a new SparkContext installs
    its own SIGINT handler (it cancels all jobs and raises KeyboardInterrupt anywhere, even
    inside a Py4J call, which is how the JVM's StackOverflowError traces came about)."""
    if STOP.active and threading.current_thread() is threading.main_thread():
        for signum in _SIGNALS:
            signal.signal(signum, STOP._handle)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
