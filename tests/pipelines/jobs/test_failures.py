"""Users' mistakes and failures, driven through the ``pipelines`` command (issue 15).

Each test is something a user does wrong or meets at run time. Where the exit status, the
time to fail or the output matters the command runs as its own process (``python -m
pipelines``) exactly as a user runs it, and the test checks all three: a failure before
Spark starts must come within seconds, in one line, without a traceback. Runs that need
Spark and whose output is checked in-process use ``pipelines.jobs.cli.main`` on the suite's
session (a new JVM per test would cost ~10 s each).

The ends checked are the data: nothing may exit 0 after skipping or duplicating rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from jobs.demo import produce
from pipelines.jobs import runner
from pulsarwire.broker import Broker
from tests.helpers.cli import ROOT, command_env, no_trace, pipelines
from tests.helpers.orders_job import INGEST, ORDERS, in_process, order_ids, send_orders


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The local profile pointed at ``tmp_path`` for data; the working directory is the repo."""
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("PIPELINES_PROJECT_DIR", raising=False)
    monkeypatch.chdir(ROOT)
    return tmp_path


# -- the service URL: a preflight before Spark starts ------------------------------------------
@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("pulsar://127.0.0.1:1", "connection refused"),
        ("pulsar://no-such-broker.invalid:6650", "name not resolved"),
        ("HTTP", "the server answered HTTP, not the Pulsar protocol"),
    ],
    ids=["broker-down", "wrong-host", "http-port"],
)
def test_unreachable_service_url_fails_in_seconds_in_one_line(
    url: str, cause: str, http_port: int, tmp_path: Path
) -> None:
    if url == "HTTP":
        url = f"pulsar://127.0.0.1:{http_port}"
    ran = pipelines("run", INGEST, PULSAR_URL=url, PIPELINES_DATA_DIR=str(tmp_path))
    assert ran.code == 1
    assert ran.seconds < 10, ran  # the refused broker is tried again for 3 s, the others not
    assert ran.out == "" and len(ran.err_lines) == 1, ran.err
    line = ran.err_lines[0]
    assert line.startswith(f"jobs/orders_ingest.yaml: source.pulsar.service_url: cannot reach {url} ")
    assert "pulsar.service_url (conf/local.yaml) ← $PULSAR_URL" in line and cause in line
    assert not (tmp_path / "checkpoints").exists()  # nothing started


def test_unwritable_paths_are_named_before_spark_starts(broker: Broker, tmp_path: Path) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    ran = pipelines(
        "run",
        INGEST,
        "--set",
        "checkpoint=/sys/pipelines-test/checkpoint",  # read-only even for root
        "--set",
        f"offsets={in_the_way}/offsets",
        PULSAR_URL=broker.service_url,
        PIPELINES_DATA_DIR=str(tmp_path),
    )
    assert ran.code == 1 and ran.seconds < 10 and ran.out == ""
    assert ran.err_lines == [
        "jobs/orders_ingest.yaml: checkpoint: cannot write /sys/pipelines-test/checkpoint: "
        + ran.err_lines[0].split("checkpoint: ")[-1],
        f"jobs/orders_ingest.yaml: offsets: cannot write {in_the_way}/offsets: {in_the_way} is a file, "
        "not a directory",
    ]
    assert any(why in ran.err_lines[0] for why in ("permission denied", "operation not permitted"))


# -- a topic that does not exist -----------------------------------------------------------------
def test_a_typo_in_the_topic_is_an_error_and_creates_nothing(broker: Broker, tmp_path: Path) -> None:
    produce(broker.service_url, "orders", 5)
    produce(broker.service_url, "orders-returns", 1)
    for args in (("run", INGEST), ("backfill", INGEST, "--from", "earliest")):
        ran = pipelines(
            *args,
            "--set",
            "source.pulsar.topic=ordres",
            PULSAR_URL=broker.service_url,
            PIPELINES_DATA_DIR=str(tmp_path),
        )
        assert ran.code == 1 and ran.seconds < 10 and ran.out == "", ran
        assert ran.err_lines == [
            "jobs/orders_ingest.yaml: source.pulsar.topic: topic persistent://public/default/ordres does "
            "not exist; closest topics in public/default: orders, orders-returns"
        ]
    assert not broker.topic_exists("persistent://public/default/ordres")
    assert sorted(broker.topics) == [ORDERS, "persistent://public/default/orders-returns"]


