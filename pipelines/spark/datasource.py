"""The ``pulsarwire`` Spark data source: one class that Spark instantiates per query.

Spark builds a :class:`PulsarWireDataSource` from the options of
``spark.read/readStream/write/writeStream.format("pulsarwire")`` and asks it
for a schema, a reader, a stream reader, a writer or a stream writer. The real
work lives in :mod:`pipelines.spark.reader` (planning and reading) and
:mod:`pipelines.spark.sink` (exactly-once producing); this module only dispatches.
Register it once per session with :func:`pipelines.register`.

Spark starts a new Python process for every streaming query to run the source's driver
side, and importing this module is most of what that process does before the first batch:
so the sink is imported only when a writer is asked for (a reading query never loads it).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pipelines import FORMAT
from pipelines.spark.reader import PulsarBatchReader, PulsarStreamReader, source_schema


class PulsarWireDataSource(DataSource):
    """``format("pulsarwire")``: Pulsar topics as a batch or streaming source and sink."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:

        return PulsarBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:

        return PulsarStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pipelines.spark.sink import PulsarBatchWriter  # see the module docstring

        return PulsarBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pipelines.spark.sink import PulsarStreamWriter  # see the module docstring

        return PulsarStreamWriter(self.options, schema, overwrite)
