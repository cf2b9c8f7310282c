"""Checks made before Spark starts, so that a job that cannot work fails in seconds, in one line.

``pipelines run``, ``backfill`` and ``offsets`` call :func:`check` on the validated job
before the runner (and Spark) is imported. In this order:

1. **paths** — every local path the job writes (``checkpoint``, ``sink.delta.path``,
   ``offsets``) can be written: the path, or its nearest existing parent, must be a
   directory that takes a new file (tried, not guessed from mode bits, so read-only mounts
   and root are judged right); the Delta table a publish job reads must exist. Remote URIs
   (``s3://``, ``abfss://``, ...) are left to the storage.
2. **service URLs** — the URL of each Pulsar source and sink answers Pulsar's handshake
   within :data:`PROBE_SECONDS` (one connection, no client retries). A name that does not
   resolve, a port that speaks another protocol, a TLS or authentication failure fail at
   once; a refused connection is tried again for :data:`REFUSED_SECONDS` (a broker that is
   starting). The message names the URL, the key and where the value came from
   (``pulsar.service_url (conf/local.yaml) ← $PULSAR_URL``) and the cause.
3. **topics** — the source's named topics exist (the source never creates topics); a
   missing one names the namespace's closest topics. Skipped for a stream with
   ``wait_for_topic: true``.
4. **positions** (``run``) — the checkpoint's last positions (or, without a checkpoint, the
   offset store's) still mean what they meant. Two things say they do not: a position past
   the end of its topic-partition, and a durable subscription acknowledged less than the
   position (the job acknowledges its subscription before it stores a position, so a
   subscription behind the positions was created again: see
   :mod:`pipelines.state.exactly_once`). Either means the broker's data was reset, the job
   points at another cluster or the topic was recreated, and that resuming there could skip
   what was written since. With ``fail_on_data_loss: true`` that is an error saying how to
   reset; with ``false`` a warning, and :func:`check` returns those partitions: the run
   repositions them at their earliest message (store, subscription and checkpoint) and
   reads them again.

Every problem is one :class:`~pipelines.errors.JobError` line ``file: key: message``.
:func:`plan_lines` describes what a run would do (``run --dry-run``, ``validate --plan``).
Nothing here imports Spark, except :func:`plan_lines` (Spark's Python modules, no JVM).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipelines.errors import (
    JobError,
    MissingTopicError,
    OffsetsAheadError,
    OffsetStoreError,
    OptionError,
    PipelinesError,
    SubscriptionLostError,
)
from pipelines.jobs.models import Job
from pipelines.masking import mask
from pipelines.options.client import ClientSettings, client_settings
from pipelines.spark.planner import Planner, SourceSettings, TopicSelector, released_entry, resolve_start
from pipelines.state.delta import DELTA_SPARK_CLASSES
from pipelines.state.exactly_once import batch_offsets
from pipelines.state.offsets import OffsetStore
from pipelines.state.positions import Offsets, Position
from pulsarwire import (
    AuthenticationError,
    AuthorizationError,
    LocalCredentialsError,
    NotPulsarError,
    NotTlsError,
    PulsarWireError,
    RemoteProtocolError,
)

__all__ = ["PROBE_SECONDS", "check", "connect_failure", "plan_lines", "probe", "unwritable"]

#: how long a service URL has to answer the Pulsar handshake
PROBE_SECONDS = 5.0
#: how long a refused connection is tried again (a broker that is starting)
REFUSED_SECONDS = 3.0


def warn(text: str) -> None:
    print(f"warning: {mask(text)}", file=sys.stderr, flush=True)


# -- paths ------------------------------------------------------------------------------------
#: a URI scheme (``s3://``, ``abfss://``, ``dbfs:/``); one letter is a Windows drive, not a scheme
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


def local_path(target: str, *, table: bool = False) -> Path | None:
    """The local filesystem path of ``target`` (a plain path or ``file:`` URI); None for other URIs
    and, with ``table``, for catalog table names (no ``/``)."""
    if target.startswith("file:"):
        rest = target[len("file:") :]
        return Path(rest[2:] if rest.startswith("//") else rest)
    if _SCHEME.match(target) or (table and "/" not in target and "\\" not in target):
        return None
    return Path(target)


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
    """One line per job path that cannot be written (or, for a publish source, read)."""
    out: list[str] = []
    written: list[tuple[str, str | None, bool]] = [
        ("checkpoint", job.checkpoint, False),
        ("offsets", job.offsets, True),
    ]
    if job.sink.delta is not None:
        written.append(("sink.delta.path", job.sink.delta.path, True))
    for key, target, table in written:
        path = local_path(target, table=table) if target else None
        reason = unwritable(path) if path is not None else None
        if reason is not None:
            out.append(f"{job.source_file}: {key}: cannot write {target}: {reason}")
    if job.source.delta is not None:
        path = local_path(job.source.delta.path, table=True)
        if path is not None and not (path / "_delta_log").is_dir():
            out.append(
                f"{job.source_file}: source.delta.path: no Delta table at {job.source.delta.path} "
                "(run the job that writes it first)"
            )
    return out


# -- the Delta engine ----------------------------------------------------------------------------
def engine_problems(job: Job) -> list[str]:
    """``spark.delta_engine: delta-spark`` on a session this command starts: the job's Spark
    settings must bring the Delta jars and the session extension (the runner checks an existing
    session once it has joined it)."""
    if job.spark.delta_engine != "delta-spark" or job.spark.session != "new":
        return []
    if job.sink.delta is None and job.offsets is None and job.source.delta is None:
        return []
    conf = {k: str(v) for k, v in job.spark.conf.items()}
    packages = conf.get("spark.jars.packages", "")
    jars = conf.get("spark.jars", "")
    bundled = _pyspark_jars()
    missing = []
    if "io.delta:delta-spark" not in packages and "delta-spark" not in jars and not bundled:
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


# -- service URLs ------------------------------------------------------------------------------
def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def connect_failure(exc: BaseException, timeout: float = PROBE_SECONDS) -> str:
    """A short cause for a failed connection: connection refused, name not resolved, ..."""
    for e in _chain(exc):
        if isinstance(e, NotTlsError | NotPulsarError):
            return e.reason
        if isinstance(e, LocalCredentialsError):  # made on this side: the broker was not asked
            return e.server_message or str(e)
        if isinstance(e, socket.gaierror):
            if e.errno in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None)):
                return "name not resolved (no such host)"
            return f"name resolution failed ({e.strerror or e})"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused (nothing listens there: is the broker running?)"
        if isinstance(e, RemoteProtocolError):
            return (
                "this port does not speak the Pulsar protocol (an HTTP or admin port? "
                "Pulsar's binary protocol listens on 6650, 6651 with TLS)"
            )
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"the broker's TLS certificate is not trusted ({e.verify_message or e})"
        if isinstance(e, ssl.SSLError):
            return f"TLS handshake failed ({e.reason or e})"
        if isinstance(e, AuthenticationError | AuthorizationError):
            return f"the broker refused the credentials ({e})"
        if isinstance(e, TimeoutError):
            return f"no answer within {timeout:g} s (host down or firewalled, or not a Pulsar port)"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror.lower()
    text = str(exc)
    return text.split(": ", 1)[1] if text.startswith("cannot connect to ") and ": " in text else text


def _retriable(exc: BaseException) -> bool:
    return any(isinstance(e, ConnectionRefusedError) for e in _chain(exc))


def probe(settings: ClientSettings, timeout: float = PROBE_SECONDS) -> str | None:
    """Connect to ``settings.service_url`` once; None when it answered, else the cause.

    A refused connection is tried again for :data:`REFUSED_SECONDS`; nothing else is.
    """
    quick = dataclasses.replace(
        settings,
        options={
            **settings.options,
            "connection_timeout_seconds": timeout,
            "operation_timeout_seconds": timeout,
        },
    )
    deadline = time.monotonic() + REFUSED_SECONDS
    delay = 0.2
    while True:
        try:
            client = quick.client()
        except (PulsarWireError, OSError, ValueError) as exc:
            return connect_failure(exc, timeout)
        try:
            client.check_connection(timeout)
            return None
        except (PulsarWireError, OSError) as exc:
            if not (_retriable(exc) and time.monotonic() + delay < deadline):
                return connect_failure(exc, timeout)
        finally:
            client.close()
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _services(job: Job) -> list[tuple[str, dict[str, str]]]:
    out = []
    if job.source.pulsar is not None:
        out.append(("source.pulsar.service_url", job.source_options()))
    if job.sink.pulsar is not None:
        out.append(("sink.pulsar.service_url", job.sink_options()))
    return out


def service_problems(job: Job) -> list[str]:
    """One line per Pulsar service URL of the job that does not answer the handshake."""
    out: list[str] = []
    seen: dict[str, str | None] = {}
    for key, options in _services(job):
        settings = client_settings(options)
        url = settings.service_url
        if url not in seen:
            seen[url] = probe(settings)
        reason = seen[url]
        if reason is None:
            continue
        origin = job.origin(key)
        came = f" ({key} ← {origin})" if origin else ""
        out.append(f"{job.source_file}: {key}: cannot reach {url}{came}: {reason}")
    return out


# -- topics and positions -----------------------------------------------------------------------
def _planner(job: Job, *, durable: bool = False) -> Planner:
    """A planner on the job's source; ``durable``: on the stream's own durable subscription."""
    src = job.source.pulsar
    assert src is not None
    selector = TopicSelector.of(src.topic, src.topics, src.topics_pattern)
    return Planner(
        client_settings(job.source_options()), selector, subscription=job.subscription if durable else None
    )


def _topic_key(job: Job) -> str:
    src = job.source.pulsar
    assert src is not None
    return "source.pulsar." + ("topic" if src.topic else "topics" if src.topics else "topics_pattern")


def checkpoint_offsets(checkpoint: str | None, *, committed: bool = False) -> Offsets | None:
    """The end positions of the last batch in a local checkpoint's offset log (None without one);
    with ``committed`` of the last batch Spark committed (a later one is replayed by a restart)."""
    path = local_path(checkpoint) if checkpoint else None
    log_dir = path / ("commits" if committed else "offsets") if path is not None else None
    if path is None or log_dir is None or not log_dir.is_dir():
        return None
    batches = sorted(int(p.name) for p in log_dir.iterdir() if p.name.isdigit())
    if not batches:
        return None

    try:
        return batch_offsets(str(path), batches[-1])
    except PipelinesError:
        return None


def stored_offsets(job: Job) -> Offsets | None:
    """The job's positions in its offset store (None when it cannot be read without Spark)."""
    if job.offsets is None:
        return None

    try:
        stored = OffsetStore(job.offsets, storage_options=job.storage_options()).load(job.name)
    except OffsetStoreError:
        return None
    return stored if len(stored) else None


