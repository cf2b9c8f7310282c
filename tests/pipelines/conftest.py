"""Fixtures for the Spark side: one SparkSession for the whole run, a broker per module.

* ``spark`` — a session-scoped local[2] SparkSession with ``format("pulsarwire")``
  registered (starting one costs ~8 s on 2 cores, so there is only one). The Delta Lake jars
  (tests/helpers/peers.py: Maven-resolved, cached) are on its classpath, but its catalog and SQL
  are Spark's own: ``delta_spark_available`` is False, so the deltalake (delta-rs) paths run on it.
* ``delta_spark`` — a second SparkSession on the same SparkContext (no second JVM) with
  ``DeltaSparkSessionExtension`` and ``DeltaCatalog``: the delta-spark engine, for real. While a
  test uses it, it is the JVM's active session (Delta looks that up), and ``spark`` is again after.
* ``dedup_broker`` — a module-scoped broker with deduplication on; tests isolate
  themselves with unique topic names.
* ``produce`` — send payloads with the pulsarwire producer and return their ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pulsarwire.broker import Broker
from tests.helpers import peers

#: why the Delta jars are not on the session's classpath (None when they are)
_no_delta_jars: list[str] = []


def _delta_jars() -> str:
    """``spark.jars`` for the session: the cached Delta jars, fetched first on a fresh machine."""
    try:
        return ",".join(str(p) for p in peers.delta_jars())
    except peers.PeerUnavailable as exc:
        _no_delta_jars.append(str(exc))
        return ""


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    import pipelines

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pulsarwire-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        # small test queries: compiling code costs more CPU than it saves (2 cores, 4 workers)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.jars", _delta_jars())
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pipelines.register(session)
    yield session
    session.stop()


#: settings for tiny test tables (measured: the first commit 8-12 s -> 1.4-2 s, later ones ~1.5 s):
#: Delta's state in 1 task (not 50), no statistics or checksum files to compute per commit
DELTA_TEST_CONF = {
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.shuffle.partitions": "1",
    "spark.databricks.delta.stats.collect": "false",
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def _delta_session(spark: Any) -> Any:
    from pyspark.sql import SparkSession

    if _no_delta_jars:
        pytest.fail(f"the Delta jars could not be fetched (`make peers`): {_no_delta_jars[0]}")
    jvm = spark._jvm
    builder = jvm.org.apache.spark.sql.classic.SparkSession.builder().sparkContext(spark._jsc.sc())
    conf = {**peers.delta_spark_conf(), **DELTA_TEST_CONF}
    del conf["spark.jars"]  # already on the context's classpath
    for key, value in conf.items():  # the rest of its conf comes from the SparkContext's
        builder = builder.config(key, value)
    # spark.sql.extensions is read from the SparkContext's conf, which has none: inject Delta's
    builder = builder.withExtensions(jvm.io.delta.sql.DeltaSparkSessionExtension())
    # format("pulsarwire") is there already: data sources are the SparkContext's (shared state)
    return SparkSession(spark.sparkContext, builder.create())


@pytest.fixture
def delta_spark(_delta_session: Any, spark: Any) -> Iterator[Any]:
    jvm = spark._jvm
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(_delta_session._jsparkSession)
    try:
        yield _delta_session
    finally:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


@pytest.fixture(scope="module")
def dedup_broker() -> Iterator[Broker]:
    with Broker(deduplication=True) as b:
        yield b


@pytest.fixture
def topic_name() -> str:
    return f"persistent://public/default/spark-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def produce() -> Callable[..., list[Any]]:
    """``produce(service_url, topic, payloads, **producer_options)`` → message ids, in order."""
    from pulsarwire.client.blocking import Client

    def send(service_url: str, topic: str, payloads: list[bytes], **kw: Any) -> list[Any]:
        keys = kw.pop("keys", None)
        client = Client(service_url)
        try:
            producer = client.create_producer(topic, block_if_queue_full=True, **kw)
            futures: list[Any] = []
            ids: list[Any] = [None] * len(payloads)

            def done(i: int) -> Callable[[Any, Any], None]:
                def cb(err: Any, mid: Any) -> None:
                    if err is not None:
                        futures.append(err)
                    ids[i] = mid

                return cb

            for i, p in enumerate(payloads):
                extra = {"partition_key": keys[i]} if keys is not None and keys[i] is not None else {}
                producer.send_async(p, done(i), **extra)
            producer.flush()
            producer.close()
            assert not futures, futures
            return ids
        finally:
            client.close()

    return send
