"""One rule, two transports (issue 29, "The broker's shape"): the binary protocol and the web service
ask the broker's service layer the same questions, so they answer alike.

Each test asks one question over a raw binary connection (frames from this process) and over plain
HTTP (urllib) against the same broker on 127.0.0.1, and checks both answers:

* partitioned metadata of a topic that does not exist, when the asker does not allow creation
  (``metadata_auto_creation_enabled=false`` / no ``checkAllowAutoCreation``) or the broker does
  not auto-create: TopicNotFound / 404, and nothing is created -- as Pulsar 4's
  ServerCnx.handlePartitionMetadataRequest and PersistentTopicsBase.internalGetPartitionedMetadataAsync
  answer. (The binary path answered 0 partitions before the service layer.) When both allow it,
  both answer the broker's default partitions;
* partitioned metadata and lookup in a tenant or namespace that does not exist: TopicNotFound / 404;
* partitioned metadata and lookup by a role without a grant: AuthorizationError / 403;
* lookup of a topic not created yet: the same broker URL on both paths (Pulsar's binary lookup
  does not ask whether the topic exists);
* a lookup naming a listener the broker does not advertise: ServiceNotReady / 503 (the web
  service answered 500 with a traceback in the log before);
* a partition of a partitioned topic exists for both paths with auto-creation off (Pulsar
  creates the partitions with the partitioned topic): a producer may attach to it and its stats
  are served; a partition index past the count exists for neither. (The binary path refused the
  producer with TopicNotFound before the service layer.)
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import jwt
import pytest

from pulsarwire.broker import Broker, Grants, TokenAuth
from pulsarwire.codec import new_command
from pulsarwire.proto import pb
from tests.helpers.hostile import answer, producer
from tests.helpers.raw import RawConnection

T = pb.BaseCommand
E = pb.ServerError
SECRET = b"r" * 32


def http(base: str, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    """(status, JSON body) of one request."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    return status, json.loads(text) if text else None


def binary_partitions(conn: RawConnection, topic: str, *, create: bool = True) -> tuple[int, int]:
    """(error code or -1, partitions) of PARTITIONED_METADATA."""
    cmd, req = new_command(T.PARTITIONED_METADATA)
    req.topic = topic
    req.request_id = 1
    if not create:
        req.metadata_auto_creation_enabled = False
    r = answer(conn, cmd, T.PARTITIONED_METADATA_RESPONSE).command.partitionMetadataResponse
    if r.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
        return int(r.error), 0
    return -1, int(r.partitions)


def binary_lookup(conn: RawConnection, topic: str, listener: str | None = None) -> tuple[int, str]:
    """(error code or -1, brokerServiceUrl) of LOOKUP."""
    cmd, req = new_command(T.LOOKUP)
    req.topic = topic
    req.request_id = 2
    if listener is not None:
        req.advertised_listener_name = listener
    r = answer(conn, cmd, T.LOOKUP_RESPONSE).command.lookupTopicResponse
    if r.response == pb.CommandLookupTopicResponse.Failed:
        return int(r.error), ""
    return -1, r.brokerServiceUrl


def http_partitions(
    base: str, topic: str, *, create: bool = False, token: str | None = None
) -> tuple[int, Any]:
    path = "/admin/v2/" + topic.replace("://", "/", 1) + "/partitions"
    return http(base, "GET", path + ("?checkAllowAutoCreation=true" if create else ""), token=token)


def http_lookup(base: str, topic: str, token: str | None = None) -> tuple[int, Any]:
    return http(base, "GET", "/lookup/v2/topic/" + topic.replace("://", "/", 1), token=token)


def unique(name: str, namespace: str = "public/default") -> str:
    return f"persistent://{namespace}/{name}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def both() -> Iterator[Broker]:
    """Auto-creation on, as a Pulsar standalone; 3 partitions for auto-created topics."""
    with Broker(http_port=0, default_partitions=3) as b:
        yield b


@pytest.fixture(scope="module")
def strict() -> Iterator[Broker]:
    """Auto-creation off."""
    with Broker(http_port=0, allow_auto_topic_creation=False) as b:
        yield b


def test_partitioned_metadata_of_a_missing_topic_without_creation_is_not_found_on_both(both: Broker) -> None:
    base = both.http_url
    assert base is not None
    topic = unique("missing")
    conn = RawConnection.to(both.service_url)
    try:
        assert binary_partitions(conn, topic, create=False)[0] == E.TopicNotFound
        assert http_partitions(base, topic)[0] == 404
        assert not both.topic_exists(topic)  # neither created it
        # Both allowed to create: both answer the broker's default partitions, the same topic.
        assert http_partitions(base, topic, create=True) == (200, {"partitions": 3, "deleted": False})
        assert binary_partitions(conn, topic) == (-1, 3)
        other = unique("created-by-binary")
        assert binary_partitions(conn, other) == (-1, 3)
        assert http_partitions(base, other) == (200, {"partitions": 3, "deleted": False})
    finally:
        conn.close()


