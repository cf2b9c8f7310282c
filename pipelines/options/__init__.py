"""The options of the ``pulsarwire`` source and sink, shared by Spark and job files.

:mod:`~pipelines.options.grammar` parses option values (durations, times, positions, client
settings); :mod:`~pipelines.options.auth` reads connector-style authentication options.
"""
