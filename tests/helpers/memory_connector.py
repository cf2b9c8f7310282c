"""A connector written outside pipelines: ``source.memory``, Arrow batches with integer offsets.

It is the proof that a new protocol is one module: nothing in the runner, preflight, config or
state modules knows it. It is installed as a third-party package would install it, with an entry
point of the group ``pipelines.connectors`` (:func:`install` writes the ``.dist-info`` that a
``pip install`` would), and a job file uses it as ``source: {memory: {path: DIR}}``.

The data is the Arrow IPC files ``DIR/*.arrow`` (a column ``value``, strings), read in name
order: their rows are the messages of one partition, ``<topic>-partition-0``, at offsets 0, 1,
2, ... (:meth:`Position.at_offset`). The stream's Spark offsets are :class:`Offsets` JSON, as the
connector contract asks, so Spark's checkpoint, the offset store and the Delta sink's commit
metadata hold them like Pulsar's. ``max_rows_per_batch`` cuts a stream into batches. A release
(after the sink's commit) and a rewind (``offsets reset``) are recorded in ``DIR/released.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from pipelines.connectors.base import Batch, Checked, JobContext, Opened, Resume
from pipelines.connectors.section import ConnectorSection
from pipelines.options.bound import Bound
from pipelines.state.offsets import OffsetStore
from pipelines.state.positions import Offsets, Position, topic_partition

SCHEMA_DDL = "topic string, offset long, value string"


def install(site: Path) -> Path:
    """Write the entry point of this connector as an installed distribution under ``site`` (put
    ``site`` on ``PYTHONPATH``); returns ``site``."""
    info = site / "pipelines_memory_connector-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pipelines-memory-connector\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[pipelines.connectors]\nsource.memory = tests.helpers.memory_connector:MemorySource\n"
        "source.memstream = tests.helpers.memory_connector:StreamOnlySource\n"
    )
    return site


def append(directory: Path, values: list[str]) -> None:
    """Append messages: one more Arrow file in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    n = len(list(directory.glob("*.arrow")))
    table = pa.table({"value": pa.array(values, pa.string())})
    with ipc.new_file(directory / f"{n:06d}.arrow", table.schema) as writer:
        writer.write_table(table)


def _values(directory: str) -> list[str]:
    out: list[str] = []
    for file in sorted(Path(directory).glob("*.arrow")):
        with ipc.open_file(file) as reader:
            out += reader.read_all().column("value").to_pylist()
    return out


class MemorySource(ConnectorSection):
    """``source.memory`` — the messages of the Arrow files in ``path``."""

    KEEPS_POSITIONS = True
    BOUNDED = True

    path: str
    topic: str = "mem"
    max_rows_per_batch: int | None = None

    def describe(self) -> str:
        return f"memory {self.path}"

    def open(self, ctx: JobContext) -> Any:
        return MemoryConnector(self, ctx)


class StreamOnlySource(MemorySource):
    """``source.memstream`` — the same messages, streamed only: positions kept, no ranges."""

    BOUNDED = False