def start_positions(job: Job, *, committed: bool = False) -> tuple[Offsets | None, str]:
    """Where a run resumes: the checkpoint's positions, else the offset store's; and which.
    With ``committed`` the checkpoint's last committed batch (what the job has acknowledged)."""
    found = checkpoint_offsets(job.checkpoint, committed=committed)
    if found is not None:
        return found, "checkpoint"
    return stored_offsets(job), "offsets"


def lost_positions(job: Job, planner: Planner, parts: list[str]) -> tuple[dict[str, str], str]:
    """topic-partition → why the position the job resumes from no longer means what it meant:
    past the partition's end, or ahead of what the job's subscription has acknowledged; and
    where those positions are kept (``checkpoint`` or ``offsets``)."""
    start, where = start_positions(job)
    if start is None:
        return {}, where
    kind = "checkpointed" if where == "checkpoint" else "stored"
    found: dict[str, str] = {}
    latest = planner.latest(parts)
    for tp, pos in start.items():
        if tp in latest and pos > latest[tp]:
            found[tp] = str(OffsetsAheadError(tp, str(pos), str(latest[tp]), kind))
    # the checkpoint's last committed batch; the offset store holds committed positions only
    acked_start, acked_where = (
        start_positions(job, committed=True) if where == "checkpoint" else (start, where)
    )
    if acked_start is None:
        return found, where
    # the subscription is acknowledged before a position is stored (or a batch committed); the
    # job has subscribed before, so asking subscribes nothing new unless it was lost
    durable = _planner(job, durable=True)
    try:
        acked = durable.acknowledged([tp for tp in acked_start if tp in latest and tp not in found])
    finally:
        durable.close()
    for tp, mark in acked.items():
        owed = released_entry(acked_start[tp])
        if mark is not None and owed is not None and mark < owed:
            found[tp] = str(
                SubscriptionLostError(
                    tp,
                    job.subscription,
                    str(acked_start[tp]),
                    "nothing" if mark.entry_id < 0 and mark.ledger_id < 0 else str(mark),
                    "checkpointed" if acked_where == "checkpoint" else "stored",
                )
            )
    return found, where


