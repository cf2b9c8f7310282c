"""The Delta offset store on real Delta tables under tmp_path.

Most tests use the deltalake engine (no Spark). The delta-spark engine runs the same
scenarios on the suite's Delta session (``delta_spark``: the Delta jars Maven fetched,
tests/helpers/peers.py) under ``make test-long`` (CI): in ``make test`` they were the longest
part of its longest path, the one worker of the Spark session.
"""

from __future__ import annotations

import logging
import re
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from pipelines.errors import OffsetStoreError, StaleEpochError
from pipelines.state.delta import CommitRetry
from pipelines.state.offsets import (
    COLUMNS,
    DeltaRsEngine,
    DeltaSparkEngine,
    OffsetStore,
    engine_for,
    partition_of,
)
from pipelines.state.positions import Offsets, Position

T0 = "persistent://public/default/orders-partition-0"
T1 = "persistent://public/default/orders-partition-1"
PLAIN = "persistent://public/default/plain"


def offs(**kw: str) -> Offsets:
    names = {"t0": T0, "t1": T1, "plain": PLAIN}
    return Offsets({names[k]: Position.parse(v) for k, v in kw.items()})


DELTA_SPARK = pytest.param("delta-spark", marks=[pytest.mark.spark, pytest.mark.long])


@pytest.fixture(params=["deltalake", DELTA_SPARK])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> OffsetStore:
    path = tmp_path / "offsets"
    if request.param == "deltalake":
        return OffsetStore(str(path), engine=DeltaRsEngine(str(path)))
    engine = DeltaSparkEngine(request.getfixturevalue("delta_spark"), str(path))
    return OffsetStore(str(path), engine=engine)


@pytest.fixture
def rs_store(tmp_path: Path) -> OffsetStore:
    return OffsetStore(tmp_path / "offsets")


# --------------------------------------------------------------------------- both engines


def test_load_on_missing_table_is_empty(store: OffsetStore) -> None:
    assert store.load("job") == Offsets()
    assert store.rows("job") == []


def test_commit_then_load(store: OffsetStore) -> None:
    store.commit("job", offs(t0="5:10:-1", t1="6:0:3"), batch_id=0)
    assert store.load("job") == offs(t0="5:10:-1", t1="6:0:3")


def test_second_commit_adds_topics_and_advances(store: OffsetStore) -> None:
    store.commit("job", offs(t0="5:10:-1"), batch_id=0)
    store.commit("job", offs(t0="5:11:-1", plain="1:2:-1"), batch_id=1)
    assert store.load("job") == offs(t0="5:11:-1", plain="1:2:-1")
    assert [(r["topic"], r["batch_id"]) for r in store.rows("job")] == [(T0, 1), (PLAIN, 1)]


