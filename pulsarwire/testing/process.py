"""Our broker as a separate process (``python -m pulsarwire.broker``), for demos and benchmarks.

``broker_process(*args)`` starts it on a free loopback port (``--port 0``) with the given
extra command-line arguments, waits for its ``ready on pulsar://...`` line and yields that
URL; the broker is stopped (:func:`stop_process`: SIGTERM, then SIGKILL) when the block
ends. Its logs go to stderr, which is discarded, so nothing can fill a pipe while it runs.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

READY = re.compile(r"ready on (pulsar://\S+)")


@contextlib.contextmanager
def broker_process(
    *args: str, start_timeout: float = 30.0, preexec_fn: Callable[[], None] | None = None
) -> Iterator[str]:
    """Run a broker with ``args`` while the block runs; yields its ``pulsar://`` URL.

    Raises RuntimeError when it does not report ready within ``start_timeout`` seconds.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsarwire.broker", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=preexec_fn,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + start_timeout
        for line in proc.stdout:
            match = READY.search(line)
            if match:
                yield match.group(1)
                return
            if time.monotonic() > deadline:
                break
        raise RuntimeError(f"the pulsarwire broker did not report 'ready on' (exit code {proc.poll()})")
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL when ``proc`` has not exited within ``grace`` seconds; reaps it."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
