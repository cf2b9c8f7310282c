"""The pulsarwire sink: batch and streaming writes into our broker, exactly once through deduplication.

Every test reads the target topic back and asserts the exact messages (payload, key,
properties, event time, producer name, sequence id). The official client is the judge in the
first test; the others read with pulsarwire's reader. Spark jobs are the slow part, so each
test runs as few of them as its scenario needs; option validation runs without Spark.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from pipelines.errors import OptionError, SinkError
from pipelines.options.client import client_settings
from pipelines.spark.sink import (
    MAX_BATCH_ID,
    MAX_ROWS_PER_TASK,
    PulsarBatchWriter,
    PulsarCommitMessage,
    PulsarStreamWriter,
    TopicWrite,
    _write_task,
    base_topic,
    check_deduplication,
    full_topic_name,
    sequence_id,
    sink_settings,
)
from pulsarwire.broker import Broker
from pulsarwire.client.message import Message
from pulsarwire.client.routing import HashingScheme, partition_for_key
from tests.helpers.pw_client import read_topic

FORMAT = "pulsarwire"
BINARY_SCHEMA = T.StructType(
    [
        T.StructField("value", T.BinaryType()),
        T.StructField("key", T.StringType()),
        T.StructField("properties", T.MapType(T.StringType(), T.StringType())),
        T.StructField("eventTime", T.TimestampType()),
    ]
)


def values(messages: list[Message]) -> list[str]:
    return [m.data().decode() for m in messages]


def write(df: Any, url: str, **options: str) -> None:
    df.write.format(FORMAT).option("service.url", url).options(**options).mode("append").save()


def new_topic() -> str:
    return f"persistent://public/default/sink-{uuid.uuid4().hex[:10]}"


# -- batch writes -----------------------------------------------------------------------


def test_batch_write_binary_values_keys_properties_event_times(
    spark: Any, dedup_broker: Broker, topic_name: str
) -> None:
    import pulsar

    t0 = datetime(2024, 5, 1, 12, 0, 0, 123_000, tzinfo=UTC)
    rows = [
        (b"\x00\x01\xff", "k1", {"a": "1", "b": "two"}, t0),
        (b"", None, None, None),
        (b"plain", "k2", {}, datetime(2024, 5, 1, 12, 0, 1, 999_999, tzinfo=UTC)),
        (bytes(range(256)), "k1", {"only": ""}, t0),
    ]
    df = spark.createDataFrame(rows, BINARY_SCHEMA).coalesce(1)
    write(df, dedup_broker.service_url, topic=topic_name)

    client = pulsar.Client(dedup_broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic_name, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            m = reader.read_next(10_000)
            got.append((m.data(), m.partition_key(), m.properties(), m.event_timestamp()))
    finally:
        client.close()
    t0_ms = 1714564800123
    assert got == [
        (b"\x00\x01\xff", "k1", {"a": "1", "b": "two"}, t0_ms),
        (b"", "", {}, 0),
        (b"plain", "k2", {}, 1714564801999),
        (bytes(range(256)), "k1", {"only": ""}, t0_ms),
    ]


def test_topic_column_routes_rows_and_string_values_binary_keys(spark: Any, dedup_broker: Broker) -> None:
    a, b = new_topic(), new_topic()
    a_short = a.removeprefix("persistent://public/default/")  # the same topic: one producer name on it
    schema = T.StructType(
        [
            T.StructField("value", T.StringType()),
            T.StructField("key", T.BinaryType()),
            T.StructField("topic", T.StringType()),
        ]
    )
    rows = [(f"v{i}", f"kéy{i}".encode(), [a, b, None, a_short][i % 4]) for i in range(40)]
    df = spark.createDataFrame(rows, schema).repartition(2)
    # the option is the default for a null topic
    write(df, dedup_broker.service_url, topic=a, producerNamePrefix="router", batchId="0")

    got_a = read_topic(dedup_broker.service_url, a)
    got_b = read_topic(dedup_broker.service_url, b)
    assert sorted(values(got_a)) == sorted(f"v{i}" for i in range(40) if i % 4 != 1)
    assert sorted(values(got_b)) == sorted(f"v{i}" for i in range(40) if i % 4 == 1)
    assert all(m.partition_key() == "kéy" + m.data().decode()[1:] for m in got_a + got_b)
    assert {m.producer_name() for m in got_a + got_b} == {"router-0", "router-1"}


def test_exactly_once_on_partitioned_topic_routes_deterministically(spark: Any, dedup_broker: Broker) -> None:
    topic = new_topic()
    dedup_broker.create_partitioned_topic(topic, 3)
    # ids 0..29 are Spark partition 0, 30..59 Spark partition 1; every fourth row has no key
    df = spark.range(0, 60, numPartitions=2).selectExpr(
        "cast(id as string) as value",
        "case when id % 4 = 0 then null else concat('key-', id % 7) end as key",
    )
    write(df, dedup_broker.service_url, topic=topic, producerNamePrefix="job-a", batchId="5")

    seen = []
    for p in range(3):
        for m in read_topic(dedup_broker.service_url, f"{topic}-partition-{p}"):
            n = int(m.data())
            spark_partition, row = divmod(n, 30)
            seen.append(n)
            if n % 4 == 0:
                assert m.partition_key() == ""
                assert p == spark_partition % 3, n
            else:
                assert m.partition_key() == f"key-{n % 7}"
                assert p == partition_for_key(f"key-{n % 7}", 3), n
            assert m.producer_name() == f"job-a-{spark_partition}"
            assert m.sequence_id() == 5 * 2**32 + row
    assert sorted(seen) == list(range(60))


def test_at_least_once_partitioned_topic_uses_the_hashing_scheme(spark: Any, dedup_broker: Broker) -> None:
    topic = new_topic()
    dedup_broker.create_partitioned_topic(topic, 4)
    df = spark.range(0, 40, numPartitions=2).selectExpr(
        "cast(id as string) as value", "concat('user-', id % 9) as key"
    )
    write(df, dedup_broker.service_url, topic=topic, hashingScheme="Murmur3_32Hash", compressionType="zlib")

    seen = []
    for p in range(4):
        for m in read_topic(dedup_broker.service_url, f"{topic}-partition-{p}"):
            seen.append(int(m.data()))
            assert p == partition_for_key(m.partition_key(), 4, HashingScheme.Murmur3_32Hash)
    assert sorted(seen) == list(range(40))


def test_exactly_once_replays_publish_each_row_once(spark: Any, dedup_broker: Broker) -> None:
    url, topic = dedup_broker.service_url, new_topic()
    full = spark.range(0, 40, numPartitions=2).selectExpr("cast(id as string) as value")
    opts = {"topic": topic, "producerNamePrefix": "nightly", "batchingMaxMessages": "4"}

    # a write that stopped part-way: each task stored only its first 7 rows
    write(full.filter("id % 20 < 7"), url, batchId="0", **opts)
    assert sorted(map(int, values(read_topic(url, topic)))) == [i for i in range(40) if i % 20 < 7]

    write(full, url, batchId="0", **opts)  # the rerun completes it
    write(full, url, batchId="0", **opts)  # and running it again changes nothing
    once = read_topic(url, topic)
    assert sorted(map(int, values(once))) == list(range(40))
    assert [(m.producer_name(), m.sequence_id()) for m in once if m.data() == b"27"] == [("nightly-1", 7)]

    write(full, url, batchId="1", **opts)  # a new version appends
    twice = read_topic(url, topic)
    assert sorted(map(int, values(twice))) == sorted(list(range(40)) * 2)
    assert sorted(m.sequence_id() for m in twice[len(once) :] if m.producer_name() == "nightly-0") == [
        2**32 + i for i in range(20)
    ]
    assert check_deduplication(client_settings({"service.url": url}), topic, "nightly-0", 2**32 + 19)

    write(full, url, batchId="0", **opts)  # an older version is taken as already published
    assert len(read_topic(url, topic)) == 80


def test_exactly_once_replay_over_many_arrow_batches_and_partitions(spark: Any, dedup_broker: Broker) -> None:
    """Rows reach the task in Arrow batches of 7: the sequence ids run on across them, and a
    replay skips exactly what each partition stored, where the stored rows of a partition are
    not one run of the task's rows (its other rows went to other partitions)."""
    url, topic = dedup_broker.service_url, new_topic()
    dedup_broker.create_partitioned_topic(topic, 3)
    full = spark.range(0, 60, numPartitions=2).selectExpr(
        "cast(id as string) as value",
        "case when id % 5 = 0 then null else concat('k', id % 11) end as key",
    )
    opts = {"topic": topic, "producerNamePrefix": "multi", "batchId": "4", "batchingMaxMessages": "3"}
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    try:
        write(full.filter("id % 30 < 17"), url, **opts)  # each task stopped after its first 17 rows
        write(full, url, **opts)
        write(full, url, **opts)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    seen = []
    for p in range(3):
        got = read_topic(url, f"{topic}-partition-{p}")
        by_producer: dict[str, list[int]] = {}
        for m in got:
            n = int(m.data())
            spark_partition, row = divmod(n, 30)
            assert m.producer_name() == f"multi-{spark_partition}"
            assert m.sequence_id() == 4 * 2**32 + row
            by_producer.setdefault(m.producer_name(), []).append(m.sequence_id())
            seen.append(n)
        for ids in by_producer.values():
            assert ids == sorted(ids)  # stored in row order
    assert sorted(seen) == list(range(60))


