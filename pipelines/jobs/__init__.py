"""YAML jobs: load and validate a job file, check it before Spark, run it, the CLI.

:mod:`~pipelines.jobs.config` turns YAML files into one document, :mod:`~pipelines.jobs.models`
validates it into a :class:`~pipelines.jobs.models.Job`, :mod:`~pipelines.jobs.preflight` checks
the outside world in seconds, :mod:`~pipelines.jobs.runner` runs the Spark query and
:mod:`~pipelines.jobs.cli` is the ``pipelines`` command. ``pipelines validate`` imports no pyspark:
only the runner does (a test holds this boundary).
"""
