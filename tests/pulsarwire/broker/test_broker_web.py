"""The broker's web service (issue 19): Pulsar's admin REST API v2 subset, HTTP lookup, /metrics.

Plain HTTP calls (urllib) against a broker started with ``http_port``; the shapes and status codes
are those of Pulsar's REST reference (``{"reason": ...}`` errors, 204 for changes, 409 for what
exists, 404 for what does not, 412 for busy topics and subscriptions). The official client uses
an ``http://`` service URL (HTTP lookup). Hostile HTTP input (oversized head or body, a slowloris,
bad JSON, chunked bodies) is sent from this process to a broker process, and a binary-protocol
bystander is served promptly afterwards (tests/helpers/hostile.py).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import jwt
import pulsar
import pytest

from pulsarwire.broker import Broker, Grants
from pulsarwire.broker.auth import TokenAuth
from pulsarwire.broker.schemas import Compatibility
from pulsarwire.codec.frames import DEFAULT_MAX_MESSAGE_SIZE
from tests.helpers.hostile import assert_bystander_served, broker_url
from tests.helpers.judge import new_topic as _new_topic
from tests.helpers.web import call

SECRET = b"s" * 32
AVRO_V1 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
AVRO_V2_DEFAULT = json.dumps(
    {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}],
    }
)
AVRO_V2_NO_DEFAULT = json.dumps(
    {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string"}]}
)


def new_topic(prefix: str) -> str:
    """A unique local name in public/default."""
    return _new_topic(prefix).rsplit("/", 1)[1]


@pytest.fixture(scope="module")
def web() -> Iterator[Broker]:
    with Broker(http_port=0) as b:
        yield b


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


# -- tenants and namespaces ------------------------------------------------------------------


def test_tenants_and_namespaces(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    assert call(u, "GET", "/admin/v2/tenants")[:2] == (200, ["public"])
    assert call(u, "GET", "/admin/v2/tenants/shop")[:2] == (404, {"reason": "Tenant does not exist"})
    assert call(u, "PUT", "/admin/v2/namespaces/shop/orders")[:2] == (
        404,
        {"reason": "Tenant does not exist"},
    )
    info = {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert call(u, "PUT", "/admin/v2/tenants/shop", info)[0] == 204
    assert call(u, "PUT", "/admin/v2/tenants/shop", info)[:2] == (409, {"reason": "Tenant already exists"})
    assert call(u, "GET", "/admin/v2/tenants/shop")[:2] == (200, info)
    assert call(u, "GET", "/admin/v2/namespaces/shop")[:2] == (200, [])
    assert call(u, "PUT", "/admin/v2/namespaces/shop/orders")[0] == 204
    assert call(u, "PUT", "/admin/v2/namespaces/shop/orders")[:2] == (
        409,
        {"reason": "Namespace already exists"},
    )
    assert call(u, "GET", "/admin/v2/namespaces/shop")[:2] == (200, ["shop/orders"])
    assert "shop/orders" in web.namespaces
    status, policies, _ = call(u, "GET", "/admin/v2/namespaces/shop/orders")
    assert status == 200 and policies["schema_compatibility_strategy"] == "UNDEFINED"
    # The namespace is usable by clients at once.
    client = pulsar.Client(web.service_url)
    try:
        client.create_producer("persistent://shop/orders/first").send(b"x")
    finally:
        client.close()
    status, topics, _ = call(u, "GET", "/admin/v2/namespaces/shop/orders/topics")
    assert (status, topics) == (200, ["persistent://shop/orders/first"])
    assert call(u, "GET", "/admin/v2/namespaces/shop/missing/topics")[:2] == (
        404,
        {"reason": "Namespace does not exist"},
    )


def test_namespace_policies_apply_to_topics(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    call(u, "PUT", "/admin/v2/tenants/pol")
    assert call(u, "PUT", "/admin/v2/namespaces/pol/ns")[0] == 204
    topic = "persistent://pol/ns/t"
    assert not web.call(web.deduplication_enabled, topic)
    assert call(u, "GET", "/admin/v2/namespaces/pol/ns/deduplication")[0] == 204  # not set
    assert call(u, "POST", "/admin/v2/namespaces/pol/ns/deduplication", True)[0] == 204
    assert call(u, "GET", "/admin/v2/namespaces/pol/ns/deduplication")[:2] == (200, True)
    assert web.call(web.deduplication_enabled, topic)
    assert call(u, "POST", "/admin/v2/namespaces/pol/ns/deduplication", "yes")[0] == 400
    assert call(u, "PUT", "/admin/v2/namespaces/pol/ns/schemaCompatibilityStrategy", "BACKWARD")[0] == 204
    assert call(u, "GET", "/admin/v2/namespaces/pol/ns/schemaCompatibilityStrategy")[:2] == (200, "BACKWARD")
    assert web.call(web.schema_compatibility, topic) is Compatibility.BACKWARD
    assert call(u, "PUT", "/admin/v2/namespaces/pol/ns/schemaCompatibilityStrategy", "SOMETIMES")[0] == 400
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert call(u, "POST", "/admin/v2/namespaces/pol/ns/retention", retention)[0] == 204
    assert call(u, "GET", "/admin/v2/namespaces/pol/ns/retention")[:2] == (200, retention)
    bad = {"retentionTimeInMinutes": -5, "retentionSizeInMB": 1}
    assert call(u, "POST", "/admin/v2/namespaces/pol/ns/retention", bad)[0] == 412
    # PUT with a Policies body: the settings this broker has are applied (as the official client's
    # test setup creates its namespaces); the others (auth_policies...) are not.
    body = {
        "replication_clusters": ["standalone"],
        "deduplicationEnabled": True,
        "schema_compatibility_strategy": "FORWARD",
        "auth_policies": {"namespace_auth": {"anonymous": ["produce"]}},
    }
    assert call(u, "PUT", "/admin/v2/namespaces/pol/with-body", body)[0] == 204
    assert web.call(web.deduplication_enabled, "persistent://pol/with-body/t")
    assert web.call(web.schema_compatibility, "persistent://pol/with-body/t") is Compatibility.FORWARD
    assert call(u, "PUT", "/admin/v2/namespaces/pol/bad-body", {"deduplicationEnabled": "on"})[0] == 400
    assert "pol/bad-body" not in web.namespaces
    # A topic policy wins over its namespace's, and can be removed again.
    path = "/admin/v2/persistent/pol/ns/t/deduplicationEnabled"
    assert call(u, "GET", path)[0] == 204
    assert call(u, "POST", path, False)[0] == 204
    assert call(u, "GET", path)[:2] == (200, False)
    assert not web.call(web.deduplication_enabled, topic)
    assert call(u, "DELETE", path)[0] == 204
    assert call(u, "GET", path + "?applied=true")[:2] == (200, True)


# -- topics --------------------------------------------------------------------------------------


def test_partitioned_topic_lifecycle(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    name = new_topic("pt")
    path = f"/admin/v2/persistent/public/default/{name}/partitions"
    full = f"persistent://public/default/{name}"
    # Pulsar 4's reasons name the topic (checked against Apache Pulsar: test_admin_rest_real_pulsar.py)
    assert call(u, "GET", path)[:2] == (404, {"reason": f"Topic {full} not found"})
    assert call(u, "PUT", path, 0)[0] == 406
    assert call(u, "PUT", path, "three")[0] == 400
    assert call(u, "PUT", path, 3)[0] == 204
    assert call(u, "PUT", path, 3)[:2] == (409, {"reason": "This topic already exists"})
    assert call(u, "GET", path)[:2] == (200, {"partitions": 3, "deleted": False})
    assert call(u, "POST", path, 2)[0] == 422
    assert call(u, "POST", path, 4)[0] == 204
    assert call(u, "GET", path)[:2] == (200, {"partitions": 4, "deleted": False})
    status, topics, _ = call(u, "GET", "/admin/v2/persistent/public/default")
    assert status == 200 and [f"{full}-partition-{i}" for i in range(4)] == [t for t in topics if name in t]
    assert full in call(u, "GET", "/admin/v2/persistent/public/default/partitioned")[1]
    assert call(u, "DELETE", path)[0] == 204
    assert call(u, "GET", path)[0] == 404
    assert call(u, "DELETE", path)[:2] == (404, {"reason": f"Topic {full} not found."})


def test_non_partitioned_topic_create_and_delete(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    name = new_topic("np")
    path = f"/admin/v2/persistent/public/default/{name}"
    full = f"persistent://public/default/{name}"
    assert call(u, "DELETE", path)[:2] == (404, {"reason": f"Topic {full} not found"})
    assert call(u, "PUT", path)[0] == 204
    assert call(u, "PUT", path)[:2] == (409, {"reason": "This topic already exists"})
    assert call(u, "GET", path + "/partitions")[:2] == (200, {"partitions": 0, "deleted": False})
    client = pulsar.Client(web.service_url)
    try:
        producer = client.create_producer(f"persistent://public/default/{name}")
        producer.send(b"x")
        assert call(u, "DELETE", path)[:2] == (412, {"reason": "Topic has active producers/subscriptions"})
        assert call(u, "DELETE", path + "?force=true")[0] == 204
    finally:
        client.close()
    assert (
        f"persistent://public/default/{name}" not in call(u, "GET", "/admin/v2/persistent/public/default")[1]
    )


def test_stats_subscriptions_skip_reset_and_delete(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    name = new_topic("subs")
    full = f"persistent://public/default/{name}"
    base = f"/admin/v2/persistent/public/default/{name}"
    client = pulsar.Client(web.service_url)
    try:
        consumer = client.subscribe(full, "sub-a", consumer_name="c1")
        producer = client.create_producer(full, producer_name="p1")
        for i in range(5):
            producer.send(b"m%d" % i)
        status, stats, _ = call(u, "GET", base + "/stats")
        assert status == 200
        assert stats["msgInCounter"] == 5
        assert [p["producerName"] for p in stats["publishers"]] == ["p1"]
        sub = stats["subscriptions"]["sub-a"]
        assert sub["type"] == "Exclusive" and sub["msgBacklog"] == 5
        assert [c["consumerName"] for c in sub["consumers"]] == ["c1"]
        status, internal, _ = call(u, "GET", base + "/internalStats")
        assert status == 200 and internal["numberOfEntries"] == 5
        assert set(internal["cursors"]["sub-a"]) >= {"markDeletePosition", "readPosition"}
        assert call(u, "GET", base + "/subscriptions")[:2] == (200, ["sub-a"])
        assert call(u, "POST", base + "/subscription/sub-a/skip_all")[0] == 204
        assert call(u, "GET", base + "/stats")[1]["subscriptions"]["sub-a"]["msgBacklog"] == 0
        assert call(u, "POST", base + "/subscription/sub-a/resetcursor/0")[0] == 204
        assert call(u, "GET", base + "/stats")[1]["subscriptions"]["sub-a"]["msgBacklog"] == 5
        # The consumer was disconnected by the reset (as Pulsar) and gets everything again.
        got = [consumer.receive(5000).data() for _ in range(5)]
        assert got == [b"m%d" % i for i in range(5)]
        assert call(u, "POST", base + "/subscription/nope/skip_all")[:2] == (
            404,
            {"reason": f"Subscription nope not found for topic {full}"},
        )
        assert call(u, "POST", base + "/subscription/sub-a/resetcursor/soon")[0] == 400
        deadline = time.monotonic() + 10  # the consumer resubscribes after the reset closed it
        while not call(u, "GET", base + "/stats")[1]["subscriptions"]["sub-a"]["consumers"]:
            assert time.monotonic() < deadline, "the consumer did not resubscribe"
            time.sleep(0.05)
        assert call(u, "DELETE", base + "/subscription/sub-a")[:2] == (
            412,
            {"reason": "Subscription has active connected consumers"},
        )
        consumer.close()
        assert call(u, "DELETE", base + "/subscription/sub-a")[0] == 204
        assert call(u, "GET", base + "/subscriptions")[:2] == (200, [])
    finally:
        client.close()
    assert call(u, "GET", "/admin/v2/persistent/public/default/no-such-topic/stats")[0] == 404


def test_terminate(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    name = new_topic("term")
    full = f"persistent://public/default/{name}"
    client = pulsar.Client(web.service_url)
    try:
        producer = client.create_producer(full)
        last = [producer.send(b"m%d" % i) for i in range(3)][-1]
        status, mid, _ = call(u, "POST", f"/admin/v2/persistent/public/default/{name}/terminate")
        assert status == 200
        assert mid == {"ledgerId": last.ledger_id(), "entryId": last.entry_id(), "partitionIndex": -1}
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(full)
    finally:
        client.close()


def test_compaction_endpoints(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    name = new_topic("compact")
    base = f"/admin/v2/persistent/public/default/{name}"
    assert call(u, "PUT", base + "/compaction")[0] == 404
    call(u, "PUT", base)
    status, body, _ = call(u, "GET", base + "/compaction")
    assert status == 200 and body["status"] == "NOT_RUN"
    client = pulsar.Client(web.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(f"persistent://public/default/{name}", batching_enabled=False)
        for key, value in (("a", b"1"), ("b", b"2"), ("a", b"3")):
            producer.send(value, partition_key=key)
        assert call(u, "PUT", base + "/compaction")[0] == 204
        deadline = time.monotonic() + 30  # as the official client's tests: poll until it is done
        while (status := call(u, "GET", base + "/compaction")[1]["status"]) == "RUNNING":
            assert time.monotonic() < deadline, "compaction still RUNNING after 30 s"
            time.sleep(0.05)
        assert status == "SUCCESS"
        reader = client.create_reader(
            f"persistent://public/default/{name}", pulsar.MessageId.earliest, is_read_compacted=True
        )
        assert [reader.read_next(5000).data() for _ in range(2)] == [b"2", b"3"]
    finally:
        client.close()


# -- schemas --------------------------------------------------------------------------------------


def test_schemas(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    name = new_topic("schema")
    path = f"/admin/v2/schemas/public/default/{name}/schema"
    assert call(u, "GET", path)[:2] == (404, {"reason": "Schema not found"})
    v1 = {"type": "AVRO", "schema": AVRO_V1, "properties": {"owner": "shop"}}
    assert call(u, "POST", path, v1)[:2] == (202, {"version": {"version": 0}})
    assert call(u, "POST", path, v1)[:2] == (202, {"version": {"version": 0}})  # known: same version
    status, got, _ = call(u, "GET", path)
    assert status == 200
    assert {k: got[k] for k in ("version", "type", "data", "properties")} == {
        "version": 0,
        "type": "AVRO",
        "data": AVRO_V1,
        "properties": {"owner": "shop"},
    }
    assert isinstance(got["timestamp"], int)
    compat = f"/admin/v2/schemas/public/default/{name}/compatibility"
    with_default = {"type": "AVRO", "schema": AVRO_V2_DEFAULT}
    without_default = {"type": "AVRO", "schema": AVRO_V2_NO_DEFAULT}
    assert call(u, "POST", compat, with_default)[:2] == (
        202,
        {"isCompatibility": True, "schemaCompatibilityStrategy": "FULL"},
    )
    assert call(u, "POST", compat, without_default)[1]["isCompatibility"] is False
    assert call(u, "POST", path, without_default)[0] == 409
    assert call(u, "POST", path, with_default)[:2] == (202, {"version": {"version": 1}})
    assert call(u, "GET", path + "/0")[1]["data"] == AVRO_V1
    assert call(u, "GET", path + "/1")[1]["version"] == 1
    assert call(u, "GET", path + "/7")[0] == 404
    assert call(u, "POST", path, {"type": "NO_SUCH_TYPE", "schema": ""})[0] == 422
    assert call(u, "POST", path, {"type": "AVRO", "schema": "{not avro"})[0] == 422
    # The binary protocol sees the same registry.
    assert web.call(web.schemas.get, f"persistent://public/default/{name}", None).version == 1
    # Deleting: a marker version; earlier versions stay readable by number; a new history starts.
    assert call(u, "DELETE", path)[:2] == (200, {"version": 2})
    assert call(u, "GET", path)[:2] == (404, {"reason": "Schema not found"})
    assert call(u, "GET", path + "/2")[0] == 404
    assert call(u, "GET", path + "/0")[1]["data"] == AVRO_V1
    assert call(u, "DELETE", path)[0] == 404
    assert call(u, "POST", path, without_default)[:2] == (202, {"version": {"version": 3}})


def test_tenants_and_policies_survive_a_restart(start_broker: Callable[..., Broker], tmp_path: Path) -> None:
    b = start_broker(http_port=0, data_dir=tmp_path)
    u = b.http_url
    assert u is not None
    assert call(u, "PUT", "/admin/v2/tenants/lonely")[0] == 204
    assert call(u, "PUT", "/admin/v2/tenants/kept")[0] == 204
    assert call(u, "PUT", "/admin/v2/namespaces/kept/ns")[0] == 204
    assert call(u, "POST", "/admin/v2/namespaces/kept/ns/deduplication", True)[0] == 204
    retention = {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}
    assert call(u, "POST", "/admin/v2/namespaces/kept/ns/retention", retention)[0] == 204
    assert call(u, "POST", "/admin/v2/persistent/kept/ns/t/deduplicationEnabled", False)[0] == 204
    b.restart()
    u = b.http_url
    assert u is not None
    assert call(u, "GET", "/admin/v2/tenants")[:2] == (200, ["kept", "lonely", "public"])
    assert call(u, "GET", "/admin/v2/namespaces/kept/ns/deduplication")[:2] == (200, True)
    assert call(u, "GET", "/admin/v2/namespaces/kept/ns/retention")[:2] == (200, retention)
    assert call(u, "GET", "/admin/v2/persistent/kept/ns/t/deduplicationEnabled")[:2] == (200, False)
    assert b.call(b.deduplication_enabled, "persistent://kept/ns/other")


def test_schema_deletion_survives_a_restart(start_broker: Callable[..., Broker], tmp_path: Path) -> None:
    b = start_broker(http_port=0, data_dir=tmp_path)
    u = b.http_url
    assert u is not None
    path = "/admin/v2/schemas/public/default/kept/schema"
    assert call(u, "POST", path, {"type": "AVRO", "schema": AVRO_V1})[0] == 202
    assert call(u, "DELETE", path)[:2] == (200, {"version": 1})
    b.restart()
    u = b.http_url
    assert u is not None
    assert call(u, "GET", path)[0] == 404
    assert call(u, "POST", path, {"type": "AVRO", "schema": AVRO_V2_NO_DEFAULT})[:2] == (
        202,
        {"version": {"version": 2}},
    )


# -- lookup, official client over http:// ---------------------------------------------------------


def test_lookup_answer(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    status, body, _ = call(u, "GET", "/lookup/v2/topic/persistent/public/default/looked-up")
    assert status == 200
    assert body["brokerUrl"] == web.service_url
    assert body["httpUrl"] == u
    assert set(body) >= {"brokerUrl", "brokerUrlTls", "httpUrl", "httpUrlTls"}
    assert call(u, "GET", "/lookup/v2/topic/persistent/public/nope/t")[:2] == (
        404,
        {"reason": "Namespace does not exist"},
    )


def test_official_client_with_http_service_url(web: Broker) -> None:
    u = web.http_url
    assert u is not None and u.startswith("http://")
    partitioned = f"persistent://public/default/{new_topic('http-pt')}"
    web.create_partitioned_topic(partitioned, 3)
    client = pulsar.Client(u, operation_timeout_seconds=10)
    try:
        for topic in (new_topic("http"), partitioned):
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            for i in range(6):
                producer.send(b"m%d" % i)
            got = sorted(consumer.receive(5000).data() for _ in range(6))
            assert got == [b"m%d" % i for i in range(6)]
        assert len(client.get_topic_partitions(partitioned)) == 3
    finally:
        client.close()


def test_health_and_metrics(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    assert call(u, "GET", "/admin/v2/brokers/health")[:2] == (200, "ok")
    name = new_topic("metrics")
    client = pulsar.Client(web.service_url)
    try:
        producer = client.create_producer(name)
        for _ in range(3):
            producer.send(b"x")
    finally:
        client.close()
    status, text, headers = call(u, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    labels = f'cluster="standalone",namespace="public/default",topic="persistent://public/default/{name}"'
    assert f"pulsar_in_messages_total{{{labels}}} 3" in text.splitlines()
    assert "# TYPE pulsar_msg_backlog gauge" in text


def test_unknown_path_and_wrong_method(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    assert call(u, "GET", "/admin/v2/nothing/here")[:2] == (404, {"reason": "Not Found"})
    status, body, headers = call(u, "DELETE", "/admin/v2/tenants")
    assert (status, body) == (405, {"reason": "Method Not Allowed"})
    assert headers["Allow"] == "GET"
    assert call(u, "PUT", "/admin/v2/persistent/public/default/x/partitions", raw=b"{nope")[:2] == (
        400,
        {"reason": "the request body is not valid JSON"},
    )


# -- authentication and authorization ------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured() -> Iterator[Broker]:
    grants = Grants.of(
        "alice:public/default:produce,consume", "reader:public/default:consume", superusers=["admin"]
    )
    with Broker(http_port=0, auth=TokenAuth(secret=SECRET), grants=grants) as b:
        yield b


def test_auth_401_without_token_403_without_grant(secured: Broker) -> None:
    u = secured.http_url
    assert u is not None
    stats = "/admin/v2/persistent/public/default/secure-t/partitions"
    assert call(u, "GET", stats)[0] == 401
    assert call(u, "GET", stats, token="not-a-token")[0] == 401
    assert call(u, "GET", stats, token=token("alice"))[0] in (200, 404)  # lookup: produce or consume
    assert call(u, "GET", stats, token=token("bob"))[0] == 403  # no grant
    # Tenants, namespaces and topic creation need a superuser.
    assert call(u, "GET", "/admin/v2/tenants", token=token("alice"))[0] == 403
    assert call(u, "GET", "/admin/v2/tenants", token=token("admin"))[:2] == (200, ["public"])
    assert call(u, "PUT", stats, 2, token=token("alice"))[0] == 403
    assert call(u, "PUT", stats, 2, token=token("admin"))[0] == 204
    # Schema upload needs produce; subscriptions need consume.
    schema = "/admin/v2/schemas/public/default/secure-t/schema"
    string = {"type": "STRING", "schema": ""}
    assert call(u, "POST", schema, string, token=token("reader"))[0] == 403
    assert call(u, "POST", schema, string, token=token("alice"))[0] == 202
    assert call(u, "GET", schema, token=token("reader"))[0] == 200
    subs = "/admin/v2/persistent/public/default/secure-t/subscriptions"
    assert call(u, "GET", subs, token=token("reader"))[:2] == (200, [])
    assert call(u, "GET", "/admin/v2/brokers/health", token=token("alice"))[0] == 403
    # Metrics are not authenticated (Pulsar's authenticateMetricsEndpoint=false).
    assert call(u, "GET", "/metrics")[0] == 200


def test_auth_official_client_over_http_lookup(secured: Broker) -> None:
    u = secured.http_url
    assert u is not None
    client = pulsar.Client(
        u, authentication=pulsar.AuthenticationToken(token("alice")), operation_timeout_seconds=10
    )
    try:
        topic = new_topic("secure-http")
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"hello")
        assert consumer.receive(5000).data() == b"hello"
    finally:
        client.close()


# -- hostile HTTP input from another process ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def web_process() -> Iterator[tuple[str, str]]:
    """A broker process with the web service and a 1 s request deadline: (pulsar URL, http URL)."""
    port = _free_port()
    with broker_url("--http-port", str(port), "--connect-timeout", "1") as url:
        yield url, f"http://127.0.0.1:{port}"


def _raw(http_url: str, data: bytes, *, read_timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the broker closes it."""
    host, port = http_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=read_timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def _served(http_url: str) -> None:
    assert call(http_url, "GET", "/admin/v2/tenants")[:2] == (200, ["public"])


