"""The SparkSession every Spark benchmark runs on: ``local[2]``, no UI or progress bar, ERROR
logs, and pipelines' data source and sinks registered. ``conf`` adds a benchmark's own settings."""

from __future__ import annotations

from typing import Any


def local_spark(conf: dict[str, str] | None = None) -> Any:
    """Get or create the benchmark session (pyspark is imported here: only Spark benches pay for it)."""
    from pyspark.sql import SparkSession

    import pipelines

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pipelines.register(spark)
    return spark
