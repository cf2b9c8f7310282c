"""The broker as its users start it: ``python -m pulsarwire.broker`` in its own process.

:func:`cli_broker` starts it on a free port (``--port 0``), waits for its "ready on" line and
yields the process and its service URL; the process gets SIGTERM at the end if still running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cli_broker(*args: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m pulsarwire.broker ARGS`` (with ``env`` added to the environment); yields (process, URL)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsarwire.broker", "--port", "0", "--log-level", "WARNING", *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "ready on" in line, line
        yield proc, line.split("ready on", 1)[1].split()[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
