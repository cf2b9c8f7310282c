"""Spark's JVM in a process session of its own, so that signals for ``pipelines`` reach only it.

PySpark starts the JVM (``spark-submit``, then ``java``) as a child in the driver's process
group, and the JVM forks Spark's Python workers into that group too. A signal sent to the
group — Ctrl-C in a terminal, ``kill -TERM -PGID``, a supervisor that signals the group — then
reaches all of them at once. The JVM ignores SIGINT (PySpark starts it so), but on SIGTERM it
runs its shutdown hooks: the SparkContext stops under the running query and the JVM, the
accumulator server and Py4J print their stack traces while the driver is still finishing its
batch. :func:`start_context` starts the JVM with ``start_new_session`` (``launch_gateway``'s
``popen_kwargs``, a documented developer hook), so a signal to the driver's group reaches the
driver alone; the driver then stops after the batch in flight (:mod:`pipelines.jobs.stopping`)
and stops Spark itself.

Nothing is left behind when the driver dies without stopping Spark (SIGKILL, a crash): the
JVM ends when its stdin, a pipe from the driver, closes (PySpark's gateway server watches
it), and the Python workers end with the JVM. A JVM this process started earlier (a second
job in one process) is reused as PySpark would; a Spark Connect session (``spark.remote``,
``SPARK_REMOTE``) has no JVM here and is left to the builder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway


def start_context(master: str, app_name: str, conf: Mapping[str, str]) -> None:
    """Start the SparkContext (and its JVM, in a session of its own) that the next
    ``SparkSession.builder.getOrCreate()`` joins; nothing when this process has a JVM already."""
    if SparkContext._gateway is not None or SparkContext._active_spark_context is not None:
        return
    if "spark.remote" in conf or "SPARK_REMOTE" in os.environ:  # Spark Connect: no local JVM here
        return
    spark_conf = SparkConf().setMaster(master).setAppName(app_name).setAll(list(conf.items()))
    gateway = launch_gateway(spark_conf, popen_kwargs={"start_new_session": True})  # type: ignore[no-untyped-call]
    SparkContext(conf=spark_conf, gateway=gateway)