def test_bad_rows_are_named_and_nothing_of_their_arrow_batch_is_sent(dedup_broker: Broker) -> None:
    """The task's checks run on each Arrow batch before it is sent: the error names the row
    (counted over the task's batches, also in a sliced batch), the batches before it are
    stored and nothing of its own batch is."""
    url = dedup_broker.service_url
    schema = pa.schema(
        [
            ("value", pa.binary()),
            ("key", pa.string()),
            ("topic", pa.string()),
            ("properties", pa.map_(pa.string(), pa.string())),
            ("eventTime", pa.timestamp("us", tz="UTC")),
        ]
    )
    spark_schema = T.StructType(
        [
            T.StructField("value", T.BinaryType()),
            T.StructField("key", T.StringType()),
            T.StructField("topic", T.StringType()),
            T.StructField("properties", T.MapType(T.StringType(), T.StringType())),
            T.StructField("eventTime", T.TimestampType()),
        ]
    )
    good = {"value": b"v", "key": "k", "topic": None, "properties": [("a", "1")], "eventTime": 1_000_000}
    cases = [
        ({"value": None}, "value is null"),
        ({"properties": [("a", "1"), ("b", None)]}, "property 'b' is null (Pulsar properties are strings)"),
        ({"eventTime": 999}, "eventTime must be after 1970-01-01T00:00:00.000Z"),
    ]
    for bad, message in cases:
        topic = new_topic()
        settings = sink_settings({"service.url": url, "topic": topic}, spark_schema, streaming=False)
        first = pa.RecordBatch.from_pylist([good] * 4, schema)
        rows = [good] * 6
        rows[4] = {**good, **bad}
        second = pa.RecordBatch.from_pylist(rows, schema).slice(2)  # its row 2 is the bad one
        with pytest.raises(SinkError, match=rf"^row 6 of Spark partition 3: {re.escape(message)}"):
            _write_task(settings, [first, second], 3, None)
        assert len(read_topic(url, topic)) == 4

    no_default = sink_settings({"service.url": url}, spark_schema, streaming=False)
    rows = [{**good, "topic": new_topic()}] * 3
    rows[1] = {**good, "topic": None}
    with pytest.raises(
        SinkError, match=r"^row 1 of Spark partition 0: topic is null and there is no topic option"
    ):
        _write_task(no_default, [pa.RecordBatch.from_pylist(rows, schema)], 0, None)


