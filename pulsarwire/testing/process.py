"""Our brokers as separate processes (``python -m pulsarwire.broker``, ``python -m
pulsarwire.kafka.broker``), for demos, tests and benchmarks.

``broker_process(*args)`` starts it on a free loopback port (``--port 0``) with the given
extra command-line arguments, waits for its ``ready on pulsar://...`` line and yields that
URL (``broker_subprocess`` yields the process too, for its pid); the broker is stopped
(:func:`stop_process`: SIGTERM, then SIGKILL) when the block ends. Its logs go to stderr,
which is discarded unless a file is given, and a thread keeps reading its stdout, so nothing
can fill a pipe while it runs; a broker that prints nothing still meets the deadline.
``kafka_broker_process(*args)`` / ``kafka_broker_subprocess`` do the same for the Kafka broker
and yield its bootstrap address ``host:port``.
"""

from __future__ import annotations

import contextlib
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

READY = re.compile(r"ready on (pulsar://\S+)")
KAFKA_READY = re.compile(r"ready on (\S+:\d+)")


@contextlib.contextmanager
def broker_process(
    *args: str,
    start_timeout: float = 30.0,
    preexec_fn: Callable[[], None] | None = None,
    stderr: Any = subprocess.DEVNULL,
) -> Iterator[str]:
    """Run a broker with ``args`` while the block runs; yields its ``pulsar://`` URL.

    ``stderr`` (its log) is discarded unless given a file. Raises RuntimeError when it does not
    report ready within ``start_timeout`` seconds.
    """
    with broker_subprocess(*args, start_timeout=start_timeout, preexec_fn=preexec_fn, stderr=stderr) as (
        url,
        _proc,
    ):
        yield url


@contextlib.contextmanager
def broker_subprocess(
    *args: str,
    start_timeout: float = 30.0,
    preexec_fn: Callable[[], None] | None = None,
    stderr: Any = subprocess.DEVNULL,
    module: str = "pulsarwire.broker",
    ready: re.Pattern[str] = READY,
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """:func:`broker_process` that also yields the process (for its pid: RSS, open files)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        preexec_fn=preexec_fn,
    )
    try:
        lines = _lines_of(proc)
        deadline = time.monotonic() + start_timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:  # stdout closed: the broker is exiting
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.0, deadline - time.monotonic()))
                break
            match = ready.search(line)
            if match:
                yield match.group(1), proc
                return
        raise RuntimeError(
            f"{module} did not report 'ready on' within {start_timeout:g} s (exit code {proc.poll()})"
        )
    finally:
        stop_process(proc)


@contextlib.contextmanager
def kafka_broker_process(
    *args: str, start_timeout: float = 30.0, stderr: Any = subprocess.DEVNULL
) -> Iterator[str]:
    """``python -m pulsarwire.kafka.broker --port 0 *args`` while the block runs; yields ``host:port``."""
    with kafka_broker_subprocess(*args, start_timeout=start_timeout, stderr=stderr) as (address, _proc):
        yield address


@contextlib.contextmanager
def kafka_broker_subprocess(
    *args: str,
    start_timeout: float = 30.0,
    stderr: Any = subprocess.DEVNULL,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """:func:`kafka_broker_process` that also yields the process (to signal or kill it)."""
    with broker_subprocess(
        *args,
        start_timeout=start_timeout,
        stderr=stderr,
        preexec_fn=preexec_fn,
        module="pulsarwire.kafka.broker",
        ready=KAFKA_READY,
    ) as found:
        yield found


def _lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """The lines ``proc`` prints, read by a daemon thread until its stdout closes (then ``None``)."""
    lines: queue.Queue[str | None] = queue.Queue()
    stdout = proc.stdout
    assert stdout is not None

    def pump() -> None:
        for line in stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="broker-stdout", daemon=True).start()
    return lines


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL when ``proc`` has not exited within ``grace`` seconds; reaps it."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
