"""``schema=auto``: the topic's Pulsar schema decides the type of the ``value`` column.

Values are produced by the official client with its own schemas (AvroSchema, JsonSchema,
StringSchema and primitive schemas) to our broker and read back through Spark; what Spark
returns must equal what was sent. Types the official Python client cannot declare
(BOOLEAN, TIMESTAMP, INSTANT, ...) are registered with GET_OR_CREATE_SCHEMA, the way a
Java producer's schema reaches the broker, and their bytes are the Java encodings. The
mapping and the decoders are also tested as pure functions, without Spark.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from decimal import Decimal
from enum import Enum
from typing import Any

import _pulsar
import fastavro
import pulsar
import pyarrow as pa
import pytest
from chispa.schema_comparer import assert_schema_equality
from pulsar.schema import (
    Array,
    AvroSchema,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Integer,
    JsonSchema,
    Long,
    Map,
    Record,
    String,
)
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pipelines.errors import OptionError, PipelinesError
from pipelines.options.source import SourceOptions
from pipelines.spark.schemas import (
    SchemaDecodeError,
    ValueSchema,
    json_rows,
    json_vectorized,
    parse_avro,
    spark_type,
)
from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.client.schema import TYPE_NAMES, SchemaInfo
from pulsarwire.codec.frames import new_command
from pulsarwire.proto import pb

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


# -- producing with the official client ---------------------------------------------------
class Color(Enum):
    red = 1
    green = 2


class Size(Enum):
    S = "S"
    L = "L"


class Point(Record):
    x = Integer()
    y = Integer(required=True)


class Order(Record):
    id = Long(required=True)
    customer = String()
    price = Double()
    paid = Boolean()
    where = Point()
    back = Point()  # the same record type again: a named reference in the schema
    tags = Array(String())
    counts = Map(Long())
    color = CustomEnum(Color)
    blob = Bytes()


class Shipment(Record):
    id = Long(required=True)
    carrier = String()
    weight = Double()
    express = Boolean()
    size = CustomEnum(Size)
    stops = Array(Point())
    origin = Point()


class Tagged(Record):
    id = Long(required=True)
    labels = Map(String())
    color = CustomEnum(Color)


def official_send(url: str, topic: str, schema: Any, values: list[Any], batched: bool = True) -> None:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            topic, schema=schema, batching_enabled=batched, batching_max_publish_delay_ms=5
        )
        for v in values:
            producer.send_async(v, None)
        producer.flush()
        producer.close()
    finally:
        client.close()


class PrimitiveSchema(pulsar.schema.Schema):
    """An official-client schema of a primitive type, encoded as Pulsar's Java schemas do."""

    def __init__(self, kind: Any, name: str, fmt: str) -> None:
        super().__init__(object, kind, None, name)
        self.fmt = fmt

    def encode(self, obj: Any) -> bytes:
        return struct.pack(self.fmt, obj)

    def decode(self, data: bytes) -> Any:
        return struct.unpack(self.fmt, data)[0]


def declare_schema(url: str, topic: str, kind: str, definition: bytes = b"") -> None:
    """Register a schema by GET_OR_CREATE_SCHEMA (for types the official Python client lacks)."""
    number = {name: n for n, name in TYPE_NAMES.items()}[kind]
    client = Client(url)

    async def go() -> None:
        conn = await client._core.connection_for(topic)
        cmd, req = new_command(pb.BaseCommand.GET_OR_CREATE_SCHEMA)
        req.topic = topic
        req.schema.name = kind
        req.schema.type = number
        req.schema.schema_data = definition
        resp = await conn.request(cmd, 10)
        assert not resp.is_error and not resp.command.getOrCreateSchemaResponse.HasField("error_code")

    try:
        client._run(go())
    finally:
        client.close()


