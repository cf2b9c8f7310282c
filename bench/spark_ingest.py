"""Spark ingest: rows/s into Delta and into ``noop`` through the ``pulsarwire`` source, beside Spark's own.

Each size in ``--sizes`` is one partitioned topic (``--partitions``, default 2) of batched,
LZ4, 100-byte messages in our broker (a subprocess). Every query runs in the same
SparkSession (local[2]) with the same trigger (availableNow; with ``--per-batch N`` at most N
rows per micro-batch), selects the same columns and reads the whole topic:

  (a) ``pulsarwire`` source -> Delta  (``foreachBatch`` -> ``write_delta_exactly_once``:
      idempotent deltalake write, offset store, broker ack)
  (b) Spark's ``rate-micro-batch`` source (100-byte values) -> Delta (the same idempotent write)
  (c) ``pulsarwire`` source -> ``noop`` sink (what reading costs)
  (d) ``rate-micro-batch`` -> ``noop``
  (e) a Python data source that hands Spark ready-made RecordBatches of the same schema ->
      ``noop``: what Spark's Python data source path costs by itself (the ceiling of any
      Python source on this machine)

plus the bulk Arrow reader alone (``Client.read_arrow``, one partition after another, no Spark).

Seconds run from ``start()`` until the micro-batch holding the last row has committed. Every
query is run ``--repeat`` times (best kept: the machine is shared) after a warm-up that starts
the Python workers. Over the sizes, ``seconds = fixed + rows / rate`` is fitted (least squares):
``fixed`` is what a query costs whatever its size (query start, Python source process, planning,
commits), ``rate`` the steady-state throughput. ``cpu`` is the CPU time of the whole process
tree (driver, JVM, Python workers, broker) over a query: unlike seconds, it hardly depends on
what else runs on the machine, and it is fitted the same way. The phase columns split a run
using Spark's progress reports: ``start`` (before the first trigger: query start, and for a
Python source the new process that runs its driver side), ``plan`` (latestOffset), ``batch``
(addBatch: read and write), ``commit`` (the rest of the triggers) and ``end`` (after the last
row until the query has stopped).

Spark starts a new Python process for the driver side of every query of a Python source, and
that process imports the source's modules: where the environment forbids writing bytecode
(``PYTHONDONTWRITEBYTECODE``, as in a source checkout used through ``PYTHONPATH``), each one
would compile them from source again, which an installed package never does. So Spark's
Python processes get a bytecode cache of their own in the bench's temporary directory
(``PYTHONPYCACHEPREFIX``), filled by the warm-up queries; ``--no-bytecode-cache`` leaves the
environment as it is.

Most of what any Python source costs before its first batch ((e)'s ``start``) is that new
process importing pyspark: Spark puts its ``pyspark.zip`` first on the path of its Python
processes, and a zip holds no bytecode, so each one compiles pyspark's modules again (about
0.4 s of CPU). ``--installed-pyspark`` starts Spark's Python processes through a launcher that
puts the installed pyspark (the same version, its bytecode cached) ahead of the zip: what a
deployment gains that does the same; the default measures Spark as it comes.

Goal (issue 8): (a) >= 300k rows/s; goal (issue 18): (a) >= 0.8x (b) at 1M rows.
Run: ``python bench/spark_ingest.py [--messages 1000000]``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from brokers import machine, pulsarwire_broker
from consume import fill
from local_spark import local_spark
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

COLUMNS = ("key", "value", "topic", "partition", "ledgerId", "entryId", "batchIndex", "publishTime")
WARMUP_ROWS = 40_000


def topic_of(rows: int) -> str:
    return f"persistent://public/default/ingest-{rows}"


# -- (e): Spark's own cost for a Python streaming source --------------------------------
class MemorySource(DataSource):
    """``format("bench-memory")``: ``rows`` rows in ``partitions`` input partitions, no I/O.

    Defined in the script, so Spark pickles it by value into its Python workers.
    """

    @classmethod
    def name(cls) -> str:
        return "bench-memory"

    def schema(self) -> Any:
        from pipelines.spark.reader import source_schema

        # the pulsarwire source's schema; the options are only validated, nothing is connected
        return source_schema({"service.url": "pulsar://localhost:6650", "topic": "bench-memory"})

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MemoryStream(self.options, schema)


class MemoryStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are row counts; each task yields slices of one prepared 10,000-row RecordBatch."""

    def __init__(self, options: Any, schema: Any) -> None:
        self.rows = int(options["rows"])
        self.partitions_ = int(options["partitions"])
        self.per_batch = int(options.get("perBatch", "0"))
        self.schema = schema

    def initialOffset(self) -> dict[str, int]:
        return {"rows": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        return None

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.per_batch) if self.per_batch else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        end = self.rows
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["rows"] + limit.max_rows)
        return {"rows": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        a, b, k = start["rows"], end["rows"], self.partitions_
        cuts = [a + (b - a) * i // k for i in range(k + 1)]
        return [InputPartition((i, cuts[i], cuts[i + 1])) for i in range(k) if cuts[i + 1] > cuts[i]]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        index, lo, hi = partition.value
        n = 10_000
        template = pa.RecordBatch.from_pydict(
            {
                "key": [None] * n,
                "value": [b"v" * 100] * n,
                "topic": [f"persistent://public/default/memory-partition-{index}"] * n,
                "partition": [index] * n,
                "messageId": [b"\x08\x01\x10\x02\x18\x00"] * n,
                "ledgerId": [1] * n,
                "entryId": [i // 1000 for i in range(n)],
                "batchIndex": [i % 1000 for i in range(n)],
                "publishTime": [1_700_000_000_000_000] * n,
                "eventTime": [None] * n,
                "properties": [[]] * n,
                "producerName": ["bench"] * n,
                "sequenceId": list(range(n)),
            },
            schema=to_arrow_schema(self.schema, timezone="UTC"),
        )
        for at in range(lo, hi, n):
            yield template.slice(0, min(n, hi - at))


# -- measuring a query -------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu() -> float:
    """CPU seconds used so far by this process and its descendants (JVM, Python workers, broker).

    Reaped children count through their parent's cutime/cstime, so a difference of two calls
    is what the tree used in between, whatever else runs on the machine. 0 without /proc.
    """
    parent: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(x) for x in fields[11:15]) / _TICK
    me = os.getpid()
    total = 0.0
    for pid, t in times.items():
        p = pid
        while p not in (me, 0, 1) and p in parent:
            p = parent[p]
        if p == me:
            total += t
    return total


@dataclass
class Run:
    rows: int
    seconds: float  # start() until the batch with the last row committed
    cpu: float  # CPU seconds of the whole process tree over the query, start to end
    end: float  # from the last row committed until the query has stopped
    start: float  # before the first trigger
    plan: float  # sum of latestOffset
    batch: float  # sum of addBatch
    commit: float  # the rest of the triggers
    batches: int


def _when(progress: Any) -> float:
    """Wall-clock end of a trigger (its start timestamp plus its duration)."""
    began = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return began + progress["durationMs"].get("triggerExecution", 0) / 1000


def measure(start: Callable[[], Any], rows: int) -> Run:
    """Start an availableNow query, wait for its end, and split its time into phases.

    ``rows`` is how many rows the query must read (the time runs until the batch holding the
    last of them has committed).
    """
    c0 = tree_cpu()
    t0 = time.time()
    q = start()
    q.awaitTermination()
    cpu = tree_cpu() - c0
    stopped = time.time()
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    taken: list[Any] = []
    total = 0
    for p in q.recentProgress:
        taken.append(p)
        total += p["numInputRows"]
        if total >= rows:
            break
    if total < rows:
        raise RuntimeError(f"the query read {total} rows, expected {rows}")
    d = [p["durationMs"] for p in taken]
    first = datetime.fromisoformat(taken[0]["timestamp"].replace("Z", "+00:00")).timestamp()
    plan = sum(x.get("latestOffset", 0) for x in d) / 1000
    batch = sum(x.get("addBatch", 0) for x in d) / 1000
    trigger = sum(x.get("triggerExecution", 0) for x in d) / 1000
    last = _when(taken[-1])
    return Run(total, last - t0, cpu, stopped - last, first - t0, plan, batch, trigger - plan - batch, len(d))


def combined(runs: list[Run]) -> Run:
    """Consecutive queries as one run: every figure adds up; ``end`` is the last one's."""
    return Run(
        sum(r.rows for r in runs),
        sum(r.seconds for r in runs) + sum(r.end for r in runs[:-1]),
        sum(r.cpu for r in runs),
        runs[-1].end,
        sum(r.start for r in runs),
        sum(r.plan for r in runs),
        sum(r.batch for r in runs),
        sum(r.commit for r in runs),
        sum(r.batches for r in runs),
    )


class Bench:
    def __init__(self, spark: Any, url: str, work: Path, partitions: int, per_batch: int) -> None:
        self.spark = spark
        self.url = url
        self.work = work
        self.partitions = partitions
        self.per_batch = per_batch
        self.n = 0

    def _dir(self, what: str) -> Path:
        self.n += 1
        return self.work / f"{self.n}-{what}"

    def pulsar(self, topic: str, rows: int, sink: str) -> Run:
        from pipelines.connectors.pulsar_delta import ExactlyOnceJob, close_clients, write_delta_exactly_once

        here = self._dir(f"pulsar-{sink}")
        source = {"service.url": self.url, "topic": topic, "subscriptionName": f"bench-{here.name}"}
        job = ExactlyOnceJob(f"bench-{here.name}", str(here / "ck"), str(self.work / "offsets"), source)
        reader = self.spark.readStream.format("pulsarwire")
        limit = {"maxMessagesPerTrigger": str(self.per_batch)} if self.per_batch else {}
        for k, v in {**source, "startingOffsets": "earliest", **limit}.items():
            reader = reader.option(k, v)
        df = reader.load().select(*COLUMNS)
        target = str(here / "table")

        def write(batch: Any, batch_id: int) -> None:
            write_delta_exactly_once(batch, batch_id, target, job)

        w = df.writeStream.foreachBatch(write) if sink == "delta" else df.writeStream.format("noop")
        w = w.option("checkpointLocation", job.checkpoint).trigger(availableNow=True)
        try:
            return measure(w.start, rows)
        finally:
            close_clients()
            shutil.rmtree(here, ignore_errors=True)

    def rate(self, rows: int, sink: str) -> Run:
        from pipelines.state.delta import write_idempotent

        here = self._dir(f"rate-{sink}")
        target = str(here / "table")
        df = (
            self.spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", self.per_batch or rows)
            .option("numPartitions", self.partitions)
            .load()
            .selectExpr(
                "CAST(NULL AS BINARY) AS key",
                "CAST(rpad(sha2(CAST(value AS STRING), 256), 100, 'x') AS BINARY) AS value",
                "'rate' AS topic",
                "CAST(value % 2 AS INT) AS partition",
                "CAST(0 AS BIGINT) AS ledgerId",
                "value AS entryId",
                "CAST(-1 AS INT) AS batchIndex",
                "timestamp AS publishTime",
            )
        )

        def write(batch: Any, batch_id: int) -> None:
            write_idempotent(batch, target, "bench-rate", batch_id)

        w = df.writeStream.foreachBatch(write) if sink == "delta" else df.writeStream.format("noop")
        w = w.option("checkpointLocation", str(here / "ck")).trigger(availableNow=True)
        # Under availableNow this source makes exactly one batch of rowsPerBatch; with a limit,
        # each further batch is one more run on the same checkpoint (which goes on where the
        # last stopped): no query is stopped in the middle of a batch.
        per = self.per_batch or rows
        try:
            return combined([measure(w.start, per) for _ in range(-(-rows // per))])
        finally:
            shutil.rmtree(here, ignore_errors=True)

    def memory(self, rows: int) -> Run:
        here = self._dir("memory")
        df = (
            self.spark.readStream.format("bench-memory")
            .option("rows", rows)
            .option("partitions", self.partitions)
            .option("perBatch", self.per_batch)
            .load()
            .select(*COLUMNS)
        )
        w = df.writeStream.format("noop").option("checkpointLocation", str(here / "ck"))
        try:
            return measure(w.trigger(availableNow=True).start, rows)
        finally:
            shutil.rmtree(here, ignore_errors=True)


def reader_alone(url: str, topic: str) -> tuple[int, float]:
    """Rows and seconds of the bulk Arrow reader over every partition, one after another."""
    from pulsarwire.client.blocking import Client
    from pulsarwire.codec import MessageId

    client = Client(url)
    try:
        rows = 0
        started = time.perf_counter()
        for tp in client.get_topic_partitions(topic):
            probe = client.subscribe(tp, "bench-probe", durable=False)
            last = probe.get_last_message_id()
            probe.close()
            p = int(tp.rsplit("-", 1)[1])
            for rb in client.read_arrow(tp, MessageId.EARLIEST, last, partition=p, batch_rows=10_000):
                rows += rb.num_rows
        return rows, time.perf_counter() - started
    finally:
        client.close()


def installed_pyspark_python(work: Path, python: str) -> str:
    """A launcher of ``python`` for Spark's Python processes that puts the installed pyspark
    (whose bytecode is cached) ahead of the ``pyspark.zip`` Spark puts first on their path."""
    import pyspark

    site = str(Path(pyspark.__file__).resolve().parents[1])
    launcher = work / "spark-python"
    path = f"PYTHONPATH={shlex.quote(site)}${{PYTHONPATH:+:$PYTHONPATH}}"
    launcher.write_text(f'#!/bin/sh\n{path} exec {shlex.quote(python)} "$@"\n')
    launcher.chmod(0o755)
    return str(launcher)


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares ``seconds = fixed + rows / rate`` → (fixed, rate); None when it does not fit."""
    if len({r for r, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(r for r, _ in points) / n
    my = sum(s for _, s in points) / n
    slope = sum((r - mx) * (s - my) for r, s in points) / sum((r - mx) ** 2 for r, _ in points)
    if slope <= 0:
        return None
    return my - slope * mx, 1 / slope


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=1_000_000, help="the largest size")
    p.add_argument("--sizes", help="comma-separated topic sizes (default: a fifth of --messages, and it)")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--per-batch", type=int, default=0, help="rows per micro-batch (0: all available)")
    p.add_argument("--repeat", type=int, default=2, help="runs per query; the fastest is kept")
    p.add_argument(
        "--installed-pyspark",
        action="store_true",
        help="Spark's Python processes import the installed pyspark, not the pyspark.zip Spark puts first",
    )
    p.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="leave PYTHONDONTWRITEBYTECODE as it is (Spark's Python processes compile from source)",
    )
    args = p.parse_args(argv)
    given = args.sizes.split(",") if args.sizes else [args.messages // 5, args.messages]
    sizes = sorted({int(s) for s in given})

    work = Path(tempfile.mkdtemp(prefix="spark-ingest-"))
    if args.installed_pyspark:
        os.environ["PYSPARK_PYTHON"] = installed_pyspark_python(work, os.environ["PYSPARK_PYTHON"])
    if not args.no_bytecode_cache:
        # read by Spark's Python processes, which inherit the environment the JVM starts with
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    topics = [f"{topic_of(n)}={args.partitions}" for n in sorted({*sizes, WARMUP_ROWS})]
    queries = {
        "(a) pulsarwire -> Delta": lambda b, n: b.pulsar(topic_of(n), n, "delta"),
        "(b) rate       -> Delta": lambda b, n: b.rate(n, "delta"),
        "(c) pulsarwire -> noop": lambda b, n: b.pulsar(topic_of(n), n, "noop"),
        "(d) rate       -> noop": lambda b, n: b.rate(n, "noop"),
        "(e) memory     -> noop": lambda b, n: b.memory(n),
    }
    best: dict[tuple[str, int], Run] = {}
    least_cpu: dict[tuple[str, int], float] = {}
    try:
        with pulsarwire_broker(*(a for t in topics for a in ("--partitioned-topic", t))) as url:
            t = time.perf_counter()
            for n in sorted({*sizes, WARMUP_ROWS}):
                fill(url, topic_of(n), n, 100, last=False)
            fill_s = time.perf_counter() - t
            alone_rows, alone_s = reader_alone(url, topic_of(sizes[-1]))
            spark = local_spark({"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "4g"})
            spark.dataSource.register(MemorySource)
            bench = Bench(spark, url, work, args.partitions, args.per_batch)
            # the first queries start Spark's Python workers and warm the JVM: not in any figure
            for run in queries.values():
                run(bench, WARMUP_ROWS)
            for _ in range(args.repeat):
                for name, run in queries.items():
                    for n in sizes:
                        r = run(bench, n)
                        if (name, n) not in best or r.seconds < best[name, n].seconds:
                            best[name, n] = r
                        least_cpu[name, n] = min(r.cpu, least_cpu.get((name, n), r.cpu))
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(machine())
    per = f"at most {args.per_batch} rows per micro-batch" if args.per_batch else "all available in one"
    print(
        f"sizes {', '.join(f'{n:,}' for n in sizes)} messages of 100 bytes, {args.partitions} partitions, "
        f"LZ4 batches of 1000; availableNow, {per}; Spark local[2]; best of {args.repeat}; "
        f"filled in {fill_s:.1f} s"
    )
    dont_write = "PYTHONDONTWRITEBYTECODE" in os.environ
    pyspark_from = "the installed pyspark" if args.installed_pyspark else "Spark's pyspark.zip"
    print(
        "Spark's Python processes: "
        + ("compile our modules from source (PYTHONDONTWRITEBYTECODE)" if dont_write else "bytecode cached")
        + f", import {pyspark_from}"
    )
    print(
        f"bulk reader alone (no Spark, partitions one after another): {alone_rows:,} rows in "
        f"{alone_s:.2f} s = {alone_rows / alone_s:,.0f} rows/s on one core"
    )
    print(
        "seconds: start() until the last row is committed; cpu: CPU seconds of the whole process tree "
        "(driver, JVM, Python workers, broker) over the query, fewest of the runs"
    )
    print(
        f"{'query':<24}{'rows':>10}{'seconds':>9}{'rows/s':>10}{'cpu':>7}  start   plan  batch commit batches"
    )
    for name in queries:
        for n in sizes:
            r = best[name, n]
            cpu = least_cpu[name, n]
            print(
                f"{name:<24}{r.rows:>10,}{r.seconds:>9.2f}{r.rows / r.seconds:>10,.0f}{cpu:>7.2f}"
                f"{r.start:>7.2f}{r.plan:>7.2f}{r.batch:>7.2f}{r.commit:>7.2f}{r.end:>7.2f}{r.batches:>8}"
            )
    print("fit over the sizes: seconds = fixed + rows / rate; cpu = fixed cpu + rows * cpu per 1M rows")
    rates: dict[str, float] = {}
    for name in queries:
        f = fit([(n, best[name, n].seconds) for n in sizes])
        c = fit([(n, least_cpu[name, n]) for n in sizes])
        wall = (
            "(no fit: times do not grow with rows)"
            if f is None
            else f"fixed {f[0]:5.2f} s + {f[1]:>9,.0f} rows/s"
        )
        cpu = "" if c is None else f"   cpu: fixed {c[0]:5.2f} s + {1e6 / c[1]:5.2f} s per 1M rows"
        if f is not None:
            rates[name] = f[1]
        print(f"{name:<24} {wall}{cpu}")
    a, b = rates.get("(a) pulsarwire -> Delta"), rates.get("(b) rate       -> Delta")
    if a is not None and b is not None:
        print(f"steady-state ratio (a)/(b) = {a / b:.2f}")
    if a is not None:
        print(f"goal (a) >= 300,000 rows/s (steady state): {'met' if a >= 300_000 else 'NOT met'}")
    n = sizes[-1]
    rate_s, ours_s = best["(b) rate       -> Delta", n].seconds, best["(a) pulsarwire -> Delta", n].seconds
    verdict = "met" if rate_s / ours_s >= 0.8 else "NOT met"
    print(f"end to end at {n:,} rows: (a)/(b) = {rate_s / ours_s:.2f}; goal (issue 18) >= 0.8: {verdict}")
    # (e) reads nothing: its start is what any Python streaming source costs before a batch
    floor = best["(e) memory     -> noop", n].start - best["(b) rate       -> Delta", n].start
    print(
        f"  any Python source starts {floor:.2f} s later than (b) ((e)'s start): even with nothing else "
        f"added, (a)/(b) would be {rate_s / (rate_s + floor):.2f}"
    )


if __name__ == "__main__":
    main()
