"""``spark.delta_engine`` is what writes (issue 28, point 5), through the ``pipelines`` command.

delta-spark on a session the command starts is checked before Spark starts (the job's Spark
settings must bring Delta's jars and extension); on a session it joins, once joined
(``runner.delta_engine``). Every run that writes Delta says in its first line which engine writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pulsarwire.broker import Broker
from tests.helpers.cli import no_trace, pipelines
from tests.helpers.orders_job import (
    INGEST,
    in_process,
    order_ids,
    send_orders,
)


def test_delta_spark_without_its_jars_fails_before_spark_naming_the_classes(
    pulsar_broker: Broker, repo_data: Path
) -> None:
    ran = pipelines(
        "run",
        INGEST,
        "--set",
        "spark.delta_engine=delta-spark",
        PULSAR_URL=pulsar_broker.service_url,
        PIPELINES_DATA_DIR=str(repo_data),
    )
    assert ran.code == 1 and ran.out == "" and ran.seconds < 15, ran
    (line,) = ran.err_lines
    assert line.startswith(f"{INGEST}: spark.delta_engine: delta-spark needs the classes ")
    assert "io.delta.tables.DeltaTable" in line and "io.delta.sql.DeltaSparkSessionExtension" in line
    assert no_trace(ran.err) and not (repo_data / "tables").exists()


@pytest.mark.spark
def test_a_run_says_in_its_first_line_which_engine_writes(
    spark: Any, pulsar_broker: Broker, repo_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PULSAR_URL", pulsar_broker.service_url)
    send_orders(pulsar_broker.service_url, 0, 50)
    ran = in_process("run", INGEST)
    assert ran.code == 0, ran
    assert ran.out_lines[0] == (
        "[orders_ingest] Delta tables written by deltalake (delta-rs) (spark.delta_engine: deltalake)"
    )
    assert order_ids(repo_data) == list(range(50))