def read_auto(spark: Any, url: str, **options: str) -> Any:
    reader = spark.read.format("pulsarwire").option("service.url", url).option("schema", "auto")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def plain(v: Any) -> Any:
    """Spark's Python values made comparable: bytearray → bytes, recursively."""
    if isinstance(v, bytearray):
        return bytes(v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


# -- Spark reads -----------------------------------------------------------------------------
def test_avro_record_with_nested_types(spark: Any, dedup_broker: Broker, topic_name: str) -> None:
    orders = [
        Order(
            id=i,
            customer=f"c{i}",
            price=i * 1.5,
            paid=i % 2 == 0,
            where=Point(x=i, y=-i),
            back=Point(x=None, y=7),
            tags=[f"t{j}" for j in range(i)],
            counts={f"k{j}": j * 10 for j in range(i % 3)},
            color=Color.green if i % 2 else Color.red,
            blob=bytes([i, 0, 255]),
        )
        for i in range(6)
    ]
    orders.append(Order(id=99, where=None, back=None))  # every optional field null
    official_send(dedup_broker.service_url, topic_name, AvroSchema(Order), orders)

    df = read_auto(spark, dedup_broker.service_url, topic=topic_name)
    point = StructType([StructField("x", IntegerType(), True), StructField("y", IntegerType(), False)])
    assert_schema_equality(
        df.schema["value"].dataType,
        StructType(
            [
                StructField("id", LongType(), False),
                StructField("customer", StringType(), True),
                StructField("price", DoubleType(), True),
                StructField("paid", BooleanType(), True),
                StructField("where", point, True),
                StructField("back", point, True),
                StructField("tags", ArrayType(StringType(), False), True),
                StructField("counts", MapType(StringType(), LongType(), False), True),
                StructField("color", StringType(), True),
                StructField("blob", BinaryType(), True),
            ]
        ),
    )
    assert df.schema["key"].dataType == BinaryType()
    assert df.schema["topic"].dataType == StringType()
    rows = df.orderBy("value.id").collect()
    expected = [
        {
            "id": o.id,
            "customer": o.customer,
            "price": o.price,
            "paid": o.paid,
            "where": None if o.where is None else {"x": o.where.x, "y": o.where.y},
            "back": None if o.back is None else {"x": o.back.x, "y": o.back.y},
            "tags": o.tags,
            "counts": o.counts,
            "color": None if o.color is None else o.color.name,
            "blob": o.blob,
        }
        for o in orders
    ]
    assert [plain(r.value.asDict(recursive=True)) for r in rows] == expected
    assert {r.topic for r in rows} == {topic_name}
    assert all(r.key is None for r in rows)


def test_avro_logical_types(spark: Any, dedup_broker: Broker, topic_name: str) -> None:
    definition = {
        "type": "record",
        "name": "Reading",
        "namespace": "com.example",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "at_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3},
            },
            {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "of_day", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "ratio", "type": "float"},
        ],
    }
    readings = [
        {
            "at": EPOCH + dt.timedelta(days=19_700 + i, milliseconds=123 + i),
            "at_us": None if i == 2 else EPOCH + dt.timedelta(days=19_000, microseconds=654_321 + i),
            "day": dt.date(2024, 2, 29) + dt.timedelta(days=i),
            "amount": Decimal(f"{i}12345.678"),
            "digest": bytes([i, i, i, i]),
            "local": dt.datetime(2024, 1, 1, 12, 30, 15, 250_000) + dt.timedelta(hours=i),
            "of_day": 3_600_000 + i,
            "ratio": 0.5 + i,
        }
        for i in range(4)
    ]
    official_send(
        dedup_broker.service_url, topic_name, AvroSchema(None, schema_definition=definition), readings
    )

    df = read_auto(spark, dedup_broker.service_url, topic=topic_name)
    assert_schema_equality(
        df.schema["value"].dataType,
        StructType(
            [
                StructField("at", TimestampType(), False),
                StructField("at_us", TimestampType(), True),
                StructField("day", DateType(), False),
                StructField("amount", DecimalType(12, 3), False),
                StructField("digest", BinaryType(), False),
                StructField("local", TimestampNTZType(), False),
                StructField("of_day", IntegerType(), False),
                StructField("ratio", FloatType(), False),
            ]
        ),
    )
    got = (
        df.select(
            F.unix_micros("value.at").alias("at"),
            F.unix_micros("value.at_us").alias("at_us"),
            F.unix_date("value.day").alias("day"),
            "value.amount",
            "value.digest",
            "value.local",
            "value.of_day",
            "value.ratio",
        )
        .orderBy("at")
        .collect()
    )

    def micros(t: dt.datetime | None) -> int | None:
        return None if t is None else (t - EPOCH) // dt.timedelta(microseconds=1)

    assert [tuple(plain(list(r))) for r in got] == [
        (
            micros(r["at"]),
            micros(r["at_us"]),
            (r["day"] - dt.date(1970, 1, 1)).days,
            r["amount"],
            r["digest"],
            r["local"],
            r["of_day"],
            r["ratio"],
        )
        for r in readings
    ]


