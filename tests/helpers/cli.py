"""The ``pipelines`` command as a user runs it: its own process, from the project root.

:func:`pipelines` runs ``python -m pipelines ARGS`` with the environment of a user's shell (the
project importable, Spark's workers on this Python, no ``PIPELINES_*``/``PULSAR_*`` from the
test run) and returns a :class:`Ran`: exit code, output and seconds, for tests that check all
three. :func:`pulsarwire_admin` runs ``python -m pulsarwire.admin ARGS`` the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    @property
    def out_lines(self) -> list[str]:
        return [line for line in self.out.splitlines() if line.strip()]


def command_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: the project importable, Spark's workers on this Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "PULSAR_"))}
    env.update(PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.update(extra)
    return env


def pipelines(
    *args: str,
    timeout: float = 180,
    cwd: Path = ROOT,
    python: tuple[str, ...] = ("-m", "pipelines"),
    **env: str,
) -> Ran:
    """``python -m pipelines ARGS`` as its own process, from ``cwd`` (the project root); ``python``
    replaces ``-m pipelines`` (e.g. ``-c CODE`` that runs the command in an altered interpreter)."""
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *python, *args],
        cwd=cwd,
        env=command_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t)


def no_trace(text: str) -> bool:
    return not any(word in text for word in ("Traceback", "Exception", "\tat ", "StackOverflow"))


def pulsarwire_admin(*args: str, timeout: float = 60, **env: str) -> Ran:
    """``python -m pulsarwire.admin ARGS`` as its own process (the ``pulsarwire-admin`` command)."""
    return pipelines(*args, timeout=timeout, python=("-m", "pulsarwire.admin"), **env)