def test_a_stream_may_wait_for_its_topic(
    spark: Any, broker: Broker, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting = ("--set", "source.pulsar.topic=later", "--set", "source.pulsar.wait_for_topic=true")
    ran = in_process("run", INGEST, *waiting)
    assert ran.code == 0, ran
    assert not broker.topic_exists("persistent://public/default/later")  # waiting does not create it
    produce(broker.service_url, "later", 30)
    assert in_process("run", INGEST, *waiting).code == 0
    assert order_ids(project) == list(range(30))


# -- stored positions ahead of the topic ----------------------------------------------------------
def test_positions_from_another_cluster_fail_before_reading(
    spark: Any, broker: Broker, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    send_orders(broker.service_url, 0, 200)
    assert in_process("run", INGEST).code == 0
    assert order_ids(project) == list(range(200))
    with Broker(deduplication=True) as fresh:  # the data was reset: a new broker, 20 new orders
        send_orders(fresh.service_url, 1000, 20)
        ran = pipelines("run", INGEST, PULSAR_URL=fresh.service_url, PIPELINES_DATA_DIR=str(project))
        assert ran.code == 1 and ran.seconds < 10 and ran.out == "", ran
        (line,) = ran.err_lines
        assert line.startswith(f"jobs/orders_ingest.yaml: checkpoint: {ORDERS}: the checkpointed position ")
        assert "is past the topic's end" in line
        assert "pipelines offsets reset jobs/orders_ingest.yaml --to earliest --yes" in line
        assert order_ids(project) == list(range(200))  # nothing read, nothing skipped

        # without the checkpoint the offset store says the same
        ran = pipelines(
            "run",
            INGEST,
            "--set",
            f"checkpoint={project}/new-checkpoint",
            PULSAR_URL=fresh.service_url,
            PIPELINES_DATA_DIR=str(project),
        )
        assert ran.code == 1 and "offsets: " + ORDERS + ": the stored position" in ran.err

        # fail_on_data_loss: false reads the partition again from its earliest message
        monkeypatch.setenv("PULSAR_URL", fresh.service_url)
        ran = in_process("run", INGEST, "--set", "source.pulsar.fail_on_data_loss=false")
        assert ran.code == 0, ran
        assert "is past the topic's end" in ran.err and "earliest message" in ran.err
        assert order_ids(project) == list(range(200)) + list(range(1000, 1020))


def test_the_source_checks_positions_for_every_batch(
    spark: Any, dedup_broker: Broker, topic_name: str, tmp_path: Path, produce: Any
) -> None:
    """A checkpoint past the end met by a running query (the check inside the source)."""
    from pyspark.errors import StreamingQueryException

    produce(dedup_broker.service_url, topic_name, [b"a"] * 30, batching_enabled=False)

    def stream(url: str, fail: bool) -> Any:
        df = (
            spark.readStream.format("pulsarwire")
            .option("service.url", url)
            .option("topic", topic_name)
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "true" if fail else "false")
            .load()
            .selectExpr("CAST(value AS STRING) AS v", "ledgerId", "entryId")
        )
        got: list[Any] = []
        q = (
            df.writeStream.foreachBatch(lambda batch, _: got.extend(batch.collect()))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        return got

    assert len(stream(dedup_broker.service_url, True)) == 30
    with Broker() as fresh:
        produce(fresh.service_url, topic_name, [b"b"] * 3, batching_enabled=False)
        with pytest.raises(StreamingQueryException) as info:
            stream(fresh.service_url, True)
        assert "OffsetsAheadError" in str(info.value) and "past the topic's end" in str(info.value)
        assert [r.v for r in stream(fresh.service_url, False)] == ["b", "b", "b"]


# -- backfill over data already ingested -------------------------------------------------------------
def test_backfill_over_ingested_data_adds_nothing(spark: Any, broker: Broker, project: Path) -> None:
    produce(broker.service_url, "orders", 300)
    assert in_process("run", INGEST).code == 0
    for _ in range(2):  # the ingest job's own sink is append: the backfill merges on the position
        ran = in_process("backfill", INGEST, "--from", "earliest", "--to", "latest")
        assert ran.code == 0, ran
        assert "300 rows read, 0 new" in ran.out and "0 new rows in" in ran.out
        assert "(everything was already there)" in ran.out
        assert order_ids(project) == list(range(300))

    # a repair: rows lost from the table come back, once
    DeltaTable(str(project / "tables" / "orders_raw")).delete("order_id < 10")
    ran = in_process("backfill", INGEST, "--from", "earliest")
    assert "10 new rows in" in ran.out
    assert order_ids(project) == list(range(300))

    # messages the stream has not taken yet are the stream's to append, not the backfill's
    produce(broker.service_url, "orders", 50, first=300)
    ran = in_process("backfill", INGEST, "--from", "earliest")
    assert ran.code == 0 and "are left to the stream" in ran.out and "0 new rows in" in ran.out
    assert in_process("run", INGEST).code == 0
    assert order_ids(project) == list(range(350))


def test_backfill_refuses_an_append_sink_without_positions(spark: Any, broker: Broker, project: Path) -> None:
    produce(broker.service_url, "orders", 10)
    assert in_process("run", INGEST).code == 0
    produce(broker.service_url, "orders", 5, first=10)
    sql = '["SELECT CAST(value AS STRING) AS payload, CAST(publishTime AS DATE) AS publish_date FROM source"]'
    ran = in_process(
        "backfill",
        INGEST,
        "--from",
        "earliest",
        "--set",
        f"transform.sql={sql}",
    )
    assert ran.code == 1
    assert ran.err.startswith("jobs/orders_ingest.yaml: sink.delta.mode: a backfill must not duplicate rows")
    assert "lack topic, partition, ledgerId, entryId, batchIndex" in ran.err
    assert order_ids(project) == list(range(10))


def test_backfill_of_an_empty_window_says_so_without_spark(broker: Broker, tmp_path: Path) -> None:
    produce(broker.service_url, "orders", 10)
    ran = pipelines(
        "backfill",
        INGEST,
        "--from",
        "2030-01-01T00:00:00Z",
        "--to",
        "2030-01-02T00:00:00Z",
        PULSAR_URL=broker.service_url,
        PIPELINES_DATA_DIR=str(tmp_path),
    )
    assert ran.code == 0 and ran.seconds < 10, ran
    assert ran.out_lines == [
        "[orders_ingest] backfill 2030-01-01T00:00:00Z .. 2030-01-02T00:00:00Z: no messages in this "
        "window (1 topic-partition(s)); nothing to do"
    ]


# -- errors at run time map to job keys, before any data is read ----------------------------------------
def test_a_partition_column_missing_from_the_rows_fails_before_reading(
    spark: Any, broker: Broker, project: Path
) -> None:
    produce(broker.service_url, "orders", 20)
    ran = in_process("run", INGEST, "--set", "sink.delta.partition_by=[publish_day]")
    assert ran.code == 1 and ran.out == ""
    assert ran.err.startswith(
        "jobs/orders_ingest.yaml: sink.delta.partition_by: column publish_day is not in the transformed "
        "rows (columns: order_key, payload, topic, partition, ledgerId, entryId, batchIndex, publishTime, "
        "properties, order_id, customer, amount, publish_date)"
    )
    assert not (project / "tables" / "orders_raw").exists()
    assert "orders_ingest" not in broker.stats(ORDERS)["subscriptions"]  # the stream never started


def test_a_failure_inside_spark_is_one_line(spark: Any, broker: Broker, project: Path) -> None:
    produce(broker.service_url, "orders", 5)
    failing = (
        '["SELECT CAST(value AS STRING) AS payload, topic, `partition`, ledgerId, entryId, batchIndex, '
        'assert_true(entryId < 0) AS checked, CAST(publishTime AS DATE) AS publish_date FROM source"]'
    )
    ran = in_process("run", INGEST, "--set", f"transform.sql={failing}")
    assert ran.code == 1 and no_trace(ran.err.replace("SparkRuntimeException", "")), ran.err
    assert ran.err_lines == [
        "error: jobs/orders_ingest.yaml: SparkRuntimeException: '(entryId < 0)' is not true! SQLSTATE: P0001",
        "run with -v for the full trace",
    ]


def test_errors_are_short_and_traces_come_with_v(broker: Broker, tmp_path: Path) -> None:
    broken = tmp_path / "offsets" / "_delta_log"
    broken.mkdir(parents=True)
    (broken / "00000000000000000000.json").write_text("not json\n")
    args = ("offsets", "show", INGEST, "--set", f"offsets={tmp_path}/offsets")
    env = {"PULSAR_URL": broker.service_url, "PIPELINES_DATA_DIR": str(tmp_path)}
    ran = pipelines(*args, **env)
    assert ran.code == 1 and no_trace(ran.err)
    assert len(ran.err_lines) == 2 and ran.err_lines[0].startswith(f"error: offset table {tmp_path}/offsets")
    assert ran.err_lines[1] == "run with -v for the full trace"
    verbose = pipelines(*args, "-v", **env)  # -v after the command
    assert verbose.code == 1 and "Traceback" in verbose.err and "run with -v" not in verbose.err


# -- the CLI people expect ----------------------------------------------------------------------------
def test_version_help_and_list() -> None:
    ran = pipelines("--version")
    assert ran.code == 0 and ran.out.startswith("pipelines (pulsarwire) ")
    ran = pipelines()
    assert ran.code == 0 and ran.out.startswith("usage: pipelines") and "list" in ran.out
    ran = pipelines("list")
    assert ran.code == 0
    table = ".run/data/tables/orders_raw"
    assert ran.out_lines == [
        f"orders_backfill  jobs/orders_backfill.yaml  pulsar orders → delta {table} (merge)",
        f"orders_ingest    jobs/orders_ingest.yaml    pulsar orders → delta {table} (append)",
        f"orders_publish   jobs/orders_publish.yaml   delta {table} → pulsar orders-enriched",
    ]


def test_dry_run_and_plan_show_topics_and_start_positions(broker: Broker, tmp_path: Path) -> None:
    produce(broker.service_url, "orders", 40)
    env = {"PULSAR_URL": broker.service_url, "PIPELINES_DATA_DIR": str(tmp_path)}
    ran = pipelines("run", INGEST, "--dry-run", **env)
    assert ran.code == 0 and ran.seconds < 15, ran
    assert "topics: 1 topic-partition(s); starts from starting position earliest" in ran.out
    assert f"  {ORDERS}: from the earliest message; last message " in ran.out
    assert f"service_url: {broker.service_url}" in ran.out and ran.out.rstrip().endswith("runs it")
    assert not (tmp_path / "checkpoints").exists()
    assert broker.stats(ORDERS)["subscriptions"] == {}  # nothing subscribed
    ran = pipelines("validate", "--plan", INGEST, **env)
    assert ran.code == 0 and ran.out_lines[0] == f"ok  {INGEST}" and "starts from" in ran.out


def test_offsets_show_counts_the_backlog_in_messages(spark: Any, broker: Broker, project: Path) -> None:
    produce(broker.service_url, "orders", 100)  # batched: entries hold several messages
    assert in_process("run", INGEST).code == 0
    produce(broker.service_url, "orders", 35, first=100)
    ran = pipelines("offsets", "show", INGEST, PULSAR_URL=broker.service_url, PIPELINES_DATA_DIR=str(project))
    assert ran.code == 0, ran
    (row,) = [line for line in ran.out_lines if line.strip().startswith(ORDERS)]
    assert row.endswith("backlog 35 messages") and "  end " in row


def test_progress_lines_give_the_lag_in_messages(spark: Any, broker: Broker, project: Path) -> None:
    produce(broker.service_url, "orders", 90)
    ran = in_process("run", INGEST, "--set", "source.pulsar.max_messages_per_trigger=30")
    assert ran.code == 0
    batches = [line for line in ran.out_lines if "] batch " in line]
    assert len(batches) == 3
    assert batches[0].endswith(", 60 messages left, ETA " + batches[0].rsplit("ETA ", 1)[-1])
    assert batches[-1].endswith(", 0 messages left")  # no ETA once nothing is left


def test_progress_lines_printed_late_give_the_lag_after_their_own_batch(
    spark: Any, broker: Broker, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine Spark reports a batch's progress after later batches ran: the line
    still gives what was left just after its own batch (here every line waits for the end)."""
    late = runner.Progress.report

    def at_the_end(self: runner.Progress, query: Any, *, final: bool = False) -> None:
        if final:
            late(self, query, final=True)

    monkeypatch.setattr(runner.Progress, "report", at_the_end)
    produce(broker.service_url, "orders", 90)
    ran = in_process("run", INGEST, "--set", "source.pulsar.max_messages_per_trigger=30")
    assert ran.code == 0
    batches = [line for line in ran.out_lines if "] batch " in line]
    assert [line.split(" rows in ")[0].rsplit("] ", 1)[1] for line in batches] == [
        "batch 0: 30",
        "batch 1: 30",
        "batch 2: 30",
    ]
    assert [line.split(" s, ", 1)[1].split(" messages left")[0] for line in batches] == ["60", "30", "0"]


# -- Ctrl-C and SIGTERM ------------------------------------------------------------------------------
class Lines(list[str]):
    """A process's stdout lines, collected by a thread; :meth:`complete` waits for the last ones."""

    reader: threading.Thread

    def complete(self) -> Lines:
        self.reader.join(30)
        return self


def start_run(broker: Broker, data: Path, *args: str) -> tuple[subprocess.Popen[str], Lines]:
    """``pipelines run`` in its own process group (as a shell runs it); stdout lines collected."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines", "run", INGEST, *args],
        cwd=ROOT,
        env=command_env(PULSAR_URL=broker.service_url, PIPELINES_DATA_DIR=str(data)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines = Lines()
    assert proc.stdout is not None
    lines.reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    lines.reader.start()
    return proc, lines


def wait_for(lines: list[str], text: str, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in lines):
        assert proc.poll() is None, f"exited {proc.returncode} before {text!r}: {lines}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s: {lines}"
        time.sleep(0.05)


def processes() -> dict[int, tuple[int, int]]:
    """Every running process (zombies waiting to be reaped do not count): pid → (ppid, pgid)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            found[int(stat.parent.name)] = (int(fields[1]), int(fields[2]))
    return found


def descendants(pid: int) -> set[int]:
    """The processes ``pid`` started, and theirs: Spark's JVM (in a session of its own) and the
    Python workers it forks."""
    table = processes()
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        children = [p for p, (ppid, _) in table.items() if ppid == parent and p not in found]
        found.update(children)
        todo.extend(children)
    return found


def live_in(pgid: int) -> list[int]:
    """The running processes of a process group."""
    return [p for p, (_, g) in processes().items() if g == pgid]


def group_ends(pgid: int, also: set[int] | frozenset[int] = frozenset(), timeout: float = 30) -> bool:
    """Whether every process of the run's group, and ``also`` (its descendants: the JVM and Spark's
    Python workers, which are in a group of their own), has exited."""
    deadline = time.monotonic() + timeout
    while any(p in also or g == pgid for p, (_, g) in processes().items()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.long  # ~85 s: make test-long (CI's second step)
@pytest.mark.spark_process  # every run is its own process: the signals are the point
def test_signals_and_a_refused_second_run_leave_a_rerun_exactly_once(broker: Broker, tmp_path: Path) -> None:
    produce(broker.service_url, "orders", 6000)
    small = ("--set", "source.pulsar.max_messages_per_trigger=500")

    # Ctrl-C in a terminal: SIGINT to the whole process group; the batch in flight commits
    proc, lines = start_run(broker, tmp_path, *small)
    wait_for(lines, "] batch 0:", proc)
    spark = descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    t = time.monotonic()
    code = proc.wait(60)
    err = proc.stderr.read() if proc.stderr else ""
    assert code == 130 and time.monotonic() - t < 30, (code, err, lines.complete())
    assert no_trace(err), err
    assert [line for line in err.splitlines() if "SIGINT" in line] == [
        "[orders_ingest] SIGINT: stopping after the current batch (Ctrl-C again to stop at once)"
    ]
    assert len(err.splitlines()) <= 2  # that line and the JVM's own "Using incubator modules"
    assert "stopped (rerun to continue)" in lines.complete()[-1]
    assert group_ends(proc.pid, spark)  # no JVM or Python worker left behind
    stopped_at = len(order_ids(tmp_path))
    assert 0 < stopped_at < 6000 and stopped_at % 500 == 0  # whole batches only

    # while a run goes on, a second run of the job and a reset of its positions are refused at
    # once, in one line naming the run that holds the job's lock
    slow = ("--set", "source.pulsar.max_messages_per_trigger=50")  # still running after the refusals
    proc, lines = start_run(broker, tmp_path, *slow)
    wait_for(lines, "] batch ", proc)
    lock = f"{tmp_path}/checkpoints/orders_ingest.lock"
    for args in (("run", INGEST), ("offsets", "reset", INGEST, "--to", "earliest", "--yes")):
        ran = pipelines(*args, PULSAR_URL=broker.service_url, PIPELINES_DATA_DIR=str(tmp_path))
        assert ran.code == 1 and ran.out == "" and len(ran.err_lines) == 1, ran
        assert ran.err_lines[0].startswith(
            f"jobs/orders_ingest.yaml: checkpoint: job orders_ingest is busy: pipelines run {INGEST} "
            f"(pid {proc.pid} on "
        ), ran.err
        assert f"holds its lock {lock}; one command at a time" in ran.err_lines[0]
    assert proc.poll() is None  # the run goes on

    # SIGTERM to the whole process group (a shell's `kill -TERM -PGID`, a supervisor; docker stop
    # and kubectl send it to the process alone, which is the same for the driver): the batch in
    # flight commits, exit 143; Spark's JVM and workers, in a session of their own, are not hit
    spark = descendants(proc.pid)
    assert spark - set(live_in(proc.pid)), "Spark's JVM runs outside the driver's process group"
    os.killpg(proc.pid, signal.SIGTERM)
    code = proc.wait(60)
    err = proc.stderr.read() if proc.stderr else ""
    assert code == 143 and no_trace(err) and len(err.splitlines()) <= 2, (code, err, lines.complete())
    assert [line for line in err.splitlines() if "SIGTERM" in line] == [
        "[orders_ingest] SIGTERM: stopping after the current batch (send it again to stop at once)"
    ]
    assert "stopped (rerun to continue)" in lines.complete()[-1] and group_ends(proc.pid, spark)
    assert len(order_ids(tmp_path)) % 50 == 0

    # Ctrl-C twice (impatient): the second stops at once, mid-batch, still without a trace
    proc, lines = start_run(broker, tmp_path, *small)
    wait_for(lines, "] batch ", proc)
    spark = descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    code = proc.wait(60)
    err = proc.stderr.read() if proc.stderr else ""
    assert code == 130 and no_trace(err), (code, err, lines.complete())
    assert "SIGINT again: stopping now" in err
    assert group_ends(proc.pid, spark)

    # the rerun takes everything else, exactly once
    ran = pipelines("run", INGEST, PULSAR_URL=broker.service_url, PIPELINES_DATA_DIR=str(tmp_path))
    assert ran.code == 0, ran
    assert order_ids(tmp_path) == list(range(6000))
