"""The Spark side of pipelines: the ``pulsarwire`` data source and everything it runs.

:mod:`~pipelines.spark.datasource` is the class Spark instantiates; the driver plans with
:mod:`~pipelines.spark.planner` (topics, partitions, ranges; no Spark in it), executors read with
:mod:`~pipelines.spark.reader` and write with :mod:`~pipelines.spark.sink`;
:mod:`~pipelines.spark.schemas` maps Pulsar schemas to Spark types and
:mod:`~pipelines.spark.quarantine` handles messages that cannot be decoded. This is the only
sub-package whose modules import pyspark at import time.
"""