def test_json_record(spark: Any, dedup_broker: Broker, topic_name: str) -> None:
    shipments = [
        Shipment(
            id=i,
            carrier=f"carrier\n{i}",
            weight=i + 0.25,
            express=i % 2 == 1,
            size=Size.L if i % 2 else Size.S,
            stops=[Point(x=j, y=j * 2) for j in range(i)],
            origin=Point(x=None, y=i),
        )
        for i in range(5)
    ]
    shipments.append(Shipment(id=50, origin=None))
    official_send(dedup_broker.service_url, topic_name, JsonSchema(Shipment), shipments)

    df = read_auto(spark, dedup_broker.service_url, topic=topic_name)
    point = StructType([StructField("x", IntegerType(), True), StructField("y", IntegerType(), True)])
    # JSON documents may leave anything out: every field and element is nullable
    assert_schema_equality(
        df.schema["value"].dataType,
        StructType(
            [
                StructField("id", LongType(), True),
                StructField("carrier", StringType(), True),
                StructField("weight", DoubleType(), True),
                StructField("express", BooleanType(), True),
                StructField("size", StringType(), True),
                StructField("stops", ArrayType(point, True), True),
                StructField("origin", point, True),
            ]
        ),
    )
    rows = df.orderBy("value.id").collect()
    assert [r.value.asDict(recursive=True) for r in rows] == [
        {
            "id": s.id,
            "carrier": s.carrier,
            "weight": s.weight,
            "express": s.express,
            "size": None if s.size is None else s.size.value,
            "stops": None if s.stops is None else [{"x": p.x, "y": p.y} for p in s.stops],
            "origin": None if s.origin is None else {"x": s.origin.x, "y": s.origin.y},
        }
        for s in shipments
    ]


def test_json_record_with_map_and_numeric_enum(spark: Any, dedup_broker: Broker, topic_name: str) -> None:
    items = [Tagged(id=i, labels={f"l{j}": f"v{j}" for j in range(i)}, color=Color.green) for i in range(3)]
    official_send(dedup_broker.service_url, topic_name, JsonSchema(Tagged), items)
    df = read_auto(spark, dedup_broker.service_url, topic=topic_name)
    assert_schema_equality(
        df.schema["value"].dataType,
        StructType(
            [
                StructField("id", LongType(), True),
                StructField("labels", MapType(StringType(), StringType(), True), True),
                StructField("color", StringType(), True),
            ]
        ),
    )
    rows = df.orderBy("value.id").collect()
    # the Python client writes an enum's value (2), not its symbol, into JSON
    assert [r.value.asDict(recursive=True) for r in rows] == [
        {"id": t.id, "labels": t.labels, "color": "2"} for t in items
    ]


OFFICIAL_PRIMITIVES = [
    ("STRING", pulsar.schema.StringSchema(), ["", "héllo", "multi\nline"], StringType()),
    ("INT8", PrimitiveSchema(_pulsar.SchemaType.INT8, "INT8", ">b"), [-128, 0, 127], ByteType()),
    ("INT16", PrimitiveSchema(_pulsar.SchemaType.INT16, "INT16", ">h"), [-32768, 1, 32767], ShortType()),
    (
        "INT32",
        PrimitiveSchema(_pulsar.SchemaType.INT32, "INT32", ">i"),
        [-(2**31), 5, 2**31 - 1],
        IntegerType(),
    ),
    ("INT64", PrimitiveSchema(_pulsar.SchemaType.INT64, "INT64", ">q"), [-(2**63), 5, 2**63 - 1], LongType()),
    ("FLOAT", PrimitiveSchema(_pulsar.SchemaType.FLOAT, "FLOAT", ">f"), [-1.5, 0.0, 3.25], FloatType()),
    ("DOUBLE", PrimitiveSchema(_pulsar.SchemaType.DOUBLE, "DOUBLE", ">d"), [-1e300, 0.1, 2.5], DoubleType()),
]