# -- the Spark data source (runs in Spark's Python workers) ---------------------------------------
def _data_source() -> Any:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    def rows(directory: str, topic: str, start: int, end: int) -> Iterator[tuple[str, int, str]]:
        """Offsets ``start`` to ``end``, both included."""
        values = _values(directory)
        for offset in range(max(start, 0), min(end, len(values) - 1) + 1):
            yield topic, offset, values[offset]

    def offset(positions: dict[str, str], key: str) -> int:
        return Position.parse(positions[key]).offset if key in positions else -1

    class Reader(DataSourceReader):  # type: ignore[misc]
        def __init__(self, options: dict[str, str]) -> None:
            self.options = options

        def read(self, partition: Any) -> Iterator[tuple[str, int, str]]:
            o = self.options
            key = topic_partition(o["topic"], 0)
            start, end = json.loads(o["start"]), json.loads(o["end"])
            return rows(o["path"], o["topic"], offset(start, key) + 1, offset(end, key))

    class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
        def __init__(self, options: dict[str, str]) -> None:
            self.options = options
            self.key = topic_partition(options["topic"], 0)
            self.step = int(options.get("maxRows") or 0)
            self.target: int | None = None  # availableNow: what there was when the query started

        def prepareForTriggerAvailableNow(self) -> None:
            self.target = len(_values(self.options["path"])) - 1

        def initialOffset(self) -> dict[str, str]:
            start: dict[str, str] = json.loads(self.options.get("start") or "{}")
            return {self.key: start.get(self.key, str(Position.EARLIEST))}

        def latestOffset(self, start: dict[str, str], limit: Any) -> dict[str, str]:
            last = len(_values(self.options["path"])) - 1 if self.target is None else self.target
            if self.step:
                last = min(last, offset(start, self.key) + self.step)
            return {self.key: str(Position.at_offset(max(last, offset(start, self.key))))}

        def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[Any]:
            return [InputPartition((offset(start, self.key) + 1, offset(end, self.key)))]

        def read(self, partition: Any) -> Iterator[tuple[str, int, str]]:
            first, last = partition.value
            return rows(self.options["path"], self.options["topic"], first, last)

    class MemoryDataSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "pipelines-memory"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema: Any) -> Any:
            return Reader(self.options)

        def streamReader(self, schema: Any) -> Any:
            return StreamReader(self.options)

    return MemoryDataSource


