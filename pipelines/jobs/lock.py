"""One run of a job at a time: an OS file lock beside the job's checkpoint.

``pipelines run`` holds :func:`job_lock` from its checks to its end, and ``offsets reset``
while it rewrites the positions. The lock is ``flock(LOCK_EX | LOCK_NB)`` on the file
``<checkpoint>.lock`` next to the checkpoint directory (not inside it: a reset moves the
checkpoint aside, the lock stays). The kernel releases it when the holder's process ends
however it ends (exit, Ctrl-C, SIGKILL, a crash), so there is no stale lock to clean up; the
file itself is left in place (deleting it would let a third process lock a new file while a
second waits on the old one). The holder writes its pid, host, command and start time into
the file so that the refusal can say who holds it. The descriptor is not inherited by child
processes (Python's default), so Spark's JVM never keeps a lock alive after the driver.

A second command that finds the lock taken fails at once with one line (:class:`JobLocked`,
a JobError naming the job file and ``checkpoint``), instead of Spark failing the second
query ~30 s later with ``CONCURRENT_STREAM_LOG_UPDATE``.

A checkpoint on remote storage (``s3://``, ``abfss://``, ``dbfs:``, ...) has no file that
``flock`` can lock. Its lock is a local file named after the checkpoint's URI, under the
system's temporary directory (``pipelines-locks/``): two runs on the same machine are refused
the same way; runs on different machines (two clusters) are not seen, and there Spark's own
check and the scheduler's one-run-at-a-time setting (Databricks ``max_concurrent_runs: 1``)
are what prevent them. A job without a checkpoint (a console sink) locks the checkpoint the
runner gives it, :func:`checkpoint_of`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.errors import JobError
from pipelines.jobs.models import Job
from pipelines.state.checkpoint import local_path

__all__ = ["JobLocked", "checkpoint_of", "job_lock", "lock_path"]


#: the locks this process holds (job_lock is reentrant: a nested call for the same job passes)
_held: set[Path] = set()


class JobLocked(JobError):
    """Another process holds the job's lock (a run, or an ``offsets reset``)."""


def checkpoint_of(job: Job) -> str:
    """The checkpoint a run of ``job`` uses: its own, or (console sink) one under ``.run/``."""
    return job.checkpoint or str(Path(".run", "console-checkpoints", job.name))


def lock_path(job: Job, *, beside: bool = True) -> Path:
    """Where the lock of ``job`` is: ``<checkpoint>.lock`` beside a local checkpoint, else (a
    remote checkpoint, or ``beside=False``) a local file named after the checkpoint."""
    checkpoint = checkpoint_of(job)
    local = local_path(checkpoint)
    if local is not None and beside:
        return local.parent / f"{local.name}.lock"
    digest = hashlib.sha1(checkpoint.rstrip("/").encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir(), "pipelines-locks", f"{job.name}-{digest}.lock")


def _holder(fd: int) -> str:
    """Who holds the lock, from what it wrote into the file (may be empty while it starts)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another pipelines command"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(info.get("since", 0))))
    what, host = info.get("command", "a pipelines command"), info.get("host", "?")
    return f"{what} (pid {info['pid']} on {host}, since {since})"


def _open(job: Job, path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise job.error("checkpoint", f"cannot create the lock file {path}: {exc.strerror or exc}") from None


def _acquire(job: Job, path: Path) -> int:
    """The locked descriptor of ``path``; raises JobLocked when another process holds it, or
    OSError when the filesystem has no ``flock`` (the descriptor is closed then)."""
    fd = _open(job, path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise JobLocked(
            f"{job.source_file}: checkpoint: job {job.name} is busy: {holder} holds its lock {path}; "
            "one command at a time: wait for it to end or stop it, then try again"
        ) from None
    except OSError:
        os.close(fd)
        raise
    return fd


@contextmanager
def job_lock(job: Job, command: str = "run") -> Iterator[Path]:
    """Hold the lock of ``job`` while the block runs; yields the lock file's path.

    ``command`` names what holds it (``run``, ``offsets reset``) in the message another
    command gets. Reentrant within a process. Raises :class:`JobLocked` at once when another
    process holds it, and JobError when the lock file cannot be created. On a filesystem
    without ``flock`` (some FUSE and network mounts) the lock is the local file
    :func:`lock_path` names for a remote checkpoint.
    """
    path = lock_path(job)
    for held in (path, lock_path(job, beside=False)):
        if held in _held:  # this process holds it already (the CLI around a runner that locks too)
            yield held
            return
    try:
        fd = _acquire(job, path)
    except JobLocked:
        raise
    except OSError as exc:
        if path == lock_path(job, beside=False):
            raise job.error("checkpoint", f"cannot lock {path}: {exc.strerror or exc}") from None
        path = lock_path(job, beside=False)
        fd = _acquire(job, path)
    try:
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": f"pipelines {command} {job.source_file}",
            "since": time.time(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        _held.add(path)
        try:
            yield path
        finally:
            _held.discard(path)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no stale "who" for the next reader; the kernel drops the lock
    finally:
        os.close(fd)
