"""pipelines: Spark jobs reading from and writing to Pulsar through pulsarwire.

``pipelines.register(spark)`` makes ``format("pulsarwire")`` available in a
SparkSession (source and sink, batch and streaming). The sub-packages: ``pipelines.spark``
(the data source; the only one importing pyspark), ``pipelines.state`` (positions, Delta
writes, the offset store, exactly once), ``pipelines.jobs`` (job files, checks, runner, CLI)
and ``pipelines.options`` (the options of the source and sink).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from pipelines.errors import PipelinesError
from pipelines.extras import check_pyspark

__all__ = ["FORMAT", "register"]

FORMAT = "pulsarwire"


def register(spark: Any) -> None:
    """Register the ``pulsarwire`` data source with ``spark`` (idempotent).

    Spark runs the source's code in Python worker processes started with the interpreter
    ``PYSPARK_PYTHON`` names, ``python3`` from the PATH when it is unset: in a fresh shell
    that is the system's Python, which has no pulsarwire. So for a local session (its
    workers run on this machine) with ``PYSPARK_PYTHON`` unset, the workers are pointed at
    this interpreter. When ``PYSPARK_PYTHON`` names an interpreter that cannot import
    pulsarwire, PipelinesError says what to set instead of letting every task fail.
    Clusters (any other master) keep their own setting: their images install pulsarwire.
    A pyspark older than :data:`pipelines.extras.PYSPARK_MIN` is a PipelinesError naming
    the version needed.
    """
    check_pyspark()  # a runtime whose Spark is too old: one line, not an ImportError
    _use_this_python(spark)
    from pipelines.spark.datasource import PulsarWireDataSource  # pyspark: only when registering

    spark.dataSource.register(PulsarWireDataSource)


def _use_this_python(spark: Any) -> None:
    sc = getattr(spark, "sparkContext", None)  # none under Spark Connect: the server decides
    if sc is None:
        return
    try:
        local = str(sc.master).startswith("local")
    except Exception:  # a Connect session raises on sparkContext access
        return
    if not local:
        return
    chosen = os.environ.get("PYSPARK_PYTHON")
    if not chosen:
        sc.pythonExec = sys.executable  # the UDFs and data sources registered from now on
        os.environ["PYSPARK_PYTHON"] = sys.executable  # and sessions created later
        return
    if os.path.realpath(chosen) == os.path.realpath(sys.executable):
        return
    check = [chosen, "-c", "import pulsarwire, pipelines"]
    try:
        failed = subprocess.run(check, capture_output=True, timeout=30).returncode != 0
    except (OSError, subprocess.SubprocessError):
        failed = True
    if failed:
        raise PipelinesError(
            f"PYSPARK_PYTHON={chosen} cannot import pulsarwire, so Spark's Python workers would fail: "
            f"unset it (workers then use this interpreter, {sys.executable}) or point it at a Python "
            "that has pulsarwire installed"
        )