@pytest.mark.parametrize(
    ("kind", "schema", "values", "spark_type_"), OFFICIAL_PRIMITIVES, ids=[p[0] for p in OFFICIAL_PRIMITIVES]
)
def test_primitive_from_the_official_client(
    spark: Any,
    dedup_broker: Broker,
    topic_name: str,
    kind: str,
    schema: Any,
    values: list[Any],
    spark_type_: Any,
) -> None:
    if kind != "STRING":
        # The official client (C++ core 3.x) does not send INT*/FLOAT/DOUBLE schemas to the
        # broker, only encodes with them: register the schema as a Java producer would.
        declare_schema(dedup_broker.service_url, topic_name, kind)
    official_send(dedup_broker.service_url, topic_name, schema, values, batched=False)
    df = read_auto(spark, dedup_broker.service_url, topic=topic_name)
    assert df.schema["value"].dataType == spark_type_
    assert [r.value for r in df.orderBy("entryId").collect()] == values


def test_primitives_java_clients_declare(spark: Any, dedup_broker: Broker, produce) -> None:
    """BOOLEAN, DATE, TIME, TIMESTAMP, INSTANT and the java.time types, bytes as Java encodes them."""
    url = dedup_broker.service_url
    ms = 1_700_000_000_123
    cases = {
        "BOOLEAN": ([b"\x01", b"\x00", b"\x02"], BooleanType(), "value", [True, False, True]),
        "TIMESTAMP": (
            [struct.pack(">q", ms), struct.pack(">q", -1)],
            TimestampType(),
            "us",
            [ms * 1000, -1000],
        ),
        "DATE": ([struct.pack(">q", ms)], TimestampType(), "us", [ms * 1000]),
        "TIME": ([struct.pack(">q", 45_000_123)], LongType(), "value", [45_000_123]),
        "INSTANT": (
            [struct.pack(">qi", 1_700_000_000, 987_654_321), struct.pack(">qi", -2, 500_000_000)],
            TimestampType(),
            "us",
            [1_700_000_000_987_654, -1_500_000],
        ),
        "LOCAL_DATE": ([struct.pack(">q", 19_782), struct.pack(">q", -1)], DateType(), "days", [19_782, -1]),
        "LOCAL_TIME": ([struct.pack(">q", 3_723_000_000_001)], LongType(), "value", [3_723_000_000_001]),
        "LOCAL_DATE_TIME": (
            [struct.pack(">qq", 19_782, 3_723_000_004_000)],
            TimestampNTZType(),
            "value",
            [dt.datetime(2024, 2, 29, 1, 2, 3, 4)],
        ),
    }
    for kind, (payloads, want_type, view, want) in cases.items():
        topic = f"persistent://public/default/prim-{kind.lower()}-{id(cases)}"
        declare_schema(url, topic, kind)
        produce(url, topic, payloads, batching_enabled=False)
        df = read_auto(spark, url, topic=topic)
        assert df.schema["value"].dataType == want_type, kind
        col = {
            "value": F.col("value"),
            "us": F.unix_micros("value"),
            "days": F.unix_date("value"),
        }[view]
        assert [r[0] for r in df.orderBy("entryId").select(col).collect()] == want, kind


def test_topic_without_schema_stays_binary(
    spark: Any, dedup_broker: Broker, topic_name: str, produce
) -> None:
    url = dedup_broker.service_url
    produce(url, topic_name, [b"\x00raw", b"bytes"])
    df = read_auto(spark, url, topic=topic_name)
    assert df.schema["value"].dataType == BinaryType()
    assert sorted(r.value for r in df.collect()) == [b"\x00raw", b"bytes"]
    # BYTES is raw as well
    other = topic_name + "-bytes"
    official_send(url, other, pulsar.schema.BytesSchema(), [b"b1"])
    df = read_auto(spark, url, topic=other)
    assert df.schema["value"].dataType == BinaryType()
    assert [r.value for r in df.collect()] == [b"b1"]


def test_partitioned_topic(spark: Any, dedup_broker: Broker, topic_name: str) -> None:
    dedup_broker.create_partitioned_topic(topic_name, 3)
    points = [Point(x=i, y=i * i) for i in range(30)]
    official_send(dedup_broker.service_url, topic_name, AvroSchema(Point), points, batched=False)
    df = read_auto(spark, dedup_broker.service_url, topic=topic_name)
    assert_schema_equality(
        df.schema["value"].dataType,
        StructType([StructField("x", IntegerType(), True), StructField("y", IntegerType(), False)]),
    )
    rows = df.collect()
    assert sorted((r.value.x, r.value.y) for r in rows) == [(i, i * i) for i in range(30)]
    assert {r.partition for r in rows} == {0, 1, 2}


