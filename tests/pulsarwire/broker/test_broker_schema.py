"""Schemas: the official client registers Avro/JSON/primitive schemas; GET_SCHEMA returns them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pulsar
from pulsar.schema import AvroSchema, Float, Integer, JsonSchema, Record, String, StringSchema

from pulsarwire.broker import Broker
from pulsarwire.proto import pb
from tests.helpers.raw import RawConnection
from tests.pulsarwire.broker.support import make_client, new_topic, receive_n


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


def test_get_or_create_schema_versions_and_restart(
    tmp_path: Path, start_broker: Callable[..., Broker]
) -> None:
    b = start_broker(data_dir=tmp_path)
    topic = new_topic("schema")
    conn = RawConnection.to(b.service_url)
    try:
        versions = []
        for rid, data in ((1, b'{"type":"string"}'), (2, b'{"type":"long"}'), (3, b'{"type":"string"}')):
            cmd = pb.BaseCommand(type=pb.BaseCommand.GET_OR_CREATE_SCHEMA)
            req = cmd.getOrCreateSchema
            req.request_id = rid
            req.topic = topic
            req.schema.name = "s"
            req.schema.type = pb.Schema.Avro
            req.schema.schema_data = data
            conn.send(cmd)
            resp = conn.expect(pb.BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse
            versions.append(resp.schema_version)
        assert versions[0] == versions[2] != versions[1]  # an existing schema keeps its version
    finally:
        conn.close()
    b.restart()
    assert get_schema(b.service_url, topic, versions[0]).schema.schema_data == b'{"type":"string"}'
    assert get_schema(b.service_url, topic).schema.schema_data == b'{"type":"long"}'


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
