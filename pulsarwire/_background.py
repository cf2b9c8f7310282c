"""An event loop in a background thread: how the in-process brokers (Pulsar's ``Broker`` and
``Cluster``, Kafka's ``Broker``) run beside the caller's code.

:func:`start_loop_thread` runs ``astart()`` on a new event loop in a daemon thread and returns
once it is done (raising what it raised); the loop then runs until :func:`stop_loop_thread`,
which stops it, lets ``astop()`` run on it and joins the thread. :class:`InBackground` is what
the in-process servers share on top: ``start()``/``stop()``, ``with``, and :meth:`~InBackground.call`
(thread-safe access to the server's state from the caller's thread).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Self


def start_loop_thread(
    name: str, astart: Callable[[], Awaitable[object]], astop: Callable[[], Awaitable[object]]
) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """(loop, thread) running ``astart()`` then the loop; raises what ``astart()`` raised."""
    ready = threading.Event()
    error: list[BaseException] = []
    loops: list[asyncio.AbstractEventLoop] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        loops.append(loop)
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(astart())
        except BaseException as exc:  # report start failures to the caller
            error.append(exc)
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(astop())
        loop.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    ready.wait()
    if error:
        thread.join()
        raise error[0]
    return loops[0], thread


def stop_loop_thread(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread, timeout: float = 30.0
) -> None:
    """Stop ``loop`` (its ``astop()`` then runs) and wait for ``thread`` to end."""
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=timeout)


class InBackground:
    """An asyncio server run on a loop of its own in a daemon thread: subclasses give
    :attr:`thread_name`, :meth:`astart` and :meth:`astop`."""

    thread_name: ClassVar[str]
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    async def astart(self) -> object:
        """Start serving on the running loop."""
        raise NotImplementedError

    async def astop(self) -> object:
        """Stop serving (on the loop, after it stopped running)."""
        raise NotImplementedError

    def start(self) -> Self:
        """Start in a background thread with its own event loop; returns when listening (raises
        what starting raised)."""
        self._loop, self._thread = start_loop_thread(self.thread_name, self.astart, self.astop)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            stop_loop_thread(self._loop, self._thread)
            self._thread = None

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the server's loop and return its result (thread-safe access to its
        state); directly when not started or already on that loop."""
        if self._loop is None or self._thread is None or threading.current_thread() is self._thread:
            return fn(*args)

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
