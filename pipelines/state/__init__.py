"""What a job remembers between runs: positions, the Delta offset store, idempotent Delta writes.

:mod:`~pipelines.state.positions` (a position in a topic-partition, a stream's offsets),
:mod:`~pipelines.state.delta` (writes keyed by app id and version, delta-rs or delta-spark),
:mod:`~pipelines.state.offsets` (the offset store table) and
:mod:`~pipelines.state.exactly_once` (the foreachBatch body and recovery built on them).
Importing these loads no pyspark; the delta-spark engine is imported when a session uses it.
"""