def test_a_failed_send_to_one_partition_fails_the_task_after_the_others_are_stored(
    pulsar_broker_factory: Callable[..., Broker],
) -> None:
    """Exactly once on a partitioned topic the task sends to its partitions at once: one
    partition's failure fails the task naming that partition and the rows, once the other
    partitions' sends are done (they are stored; a rerun skips them)."""
    broker = pulsar_broker_factory(max_message_size=64 * 1024)
    topic = new_topic()
    broker.create_partitioned_topic(topic, 3)
    key = {partition_for_key(f"k{i}", 3): f"k{i}" for i in range(20)}  # a key for each partition
    rows = [{"value": b"v%d" % i, "key": key[i % 3]} for i in range(12)]
    rows[7] = {"value": b"x" * 100_000, "key": key[1]}  # too big, to partition 1
    schema = T.StructType([T.StructField("value", T.BinaryType()), T.StructField("key", T.StringType())])
    options = {"service.url": broker.service_url, "topic": topic, "batchingEnabled": "false"}
    settings = sink_settings({**options, "producerNamePrefix": "p", "batchId": "0"}, schema, streaming=False)
    batch = pa.RecordBatch.from_pylist(rows, pa.schema([("value", pa.binary()), ("key", pa.string())]))

    with pytest.raises(
        SinkError, match=rf"could not be sent \(Spark partition 0\) to {topic}-partition-1: "
    ) as info:
        _write_task(settings, [batch], 0, 0)
    assert "MessageTooBigError" in str(info.value)
    stored = {p: values(read_topic(broker.service_url, f"{topic}-partition-{p}")) for p in range(3)}
    assert stored[0] == ["v0", "v3", "v6", "v9"]
    assert stored[2] == ["v2", "v5", "v8", "v11"]
    assert stored[1] == ["v1", "v4"]  # up to the refused row


