"""Idempotent Delta writes keyed by (app id, version), on real tables under tmp_path."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from pipelines.errors import OptionError, PipelinesError
from pipelines.state.delta import delta_spark_available, is_table_name, last_version, write_idempotent


def batch(*ids: int, tag: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "tag": pa.array([tag] * len(ids), pa.string())})


def rows(path: Path | str) -> list[tuple[Any, ...]]:
    data = DeltaTable(str(path)).to_pyarrow_table()
    return sorted(tuple(r.values()) for r in data.to_pylist())


@pytest.fixture
def target(tmp_path: Path) -> str:
    return str(tmp_path / "sink")


def test_replay_of_a_version_is_skipped(target: str) -> None:
    assert write_idempotent(batch(1, 2), target, "app", 0) is True
    assert write_idempotent(batch(1, 2), target, "app", 0) is False
    assert rows(target) == [(1, "x"), (2, "x")]
    assert last_version(target, "app") == 0
    assert DeltaTable(target).version() == 1  # the empty table, then the one write


def test_next_version_appends_and_older_ones_are_skipped(target: str) -> None:
    assert write_idempotent(batch(1), target, "app", 0) is True
    assert write_idempotent(batch(2), target, "app", 1) is True
    assert write_idempotent(batch(9), target, "app", 0) is False
    assert write_idempotent(batch(9), target, "app", 1) is False
    assert rows(target) == [(1, "x"), (2, "x")]
    assert last_version(target, "app") == 1


def test_versions_may_skip_ahead(target: str) -> None:
    assert write_idempotent(batch(1), target, "app", 5) is True
    assert write_idempotent(batch(2), target, "app", 9) is True
    assert write_idempotent(batch(3), target, "app", 7) is False
    assert rows(target) == [(1, "x"), (2, "x")]


def test_two_app_ids_are_independent(target: str) -> None:
    assert write_idempotent(batch(1), target, "a", 0) is True
    assert write_idempotent(batch(2), target, "b", 0) is True
    assert write_idempotent(batch(3), target, "a", 0) is False
    assert write_idempotent(batch(4), target, "b", 1) is True
    assert rows(target) == [(1, "x"), (2, "x"), (4, "x")]
    assert (last_version(target, "a"), last_version(target, "b"), last_version(target, "c")) == (0, 1, None)


def test_last_version_of_a_missing_table(target: str) -> None:
    assert last_version(target, "app") is None


def test_record_batch_reader(target: str) -> None:
    data = batch(1, 2, 3)
    assert write_idempotent(pa.RecordBatchReader.from_batches(data.schema, data.to_batches()), target, "a", 0)
    again = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    assert write_idempotent(again, target, "a", 0) is False
    assert rows(target) == [(1, "x"), (2, "x"), (3, "x")]


def test_overwrite_mode(target: str) -> None:
    assert write_idempotent(batch(1, 2), target, "app", 0) is True
    assert write_idempotent(batch(3), target, "app", 1, mode="overwrite") is True
    assert write_idempotent(batch(4), target, "app", 1, mode="overwrite") is False
    assert rows(target) == [(3, "x")]


def test_partition_by(target: str) -> None:
    assert write_idempotent(batch(1, tag="a"), target, "app", 0, partition_by=["tag"]) is True
    assert write_idempotent(batch(2, tag="b"), target, "app", 1, partition_by=["tag"]) is True
    assert DeltaTable(target).metadata().partition_columns == ["tag"]
    assert rows(target) == [(1, "a"), (2, "b")]


def test_merge_mode_upserts_by_keys(target: str) -> None:
    assert write_idempotent(batch(1, 2, tag="v0"), target, "app", 0, mode="merge", merge_keys=["id"]) is True
    update = pa.table({"id": pa.array([2, 3], pa.int64()), "tag": ["v1", "v1"]})
    assert write_idempotent(update, target, "app", 1, mode="merge", merge_keys=["id"]) is True
    assert (
        write_idempotent(batch(2, tag="replayed"), target, "app", 1, mode="merge", merge_keys=["id"]) is False
    )
    assert rows(target) == [(1, "v0"), (2, "v1"), (3, "v1")]
    assert last_version(target, "app") == 1


def test_merge_on_several_keys_with_odd_names(target: str) -> None:
    def data(tag: str) -> pa.Table:
        return pa.table({"my key": pa.array([1, 1], pa.int64()), 'k"2': ["a", "b"], "v": [tag, tag]})

    assert write_idempotent(data("old"), target, "app", 0, mode="merge", merge_keys=["my key", 'k"2'])
    assert write_idempotent(data("new"), target, "app", 1, mode="merge", merge_keys=["my key", 'k"2'])
    assert rows(target) == [(1, "a", "new"), (1, "b", "new")]


@pytest.mark.parametrize("existing", [False, True], ids=["new-table", "existing-table"])
def test_concurrent_writers_of_one_version_write_once(tmp_path: Path, existing: bool) -> None:
    target = str(tmp_path / "sink")
    if existing:
        assert write_idempotent(batch(0), target, "other", 0)
    start = threading.Barrier(3)
    results: list[object] = []

    def write() -> None:
        start.wait()
        try:
            results.append(write_idempotent(batch(1, 2), target, "app", 0))
        except Exception as exc:  # pragma: no cover - reported below
            results.append(exc)

    threads = [threading.Thread(target=write) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=str) == [False, False, True]
    assert rows(target) == ([(0, "x")] if existing else []) + [(1, "x"), (2, "x")]


def test_bad_arguments(target: str) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"app_id": ""}, "app_id: expected a non-empty string, got ''"),
        ({"version": -1}, "version: expected an integer >= 0, got -1"),
        ({"version": True}, "version: expected an integer >= 0, got True"),
        ({"mode": "upsert"}, "mode: expected one of append, overwrite, merge, got 'upsert'"),
        ({"mode": "merge"}, "merge_keys: mode 'merge' needs at least one key column"),
        ({"merge_keys": ["id"]}, "merge_keys: only used with mode 'merge', not 'append'"),
        (
            {"mode": "merge", "merge_keys": ["a`b"]},
            "merge_keys: not a usable column name: 'a`b' (empty, or contains '`')",
        ),
    ]
    for override, message in cases:
        kw: dict[str, Any] = {"app_id": "app", "version": 0} | override
        with pytest.raises(OptionError) as info:
            write_idempotent(batch(1), target, **kw)
        assert str(info.value) == message
    with pytest.raises(OptionError) as info:
        write_idempotent([{"id": 1}], target, "app", 0)
    assert str(info.value) == "data: expected a pyarrow Table or RecordBatchReader, got list"
    assert not Path(target).exists()


def test_catalog_name_needs_delta_spark() -> None:
    with pytest.raises(PipelinesError, match=r"^sink_table: deltalake writes need a path or URI"):
        write_idempotent(batch(1), "sink_table", "app", 0)
    with pytest.raises(
        PipelinesError, match=r"^db\.sink: a catalog table name needs a SparkSession with delta"
    ):
        last_version("db.sink", "app")


def test_unwritable_target(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(PipelinesError, match="/file/sink: "):
        write_idempotent(batch(1), str(tmp_path / "file" / "sink"), "app", 0)


def test_is_table_name(tmp_path: Path) -> None:
    assert is_table_name("db.table") and is_table_name("table")
    assert not is_table_name("s3://bucket/t") and not is_table_name("dir/t") and not is_table_name(tmp_path)


# --------------------------------------------------------------------------- Spark DataFrames


def test_spark_dataframe_without_delta_spark_goes_through_deltalake(spark: Any, target: str) -> None:
    assert not delta_spark_available(spark), "the suite's main session runs the deltalake paths"
    df = spark.createDataFrame([(1, "a", 1.5), (2, None, -0.25)], "id long, tag string, score double")
    assert write_idempotent(df, target, "query-1", 0) is True
    assert write_idempotent(df, target, "query-1", 0) is False
    assert write_idempotent(df.limit(1), target, "query-1", 1) is True
    back = spark.createDataFrame(DeltaTable(target).to_pyarrow_table())
    expected = spark.createDataFrame([(1, "a", 1.5), (2, None, -0.25), (1, "a", 1.5)], df.schema)
    assert_df_equality(back, expected, ignore_row_order=True, ignore_nullable=True)
    assert last_version(target, "query-1", spark) == 1


def test_spark_dataframe_with_delta_spark(delta_spark: Any, tmp_path: Path) -> None:
    spark = delta_spark
    assert delta_spark_available(spark)
    target = str(tmp_path / "sink")
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, tag string")
    assert write_idempotent(df, target, "q", 0, spark=spark) is True
    assert write_idempotent(df, target, "q", 0, spark=spark) is False
    assert write_idempotent(df.limit(1), target, "q", 1, spark=spark) is True
    expected = spark.createDataFrame([(1, "a"), (1, "a"), (2, "b")], "id long, tag string")
    assert_df_equality(
        spark.read.format("delta").load(target), expected, ignore_row_order=True, ignore_nullable=True
    )
    assert last_version(target, "q", spark) == 1
    update = spark.createDataFrame([(2, "B"), (3, "c")], "id long, tag string")
    assert write_idempotent(update, target, "q", 2, mode="merge", merge_keys=["id"], spark=spark) is True
    assert write_idempotent(update, target, "q", 2, mode="merge", merge_keys=["id"], spark=spark) is False
    expected = spark.createDataFrame([(1, "a"), (1, "a"), (2, "B"), (3, "c")], "id long, tag string")
    assert_df_equality(
        spark.read.format("delta").load(target), expected, ignore_row_order=True, ignore_nullable=True
    )
