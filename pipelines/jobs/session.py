"""The SparkSession of one ``pipelines`` command, and the transform applied in it.

:func:`spark_session` builds the session the job's ``spark:`` section describes (or joins an
active or ``existing`` one), registers the ``pulsarwire`` format, records and checks the Delta
engine (``spark.delta_engine``), and turns Spark's and Py4J's errors into one
:class:`~pipelines.errors.PipelinesError` naming the job file and, when the error it carries is
one of ours, the key to fix (:func:`run_error`). Spark's own logging is off unless ``-v``
(ERROR) or ``-vv`` (WARN): the command reports failures itself in one line. :func:`transform`
applies the job's ``transform`` steps (SQL over the view ``source``, Python functions) in order.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.logger import PySparkLogger
from pyspark.sql import SparkSession

from pipelines import register
from pipelines.errors import (
    JobError,
    OffsetsAheadError,
    OffsetStoreError,
    PipelinesError,
    StaleEpochError,
    short_error,
    task_errors,
)
from pipelines.jobs.jvm import start_context
from pipelines.jobs.models import Job
from pipelines.jobs.stopping import STOP, reclaim
from pipelines.masking import mask
from pipelines.state.delta import DELTA_SPARK_CLASSES, ENGINE_CONF, delta_spark_available

log = logging.getLogger("pipelines.jobs.session")


def say(text: str) -> None:
    print(mask(text), flush=True)


# -- session ---------------------------------------------------------------------------------
#: Spark's log4j2 configuration while ``pipelines`` is not verbose: nothing but our own lines
LOG4J_QUIET = Path(__file__).with_name("log4j2.properties")


def spark_log_level() -> str:
    """Spark's log level for the ``pipelines`` logger's level: OFF, ERROR (-v) or WARN (-vv)."""
    level = logging.getLogger("pipelines").getEffectiveLevel()
    return "WARN" if level <= logging.DEBUG else "ERROR" if level <= logging.INFO else "OFF"


#: pyspark's own Python loggers that print every failed query's message, plan and stack as JSON
#: on stderr (PySparkLogger, which does not propagate): kilobytes per AnalysisException
PYSPARK_QUERY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def quiet_pyspark_loggers(quiet: bool) -> None:
    """Switch pyspark's query-context loggers off (``quiet``: the command is not verbose and
    reports a failed statement itself in one line) or on again (-v)."""
    for name in PYSPARK_QUERY_LOGGERS:
        PySparkLogger.getLogger(name).disabled = quiet


def session(job: Job) -> tuple[Any, bool]:
    """The SparkSession for ``job`` and whether this call created it (then the runner stops it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    level = spark_log_level()
    quiet_pyspark_loggers(level == "OFF")
    conf = dict(job.spark.conf)
    java = conf.get("spark.driver.extraJavaOptions", "")
    if level == "OFF" and "log4j2.configurationFile" not in java:
        conf["spark.driver.extraJavaOptions"] = (
            f"{java} -Dlog4j2.configurationFile={LOG4J_QUIET.as_uri()}".strip()
        )
    active = SparkSession.getActiveSession()
    if job.spark.session == "existing" or active is not None:
        spark = active or SparkSession.builder.getOrCreate()
        for key, value in job.spark.conf.items():
            try:
                spark.conf.set(key, str(value))
            except Exception as exc:  # static conf of a running session: say so, keep going
                log.info("spark conf %s cannot be changed in a running session: %s", key, exc)
        created = False
    else:
        master = job.spark.master or "local[*]"
        start_context(master, job.app_name, {k: str(v) for k, v in conf.items()})  # JVM out of our group
        builder = SparkSession.builder.master(master).appName(job.app_name)
        for key, value in conf.items():
            builder = builder.config(key, str(value))
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel(level)
        created = True
    register(spark)
    reclaim()  # a new SparkContext took SIGINT for itself
    jvm = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if created and jvm is not None:  # a second Ctrl-C ends the JVM we started without its traces
        STOP.on_abort.append(jvm.kill)
    return spark, created


@contextmanager
def spark_session(job: Job) -> Iterator[Any]:
    """The job's SparkSession for one command: Spark's and Py4J's errors leave as one
    PipelinesError naming the job (:func:`run_error`); clients are closed and a session this
    call started is stopped on the way out."""
    spark, created = session(job)
    try:
        delta_engine(job, spark)  # refused before anything is read
        yield spark
    except PipelinesError:
        raise
    except Exception as exc:  # Spark's and Py4J's errors carry ours in their text
        raise run_error(job, exc) from exc
    finally:
        if created:
            spark.stop()


def delta_engine(job: Job, spark: Any) -> str | None:
    """The engine that writes the job's Delta tables in ``spark`` (None when it writes none):
    ``spark.delta_engine`` recorded in the session, then honoured. Raises JobError when it says
    delta-spark and the session cannot (the classes or the extension are missing)."""
    if not any(written for _, _, written in job.delta_tables()):
        return None
    spark.conf.set(ENGINE_CONF, job.spark.delta_engine)
    if delta_spark_available(spark):
        return "delta-spark"
    if job.spark.delta_engine == "delta-spark":
        raise JobError(
            f"{job.source_file}: spark.delta_engine: delta-spark, but this Spark session cannot load "
            f"{' and '.join(DELTA_SPARK_CLASSES)} (or spark.sql.extensions lacks "
            "io.delta.sql.DeltaSparkSessionExtension): add the Delta jars (spark.jars.packages "
            "io.delta:delta-spark_2.13:<version>) and the extension, or set spark.delta_engine: auto"
        )
    return "deltalake (delta-rs)"


def say_engine(job: Job, spark: Any) -> None:
    """The first line of a run that writes Delta: which engine writes."""
    engine = delta_engine(job, spark)
    if engine is not None:
        say(f"[{job.name}] Delta tables written by {engine} (spark.delta_engine: {job.spark.delta_engine})")


def transform(job: Job, spark: Any, df: Any) -> Any:
    """Apply the ``transform`` steps in order: SQL statements over the view ``source`` in turn,
    a Python function; each step reads the previous one's result."""
    for key, step in job.transform_steps():
        if step.python is not None:
            df = job.step_function(key, step)(df)
            continue
        for i, statement in enumerate(step.sql or []):
            df.createOrReplaceTempView("source")
            try:
                df = spark.sql(statement)
            except Exception as exc:
                raise job.error(f"{key}.sql[{i}]", analysis_error(exc)) from exc
    return df


def analysis_error(exc: BaseException) -> str:
    """Spark's error about a statement in one line: its message without the JSON and plan it may
    carry (an AnalysisException's text can run to kilobytes)."""
    return short_error(exc, limit=300).rstrip(";")


#: errors raised in the source or sink while a job runs → the job key a user changes to fix it
#: (a source adds its own: ``error_keys``)
_ERROR_KEYS: dict[str, str] = {
    OffsetsAheadError.__name__: "checkpoint",
    StaleEpochError.__name__: "offsets",
    OffsetStoreError.__name__: "offsets",
}


def run_error(job: Job, exc: BaseException) -> PipelinesError:
    """A Spark (or Py4J) error that failed a running job as one PipelinesError naming the job
    file and, when the error it carries is one of ours with a key to fix, that key."""
    keys = {**_ERROR_KEYS, **job.source.section.error_keys()}
    for name, message in reversed(task_errors(str(exc))):
        if name in keys:
            return PipelinesError(f"{job.source_file}: {keys[name]}: {message}")
    return PipelinesError(f"{job.source_file}: {short_error(exc)}")