def test_hostile_oversized_head(web_process: tuple[str, str]) -> None:
    url, http_url = web_process
    answer = _raw(
        http_url, b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 431 ")
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
    assert _raw(http_url, b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n").startswith(
        b"HTTP/1.1 431 "
    )
    _served(http_url)
    assert_bystander_served(url)


def test_hostile_oversized_and_chunked_body(web_process: tuple[str, str]) -> None:
    url, http_url = web_process
    head = b"PUT /admin/v2/persistent/public/default/big/partitions HTTP/1.1\r\nHost: x\r\n"
    head += b"Content-Length: %d\r\n\r\n"
    # Refused from the header alone: nothing of the body is read or allocated.
    assert _raw(http_url, head % (2**40)).startswith(b"HTTP/1.1 413 ")
    assert _raw(http_url, head % (10**30)).startswith(b"HTTP/1.1 400 ")
    # A chunked body is read (as Jetty does), within the same size cap.
    json_head = b"PUT /admin/v2/tenants/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    chunked = json_head + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    assert _raw(http_url, chunked).startswith(b"HTTP/1.1 400 ")  # read whole: not JSON
    big_chunk = json_head + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % (2**40)
    over = DEFAULT_MAX_MESSAGE_SIZE + 10  # the broker's body cap is the message size
    assert _raw(http_url, big_chunk + b"a" * over).startswith(b"HTTP/1.1 413 ")
    bad_json = json_head + b"Content-Length: 5\r\n\r\n{nope"
    answer = _raw(http_url, bad_json + b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b'"reason"' in answer
    assert b"HTTP/1.1 404 " in answer  # the connection stayed for the next request
    assert _raw(http_url, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    _served(http_url)
    assert_bystander_served(url)


def test_hostile_slowloris_is_cut_at_the_deadline(web_process: tuple[str, str]) -> None:
    url, http_url = web_process
    host, port = http_url.removeprefix("http://").split(":")
    slow = socket.create_connection((host, int(port)), timeout=5)
    try:
        answer = b""
        for byte in b"GET /admin/v2/tenants HTTP/1.1\r\nX-Slow: " + b"a" * 40:
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                break
            _served(http_url)  # others are served meanwhile
            time.sleep(0.1)
            slow.setblocking(False)
            try:
                answer += slow.recv(4096)
            except BlockingIOError:
                pass
            except OSError:
                break
            finally:
                slow.setblocking(True)
            if answer:
                break
        # The head had 1 s (--connect-timeout): the broker answered 408 however the bytes trickled.
        assert answer.startswith(b"HTTP/1.1 408 "), answer
    finally:
        slow.close()
    assert_bystander_served(url)


def test_http_port_flag() -> None:
    port = _free_port()
    with broker_url("--http-port", str(port)) as url:
        assert url.startswith("pulsar://")
        assert call(f"http://127.0.0.1:{port}", "GET", "/admin/v2/brokers/health")[:2] == (200, "ok")


def test_pytest_fixture_serves_http(pulsar_broker: Broker) -> None:
    u = pulsar_broker.http_url
    assert u is not None
    assert call(u, "GET", "/admin/v2/namespaces/public")[:2] == (200, ["public/default"])


def test_http_port_taken_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "pulsarwire.broker", "--port", "0", "--http-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"pulsarwire broker: cannot listen on 127.0.0.1:{port}: address already in use"
        " (another broker running? choose another port)"
    ]


def test_keep_alive_and_http_1_0(web: Broker) -> None:
    u = web.http_url
    assert u is not None
    get = b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: x\r\n\r\n"
    # Two requests on one HTTP/1.1 connection, the second asking to close.
    answer = _raw(u, get + get.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    assert answer.count(b"HTTP/1.1 200 OK") == 2
    # HTTP/1.0 without keep-alive: answered, then closed (_raw reads until the close).
    assert _raw(u, b"GET /admin/v2/brokers/health HTTP/1.0\r\n\r\n").endswith(b"\r\n\r\nok")


def test_deleted_topics_stay_deleted_after_a_restart(
    start_broker: Callable[..., Broker], tmp_path: Path
) -> None:
    b = start_broker(http_port=0, data_dir=tmp_path)
    client = pulsar.Client(b.service_url)
    try:
        client.create_producer("persistent://public/default/plain").send(b"x")
        b.create_partitioned_topic("persistent://public/default/parts", 2)
        client.create_producer("persistent://public/default/parts").send(b"y")
    finally:
        client.close()
    u = b.http_url
    assert u is not None
    assert call(u, "DELETE", "/admin/v2/persistent/public/default/plain")[0] == 204
    assert call(u, "DELETE", "/admin/v2/persistent/public/default/parts/partitions")[0] == 204
    b.restart()
    u = b.http_url
    assert u is not None
    assert call(u, "GET", "/admin/v2/persistent/public/default")[:2] == (200, [])
    assert call(u, "GET", "/admin/v2/persistent/public/default/partitioned")[:2] == (200, [])