def test_topics_with_different_schemas_are_refused(spark: Any, dedup_broker: Broker, produce) -> None:
    url = dedup_broker.service_url
    stem = f"persistent://public/default/mixed-{id(produce)}"
    official_send(url, f"{stem}-avro", AvroSchema(Point), [Point(x=1, y=2)])
    official_send(url, f"{stem}-str", pulsar.schema.StringSchema(), ["s"])
    produce(url, f"{stem}-none", [b"raw"])
    for pair in (("avro", "str"), ("avro", "none")):
        topics = ",".join(f"{stem}-{p}" for p in pair)
        with pytest.raises(Exception) as info:
            read_auto(spark, url, topics=topics).collect()
        text = str(info.value)
        assert "OptionError" in text and "schema=auto needs one schema for all topics" in text, text
        assert all(f"{stem}-{p}" in text for p in pair), text
    # the same schema on two topics is fine
    official_send(url, f"{stem}-avro2", AvroSchema(Point), [Point(x=3, y=4)])
    rows = read_auto(spark, url, topicsPattern=f"{stem}-avro.*").collect()
    assert sorted((r.value.x, r.value.y) for r in rows) == [(1, 2), (3, 4)]


def test_unsupported_schema_type_is_an_option_error(
    spark: Any, dedup_broker: Broker, topic_name: str
) -> None:
    declare_schema(dedup_broker.service_url, topic_name, "KEY_VALUE")
    with pytest.raises(Exception) as info:
        read_auto(spark, dedup_broker.service_url, topic=topic_name).collect()
    text = str(info.value)
    assert "OptionError" in text and "KEY_VALUE" in text and "schema=raw" in text, text


def test_corrupt_json_value_fails_the_job_naming_it(
    spark: Any, dedup_broker: Broker, topic_name: str, produce
) -> None:
    url = dedup_broker.service_url
    official_send(url, topic_name, JsonSchema(Point), [Point(x=1, y=2)], batched=False)
    (bad,) = produce(url, topic_name, [b"not json"], batching_enabled=False)
    official_send(url, topic_name, JsonSchema(Point), [Point(x=3, y=4)], batched=False)
    with pytest.raises(Exception) as info:
        read_auto(spark, url, topic=topic_name).collect()
    text = str(info.value)
    assert "SchemaDecodeError" in text, text
    assert f"{topic_name}: the value at {bad.ledger_id}:{bad.entry_id}:-1 does not decode as JSON" in text


def test_corrupt_avro_value_fails_the_job_naming_it(
    spark: Any, dedup_broker: Broker, topic_name: str, produce
) -> None:
    url = dedup_broker.service_url
    official_send(url, topic_name, AvroSchema(Point), [Point(x=1, y=2)], batched=False)
    (bad,) = produce(url, topic_name, [b"\x02\x04\x06\x08"], batching_enabled=False)  # x=2, y=3, 1 more
    with pytest.raises(Exception) as info:
        read_auto(spark, url, topic=topic_name).collect()
    text = str(info.value)
    assert "SchemaDecodeError" in text, text
    assert f"the value at {bad.ledger_id}:{bad.entry_id}:-1 does not decode as AVRO" in text
    assert "1 bytes left over" in text


