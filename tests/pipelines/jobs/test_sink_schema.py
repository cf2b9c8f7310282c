"""Schema evolution of a job's Delta table (pipelines/jobs/sink_schema.py, ``sink.delta.schema_mode``).

Without ``schema_mode: merge`` a transform whose columns differ from the table's fails before
the query starts, one line per column naming the job key; with it the new columns are added.
The refusal is checked through ``pipelines run`` as its own process (the stream must not have
started: no subscription on the broker, the table untouched); the merge on the suite's session.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from jobs.demo import produce
from pipelines.jobs.sink_schema import differences, type_text
from pulsarwire.broker import Broker
from tests.helpers.cli import ROOT, pipelines
from tests.helpers.orders_job import INGEST, ORDERS, in_process, order_ids


def struct(**fields: Any) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [{"name": k, "type": v, "nullable": True, "metadata": {}} for k, v in fields.items()],
    }


def test_differences_are_named_column_by_column() -> None:
    item = struct(sku="string", qty="integer")
    table = struct(id="long", items={"type": "array", "elementType": item, "containsNull": True}, gone="date")
    rows = struct(
        id="string",
        items={
            "type": "array",
            "elementType": struct(sku="string", qty="long", note="string"),
            "containsNull": False,
        },
        extra="decimal(10,2)",
    )
    found = [(d.kind, d.column, type_text(d.rows), type_text(d.table)) for d in differences(rows, table)]
    assert found == [
        ("type", "id", "string", "long"),
        ("type", "items[].qty", "long", "integer"),
        ("new", "items[].note", "string", "-"),
        ("new", "extra", "decimal(10,2)", "-"),
        ("missing", "gone", "-", "date"),
    ]
    # nullability and metadata are not compared
    same = struct(id="long", items={"type": "array", "elementType": item, "containsNull": False}, gone="date")
    assert list(differences(same, table)) == []


@pytest.mark.long  # make test-long (CI): the suite's longest path is its Spark-process tests
@pytest.mark.spark_process  # the run starts Spark in its own process
def test_columns_that_differ_from_the_table_are_named_before_reading(broker: Broker, tmp_path: Path) -> None:
    produce(broker.service_url, "orders", 20)
    table = tmp_path / "tables" / "orders_raw"
    write_deltalake(
        str(table),
        pa.table(
            {
                "payload": ["{}"],
                "amount": [1.5],
                "customer": ["c-1"],
                "publish_date": [datetime.date(2026, 1, 1)],
            }
        ),
        partition_by=["publish_date"],
    )
    sql = [
        "SELECT CAST(value AS STRING) AS payload, CAST(publishTime AS DATE) AS publish_date, "
        "CAST(1 AS STRING) AS amount, 1 AS extra FROM source"
    ]
    ran = pipelines(
        "run",
        INGEST,
        "--set",
        f"transform.sql={json.dumps(sql)}",
        PULSAR_URL=broker.service_url,
        PIPELINES_DATA_DIR=str(tmp_path),
    )
    assert ran.code == 1 and ran.out == "", ran
    where, key = f"the table {table}", "jobs/orders_ingest.yaml: sink.delta.schema_mode"
    assert [line for line in ran.err_lines if "Using incubator modules" not in line] == [
        f"jobs/orders_ingest.yaml: transform: column amount is string in the transformed rows but double in "
        f"{where}; cast it to double in the transform (schema_mode: merge adds columns, it does not change a "
        "column's type)",
        f"{key}: column extra (integer) of the transformed rows is not in {where}; set "
        "sink.delta.schema_mode: merge to add it, or leave it out in the transform",
        f"{key}: column customer (string) of {where} is not in the transformed rows; set "
        "sink.delta.schema_mode: merge to write it as null, or produce it in the transform",
    ]
    assert "orders_ingest" not in broker.stats(ORDERS)["subscriptions"]  # the stream never started
    assert DeltaTable(str(table)).version() == 0 and not (tmp_path / "tables" / "pipeline_offsets").exists()


def test_schema_mode_merge_adds_a_column(spark: Any, broker: Broker, repo_data: Path) -> None:
    produce(broker.service_url, "orders", 20)
    assert in_process("run", INGEST).code == 0
    produce(broker.service_url, "orders", 10, first=20)
    statements = yaml.safe_load((ROOT / INGEST).read_text())["transform"]["sql"]
    with_discount = json.dumps([*statements, "SELECT *, round(amount * 0.1, 2) AS discount FROM source"])

    ran = in_process("run", INGEST, "--set", f"transform.sql={with_discount}")
    assert ran.code == 1 and ran.out == "", ran
    assert ran.err_lines == [
        "jobs/orders_ingest.yaml: sink.delta.schema_mode: column discount (double) of the transformed rows "
        f"is not in the table {repo_data}/tables/orders_raw; set sink.delta.schema_mode: merge to add it, or "
        "leave it out in the transform"
    ]
    assert order_ids(repo_data) == list(range(20))

    ran = in_process(
        "run", INGEST, "--set", f"transform.sql={with_discount}", "--set", "sink.delta.schema_mode=merge"
    )
    assert ran.code == 0, ran
    rows = DeltaTable(str(repo_data / "tables" / "orders_raw")).to_pyarrow_table()
    assert sorted(rows.column("order_id").to_pylist()) == list(range(30))
    new = rows.filter(pc.greater_equal(rows.column("order_id"), 20))
    assert new.column("discount").null_count == 0  # the new rows carry it, the old ones read null
    assert rows.column("discount").null_count == 20