def test_partitioned_metadata_of_a_missing_topic_is_not_found_when_the_broker_does_not_create(
    strict: Broker,
) -> None:
    base = strict.http_url
    assert base is not None
    topic = unique("missing")
    conn = RawConnection.to(strict.service_url)
    try:
        assert binary_partitions(conn, topic)[0] == E.TopicNotFound
        assert http_partitions(base, topic, create=True)[0] == 404
        assert not strict.topic_exists(topic)
    finally:
        conn.close()


@pytest.mark.parametrize("namespace", ["no-such-tenant/ns", "public/no-such-namespace"])
def test_a_missing_tenant_or_namespace_is_not_found_on_both(both: Broker, namespace: str) -> None:
    base = both.http_url
    assert base is not None
    topic = unique("t", namespace)
    conn = RawConnection.to(both.service_url)
    try:
        assert binary_partitions(conn, topic)[0] == E.TopicNotFound
        assert binary_lookup(conn, topic)[0] == E.TopicNotFound
        reason = (
            "Tenant does not exist" if namespace.startswith("no-such-tenant") else "Namespace does not exist"
        )
        assert http_partitions(base, topic, create=True) == (404, {"reason": reason})
        assert http_lookup(base, topic) == (404, {"reason": reason})
    finally:
        conn.close()


def test_a_lookup_of_a_topic_not_created_yet_names_the_same_broker_on_both(both: Broker) -> None:
    base = both.http_url
    assert base is not None
    topic = unique("later")
    conn = RawConnection.to(both.service_url)
    try:
        code, url = binary_lookup(conn, topic)
        status, body = http_lookup(base, topic)
        assert (code, status) == (-1, 200)
        assert url == body["brokerUrl"] == both.service_url
    finally:
        conn.close()


def test_a_lookup_for_a_listener_not_advertised_is_refused_on_both(both: Broker) -> None:
    base = both.http_url
    assert base is not None
    topic = unique("listened")
    conn = RawConnection.to(both.service_url)
    try:
        assert binary_lookup(conn, topic, listener="nope")[0] == E.ServiceNotReady
        status, body = http(
            base, "GET", "/lookup/v2/topic/" + topic.replace("://", "/", 1) + "?listenerName=nope"
        )
        assert status == 503 and "nope" in body["reason"]
    finally:
        conn.close()


def test_a_role_without_a_grant_is_refused_on_both() -> None:
    grants = Grants.of("alice:public/default:produce", superusers=["admin"])
    with Broker(http_port=0, auth=TokenAuth(secret=SECRET), grants=grants) as b:
        base = b.http_url
        assert base is not None
        topic = unique("guarded")
        for role, allowed in (("bob", False), ("alice", True)):
            token = jwt.encode({"sub": role}, SECRET, algorithm="HS256")
            conn = RawConnection.to(b.service_url, token=token)
            try:
                binary = (binary_partitions(conn, topic)[0], binary_lookup(conn, topic)[0])
                web = (
                    http_partitions(base, topic, create=True, token=token)[0],
                    http_lookup(base, topic, token)[0],
                )
            finally:
                conn.close()
            if allowed:
                assert binary == (-1, -1) and web == (200, 200), role
            else:
                assert binary == (E.AuthorizationError, E.AuthorizationError) and web == (403, 403), role


def test_a_partition_of_a_partitioned_topic_exists_for_both(strict: Broker) -> None:
    base = strict.http_url
    assert base is not None
    topic = unique("parted")
    assert http(base, "PUT", "/admin/v2/" + topic.replace("://", "/", 1) + "/partitions", 2)[0] == 204
    conn = RawConnection.to(strict.service_url)
    try:
        first = f"{topic}-partition-0"
        assert producer(conn, first).type == T.PRODUCER_SUCCESS
        assert http(base, "GET", "/admin/v2/" + first.replace("://", "/", 1) + "/stats")[0] == 200
        past = f"{topic}-partition-2"
        refused = producer(conn, past, producer_id=2)
        assert refused.type == T.ERROR and refused.command.error.error == E.TopicNotFound
        assert http(base, "GET", "/admin/v2/" + past.replace("://", "/", 1) + "/stats")[0] == 404
        assert binary_partitions(conn, first) == (-1, 0)
        assert http_partitions(base, first) == (200, {"partitions": 0, "deleted": False})
    finally:
        conn.close()