def test_stream_with_schema_auto(spark: Any, dedup_broker: Broker, topic_name: str, tmp_path: Any) -> None:
    url = dedup_broker.service_url
    official_send(url, topic_name, AvroSchema(Point), [Point(x=i, y=i + 1) for i in range(20)])
    got: list[tuple[int, int]] = []

    def collect(df: Any, batch_id: int) -> None:
        got.extend((r.x, r.y) for r in df.select("value.x", "value.y").collect())

    query = (
        spark.readStream.format("pulsarwire")
        .option("service.url", url)
        .option("topic", topic_name)
        .option("schema", "auto")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted(got) == [(i, i + 1) for i in range(20)]


def test_schema_option_values(spark: Any, dedup_broker: Broker, topic_name: str) -> None:
    base = {"service.url": dedup_broker.service_url, "topic": topic_name}
    assert SourceOptions.from_spark(base).schema_ == "raw"
    assert SourceOptions.from_spark({**base, "schema": " AUTO "}).schema_ == "auto"
    with pytest.raises(OptionError, match="schema: expected one of raw, auto, got 'avro'"):
        SourceOptions.from_spark({**base, "schema": "avro"})
    with pytest.raises(Exception, match="expected one of raw, auto"):
        spark.read.format("pulsarwire").option("service.url", dedup_broker.service_url).option(
            "topic", topic_name
        ).option("schema", "avro").load()


# -- the Avro → Spark mapping, without Spark actions -------------------------------------------
@pytest.mark.parametrize(
    ("avro", "spark"),
    [
        ("int", IntegerType()),
        ("long", LongType()),
        ("float", FloatType()),
        ("double", DoubleType()),
        ("boolean", BooleanType()),
        ("string", StringType()),
        ("bytes", BinaryType()),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, StringType()),
        ({"type": "fixed", "name": "F", "size": 16}, BinaryType()),
        ({"type": "long", "logicalType": "timestamp-millis"}, TimestampType()),
        ({"type": "long", "logicalType": "timestamp-micros"}, TimestampType()),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, TimestampNTZType()),
        ({"type": "int", "logicalType": "date"}, DateType()),
        ({"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10}, DecimalType(38, 10)),
        (
            {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 9},
            DecimalType(9, 0),
        ),
        ({"type": "int", "logicalType": "time-millis"}, IntegerType()),  # no Spark time type: the int
        ({"type": "string", "logicalType": "uuid"}, StringType()),
        ({"type": "int", "logicalType": "timestamp-millis"}, IntegerType()),  # invalid: the base type
        ({"type": "bytes", "logicalType": "decimal"}, BinaryType()),  # no precision: the base type
        ({"type": "array", "items": "int"}, ArrayType(IntegerType(), False)),
        ({"type": "array", "items": ["null", "int"]}, ArrayType(IntegerType(), True)),
        ({"type": "map", "values": ["string", "null"]}, MapType(StringType(), StringType(), True)),
        (["null", "string"], StringType()),
        (["string"], StringType()),
    ],
    ids=lambda v: json.dumps(v) if not hasattr(v, "simpleString") else v.simpleString(),
)
def test_avro_type_mapping(avro: Any, spark: Any) -> None:
    assert spark_type(parse_avro(json.dumps(avro))) == spark


def test_avro_record_mapping_nullability_names_and_namespaces() -> None:
    schema = {
        "type": "record",
        "name": "Outer",
        "namespace": "a.b",
        "fields": [
            {"name": "req", "type": "long"},
            {"name": "opt", "type": ["null", "long"]},
            {"name": "opt_last", "type": ["long", "null"]},
            {
                "name": "in",
                "type": {"type": "record", "name": "In", "fields": [{"name": "v", "type": "int"}]},
            },
            {"name": "again", "type": ["null", "In"]},
            {"name": "full", "type": "a.b.In"},
            {"name": "list", "type": {"type": "array", "items": "a.b.In"}},
        ],
    }
    inner = StructType([StructField("v", IntegerType(), False)])
    avro = StructType(
        [
            StructField("req", LongType(), False),
            StructField("opt", LongType(), True),
            StructField("opt_last", LongType(), True),
            StructField("in", inner, False),
            StructField("again", inner, True),
            StructField("full", inner, False),
            StructField("list", ArrayType(inner, False), False),
        ]
    )
    node = parse_avro(schema)
    assert_schema_equality(spark_type(node), avro)
    assert_schema_equality(ValueSchema("AVRO", json.dumps(schema)).spark_type(), avro)
    # JSON: the same definition, every field and element nullable
    as_json = ValueSchema("JSON", json.dumps(schema)).spark_type()
    assert_schema_equality(as_json, avro, ignore_nullable=True)
    assert all(f.nullable for f in as_json.fields)
    assert as_json["list"].dataType.containsNull and all(f.nullable for f in as_json["in"].dataType.fields)


@pytest.mark.parametrize(
    ("avro", "message"),
    [
        (["null", "int", "string"], 'value: union ["null", "int", "string"] is not supported'),
        ("null", "a field of type null"),
        (
            {"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]},
            "value.next: recursive type 'N'",
        ),
        (
            {"type": "record", "name": "R", "fields": [{"name": "x", "type": "Nope"}]},
            "value.x: unknown Avro type",
        ),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 39},
            "decimal(39,0) is wider than Spark's 38",
        ),
        ({"type": "record", "fields": []}, "a record without a name"),
    ],
)
def test_avro_mapping_refusals(avro: Any, message: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_avro(json.dumps(avro))
    assert info.value.option == "schema"
    assert message in str(info.value)


def test_schema_types_raw_primitive_and_unsupported() -> None:
    assert ValueSchema.from_info(None, "t") is None
    assert ValueSchema.from_info(SchemaInfo("BYTES", b""), "t") is None
    assert ValueSchema.from_info(SchemaInfo("NONE", b""), "t") is None
    primitives = {
        "STRING": StringType(),
        "BOOLEAN": BooleanType(),
        "INT8": ByteType(),
        "INT16": ShortType(),
        "INT32": IntegerType(),
        "INT64": LongType(),
        "FLOAT": FloatType(),
        "DOUBLE": DoubleType(),
        "TIMESTAMP": TimestampType(),
        "DATE": TimestampType(),
        "TIME": LongType(),
        "INSTANT": TimestampType(),
        "LOCAL_DATE": DateType(),
        "LOCAL_TIME": LongType(),
        "LOCAL_DATE_TIME": TimestampNTZType(),
    }
    for kind, want in primitives.items():
        vs = ValueSchema.from_info(SchemaInfo(kind, b"null"), "t")
        assert vs is not None and vs.spark_type() == want, kind
    for kind in ("KEY_VALUE", "PROTOBUF", "PROTOBUF_NATIVE", "AUTO_CONSUME"):
        with pytest.raises(OptionError, match=f"persistent://x/y/t has a {kind} schema"):
            ValueSchema.from_info(SchemaInfo(kind, b"{}"), "persistent://x/y/t")
    with pytest.raises(OptionError, match="not JSON"):
        ValueSchema.from_info(SchemaInfo("AVRO", b"{nope"), "t")
    bad = {"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]}
    with pytest.raises(OptionError, match=r"^schema: persistent://x/y/t: value\.u: union \["):
        ValueSchema.from_info(SchemaInfo("JSON", json.dumps(bad).encode()), "persistent://x/y/t")


def test_client_get_schema(dedup_broker: Broker, topic_name: str) -> None:
    url = dedup_broker.service_url
    official_send(url, topic_name, AvroSchema(Point), [Point(x=1, y=2)])
    # A compatible second version (FULL: the added field has a default), given as a definition.
    v2 = dict(Point.schema())
    v2["fields"] = [*v2["fields"], {"name": "label", "type": ["null", "string"], "default": None}]
    official_send(url, topic_name, AvroSchema(None, schema_definition=v2), [{"x": 3, "y": 4, "label": "b"}])
    client = Client(url)
    try:
        latest = client.get_schema(topic_name)
        assert latest is not None and latest.type == "AVRO" and latest.version == (1).to_bytes(8, "big")
        assert json.loads(latest.schema) == v2
        first = client.get_schema(topic_name, (0).to_bytes(8, "big"))
        assert first is not None and first.type == "AVRO"
        assert json.loads(first.schema) == Point.schema() and first.properties == {}
        assert client.get_schema(topic_name, (5).to_bytes(8, "big")) is None
        assert client.get_schema(topic_name + "-nothing") is None
    finally:
        client.close()


# -- the decoders, without Spark -------------------------------------------------------------
def bulk(values: list[bytes | None]) -> pa.RecordBatch:
    """A bulk-shaped batch: value plus the columns errors name a message by."""
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "value": pa.array(values, pa.binary()),
            "topic": ["persistent://public/default/t-partition-1"] * n,
            "ledger_id": [7] * n,
            "entry_id": list(range(10, 10 + n)),
            "batch_index": [3] * n,
        }
    )


