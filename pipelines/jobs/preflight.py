"""Checks made before Spark starts, so that a job that cannot work fails in seconds, in one line.

``pipelines run``, ``backfill`` and ``offsets`` call :func:`check` on the validated job
before the runner (and Spark) is imported. In this order:

1. **paths** — every local path the job writes (``checkpoint``, the offset store, the Delta
   tables its connectors write) can be written: the path, or its nearest existing parent, must
   be a directory that takes a new file (tried, not guessed from mode bits, so read-only mounts
   and root are judged right); a Delta table the job reads must exist. Remote URIs (``s3://``,
   ``abfss://``, ...) are left to the storage. ``spark.delta_engine: delta-spark`` on a session
   the command starts needs the Delta jars and extension in ``spark.conf``.
2. **reach** — each connector can be reached (a service URL answers its protocol's handshake:
   the connector says how, :mod:`pipelines.connectors`).
3. **source** — the source's own checks (topics exist) and, for ``run``, whether the positions
   the run resumes from — the checkpoint's last batch, else the offset store's — still mean
   what they meant. The source returns the partitions a tolerant job reads again.

Every problem is one :class:`~pipelines.errors.JobError` line ``file: key: message``.
:func:`plan_lines` describes what a run would do (``run --dry-run``, ``validate --plan``).
Nothing here imports Spark.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import tempfile
from pathlib import Path

from pipelines.connectors.base import Checked, Resume
from pipelines.errors import JobError, OffsetStoreError
from pipelines.jobs.models import Job
from pipelines.state.checkpoint import last_offsets, local_path
from pipelines.state.delta import DELTA_SPARK_CLASSES
from pipelines.state.offsets import OffsetStore
from pipelines.state.positions import Offsets

__all__ = ["check", "describe_target", "plan_lines", "start_positions", "stored_offsets", "unwritable"]


# -- paths ------------------------------------------------------------------------------------
def unwritable(path: Path) -> str | None:
    """Why nothing can be written at ``path`` (None when it can): the nearest existing directory
    must take a new file."""
    here = path
    while not here.exists():
        if here.parent == here:
            break
        here = here.parent
    if not here.is_dir():
        return f"{here} is a file, not a directory"
    try:
        fd, probe_file = tempfile.mkstemp(prefix=".pipelines-write-check-", dir=here)
    except OSError as exc:
        what = exc.strerror or str(exc)
        return f"{what.lower()} ({here} does not take new files)" if here != path else what.lower()
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe_file)
    return None


def path_problems(job: Job) -> list[str]:
    """One line per job path that cannot be written (or, for a table it reads, read)."""
    out: list[str] = []
    tables = job.delta_tables()
    written = [("checkpoint", job.checkpoint, False)]
    written += [(key, path, True) for key, path, w in tables if w and key == "offsets"]
    written += [(key, path, True) for key, path, w in tables if w and key != "offsets"]
    for key, target, table in written:
        path = local_path(target, table=table) if target else None
        reason = unwritable(path) if path is not None else None
        if reason is not None:
            out.append(f"{job.source_file}: {key}: cannot write {target}: {reason}")
    for key, target, w in tables:
        path = None if w else local_path(target, table=True)
        if path is not None and not (path / "_delta_log").is_dir():
            out.append(
                f"{job.source_file}: {key}: no Delta table at {target} (run the job that writes it first)"
            )
    return out


def engine_problems(job: Job) -> list[str]:
    """``spark.delta_engine: delta-spark`` on a session this command starts: the job's Spark
    settings must bring the Delta jars and the session extension (the runner checks an existing
    session once it has joined it)."""
    if job.spark.delta_engine != "delta-spark" or job.spark.session != "new" or not job.delta_tables():
        return []
    conf = {k: str(v) for k, v in job.spark.conf.items()}
    packages = conf.get("spark.jars.packages", "")
    jars = conf.get("spark.jars", "")
    missing = []
    if "io.delta:delta-spark" not in packages and "delta-spark" not in jars and not _pyspark_jars():
        missing.append(
            f"the classes {' and '.join(DELTA_SPARK_CLASSES)} (no Delta jars: spark.conf has no "
            "spark.jars.packages io.delta:delta-spark_2.13:<version> nor spark.jars with them)"
        )
    if "DeltaSparkSessionExtension" not in conf.get("spark.sql.extensions", ""):
        missing.append("spark.sql.extensions: io.delta.sql.DeltaSparkSessionExtension")
    if not missing:
        return []
    return [
        f"{job.source_file}: spark.delta_engine: delta-spark needs {'; and '.join(missing)}; add them "
        "to spark.conf, or set spark.delta_engine: auto (deltalake when Delta's jars are not there)"
    ]


def _pyspark_jars() -> bool:
    """Whether pyspark's own jars directory holds a delta-spark jar (an image built with it)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return False
    return any(Path(spec.origin).parent.joinpath("jars").glob("delta-spark*.jar"))


# -- positions ----------------------------------------------------------------------------------
def stored_offsets(job: Job) -> Offsets | None:
    """The job's positions in its offset store (None when it cannot be read without Spark)."""
    if job.offsets is None:
        return None
    try:
        stored = OffsetStore(job.offsets, storage_options=job.storage_options()).load(job.name)
    except OffsetStoreError:
        return None
    return stored if len(stored) else None


def start_positions(job: Job, *, committed: bool = False) -> Resume:
    """Where a run resumes: the checkpoint's positions, else the offset store's; and which.
    With ``committed`` the checkpoint's last committed batch (what the job has released)."""
    found = last_offsets(job.checkpoint, committed=committed)
    if found is not None:
        return found, "checkpoint"
    return stored_offsets(job), "offsets"


# -- the whole check -----------------------------------------------------------------------------
def check(job: Job, command: str) -> Offsets:
    """Everything a ``command`` (run, backfill, offsets, plan) needs before Spark starts.

    Returns the partitions a ``run`` must read again from their earliest message (data lost
    under a tolerant setting; empty otherwise). Raises JobError with one line per problem;
    the source prints warnings to stderr.
    """
    problems = path_problems(job) + engine_problems(job) if command in ("run", "backfill") else []
    ctx = job.context()
    source, sink = job.source.section.open(ctx), job.sink.section.open(ctx)
    try:
        problems += source.reach() + sink.reach()
        if problems:
            raise JobError(problems)
        resume: Resume = start_positions(job) if command == "run" else (None, "")
        acked = start_positions(job, committed=True) if resume[1] == "checkpoint" else resume
        checked: Checked = source.preflight(command, resume, acked)
    finally:
        source.close()
        sink.close()
    if checked.problems:
        raise JobError(checked.problems)
    return checked.again


def plan_lines(job: Job) -> list[str]:
    """What a run of ``job`` would read: where it starts and what there is to read."""
    source = job.source.section.open(job.context())
    try:
        return list(source.plan(start_positions(job)))
    finally:
        source.close()


def describe_target(job: Job) -> str:
    """``pulsar orders → delta .run/data/tables/orders_raw (append)`` (for ``pipelines list``)."""
    return f"{job.source.section.describe()} → {job.sink.section.describe()}"
