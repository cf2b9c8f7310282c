"""The options of the ``pulsarwire`` source and sink, shared by Spark and job files.

One pydantic model per side is the single source of option names, types, defaults and docs:
:mod:`~pipelines.options.source` (``SourceFields`` for both, ``SourceOptions`` for Spark),
:mod:`~pipelines.options.sink` (``SinkFields``, ``SinkOptions``) and
:mod:`~pipelines.options.client` (``service.url`` and ``pulsar.client.*``, the client
settings both sides share), built on :mod:`~pipelines.options.model` (reading Spark option
maps, writing them back). :mod:`~pipelines.options.grammar` parses option values (durations,
times, positions), :mod:`~pipelines.options.bound` where a read starts or ends,
:mod:`~pipelines.options.auth` connector-style authentication options, and
:mod:`~pipelines.options.docs` writes the docs' option tables. Nothing here imports Spark.
"""
