"""Brokers for the benchmarks, each in a subprocess (so a broker never shares the GIL with a client).

``pulsarwire_broker()`` runs ``python -m pulsarwire.broker --port 0``; ``pulsar_lite_broker()``
runs pulsar-lite with a config binding it (and nothing else) to loopback. Both yield the
service URL and stop the broker afterwards; Linux kills the broker if the bench dies.
``machine()`` is the line every benchmark prints first.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from pulsarwire.testing.process import broker_process, stop_process

PR_SET_PDEATHSIG = 1


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine() -> str:
    return (
        f"machine: Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, cpu_count={os.cpu_count()}, "
        f"pulsar-client {version('pulsar-client')}, pulsarwire {version('pulsarwire')}"
    )


try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)  # loaded here, not in the forked child
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM the broker when the bench dies (no orphans).

    Only used while the bench is single-threaded (brokers start before any client exists).
    """
    if _LIBC is not None:
        with contextlib.suppress(AttributeError):  # no prctl (not Linux): the finally-blocks still stop it
            _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def pulsarwire_broker(*extra: str) -> Iterator[str]:
    with broker_process("--log-level", "WARNING", *extra, preexec_fn=_die_with_parent) as url:
        yield url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def pulsar_lite_broker() -> Iterator[str]:
    from pulsar_lite.binary_finder import find_pulsar_lite_binary

    with tempfile.TemporaryDirectory(prefix="bench-pulsar-lite-") as tmp:
        port = _free_port()
        config = Path(tmp) / "pulsar-lite.toml"
        config.write_text(
            f'addr = "127.0.0.1:{port}"\ndb_path = "{Path(tmp) / "data"}"\nlog_level = "warn"\n\n'
            "[metrics]\nenabled = false\n"
        )
        with open(Path(tmp) / "broker.log", "wb") as log:
            proc = subprocess.Popen(
                [find_pulsar_lite_binary(), "--config", str(config)],
                stdout=log,
                stderr=log,
                cwd=tmp,
                preexec_fn=_die_with_parent,
            )
            try:
                deadline = time.monotonic() + 30
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError(f"pulsar-lite exited with {proc.returncode}, see {tmp}/broker.log")
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise RuntimeError("pulsar-lite did not start listening") from None
                        time.sleep(0.05)
                yield f"pulsar://127.0.0.1:{port}"
            finally:
                stop_process(proc)