def test_primitive_decoding_checks_every_length() -> None:
    vs = ValueSchema("INT32")
    out = vs.decode(bulk([struct.pack(">i", -7), None, struct.pack(">i", 1 << 30)]))
    assert out.type == pa.int32() and out.to_pylist() == [-7, None, 1 << 30]
    with pytest.raises(SchemaDecodeError) as info:
        vs.decode(bulk([struct.pack(">i", 1), b"\x00\x00\x00\x00\x00"]))
    assert str(info.value) == (
        "persistent://public/default/t-partition-1: the value at 7:11:3 does not decode as INT32: "
        "expected 4 bytes, got 5"
    )
    assert isinstance(info.value, PipelinesError)
    assert ValueSchema("BOOLEAN").decode(bulk([b"\x00", b"\x07", None])).to_pylist() == [False, True, None]
    with pytest.raises(SchemaDecodeError, match="expected 1 bytes, got 0"):
        ValueSchema("BOOLEAN").decode(bulk([b""]))
    with pytest.raises(SchemaDecodeError, match="nanoseconds 1000000000 out of range"):
        ValueSchema("INSTANT").decode(bulk([struct.pack(">qi", 0, 10**9)]))
    with pytest.raises(SchemaDecodeError, match="at 7:10:3 does not decode as STRING: not UTF-8"):
        ValueSchema("STRING").decode(bulk([b"\xff", b"ok"]))
    ts = ValueSchema("TIMESTAMP").decode(bulk([struct.pack(">q", 1_500), None]))
    assert ts.type == pa.timestamp("us", tz="UTC") and ts.cast(pa.int64()).to_pylist() == [1_500_000, None]
    # a sliced batch (the bulk reader hands out slices) decodes its own rows only
    sliced = bulk([struct.pack(">h", i) for i in range(6)]).slice(2, 3)
    assert ValueSchema("INT16").decode(sliced).to_pylist() == [2, 3, 4]


