"""pipelines: Spark jobs reading from and writing to Pulsar through pulsarwire.

``pipelines.register(spark)`` makes ``format("pulsarwire")`` available in a
SparkSession (source and sink, batch and streaming). The offset store, the
exactly-once Delta helper and the job runner live in the submodules.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT", "register"]

FORMAT = "pulsarwire"


def register(spark: Any) -> None:
    """Register the ``pulsarwire`` data source with ``spark`` (idempotent)."""
    from .datasource import PulsarWireDataSource

    spark.dataSource.register(PulsarWireDataSource)
