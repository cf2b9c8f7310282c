"""Transforms: SQL and Python steps chain in order; SQL is checked without a JVM; errors are one line.

Issue 28, point 12. A ``transform`` list of steps (SQL, Python, SQL) runs in order in one job
(the suite's session, through the command's ``main``); ``pipelines validate`` (its own
process) names the statement, line and column of a syntax error; a statement Spark cannot
analyse (a column that does not exist) fails the run in one short line on stderr, without
pyspark's JSON log of the error (its own process: the log is written to the process's stderr).
"""

from __future__ import annotations

import json
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from jobs.demo import produce
from pipelines.jobs.cli import main as cli
from pulsarwire.broker import Broker
from tests.helpers.cli import pipelines

INGEST = "jobs/orders_ingest.yaml"

STEPS = """
    name: {name}
    source:
      pulsar:
        service_url: {url}
        topic: {topic}
        starting_offsets: earliest
    transform:
      - sql: SELECT CAST(value AS STRING) AS payload, 'sql1' AS step FROM source
      - python: chain_steps:tag
      - sql:
          - SELECT payload, concat(step, '>sql2') AS step FROM source
          - SELECT payload, concat(step, '>sql3') AS step FROM source
    sink:
      delta:
        path: {table}
    checkpoint: {data}/checkpoint
    offsets: {data}/offsets
"""

TAG = """
from pyspark.sql import functions as F


def tag(df):
    return df.withColumn("step", F.concat(F.col("step"), F.lit(">py")))
"""


def test_sql_and_python_steps_run_in_order_in_one_job(
    spark: Any, pulsar_broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    produce(pulsar_broker.service_url, "chained", 3)
    (tmp_path / "chain_steps.py").write_text(TAG)
    monkeypatch.syspath_prepend(str(tmp_path))
    job = tmp_path / "chained.yaml"
    table = tmp_path / "table"
    job.write_text(
        textwrap.dedent(STEPS).format(
            name="chained", url=pulsar_broker.service_url, topic="chained", table=table, data=tmp_path
        )
    )
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli(["run", str(job)])
    assert code == 0, err.getvalue()
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert len(rows) == 3 and {r["step"] for r in rows} == {"sql1>py>sql2>sql3"}
    assert sorted(json.loads(r["payload"])["id"] for r in rows) == [0, 1, 2]


def test_validate_names_the_statement_and_place_of_a_syntax_error(tmp_path: Path) -> None:
    steps = (
        '[{sql: "SELECT CAST(value AS STRING) AS payload FROM source"}, '
        '{sql: ["SELECT payload FROM source", "SELECT payload\\nFROM source\\nWHERE (payload > 1"]}]'
    )
    ran = pipelines("validate", INGEST, "--set", f"transform={steps}", PIPELINES_DATA_DIR=str(tmp_path))
    assert ran.code == 1 and ran.err == "", ran
    assert ran.out_lines == [
        "--set: transform[1].sql[1]: syntax error at line 3, column 18 near '1': Expecting )"
    ]
    one = pipelines(
        "validate",
        INGEST,
        "--set",
        'transform.sql=["SELEC payload FROM source"]',
        PIPELINES_DATA_DIR=str(tmp_path),
    )
    assert one.code == 1 and one.out_lines == [
        "--set: transform.sql[0]: syntax error at line 1, column 18 near 'FROM': "
        "Invalid expression / Unexpected token"
    ], one


@pytest.mark.long  # make test-long (CI): the suite's longest path is its Spark-process tests
@pytest.mark.spark_process
def test_an_unknown_column_is_one_short_line_without_sparks_json_log(
    pulsar_broker: Broker, tmp_path: Path
) -> None:
    produce(pulsar_broker.service_url, "orders", 2)
    ran = pipelines(
        "run",
        INGEST,
        "--set",
        'transform.sql=["SELECT no_such_column FROM source"]',
        PULSAR_URL=pulsar_broker.service_url,
        PIPELINES_DATA_DIR=str(tmp_path),
    )
    assert ran.code == 1, ran
    ours = [line for line in ran.err_lines if not line.startswith("WARNING: Using incubator modules")]
    assert len(ours) == 1, ran.err[:3000]
    assert ours[0].startswith("jobs/orders_ingest.yaml: transform.sql[0]: AnalysisException: ")
    assert "`no_such_column` cannot be resolved" in ours[0]
    assert '{"ts"' not in ran.err and len(ran.err) < 1000, len(ran.err)
