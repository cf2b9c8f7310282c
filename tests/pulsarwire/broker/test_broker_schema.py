"""Schemas: the official client registers Avro/JSON/primitive schemas; GET_SCHEMA returns them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Float, Integer, JsonSchema, Record, String, StringSchema

from pulsarwire.broker import Broker
from pulsarwire.proto import pb
from tests.helpers.judge import make_client, new_topic, receive_n
from tests.helpers.raw import RawConnection


class Order(Record):
    id = Integer()
    customer = String()
    amount = Float()


def get_schema(url: str, topic: str, version: bytes | None = None) -> pb.CommandGetSchemaResponse:
    conn = RawConnection.to(url)
    try:
        cmd = pb.BaseCommand(type=pb.BaseCommand.GET_SCHEMA)
        cmd.getSchema.request_id = 1
        cmd.getSchema.topic = topic
        if version is not None:
            cmd.getSchema.schema_version = version
        conn.send(cmd)
        return conn.expect(pb.BaseCommand.GET_SCHEMA_RESPONSE).command.getSchemaResponse
    finally:
        conn.close()


def test_avro_json_and_string_schemas_round_trip(shared_broker: Broker) -> None:
    client = make_client(shared_broker.service_url)
    try:
        cases = [(AvroSchema(Order), pb.Schema.Avro), (JsonSchema(Order), pb.Schema.Json)]
        for schema, proto_type in cases:
            topic = new_topic("schema")
            consumer = client.subscribe(
                topic, "s", schema=schema, initial_position=pulsar.InitialPosition.Earliest
            )
            producer = client.create_producer(topic, schema=schema)
            producer.send(Order(id=7, customer="ada", amount=12.5))
            msg = receive_n(consumer, 1, ack=True)[0]
            assert (msg.value().id, msg.value().customer, msg.value().amount) == (7, "ada", 12.5)
            resp = get_schema(shared_broker.service_url, topic)
            assert not resp.HasField("error_code")
            assert resp.schema.type == proto_type
            fields = {f["name"] for f in json.loads(resp.schema.schema_data)["fields"]}
            assert fields == {"id", "customer", "amount"}
        topic = new_topic("schema")
        client.create_producer(topic, schema=StringSchema()).send("text")
        assert get_schema(shared_broker.service_url, topic).schema.type == pb.Schema.String
    finally:
        client.close()


def test_get_schema_of_a_topic_without_one_is_an_error(shared_broker: Broker) -> None:
    resp = get_schema(shared_broker.service_url, new_topic("noschema"))
    assert resp.HasField("error_code")


def _record(*fields: dict[str, object]) -> bytes:
    return json.dumps({"type": "record", "name": "Order", "fields": list(fields)}).encode()


ID = {"name": "id", "type": "long"}
NOTE = {"name": "note", "type": ["null", "string"], "default": None}


def get_or_create(conn: RawConnection, rid: int, topic: str, data: bytes, kind: int = pb.Schema.Avro) -> Any:
    cmd = pb.BaseCommand(type=pb.BaseCommand.GET_OR_CREATE_SCHEMA)
    req = cmd.getOrCreateSchema
    req.request_id = rid
    req.topic = topic
    req.schema.name = "s"
    req.schema.type = kind  # type: ignore[assignment]
    req.schema.schema_data = data
    conn.send(cmd)
    return conn.expect(pb.BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse


def test_get_or_create_schema_versions_and_restart(
    tmp_path: Path, start_broker: Callable[..., Broker]
) -> None:
    b = start_broker(data_dir=tmp_path)
    topic = new_topic("schema")
    conn = RawConnection.to(b.service_url)
    try:
        versions = [
            get_or_create(conn, rid, topic, data).schema_version
            for rid, data in ((1, _record(ID)), (2, _record(ID, NOTE)), (3, _record(ID)))
        ]
        assert versions[0] == versions[2] != versions[1]  # an existing schema keeps its version
    finally:
        conn.close()
    b.restart()
    assert get_schema(b.service_url, topic, versions[0]).schema.schema_data == _record(ID)
    assert get_schema(b.service_url, topic).schema.schema_data == _record(ID, NOTE)


@pytest.mark.parametrize(
    ("data", "kind", "why"),
    [
        pytest.param(
            _record(ID, {"name": "qty", "type": "int"}),
            pb.Schema.Avro,
            "missing required field qty",
            id="added",
        ),
        pytest.param(
            _record({"name": "id", "type": "string"}),
            pb.Schema.Avro,
            "Found long, expecting string",
            id="retyped",
        ),
        pytest.param(_record(), pb.Schema.Avro, "missing required field id", id="removed"),
        pytest.param(
            _record({"name": "id", "type": "int"}), pb.Schema.Avro, "Found long, expecting int", id="narrowed"
        ),
        pytest.param(
            b'{"type": "string"}', pb.Schema.Avro, "Found Order, expecting string", id="not-a-record"
        ),
        pytest.param(
            b"", pb.Schema.String, "exists schema type AVRO, new schema type STRING", id="other-type"
        ),
    ],
)
def test_an_incompatible_schema_is_refused_and_the_history_unchanged(
    shared_broker: Broker, data: bytes, kind: int, why: str
) -> None:
    topic = new_topic("schema")
    conn = RawConnection.to(shared_broker.service_url)
    try:
        first = get_or_create(conn, 1, topic, _record(ID))
        resp = get_or_create(conn, 2, topic, data, kind)
        assert resp.error_code == pb.IncompatibleSchema and why in resp.error_message
        assert not resp.HasField("schema_version")
        # Compatible evolution still works, and a schema of type NONE (bytes) is no schema.
        assert get_or_create(conn, 3, topic, _record(ID, NOTE)).schema_version != first.schema_version
        assert not get_or_create(conn, 4, topic, b"", pb.Schema.Type.Value("None")).HasField("error_code")
    finally:
        conn.close()
    assert get_schema(shared_broker.service_url, topic).schema.schema_data == _record(ID, NOTE)


def test_the_official_producer_with_an_incompatible_schema_is_refused(shared_broker: Broker) -> None:
    client = make_client(shared_broker.service_url)
    try:
        topic = new_topic("schema")
        client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=1, customer="a", amount=1.0))
        with pytest.raises(pulsar.PulsarException, match="IncompatibleSchema"):
            client.create_producer(topic, schema=StringSchema())
        client.create_producer(topic).send(b"raw bytes need no schema")
    finally:
        client.close()


def test_partitions_share_their_topic_s_schema_and_asking_creates_no_topic(shared_broker: Broker) -> None:
    client = make_client(shared_broker.service_url)
    topic = new_topic("schema")
    shared_broker.create_partitioned_topic(topic, 3)
    try:
        producer = client.create_producer(topic, schema=JsonSchema(Order))  # one producer per partition
        producer.send(Order(id=1, customer="a", amount=1.0))
        before = shared_broker.topic_names()
        for name in (topic, f"{topic}-partition-0", f"{topic}-partition-2"):
            resp = get_schema(shared_broker.service_url, name)
            assert resp.schema.type == pb.Schema.Json and resp.schema_version == (0).to_bytes(8, "big")
        assert shared_broker.topic_names() == before  # no stray topic for the partitioned parent
        assert topic not in before
        missing = new_topic("nothing")
        assert get_schema(shared_broker.service_url, missing).HasField("error_code")
        assert missing not in shared_broker.topic_names()
    finally:
        client.close()


def test_consumer_stats(shared_broker: Broker) -> None:
    client = make_client(shared_broker.service_url)
    conn = RawConnection.to(shared_broker.service_url)
    topic = new_topic("stats")
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode())
        sub = pb.BaseCommand(type=pb.BaseCommand.SUBSCRIBE)
        s = sub.subscribe
        s.topic, s.subscription, s.consumer_id, s.request_id = topic, "stats", 1, 1
        s.subType = pb.CommandSubscribe.Shared
        s.initialPosition = pb.CommandSubscribe.Earliest
        s.consumer_name = "raw-consumer"
        conn.send(sub)
        conn.expect(pb.BaseCommand.SUCCESS)
        flow = pb.BaseCommand(type=pb.BaseCommand.FLOW)
        flow.flow.consumer_id, flow.flow.messagePermits = 1, 3
        conn.send(flow)
        for _ in range(3):
            conn.expect(pb.BaseCommand.MESSAGE)
        stats = pb.BaseCommand(type=pb.BaseCommand.CONSUMER_STATS)
        stats.consumerStats.request_id, stats.consumerStats.consumer_id = 2, 1
        conn.send(stats)
        r = conn.expect(pb.BaseCommand.CONSUMER_STATS_RESPONSE).command.consumerStatsResponse
        assert (r.consumerName, r.availablePermits, r.unackedMessages, r.msgBacklog, r.type) == (
            "raw-consumer",
            0,
            3,
            5,
            "Shared",
        )
    finally:
        conn.close()
        client.close()
