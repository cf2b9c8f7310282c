"""An event loop in a background thread: how the in-process brokers (Pulsar's ``Broker`` and
``Cluster``, Kafka's ``Broker``) run beside the caller's code.

:func:`start_loop_thread` runs ``astart()`` on a new event loop in a daemon thread and returns
once it is done (raising what it raised); the loop then runs until :func:`stop_loop_thread`,
which stops it, lets ``astop()`` run on it and joins the thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable


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
