"""Python transforms of the example jobs: ``transform: {python: "jobs.transforms:<function>"}``.

A transform takes the source DataFrame and returns the DataFrame to write. ``pipelines run``
imports this module (it is code a job file runs); ``pipelines validate`` only parses it to check
that the function is defined. pyspark is imported inside the function all the same, so that
importing the module is cheap.
"""

from __future__ import annotations

from typing import Any


def enrich(df: Any) -> Any:
    """Rows of ``orders_raw`` → messages for the Pulsar sink.

    ``key`` is the order key (messages of one order go to one partition); ``value`` is JSON
    with the parsed fields, a size class and the ingest time; ``properties`` says where the
    message comes from. The sink accepts exactly these columns (value, key, properties).
    """
    from pyspark.sql import functions as F

    size = (
        F.when(F.col("amount") >= 1000, F.lit("large"))
        .when(F.col("amount") >= 100, F.lit("medium"))
        .otherwise(F.lit("small"))
    )
    body = F.struct(
        F.col("order_id").alias("id"),
        F.col("customer"),
        F.col("amount"),
        size.alias("size"),
        F.date_format(F.col("publishTime"), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("ingested_at"),
        F.concat_ws(":", F.col("ledgerId"), F.col("entryId"), F.col("batchIndex")).alias("source_position"),
    )
    return df.select(
        F.col("order_key").alias("key"),
        F.to_json(body).alias("value"),
        F.create_map(F.lit("source"), F.lit("orders_publish"), F.lit("schema"), F.lit("order-v1")).alias(
            "properties"
        ),
    )