def position_problems(job: Job, lost: dict[str, str], where: str) -> tuple[list[str], Offsets]:
    """``lost`` (:func:`lost_positions`, positions kept in ``where``) as error lines
    (``fail_on_data_loss``), or as warnings and the partitions the run reads again from their
    earliest message."""
    src = job.source.pulsar
    assert src is not None
    if src.fail_on_data_loss:
        return [
            f"{job.source_file}: {where}: {text}; resuming there could skip messages written since. "
            f"To read the topic again from its start run `pipelines offsets reset {job.source_file} "
            "--to earliest --yes` (or set source.pulsar.fail_on_data_loss: false)"
            for text in lost.values()
        ], Offsets({})
    for text in lost.values():
        warn(f"{job.source_file}: {text}: this run reads it again from its earliest message")
    return [], Offsets(dict.fromkeys(lost, Position.EARLIEST))


def topic_problems(job: Job, *, positions: bool) -> tuple[list[str], Offsets]:
    """Missing topics, and (``positions``) start positions that no longer mean what they meant
    (:func:`position_problems`)."""
    src = job.source.pulsar
    if src is None or src.wait_for_topic:
        return [], Offsets({})
    planner = _planner(job)
    try:
        try:
            parts = planner.partitions()
        except MissingTopicError as exc:
            return [f"{job.source_file}: {_topic_key(job)}: {exc}"], Offsets({})
        if not positions:
            return [], Offsets({})
        return position_problems(job, *lost_positions(job, planner, parts))
    finally:
        planner.close()


