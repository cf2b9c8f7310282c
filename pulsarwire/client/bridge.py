"""The thread bridge of the blocking API: an asyncio loop on a daemon thread, and calls into it.

:class:`LoopThread` owns one event loop running on its own daemon thread. Callers on any other
thread run a coroutine there and wait for its result (:meth:`LoopThread.run`), or hand it a
plain callable (:meth:`LoopThread.call_soon`); once stopped, the loop runs nothing more and
:meth:`LoopThread.run` raises AlreadyClosedError. :class:`LoopCalls` queues callables from one
caller's thread and runs them on the loop in order, waking the loop at most once per
``DELAY`` (or at once when ``BURST`` wait), so that a receive/ack loop costs no thread hand-off
per message. Nothing of the caller's own event loop is assumed: it works in scripts and in
Spark Python workers.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from pulsarwire.errors import AlreadyClosedError

R = TypeVar("R")


class LoopThread:
    """An event loop on a daemon thread of its own (one per blocking client)."""

    def __init__(self, name: str = "pulsarwire-client") -> None:
        self.stopped = False
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run ``coro`` on the loop and wait for its result (its exception is raised here)."""
        if self.stopped:  # the loop is gone: nothing would ever run it
            coro.close()
            raise AlreadyClosedError("client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Have the loop call ``fn(*args)`` soon (from any thread; returns at once)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        """Stop the loop and its thread (waits up to 10 s); then close the loop."""
        self.stopped = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            # an unclosed loop is closed by its finalizer, which can run during interpreter
            # shutdown after its self-pipe is gone ("Exception ignored in BaseEventLoop.__del__")
            self.loop.close()


class LoopCalls:
    """Calls queued from the caller's thread and run on a :class:`LoopThread`'s loop in order.

    The loop is woken at most once per ``DELAY`` (or at once when ``BURST`` calls wait), so a
    receive/ack loop costs no thread hand-off per message.
    """

    DELAY = 0.002
    BURST = 256

    def __init__(self, bridge: LoopThread) -> None:
        self._bridge = bridge
        self._calls: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self._urgent = False

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._bridge.loop
        with self._lock:
            self._calls.append((fn, args))
            if not self._scheduled:
                self._scheduled = True
                loop.call_soon_threadsafe(loop.call_later, self.DELAY, self._run)
            elif len(self._calls) >= self.BURST and not self._urgent:
                self._urgent = True
                loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._calls:
                    self._scheduled = self._urgent = False
                    return
                fn, args = self._calls.popleft()
            fn(*args)

    def drain(self) -> None:
        """Wait until everything submitted so far ran."""

        async def nothing() -> None:
            return None

        while True:
            self._bridge.run(nothing())
            with self._lock:
                if not self._calls and not self._scheduled:
                    return