POINT_JSON = json.dumps(Point.schema())


def test_json_decoding_is_vectorized_and_names_bad_values() -> None:
    vs = ValueSchema("JSON", POINT_JSON)
    good = bulk([b'{"x": 1, "y": 2}', None, b'{\n "y": 3,\n "extra": [1]\n}'])
    fast = json_vectorized(vs, good.column("value"))
    assert fast is not None and fast.type == vs.arrow_type()
    assert fast.to_pylist() == [{"x": 1, "y": 2}, None, {"x": None, "y": 3}]
    assert json_rows(vs, good.column("value"), None).to_pylist() == fast.to_pylist()
    for i, bad in enumerate(
        [b"not json", b"", b"  ", b'{"x": 1} {"x": 2}', b'{"x": "one"}', b"[1]", b'{"x": 1.5}']
    ):
        batch = bulk([b'{"x": 0}', bad])
        assert json_vectorized(vs, batch.column("value")) is None, bad
        with pytest.raises(SchemaDecodeError) as info:
            vs.decode(batch)
        assert "t-partition-1: the value at 7:11:3 does not decode as JSON" in str(info.value), (i, bad)
    # two documents in one value and a blank one would line up by count: still refused
    assert json_vectorized(vs, bulk([b'{"x": 1} {"x": 2}', b" "]).column("value")) is None
    # maps are outside pyarrow.json: decoded value by value
    tagged = ValueSchema("JSON", json.dumps(Tagged.schema()))
    batch = bulk([b'{"id": 1, "labels": {"a": "b"}, "color": "red"}'])
    assert json_vectorized(tagged, batch.column("value")) is None
    assert tagged.decode(batch).to_pylist() == [{"id": 1, "labels": [("a", "b")], "color": "red"}]


def test_json_logical_types_both_paths() -> None:
    schema = {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
            },
        ],
    }
    vs = ValueSchema("JSON", json.dumps(schema))
    batch = bulk([b'{"at": 1700000000123, "day": 19000, "amount": 12.5}'])
    fast = json_vectorized(vs, batch.column("value"))
    slow = json_rows(vs, batch.column("value"), None)
    want = [
        {
            "at": EPOCH + dt.timedelta(milliseconds=1_700_000_000_123),
            "day": dt.date(1970, 1, 1) + dt.timedelta(days=19_000),
            "amount": Decimal("12.50"),
        }
    ]
    assert fast is not None and fast.to_pylist() == want and slow.to_pylist() == want
    # ISO-8601 text is accepted value by value
    iso = bulk([b'{"at": "2023-11-14T22:13:20.123Z", "day": "2022-01-08", "amount": "12.5"}'])
    assert vs.decode(iso).to_pylist() == want


def test_avro_decoding_every_byte_and_nulls() -> None:
    vs = ValueSchema("AVRO", POINT_JSON)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, Point.schema(), {"x": None, "y": -3})
    out = vs.decode(bulk([buf.getvalue(), None]))
    assert out.type == vs.arrow_type() and out.to_pylist() == [{"x": None, "y": -3}, None]
    with pytest.raises(SchemaDecodeError, match="at 7:10:3 does not decode as AVRO: 2 bytes left over"):
        vs.decode(bulk([buf.getvalue() + b"\x00\x00"]))
    with pytest.raises(SchemaDecodeError, match="at 7:11:3 does not decode as AVRO"):
        vs.decode(bulk([buf.getvalue(), b"\x02"]))  # the union branch, then nothing