# -- the whole check -----------------------------------------------------------------------------
def check(job: Job, command: str) -> Offsets:
    """Everything a ``command`` (run, backfill, offsets) needs before Spark starts.

    Returns the partitions a ``run`` must read again from their earliest message (data lost
    under ``fail_on_data_loss: false``; empty otherwise). Raises JobError with one line per
    problem; prints warnings to stderr.
    """
    problems = path_problems(job) + engine_problems(job) if command in ("run", "backfill") else []
    problems += service_problems(job)
    if problems:
        raise JobError(problems)
    again = Offsets({})
    if job.source.pulsar is not None and command in ("run", "backfill"):
        try:
            problems, again = topic_problems(job, positions=command == "run")
        except (PulsarWireError, OptionError) as exc:
            raise JobError(f"{job.source_file}: source.pulsar: {exc}") from None
        if problems:
            raise JobError(problems)
    return again


def plan_lines(job: Job) -> list[str]:
    """What a run of ``job`` would read: its topic-partitions, where it starts and the topics' ends."""
    if job.source.pulsar is None:
        assert job.source.delta is not None
        return [f"reads the Delta table {job.source.delta.path} (versions after the last one published)"]
    opts = SourceSettings.parse(job.source_options(), streaming=True)
    planner = _planner(job)
    try:
        parts = planner.partitions()
        latest = planner.latest(parts)
        start, where = start_positions(job)
        if start is None:
            spec = job.source.pulsar.starting_offsets or job.source.pulsar.starting_time or "latest"
            start, why = resolve_start(planner, opts.starting, parts, latest), f"starting position {spec}"
        else:
            why = "the checkpoint" if where == "checkpoint" else f"the offset store {job.offsets}"
    finally:
        planner.close()
    lines = [f"topics: {len(parts)} topic-partition(s); starts from {why}"]
    for tp in parts:
        pos = start.get(tp, Position.EARLIEST)
        begin = "the earliest message" if pos.is_earliest else f"after {pos}"
        end = "empty" if latest[tp].entry_id < 0 else f"last message {latest[tp]}"
        lines.append(f"  {tp}: from {begin}; {end}")
    return lines


def describe_target(job: Job) -> str:
    """``pulsar orders → delta .run/data/tables/orders_raw`` (for ``pipelines list``)."""
    src: Any = job.source.pulsar
    if src is not None:
        what = src.topic or ",".join(src.topics or []) or f"/{src.topics_pattern}/"
        source = f"pulsar {what}"
    else:
        assert job.source.delta is not None
        source = f"delta {job.source.delta.path}"
    if job.sink.delta is not None:
        sink = f"delta {job.sink.delta.path} ({job.sink.delta.mode})"
    elif job.sink.pulsar is not None:
        sink = f"pulsar {job.sink.pulsar.topic or '(topic column)'}"
    else:
        sink = "console"
    return f"{source} → {sink}"
