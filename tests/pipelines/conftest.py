"""Fixtures for the Spark side: one SparkSession for the whole run, a broker per module.

* ``spark`` — a session-scoped local[2] SparkSession with ``format("pulsarwire")``
  registered (starting one costs ~8 s on 2 cores, so there is only one).
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
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pipelines.register(session)
    yield session
    session.stop()


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
