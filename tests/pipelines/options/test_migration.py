"""Options of other connectors: StreamNative's move over or are refused with why, Kafka's point at ours.

Reads through ``format("pulsarwire")`` in the suite's SparkSession (issue 28, point 14): a batch
read and a stream written with StreamNative ``pulsar-spark`` options run as they are
(``admin.url``, ``pulsar.admin.*`` accepted and not needed; ``predefinedSubscription``,
``waitingForNonExistedTopic``, ``pulsar.reader.receiverQueueSize``,
``pulsar.producer.<sink option>`` used as ours); the options that cannot mean the same here
are refused saying why; Spark's Kafka source's names get the hint naming ours. Job files get
the same advice for their keys, checked through the ``pipelines`` command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pulsarwire.broker import Broker
from tests.helpers.cli import pipelines


def _reader(spark: Any, stream: bool, **options: str) -> Any:
    reader = (spark.readStream if stream else spark.read).format("pulsarwire")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def test_a_streamnative_batch_read_runs_unchanged(
    spark: Any, dedup_broker: Broker, topic_name: str, produce: Callable[..., list[Any]]
) -> None:
    url = dedup_broker.service_url
    produce(url, topic_name, [b"a", b"b", b"c"])
    options = {
        "service.url": url,
        "admin.url": "http://127.0.0.1:8080",  # required by StreamNative's connector: not needed here
        "pulsar.admin.authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "pulsar.admin.authParams": "token:admin-secret",
        "topic": topic_name,
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
        "failOnDataLoss": "true",
        "pollTimeoutMs": "20000",
        "pulsar.reader.receiverQueueSize": "2",
        "pulsar.client.operationTimeoutMs": "20000",
    }
    rows = _reader(spark, False, **options).load().selectExpr("CAST(value AS STRING) AS v").collect()
    assert sorted(r.v for r in rows) == ["a", "b", "c"]


def test_a_streamnative_stream_keeps_its_predefined_subscription(
    spark: Any, dedup_broker: Broker, topic_name: str, produce: Callable[..., list[Any]], tmp_path: Path
) -> None:
    url = dedup_broker.service_url
    produce(url, topic_name, [b"x"] * 4)
    df = _reader(
        spark,
        True,
        **{
            "service.url": url,
            "admin.url": "http://127.0.0.1:8080",
            "topic": topic_name,
            "startingOffsets": "earliest",
            "predefinedSubscription": "migrated-job",
            "waitingForNonExistedTopic": "false",
        },
    ).load()
    query = (
        df.writeStream.format("memory")
        .queryName("migrated")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert spark.table("migrated").count() == 4
    assert "migrated-job" in dedup_broker.stats(topic_name)["subscriptions"]  # the name was used


def test_streamnative_options_that_cannot_mean_the_same_are_refused_with_why(
    spark: Any, dedup_broker: Broker, topic_name: str
) -> None:
    url = dedup_broker.service_url
    cases = {
        "maxEntriesPerTrigger": "it counts entries (whole batches); admission control here counts messages",
        "subscriptionPrefix": "one durable subscription, named by subscriptionName",
        "pulsar.reader.readCompacted": "its one setting is receiverQueueSize",
        "allowDifferentTopicSchemas": "values are raw bytes unless schema=auto",
    }
    for option, why in cases.items():
        with pytest.raises(Exception) as info:
            _reader(spark, True, **{"service.url": url, "topic": topic_name, option: "1"}).load()
        said = str(info.value)
        assert (
            f"{option}: StreamNative's pulsar-spark connector's option, not taken here: ".lower()
            in said.lower()
        )
        assert why in said
    with pytest.raises(Exception) as info:  # StreamNative's offsets JSON: serialized MessageIdData
        options = {"service.url": url, "topic": topic_name, "startingOffsets": '{"t": [8, 11, 16, 101]}'}
        _reader(spark, True, **options).load()
    assert (
        "startingOffsets[t]: a serialized message id (StreamNative's connector's form) is not taken"
        in str(info.value)
    )
    # pulsar.client.*: the Java client's settings that StreamNative's connector passes on
    with pytest.raises(Exception) as info:
        options = {"service.url": url, "topic": topic_name, "pulsar.client.numIoThreads": "4"}
        _reader(spark, True, **options).load()
    said = str(info.value)
    assert "pulsar.client.numiothreads: the Java client's setting, not taken here: Java client tuning" in said


def test_streamnative_producer_settings_reach_the_sink(
    spark: Any, dedup_broker: Broker, topic_name: str
) -> None:
    url = dedup_broker.service_url
    rows = spark.createDataFrame([(b"p",), (b"q",)], "value binary")
    writer = (
        rows.write.mode("append").format("pulsarwire").option("service.url", url).option("topic", topic_name)
    )
    writer.option("admin.url", "http://127.0.0.1:8080").option(
        "pulsar.producer.batchingEnabled", "false"
    ).save()
    got = _reader(spark, False, **{"service.url": url, "topic": topic_name}).load().collect()
    assert sorted(r.value for r in got) == [b"p", b"q"] and {r.batchIndex for r in got} == {-1}  # unbatched
    with pytest.raises(Exception) as info:
        rows.write.mode("append").format("pulsarwire").option("service.url", url).option(
            "topic", topic_name
        ).option("topic.schema.class", "com.example.Order").save()
    assert "topic.schema.class: StreamNative's pulsar-spark connector's option, not taken here" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("option", "ours"),
    [
        ("maxOffsetsPerTrigger", "maxMessagesPerTrigger"),
        ("minOffsetsPerTrigger", "minMessagesPerTrigger"),
        ("kafka.bootstrap.servers", "service.url"),
        ("subscribe", "topics"),
        ("subscribePattern", "topicsPattern"),
        ("startingOffsetsByTimestamp", "startingTime"),
        ("kafka.security.protocol", "pulsar.client.*"),
    ],
)
def test_kafka_spellings_name_our_option(
    spark: Any, dedup_broker: Broker, topic_name: str, option: str, ours: str
) -> None:
    with pytest.raises(Exception) as info:
        _reader(
            spark, True, **{"service.url": dedup_broker.service_url, "topic": topic_name, option: "5"}
        ).load()
    said = str(info.value)
    assert f"{option}: the Kafka source's spelling; here it is {ours}" in said, said[:400]


def test_job_files_get_the_same_advice(tmp_path: Path) -> None:
    ran = pipelines(
        "validate",
        "jobs/orders_ingest.yaml",
        "--set",
        "source.pulsar.max_offsets_per_trigger=5",
        "--set",
        "source.pulsar.admin_url=http://127.0.0.1:8080",
        "--set",
        "source.pulsar.predefinedSubscription=orders",
        PIPELINES_DATA_DIR=str(tmp_path),
    )
    assert ran.code == 1
    assert ran.out_lines == [
        "--set: source.pulsar.max_offsets_per_trigger: unknown key: the Kafka source's spelling; "
        "here it is max_messages_per_trigger",
        "--set: source.pulsar.admin_url: unknown key: StreamNative's pulsar-spark connector's option, "
        "not needed here: pulsarwire reads topics, partitions and positions over the binary protocol "
        "(service.url); remove it",
        "--set: source.pulsar.predefinedSubscription: unknown key: StreamNative's pulsar-spark "
        "connector's name; here it is subscription",
    ]