def test_dedup_off_is_detected_and_warned(
    spark: Any, pulsar_broker_factory: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    broker = pulsar_broker_factory(deduplication=False)
    url, topic = broker.service_url, new_topic()
    df = spark.range(0, 5, numPartitions=1).selectExpr("cast(id as string) as value")
    write(df, url, topic=topic, producerNamePrefix="nodedup", batchId="0")
    write(df, url, topic=topic, producerNamePrefix="nodedup", batchId="0")
    assert len(read_topic(url, topic)) == 10  # why the warning matters

    settings = client_settings({"service.url": url})
    assert check_deduplication(settings, topic, "nodedup-0", 4) is False

    options = {"service.url": url, "topic": topic, "producerNamePrefix": "nodedup", "batchId": "0"}
    writer = PulsarBatchWriter(options, T.StructType([T.StructField("value", T.StringType())]), False)
    message = PulsarCommitMessage(0, 0, {topic: TopicWrite("nodedup-0", 5, 4)})
    with caplog.at_level(logging.WARNING, logger="pipelines.spark.sink"):
        writer.commit([message, None])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"{topic} does not deduplicate" in warnings[0]
    assert "last sequence id -1 for producer 'nodedup-0', which just wrote up to 4" in warnings[0]
    assert "set-deduplication --enable" in warnings[0]


def test_dedup_on_commit_check_passes_quietly(
    dedup_broker: Broker, produce: Callable[..., list[Any]], caplog: pytest.LogCaptureFixture
) -> None:
    url, topic = dedup_broker.service_url, new_topic()
    produce(url, topic, [b"a", b"b", b"c"], producer_name="quiet-0")
    settings = client_settings({"service.url": url})
    assert check_deduplication(settings, topic, "quiet-0", 2)
    assert not check_deduplication(settings, topic, "quiet-0", 3)

    options = {"service.url": url, "topic": topic, "producerNamePrefix": "quiet"}
    writer = PulsarStreamWriter(options, T.StructType([T.StructField("value", T.StringType())]), False)
    with caplog.at_level(logging.INFO, logger="pipelines.spark.sink"):
        writer.commit([PulsarCommitMessage(0, 0, {topic: TopicWrite("quiet-0", 3, 2)})], 0)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "3 row(s) published to 1 topic(s), 0 already stored" in caplog.text

    caplog.clear()
    stale = TopicWrite("quiet-0", 0, 2**32 + 5, skipped=4, stored_before=2**32 + 5)
    with caplog.at_level(logging.WARNING, logger="pipelines.spark.sink"):
        writer.commit([PulsarCommitMessage(0, 0, {topic: stale})], 0)
    assert [r.getMessage() for r in caplog.records] == [
        "pulsarwire sink: batch id 0 is older than batch 1, already stored by producer 'quiet-0' on "
        f"{topic}: 4 row(s) of this write were taken as already published and skipped; a new version "
        "of the data needs a higher batchId"
    ]


# -- streaming ----------------------------------------------------------------------------


def _stream(spark: Any, source: Path, checkpoint: Path, url: str, topic: str) -> None:
    query = (
        spark.readStream.schema("value string, key string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.format(FORMAT)
        .option("service.url", url)
        .option("topic", topic)
        .option("producerNamePrefix", "stream-job")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
    finally:
        query.stop()


def _json_file(directory: Path, name: str, rows: list[dict[str, str]]) -> None:
    (directory / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_streaming_write_exactly_once_across_a_replayed_batch(
    spark: Any, dedup_broker: Broker, tmp_path: Path
) -> None:
    url, topic = dedup_broker.service_url, new_topic()
    source = tmp_path / "in"
    source.mkdir()
    for f in range(3):
        _json_file(source, f"part-{f}.json", [{"value": f"f{f}-r{r}", "key": f"k{r}"} for r in range(5)])
    first = tmp_path / "ck"
    _stream(spark, source, first, url, topic)

    expected = [f"f{f}-r{r}" for f in range(3) for r in range(5)]
    got = read_topic(url, topic)
    assert sorted(values(got)) == sorted(expected)
    assert sorted((m.producer_name(), m.sequence_id()) for m in got) == [
        ("stream-job-0", b * 2**32 + r) for b in range(3) for r in range(5)
    ]
    assert {m.data().decode(): m.partition_key() for m in got} == {v: "k" + v[-1] for v in expected}

    # the driver died after the last batch was published but before its commit was logged
    second = tmp_path / "ck-copy"
    shutil.copytree(first, second)
    last = max(int(p.name) for p in (second / "commits").iterdir() if p.name.isdigit())
    assert last == 2
    (second / "commits" / str(last)).unlink()
    (second / "commits" / f".{last}.crc").unlink(missing_ok=True)
    _json_file(source, "part-3.json", [{"value": f"f3-r{r}", "key": f"k{r}"} for r in range(2)])
    _stream(spark, source, second, url, topic)

    assert (second / "commits" / str(last)).exists()  # batch 2 was run again
    again = read_topic(url, topic)
    assert sorted(values(again)) == sorted([*expected, "f3-r0", "f3-r1"])
    assert [m.sequence_id() for m in again[len(got) :]] == [3 * 2**32, 3 * 2**32 + 1]


# -- failures --------------------------------------------------------------------------------


def test_send_error_fails_the_job(spark: Any, pulsar_broker_factory: Callable[..., Broker]) -> None:
    broker = pulsar_broker_factory(max_message_size=64 * 1024)
    topic = new_topic()
    schema = T.StructType([T.StructField("value", T.BinaryType())])
    df = spark.createDataFrame([(b"small",), (b"x" * 100_000,), (b"after",)], schema).coalesce(1)
    with pytest.raises(Exception) as failed:
        write(df, broker.service_url, topic=topic, batchingEnabled="false")
    text = str(failed.value)
    assert "SinkError" in text
    assert "MessageTooBigError" in text
    assert "could not be sent (Spark partition 0)" in text


def test_missing_value_column_is_reported_by_spark(spark: Any, dedup_broker: Broker) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as payload")
    with pytest.raises(Exception, match=r"column 'value' is required.*the input has: payload"):
        write(df, dedup_broker.service_url, topic=new_topic())


# -- options and columns (no Spark job) ---------------------------------------------------

VALUE = T.StructField("value", T.StringType())
URL = {"service.url": "pulsar://127.0.0.1:6650"}


@pytest.mark.parametrize(
    ("options", "fields", "error", "message"),
    [
        ({"topic": "t"}, [VALUE], OptionError, "service.url: required"),
        ({**URL}, [VALUE], OptionError, "topic: required: give the topic option or a 'topic' column"),
        (
            {**URL, "topic": "t"},
            [T.StructField("payload", T.StringType())],
            SinkError,
            "column 'value' is required: the message payload, binary or string (the input has: payload)",
        ),
        (
            {**URL, "topic": "t"},
            [T.StructField("value", T.IntegerType())],
            SinkError,
            "column 'value' must be binary or string, got int",
        ),
        (
            {**URL, "topic": "t"},
            [VALUE, T.StructField("properties", T.MapType(T.StringType(), T.IntegerType()))],
            SinkError,
            "column 'properties' must be map<string,string>, got map<string,int>",
        ),
        (
            {**URL, "topic": "t"},
            [VALUE, T.StructField("extra", T.StringType()), T.StructField("Key", T.StringType())],
            SinkError,
            "unknown column(s) 'extra', 'Key': the sink writes only value, key, topic, properties, "
            "eventTime (column names are case-sensitive: 'Key' -> 'key'); drop or rename them, "
            "or set ignoreExtraColumns=true",
        ),
        (
            {**URL, "topic": "t", "compressionType": "brotli"},
            [VALUE],
            OptionError,
            "compressionType: expected one of NONE, LZ4, ZLIB, ZSTD, SNAPPY, got 'brotli'",
        ),
        (
            {**URL, "topic": "t", "hashingScheme": "md5"},
            [VALUE],
            OptionError,
            "hashingScheme: expected one of JavaStringHash, Murmur3_32Hash, got 'md5'",
        ),
        (
            {**URL, "topic": "t", "maxPendingMessages": "0"},
            [VALUE],
            OptionError,
            "maxPendingMessages: must be >= 1, got 0",
        ),
        (
            {**URL, "topic": "t", "producerNamePrefix": "job"},
            [VALUE],
            OptionError,
            "batchId: required with producerNamePrefix on a batch write",
        ),
        (
            {**URL, "topic": "t", "producerNamePrefix": "job", "batchId": str(MAX_BATCH_ID + 1)},
            [VALUE],
            OptionError,
            f"batchId: must be <= {MAX_BATCH_ID} (2**31 - 1), got {MAX_BATCH_ID + 1}",
        ),
        (
            {**URL, "topic": "t", "batchId": "3"},
            [VALUE],
            OptionError,
            "batchId: only meaningful with producerNamePrefix",
        ),
        (
            {**URL, "topic": "t", "producerNamePrefix": "my job", "batchId": "1"},
            [VALUE],
            OptionError,
            "producerNamePrefix: must not contain spaces",
        ),
        (
            {**URL, "topic": "t", "producerNamePrefx": "job"},
            [VALUE],
            OptionError,
            "producerNamePrefx: unknown sink option (did you mean producerNamePrefix? known: service.url, "
            "topic, batchingEnabled",
        ),
        ({**URL, "topic": "t", "path": "/x"}, [VALUE], OptionError, "path: the sink takes no path"),
    ],
)
def test_batch_writer_rejects_bad_options_and_columns(
    options: dict[str, str], fields: list[T.StructField], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        PulsarBatchWriter(options, T.StructType(fields), False)
    assert message in str(raised.value)


def test_writer_validation_that_depends_on_the_mode() -> None:
    schema = T.StructType([VALUE])
    with pytest.raises(OptionError, match="mode: overwrite is not supported"):
        PulsarBatchWriter({**URL, "topic": "t"}, schema, True)
    with pytest.raises(OptionError, match="batchId: not for streaming writes"):
        PulsarStreamWriter({**URL, "topic": "t", "producerNamePrefix": "s", "batchId": "1"}, schema, False)
    stream = PulsarStreamWriter({**URL, "topic": "t", "producerNamePrefix": "s"}, schema, True)
    assert stream.settings.exactly_once and stream.settings.batch_id is None


def test_settings_accept_spark_spellings_and_extra_columns() -> None:
    schema = T.StructType([VALUE, T.StructField("topic", T.StringType()), T.StructField("id", T.LongType())])
    options = {
        "SERVICE.URL": URL["service.url"],
        "ignoreextracolumns": "true",
        "BatchingEnabled": "false",
        "sendtimeoutms": "5000",
        "compressiontype": "lz4",  # 1 in PulsarApi.proto
        "checkpointLocation": "/tmp/ck",
        "pulsar.client.operationTimeoutMs": "2000",
    }
    s = sink_settings(options, schema, streaming=True)
    assert s.columns == {"value", "topic"}
    assert s.topic is None
    assert s.producer_config == {  # the options given, the sink's defaults for the others
        "batching_enabled": False,
        "batching_max_messages": 1000,
        "batching_max_publish_delay_ms": 10,
        "max_pending_messages": 1000,
        "send_timeout_millis": 5000,
        "compression_type": 1,
    }
    assert s.client.options == {"operation_timeout_seconds": 2.0}
    assert not s.exactly_once


def test_sequence_ids_and_their_limits() -> None:
    assert sequence_id(0, 0) == 0
    assert sequence_id(3, 7) == 3 * 2**32 + 7
    assert sequence_id(MAX_BATCH_ID, MAX_ROWS_PER_TASK - 1) == 2**63 - 1
    with pytest.raises(SinkError, match="batch id 2147483648 is outside"):
        sequence_id(MAX_BATCH_ID + 1, 0)
    with pytest.raises(SinkError, match="at most 4294967296 rows per Spark partition"):
        sequence_id(0, MAX_ROWS_PER_TASK)
    assert base_topic("persistent://a/b/c-partition-12") == "persistent://a/b/c"
    assert base_topic("persistent://a/b/c") == "persistent://a/b/c"
    assert full_topic_name("c") == "persistent://public/default/c"
    assert full_topic_name("a/b/c") == "persistent://a/b/c"
    assert full_topic_name("non-persistent://a/b/c") == "non-persistent://a/b/c"


def test_foreach_batch_helper_is_exactly_once_across_replays(
    spark: Any, dedup_broker: Broker, tmp_path: Path
) -> None:
    """Files → foreachBatch(write_pulsar_exactly_once); the same batch run twice lands once."""
    from pipelines.spark.sink import write_pulsar_exactly_once

    url, topic = dedup_broker.service_url, new_topic()
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_text("\n".join(json.dumps({"value": f"r{i}"}) for i in range(30)))
    opts = {"service.url": url, "topic": topic, "producerNamePrefix": "publish"}
    calls: list[int] = []

    def body(df: Any, batch_id: int) -> None:
        write_pulsar_exactly_once(df, batch_id, opts)
        write_pulsar_exactly_once(df, batch_id, opts)  # a replay of the same batch
        calls.append(batch_id)

    stream = spark.readStream.schema("value string").json(str(src))
    q = stream.writeStream.foreachBatch(body).option("checkpointLocation", str(tmp_path / "ck"))
    q.trigger(availableNow=True).start().awaitTermination(120)
    assert calls == [0]
    assert sorted(values(read_topic(url, topic))) == sorted(f"r{i}" for i in range(30))
    with pytest.raises(OptionError, match="producerNamePrefix"):
        write_pulsar_exactly_once(None, 0, {"service.url": url, "topic": topic})
