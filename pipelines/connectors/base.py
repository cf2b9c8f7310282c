"""The contracts between the runner and its connectors (no pyspark at import time).

The runner, preflight, the exactly-once commit and the offset store talk to a job's source and
sink only through these protocols; they never ask which kind they hold. A connector is built
by its job-file section (``source.<kind>`` / ``sink.<kind>``:
:meth:`~pipelines.connectors.section.ConnectorSection.open`) from a
small :class:`JobContext`, never from the whole job.

Positions: a source says where it is with :class:`~pipelines.state.positions.Offsets`
(topic-partition → ordered integers); a streaming source's Spark offsets are that mapping's
JSON, so Spark's checkpoint, the offset store and the sink's commit metadata all hold the same
thing, read in one place (:mod:`pipelines.state.checkpoint`).

The methods that take ``spark`` or a DataFrame are the only ones that may load pyspark; the
rest answer in seconds without a JVM (preflight, ``--dry-run``, ``offsets show``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pipelines.errors import JobError
from pipelines.options.bound import Bound
from pipelines.state.positions import Offsets

__all__ = [
    "Batch",
    "BoundedSource",
    "Checked",
    "JobContext",
    "MergeSink",
    "Opened",
    "PlainSink",
    "Sink",
    "Source",
    "StreamSource",
    "VersionSource",
]


@dataclass(frozen=True)
class JobContext:
    """What a connector knows of its job: names, places and how to word an error."""

    name: str
    file: str
    checkpoint: str | None
    offsets: str | None  # the offset store table (None: the job keeps no positions)
    storage_options: dict[str, str] | None
    #: key path → where its value came from (``pulsar.service_url (conf/local.yaml) ← $PULSAR_URL``)
    origins: dict[str, str]
    #: answers shared by the connectors of one command (a service URL probed once)
    memo: dict[str, Any] = field(default_factory=dict, compare=False)

    def error(self, key: str, message: str) -> JobError:
        """``<job file>: <key>: <message>``."""
        return JobError(f"{self.file}: {key}: {message}" if key else f"{self.file}: {message}")

    def line(self, key: str, message: str) -> str:
        return f"{self.file}: {key}: {message}"

    def origin(self, key: str) -> str:
        return self.origins.get(key, "")


#: where a run resumes: positions (None: nowhere yet) and where they are kept (checkpoint, offsets)
Resume = tuple[Offsets | None, str]


@dataclass(frozen=True)
class Checked:
    """A source's preflight answer: problem lines, and partitions a run reads again from the
    earliest message (data lost under a tolerant setting)."""

    problems: list[str]
    again: Offsets


@dataclass(frozen=True)
class Batch:
    """One batch a sink writes: its id, the query it belongs to, and for a job that keeps
    positions the source's end positions and the offset store's reset epoch."""

    batch_id: int
    query_id: str
    ends: Offsets | None = None
    epoch: int = 0


class Connector(Protocol):
    key: str  # ``source.pulsar``: the job key its errors name

    def describe(self) -> str:
        """One line for ``pipelines list``: ``pulsar orders``."""
        ...

    def tables(self) -> list[tuple[str, str, bool]]:
        """Delta tables it reads or writes: (key below its section, path, written)."""
        ...

    def reach(self) -> list[str]:
        """Problem lines, in seconds and without a JVM: it cannot be reached (a service URL that
        does not answer its protocol's handshake)."""
        ...

    def close(self) -> None:
        """Close the clients it opened."""
        ...


class Source(Connector, Protocol):
    def preflight(self, command: str, resume: Resume, acked: Resume) -> Checked:
        """Before Spark, for ``command`` (run, backfill, offsets, plan): can it be read (topics),
        and for ``run`` do the positions it resumes from (``resume``; ``acked``: those of the last
        batch committed downstream) still mean what they meant."""
        ...

    def plan(self, resume: Resume) -> list[str]:
        """What a run would read (``--dry-run``, ``validate --plan``)."""
        ...

    def idle(self, committed: tuple[int, Offsets] | None) -> str | None:
        """Why a bounded run would read nothing after the checkpoint's last committed batch
        (``committed``: its id and end positions), without Spark; None: cannot tell, run."""
        ...

    def empty(self, spark: Any) -> Any:
        """A DataFrame with the schema a read gives (checked against the sink before reading)."""
        ...


@runtime_checkable
class StreamSource(Source, Protocol):
    """A source read as a Spark stream whose offsets are :class:`Offsets` JSON."""

    corrupt_word: str  # "skipped" or "quarantined": what becomes of rows split off by split()

    def stream(self, spark: Any, keep_positions: bool) -> Any:
        """The streaming DataFrame; ``keep_positions``: without a checkpoint it resumes from the
        offset store the job's context names."""
        ...

    def split(self, df: Any) -> tuple[Any, Any] | None:
        """(good rows, undecodable rows) of a raw batch, or None when the source does not route
        them (they fail the batch)."""
        ...

    def settle(self, bad: Any, batch: Batch) -> int:
        """Log or quarantine the undecodable rows of a batch; how many there were."""
        ...

    def release(self, ends: Offsets) -> None:
        """Tell upstream everything up to ``ends`` is committed downstream (raises when it cannot)."""
        ...

    def rewind(self, positions: Offsets) -> None:
        """Make upstream hold everything after ``positions`` again (``offsets reset``)."""
        ...

    def lag(self, ends: Offsets) -> int | None:
        """Messages not yet committed after a batch that ended at ``ends``; None if unknown."""
        ...


@runtime_checkable
class BoundedSource(StreamSource, Protocol):
    """A stream source whose ranges can be read as a batch (``backfill``, ``offsets show/reset``)."""

    position_columns: tuple[str, ...]  # the columns that identify a row's position

    def read(self, spark: Any, start: Bound, end: Bound) -> Any:
        """The rows in ``(start, end]``, undecodable ones handled as the stream does."""
        ...

    def bounds(self, start: Bound, end: Bound) -> tuple[Offsets, Offsets]:
        """``start`` and ``end`` resolved now for every partition."""
        ...

    def ends(self, start: Bound, end: Bound) -> Offsets:
        """Where a read of ``(start, end]`` ended, per partition."""
        ...

    def resolve(self, bound: Bound) -> Offsets:
        """The start positions ``bound`` names for every partition."""
        ...

    def start_now(self) -> Offsets:
        """Where a stream that never ran would start."""
        ...

    def backlog(self, stored: Offsets) -> dict[str, str]:
        """topic-partition → ``end E  backlog N messages`` after its stored position."""
        ...

    def taken_by(self, positions: Offsets) -> Any:
        """A Spark condition: the row is at or before its partition's position."""
        ...

    def schema(self) -> Any:
        """The rows' StructType."""
        ...


@runtime_checkable
class VersionSource(Source, Protocol):
    """A source read on the driver as numbered batches (a Delta table's versions)."""

    def batches(self, spark: Any) -> Iterator[tuple[int, Any, int]]:
        """(batch id, rows or None when there are none, row count) of what is not yet done, in order."""
        ...

    def done(self, batch_id: int) -> None:
        """Record that ``batch_id`` was written."""
        ...

    def failed(self, batch_id: int, exc: BaseException) -> Exception:
        """The error of a batch whose write failed in Spark (naming it and the task's cause)."""
        ...

    def nothing_new(self) -> str:
        """The line of a run that found nothing."""
        ...

    def through(self) -> str:
        """The end of the summary line: how far it is done."""
        ...


class Sink(Connector, Protocol):
    keeps_positions: bool  # its commits record the source's positions: the job has an offset store

    def check(self, df: Any) -> list[str]:
        """Problem lines: the rows (their schema; nothing read) do not fit the sink."""
        ...

    def write(self, df: Any, batch: Batch) -> None:
        """Write one batch idempotently, keyed by its query id and batch id (a replay adds
        nothing); with ``batch.ends`` it records them and the epoch in its commit."""
        ...

    def committed(self, epoch: int) -> Offsets | None:
        """The end positions of the newest batch this job committed at reset epoch ``epoch``."""
        ...

    def summary(self) -> str:
        """What the sink holds after a run (``; <path> has N rows``)."""
        ...


@runtime_checkable
class MergeSink(Sink, Protocol):
    """A sink a backfill merges into, so rows already there are not written again."""

    target: str
    appends: bool  # rows are appended: what follows the stream's position is left to the stream

    def merge_keys(self, columns: Sequence[str], positions: tuple[str, ...]) -> tuple[list[str], bool]:
        """(keys, update matched rows) for rows with ``columns`` whose position columns are
        ``positions``; raises JobError when there is nothing to merge on."""
        ...

    def merge(self, df: Any, keys: list[str], update: bool) -> tuple[int, int]:
        """Merge the rows in on ``keys``; (rows read, new rows)."""
        ...


class Opened:
    """What every connector does alike: it keeps its section and the job's context, describes
    itself and lists its tables as its section does, and has nothing to reach or close unless it
    says otherwise."""

    key: str
    section: Any

    def __init__(self, section: Any, ctx: JobContext) -> None:
        self.section = section
        self.ctx = ctx

    def describe(self) -> str:
        return str(self.section.describe())

    def tables(self) -> list[tuple[str, str, bool]]:
        return list(self.section.tables())

    def reach(self) -> list[str]:
        return []

    def close(self) -> None:
        return None


class PlainSink(Opened):
    """A sink that keeps no positions, checks nothing before reading and says nothing at the end."""

    keeps_positions = False

    def check(self, df: Any) -> list[str]:
        return []

    def committed(self, epoch: int) -> Offsets | None:
        return None

    def summary(self) -> str:
        return ""