# -- the connector ------------------------------------------------------------------------------
class MemoryConnector(Opened):
    """``source.memory`` as :class:`pipelines.connectors.base.BoundedSource`."""

    key = "source.memory"
    position_columns = ("topic", "offset")
    corrupt_word = "skipped"
    section: MemorySource

    def __init__(self, section: MemorySource, ctx: JobContext) -> None:
        super().__init__(section, ctx)
        self.tp = topic_partition(section.topic, 0)

    def reach(self) -> list[str]:
        if not Path(self.section.path).is_dir():
            return [self.ctx.line(f"{self.key}.path", f"no directory {self.section.path}")]
        return []

    def _latest(self) -> Position:
        return Position.at_offset(len(_values(self.section.path)) - 1)

    def preflight(self, command: str, resume: Resume, acked: Resume) -> Checked:
        start, where = resume
        latest = self._latest()
        ahead = [
            f"{tp} at {pos} is past the end {latest}" for tp, pos in (start or {}).items() if pos > latest
        ]
        return Checked([self.ctx.line(where, text) for text in ahead], Offsets({}))

    def plan(self, resume: Resume) -> list[str]:
        start, where = resume
        begin = (start or {}).get(self.tp, Position.EARLIEST)
        return [f"{self.tp}: from after offset {begin.offset} ({where}); last offset {self._latest().offset}"]

    def idle(self, committed: tuple[int, Offsets] | None) -> str | None:
        return None

    def _options(self, spark: Any, **more: str) -> dict[str, str]:
        spark.dataSource.register(_data_source())
        return {"path": self.section.path, "topic": self.section.topic, **more}

    def stream(self, spark: Any, keep_positions: bool) -> Any:
        start = {}
        if keep_positions and self.ctx.offsets is not None:
            start = OffsetStore(self.ctx.offsets, storage_options=self.ctx.storage_options).load(
                self.ctx.name
            )
        step = str(self.section.max_rows_per_batch or "")
        reader = spark.readStream.format("pipelines-memory")
        for key, value in self._options(
            spark, start=json.dumps(start.to_dict() if start else {}), maxRows=step
        ).items():
            reader = reader.option(key, value)
        return reader.load()

    def empty(self, spark: Any) -> Any:
        return spark.createDataFrame([], SCHEMA_DDL)

    def split(self, df: Any) -> tuple[Any, Any] | None:
        return None

    def settle(self, bad: Any, batch: Batch) -> int:
        return 0

    def _record(self, what: str, positions: Offsets) -> None:
        file = Path(self.section.path, "released.json")
        seen = json.loads(file.read_text()) if file.exists() else []
        file.write_text(json.dumps([*seen, [what, positions.to_dict()]]))

    def release(self, ends: Offsets) -> None:
        self._record("release", ends)

    def rewind(self, positions: Offsets) -> None:
        self._record("rewind", positions)

    def lag(self, ends: Offsets) -> int | None:
        return self._latest().offset - ends.get(self.tp, Position.EARLIEST).offset

    # -- ranges
    def _at(self, bound: Bound, end: bool) -> Position:
        if bound.kind == "offsets":
            return Position.parse((bound.offsets or {})[self.tp])
        if bound.kind == "time":
            raise self.ctx.error(
                "backfill", "the memory source has no times: give earliest, latest or offsets"
            )
        return self._latest() if bound.kind == "latest" else Position.EARLIEST

    def bounds(self, start: Bound, end: Bound) -> tuple[Offsets, Offsets]:
        return Offsets({self.tp: self._at(start, False)}), Offsets({self.tp: self._at(end, True)})

    def ends(self, start: Bound, end: Bound) -> Offsets:
        return self.bounds(start, end)[1]

    def resolve(self, bound: Bound) -> Offsets:
        return Offsets({self.tp: self._at(bound, False)})

    def start_now(self) -> Offsets:
        return Offsets({self.tp: Position.EARLIEST})

    def read(self, spark: Any, start: Bound, end: Bound) -> Any:
        first, last = self.bounds(start, end)
        options = self._options(spark, start=first.to_json(), end=last.to_json())
        reader = spark.read.format("pipelines-memory")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    def backlog(self, stored: Offsets) -> dict[str, str]:
        latest = self._latest()
        return {
            tp: f"end {latest}  backlog {latest.offset - pos.offset} messages" for tp, pos in stored.items()
        }

    def taken_by(self, positions: Offsets) -> Any:
        from pyspark.sql import functions as F

        condition = F.lit(False)
        for tp, pos in positions.items():
            topic = tp.rsplit("-partition-", 1)[0]
            condition = condition | ((F.col("topic") == topic) & (F.col("offset") <= pos.offset))
        return condition

    def schema(self) -> Any:
        from pyspark.sql.types import _parse_datatype_string

        return _parse_datatype_string(SCHEMA_DDL)


# -- a job's whole cycle through the command, in one process with one Spark session ----------------
def cycle(job: str, checkpoint: Path, data: Path) -> None:
    """``pipelines run --dry-run``, ``run`` (a processing-time stream, Ctrl-C once its first batch
    committed), run again, more data and a lost checkpoint, ``backfill``, ``offsets show``: each
    step's output framed by
    ``== <step>`` and ``== exit <code>`` lines. The commands join this process's SparkSession, as
    they join a notebook's."""
    import os
    import shutil
    import signal
    import threading
    import time

    from pyspark.sql import SparkSession

    from pipelines.jobs.cli import main

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def interrupt() -> None:
        while not (checkpoint / "commits" / "0").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    def step(name: str, *args: str) -> None:
        print(f"== {name}", flush=True)
        print(f"== exit {main(list(args))}", flush=True)

    threading.Thread(target=interrupt, daemon=True).start()
    step("dry run", "run", job, "--dry-run")
    step("run", "run", job)
    step("rerun", "run", job, "--set", "trigger=availableNow")
    append(data, [f"m{i}" for i in range(20, 25)])
    shutil.rmtree(checkpoint)
    step("no checkpoint", "run", job, "--set", "trigger=availableNow")
    step("backfill", "backfill", job)
    step("offsets show", "offsets", "show", job)
    spark.stop()


if __name__ == "__main__":
    import sys

    cycle(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