def test_backwards_commit_keeps_newer_position_and_warns(
    store: OffsetStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.commit("job", offs(t0="5:10:-1", t1="6:0:3"), batch_id=4)
    with caplog.at_level(logging.WARNING, logger="pipelines.state.offsets"):
        store.commit("job", offs(t0="5:9:-1", t1="6:0:4"), batch_id=3)  # batch 3 replayed
    assert store.load("job") == offs(t0="5:10:-1", t1="6:0:4")
    assert {r["topic"]: r["batch_id"] for r in store.rows("job")} == {T0: 4, T1: 3}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"would move {T0} back from 5:10:-1 to 5:9:-1; keeping 5:10:-1" in warnings[0]
    assert "'job' batch 3" in warnings[0]


def test_whole_entry_is_ahead_of_its_batch_indexes(store: OffsetStore) -> None:
    store.commit("job", offs(t0="5:10:-1"), batch_id=1)
    store.commit("job", offs(t0="5:10:7"), batch_id=2)  # inside the entry already taken
    assert store.load("job") == offs(t0="5:10:-1")
    store.commit("job", offs(t0="5:11:0"), batch_id=3)
    assert store.load("job") == offs(t0="5:11:0")


def test_same_position_replayed_keeps_newer_batch_id(store: OffsetStore) -> None:
    store.commit("job", offs(t0="5:10:-1"), batch_id=7, checkpoint="/ck/a")
    store.commit("job", offs(t0="5:10:-1"), batch_id=6, checkpoint="/ck/b")
    [row] = store.rows("job")
    assert (row["batch_id"], row["checkpoint"]) == (7, "/ck/a")
    store.commit("job", offs(t0="5:10:-1"), batch_id=8, checkpoint="/ck/c")
    [row] = store.rows("job")
    assert (row["batch_id"], row["checkpoint"]) == (8, "/ck/c")


def test_reset_moves_backwards_and_leaves_other_topics(store: OffsetStore) -> None:
    store.commit("job", offs(t0="5:10:-1", t1="6:0:3"), batch_id=9)
    assert store.epoch("job") == 0
    epoch = store.reset("job", offs(t0="-1:-1:-1"))
    assert epoch == 1 and store.epoch("job") == 1
    assert store.load("job") == offs(t0="-1:-1:-1", t1="6:0:3")
    assert {r["topic"]: r["batch_id"] for r in store.rows("job")} == {T0: -1, T1: 9}
    store.commit("job", offs(t0="0:0:-1"), batch_id=0, epoch=epoch)  # earliest is behind everything
    assert store.load("job") == offs(t0="0:0:-1", t1="6:0:3")


def test_a_run_that_outlived_a_reset_records_nothing(store: OffsetStore) -> None:
    """A run reads the epoch when it starts; after a reset its commits are refused, before the
    write and inside the MERGE (a commit that raced the reset)."""
    store.commit("job", offs(t0="5:10:-1"), batch_id=3, epoch=0)
    store.reset("job", offs(t0="1:0:-1"))
    with pytest.raises(StaleEpochError, match="were reset while this run was running"):
        store.commit("job", offs(t0="5:11:-1"), batch_id=4, epoch=0)
    store.engine.upsert(  # the same row past the check, as a racing writer would send it
        [{**store.rows("job")[0], "ledger_id": 5, "entry_id": 12, "message_id": "5:12:-1", "reset_epoch": 0}],
        forward_only=True,
    )
    assert store.load("job") == offs(t0="1:0:-1")
    store.commit("job", offs(t0="1:5:-1"), batch_id=0, epoch=1)
    assert store.load("job") == offs(t0="1:5:-1")


def test_a_store_written_before_reset_epochs_is_read_and_gains_the_column(tmp_path: Path) -> None:
    """A table of the columns the store had before (no reset_epoch): read at epoch 0, commits and
    resets add the column; the rows it had are kept."""
    path = str(tmp_path / "old-offsets")
    old = [f for f in DeltaRsEngine.schema() if f.name != "reset_epoch"]
    row = {
        "job": "job", "topic": T0, "partition": 0, "ledger_id": 5, "entry_id": 10, "batch_index": -1,
        "message_id": "5:10:-1", "batch_id": 7, "committed_at": datetime.now(UTC), "checkpoint": "/ck",
    }  # fmt: skip
    write_deltalake(path, pa.Table.from_pylist([row], schema=pa.schema(old)))
    store = OffsetStore(path)
    assert store.load("job") == offs(t0="5:10:-1") and store.epoch("job") == 0
    store.commit("job", offs(t0="5:11:-1", t1="2:0:-1"), batch_id=8)
    assert store.state("job") == (offs(t0="5:11:-1", t1="2:0:-1"), 0)
    assert store.reset("job", offs(t1="1:0:-1")) == 1
    assert store.state("job") == (offs(t0="5:11:-1", t1="1:0:-1"), 1)
    assert "reset_epoch" in {f.name for f in DeltaTable(path).schema().fields}


def test_delete(store: OffsetStore) -> None:
    store.commit("job", offs(t0="5:10:-1", t1="6:0:3"), batch_id=0)
    store.commit("other", offs(t0="1:1:-1"), batch_id=0)
    store.delete("job", topics=[T1])
    assert store.load("job") == offs(t0="5:10:-1")
    store.delete("job")
    assert store.load("job") == Offsets()
    assert store.load("other") == offs(t0="1:1:-1")
    store.delete("never-committed")
    assert store.load("other") == offs(t0="1:1:-1")


def test_two_jobs_are_independent(store: OffsetStore) -> None:
    store.commit("a", offs(t0="5:10:-1"), batch_id=3)
    store.commit("b", offs(t0="1:0:-1"), batch_id=0)  # behind a's position: not a's business
    assert store.load("a") == offs(t0="5:10:-1")
    assert store.load("b") == offs(t0="1:0:-1")
    store.reset("b", offs(t0="0:0:-1"))
    assert store.load("a") == offs(t0="5:10:-1")


def test_names_with_quotes_spaces_and_sql(store: OffsetStore) -> None:
    job = 'it\'s "my" job`; DROP TABLE x; --'
    topic = 'persistent://public/default/we\'ird "topic" OR 1=1-partition-3'
    store.commit(job, Offsets({topic: Position(1, 2, -1)}), batch_id=0)
    store.commit("it's", Offsets({topic: Position(9, 9, -1)}), batch_id=0)
    assert store.load(job) == Offsets({topic: Position(1, 2, -1)})
    [row] = store.rows(job)
    assert (row["job"], row["topic"], row["partition"]) == (job, topic, 3)
    store.delete(job)
    assert store.load(job) == Offsets()
    assert store.load("it's") == Offsets({topic: Position(9, 9, -1)})


def test_rows_contents(store: OffsetStore) -> None:
    before = datetime.now(UTC)
    store.commit("job", offs(t1="6:0:3", plain="7:8:-1"), batch_id=12, checkpoint="s3://ck/job")
    after = datetime.now(UTC)
    rows = store.rows("job")
    for row in rows:
        ts = row.pop("committed_at")
        assert ts.utcoffset() == timedelta(0)
        assert before - timedelta(milliseconds=1) <= ts <= after
    assert [list(r) for r in rows] == [[c for c in COLUMNS if c != "committed_at"]] * 2
    assert rows == [
        {
            "job": "job",
            "topic": T1,
            "partition": 1,
            "ledger_id": 6,
            "entry_id": 0,
            "batch_index": 3,
            "message_id": "6:0:3",
            "batch_id": 12,
            "checkpoint": "s3://ck/job",
            "reset_epoch": 0,
        },
        {
            "job": "job",
            "topic": PLAIN,
            "partition": -1,
            "ledger_id": 7,
            "entry_id": 8,
            "batch_index": -1,
            "message_id": "7:8:-1",
            "batch_id": 12,
            "checkpoint": "s3://ck/job",
            "reset_epoch": 0,
        },
    ]


def test_checkpoint_may_be_null(store: OffsetStore) -> None:
    store.commit("job", offs(t0="1:1:-1"), batch_id=0)
    assert [r["checkpoint"] for r in store.rows("job")] == [None]


def test_empty_commit_is_a_no_op(store: OffsetStore) -> None:
    store.commit("job", Offsets(), batch_id=0)
    assert store.rows("job") == []


# --------------------------------------------------------------------------- deltalake engine


def test_table_schema(rs_store: OffsetStore, tmp_path: Path) -> None:
    rs_store.commit("job", offs(t0="1:1:-1"), batch_id=0)
    fields = [
        (f.name, f.type.type, f.nullable) for f in DeltaTable(str(tmp_path / "offsets")).schema().fields
    ]
    assert fields == [
        ("job", "string", False),
        ("topic", "string", False),
        ("partition", "integer", False),
        ("ledger_id", "long", False),
        ("entry_id", "long", False),
        ("batch_index", "integer", False),
        ("message_id", "string", False),
        ("batch_id", "long", False),
        ("committed_at", "timestamp", False),
        ("checkpoint", "string", True),
        ("reset_epoch", "long", True),
    ]


def test_concurrent_commits_of_two_jobs_all_land(tmp_path: Path) -> None:
    path = str(tmp_path / "offsets")
    errors: list[BaseException] = []

    def run(job: str) -> None:
        store = OffsetStore(path)
        try:
            for i in range(20):
                store.commit(job, offs(t0=f"1:{i}:-1", t1=f"2:{i}:-1"), batch_id=i)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(j,)) for j in ("job-a", "job-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store = OffsetStore(path)
    for job in ("job-a", "job-b"):
        assert store.load(job) == offs(t0="1:19:-1", t1="2:19:-1")
        assert [r["batch_id"] for r in store.rows(job)] == [19, 19]


def test_racing_commits_of_one_topic_end_at_the_highest_position(tmp_path: Path) -> None:
    # Three writers commit interleaved positions of the same (job, topic): commits conflict,
    # are retried, and the forward-only MERGE keeps the highest one in a single row.
    path = str(tmp_path / "offsets")
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        store = OffsetStore(path)
        start.wait()
        try:
            for i in range(8):
                store.commit("job", offs(t0=f"1:{i * 3 + k}:-1"), batch_id=i * 3 + k)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [(r["message_id"], r["batch_id"]) for r in OffsetStore(path).rows("job")] == [("1:23:-1", 23)]
    assert DeltaTable(path).to_pyarrow_table().num_rows == 1


def test_commit_conflicts_are_retried(rs_store: OffsetStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rs_store.engine = DeltaRsEngine(rs_store.table, retry=CommitRetry(attempts=4, initial_backoff=0.001))
    real_merge = DeltaTable.merge
    calls = []

    def flaky(self: DeltaTable, *args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) <= 2:
            raise CommitFailedError("Commit failed: a concurrent transactions added new data.")
        return real_merge(self, *args, **kw)

    monkeypatch.setattr(DeltaTable, "merge", flaky)
    rs_store.commit("job", offs(t0="1:1:-1"), batch_id=0)
    assert len(calls) == 3
    assert rs_store.load("job") == offs(t0="1:1:-1")


def test_commit_gives_up_after_bounded_retries(
    rs_store: OffsetStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rs_store.engine = DeltaRsEngine(rs_store.table, retry=CommitRetry(attempts=3, initial_backoff=0.001))

    def conflict(self: DeltaTable, *args: Any, **kw: Any) -> Any:
        raise CommitFailedError("Commit failed: a concurrent transactions added new data.")

    monkeypatch.setattr(DeltaTable, "merge", conflict)
    with pytest.raises(OffsetStoreError) as info:
        rs_store.commit("job", offs(t0="1:1:-1"), batch_id=0)
    assert str(info.value).startswith(f"offset table {rs_store.table}: gave up after 3 attempts")


def test_file_where_a_directory_is_expected(tmp_path: Path) -> None:
    path = tmp_path / "offsets"
    path.write_text("not a table")
    store = OffsetStore(path)
    with pytest.raises(OffsetStoreError, match=re.escape(f"offset table {path}: reading failed")):
        store.load("job")
    with pytest.raises(OffsetStoreError, match=re.escape(f"offset table {path}: ")):
        store.commit("job", offs(t0="1:1:-1"), batch_id=0)


def test_path_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    store = OffsetStore(tmp_path / "file" / "offsets")
    with pytest.raises(OffsetStoreError, match=r"^offset table .*/file/offsets: commit failed"):
        store.commit("job", offs(t0="1:1:-1"), batch_id=0)


def test_bad_arguments(rs_store: OffsetStore) -> None:
    with pytest.raises(OffsetStoreError, match="job must be a non-empty string"):
        rs_store.load("")
    with pytest.raises(OffsetStoreError, match="offsets must be an Offsets mapping, got dict"):
        rs_store.commit("job", {T0: Position(1, 1)}, batch_id=0)  # type: ignore[arg-type]
    with pytest.raises(OffsetStoreError, match="batch_id must be an integer, got '1'"):
        rs_store.commit("job", offs(t0="1:1:-1"), batch_id="1")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- choosing an engine


def test_engine_for_paths_without_spark(tmp_path: Path) -> None:
    assert isinstance(engine_for(tmp_path / "o"), DeltaRsEngine)
    assert isinstance(engine_for("s3://bucket/offsets"), DeltaRsEngine)
    assert isinstance(engine_for("relative/offsets"), DeltaRsEngine)
    assert isinstance(OffsetStore(str(tmp_path / "o")).engine, DeltaRsEngine)


def test_catalog_name_without_delta_spark_is_an_error() -> None:
    with pytest.raises(OffsetStoreError) as info:
        OffsetStore("ops.pulsar_offsets")
    assert str(info.value) == (
        "offset table ops.pulsar_offsets: looks like a catalog table name, which needs delta-spark "
        "(Delta jars and DeltaSparkSessionExtension), but no SparkSession was given; "
        "give a path or URI instead"
    )


def test_engine_for_spark_session(spark: Any, tmp_path: Path) -> None:
    from pipelines.state.delta import delta_spark_available

    if delta_spark_available(spark):
        assert isinstance(engine_for(tmp_path / "o", spark), DeltaSparkEngine)
        assert isinstance(engine_for("ops.offsets", spark), DeltaSparkEngine)
        return
    assert isinstance(engine_for(tmp_path / "o", spark), DeltaRsEngine)
    with pytest.raises(OffsetStoreError, match="but the SparkSession has no delta-spark"):
        engine_for("ops.offsets", spark)


def test_spark_merge_source_view(spark: Any, tmp_path: Path) -> None:
    # The delta-spark engine's MERGE source needs no Delta: check its rows and types here.
    from chispa.schema_comparer import assert_schema_equality
    from pyspark.sql.types import (
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from pipelines.state.offsets import _SPARK_DDL

    engine = DeltaSparkEngine(spark, str(tmp_path / "o"))
    ts = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    row = {"job": "j'1", "topic": T1, "partition": 1, "ledger_id": 6, "entry_id": 0, "batch_index": 3}
    row |= {"message_id": "6:0:3", "batch_id": 2, "committed_at": ts, "checkpoint": None, "reset_epoch": 1}
    view = engine._source([row], _SPARK_DDL)
    try:
        got = spark.table(view).collect()
        fields = spark.table(view).schema.fields
    finally:
        spark.catalog.dropTempView(view)
    [r] = got
    back = r.asDict()
    back["committed_at"] = back["committed_at"].astimezone(UTC)
    assert back == row
    assert_schema_equality(
        StructType(fields[:3]),
        StructType(
            [
                StructField("job", StringType(), False),
                StructField("topic", StringType(), False),
                StructField("partition", IntegerType(), False),
            ]
        ),
    )
    assert_schema_equality(
        StructType(fields[-3:]),
        StructType(
            [
                StructField("committed_at", TimestampType(), False),
                StructField("checkpoint", StringType(), True),
                StructField("reset_epoch", LongType(), True),
            ]
        ),
    )


def test_partition_of() -> None:
    assert partition_of(T0) == 0
    assert partition_of("persistent://t/n/x-partition-12") == 12
    assert partition_of(PLAIN) == -1
    assert partition_of("persistent://t/n/x-partition-") == -1
    assert partition_of("persistent://t/n/x-partition-2-suffix") == -1
