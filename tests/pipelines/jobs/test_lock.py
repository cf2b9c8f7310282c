"""The job lock (pipelines/jobs/lock.py): one process at a time, released by the kernel.

A second process holding :func:`~pipelines.jobs.lock.job_lock` is a real one (``python -c``),
killed with SIGKILL: no cleanup runs, the kernel drops the lock. The refusal of a second
``pipelines run`` and of ``offsets reset`` while a run goes on is checked through the command
in tests/pipelines/jobs/test_failures.py (the signal test, which has a run going on).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pipelines.jobs.config import load_job
from pipelines.jobs.lock import JobLocked, job_lock, lock_path
from pipelines.jobs.models import Job
from tests.helpers.cli import ROOT, command_env
from tests.helpers.orders_job import INGEST


def job(checkpoint: str) -> Job:
    return load_job(INGEST, "local", [f"checkpoint={checkpoint}"])


HOLD = """
import sys, time
from pipelines.jobs.config import load_job
from pipelines.jobs.lock import job_lock
job = load_job("jobs/orders_ingest.yaml", "local", [f"checkpoint={sys.argv[1]}"])
with job_lock(job, "run"):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_second_process_is_refused_until_the_holder_dies(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoints" / "orders_ingest"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(checkpoint)],
        cwd=ROOT,
        env=command_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        lock = tmp_path / "checkpoints" / "orders_ingest.lock"
        assert lock_path(job(str(checkpoint))) == lock  # beside the checkpoint, not in it
        with pytest.raises(JobLocked) as info, job_lock(job(str(checkpoint))):
            pass
        (line,) = info.value.problems
        assert line.startswith(
            "jobs/orders_ingest.yaml: checkpoint: job orders_ingest is busy: pipelines run "
            f"jobs/orders_ingest.yaml (pid {holder.pid} on "
        )
        assert line.endswith(
            f"holds its lock {lock}; one command at a time: wait for it to end or stop it, then try again"
        )
        os.kill(holder.pid, signal.SIGKILL)  # no cleanup: the kernel releases the lock
        holder.wait(10)
        with job_lock(job(str(checkpoint)), "offsets reset") as path:
            assert path == lock
            with job_lock(job(str(checkpoint))):  # reentrant in one process
                pass
        assert lock.read_text() == ""  # who held it is not left behind
    finally:
        holder.kill()
        holder.wait(10)


def test_a_remote_checkpoint_is_locked_on_this_machine() -> None:
    path = lock_path(job("s3://bucket/checkpoints/orders_ingest"))
    assert path.parent == Path(tempfile.gettempdir(), "pipelines-locks")
    assert path.name.startswith("orders_ingest-") and path.suffix == ".lock"
    other = lock_path(job("dbfs:/checkpoints/orders_ingest"))  # another URI: another lock
    assert other.parent == path.parent and other != path
    with job_lock(job("s3://bucket/checkpoints/orders_ingest")) as held:
        assert held == path
