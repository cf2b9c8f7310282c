"""The admin endpoints people migrating from a Pulsar cluster script against (issue 29, section 5).

Raw HTTP (urllib) against a broker's web service, with Pulsar's paths, status codes, headers and
JSON shapes (PersistentTopics / PersistentTopicsBase, TenantsBase, NamespacesBase,
TopicLookupBase): partitioned stats and internal stats, lastMessageId, examine/peek messages,
unload, create subscription at a position, reset-cursor to a message id, subscriptions of
partitioned topics, permissions, tenant and namespace deletion, HTTP lookup of a missing topic.
The official client (``pulsar-client``) is the judge of what the answers claim: the message ids
it was given, the messages it receives after a subscription was placed, what a role may do after
a grant.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import jwt
import pulsar
import pytest

from pulsarwire.broker import Broker, Grants
from pulsarwire.broker.auth import TokenAuth
from pulsarwire.codec.batch import split_batch
from pulsarwire.proto import pb
from tests.helpers.hostile import assert_bystander_served, connect, producer
from tests.helpers.judge import make_client, new_topic, position, receive_n, send_all, wait_until
from tests.helpers.web import call, request

SECRET = b"k" * 32
T_ = pb.BaseCommand
T = "/admin/v2/persistent/public/default"


def local(topic: str) -> str:
    return topic.rsplit("/", 1)[1]


@pytest.fixture(scope="module")
def web() -> Iterator[Broker]:
    with Broker(http_port=0) as b:
        yield b


@pytest.fixture(scope="module")
def client(web: Broker) -> Iterator[pulsar.Client]:
    c = make_client(web.service_url)
    yield c
    c.close()


def url(b: Broker) -> str:
    assert b.http_url is not None
    return b.http_url


def headers_of(items: list[tuple[str, str]]) -> dict[str, str]:
    return {k: v for k, v in items}


# -- partitioned stats --------------------------------------------------------------------------------
def test_partitioned_stats_add_up_the_partitions(web: Broker, client: pulsar.Client) -> None:
    topic = new_topic("pstats")
    u, name = url(web), local(topic)
    assert call(u, "PUT", f"{T}/{name}/partitions", 2)[0] == 204
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(4):
        producer.send(f"m{i}".encode(), partition_key=str(i))
    status, stats, _ = call(u, "GET", f"{T}/{name}/partitioned-stats")
    assert status == 200
    assert stats["metadata"] == {"partitions": 2, "deleted": False}
    assert stats["msgInCounter"] == 4
    assert sorted(stats["partitions"]) == [f"{topic}-partition-0", f"{topic}-partition-1"]
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 4
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 4
    assert len(stats["subscriptions"]["sub"]["consumers"]) == 2  # one per partition
    # addresses as Pulsar writes them (Java's InetSocketAddress)
    assert all(c["address"].startswith("/127.0.0.1:") for c in stats["subscriptions"]["sub"]["consumers"])
    assert call(u, "GET", f"{T}/{name}/partitioned-stats?perPartition=false")[1]["partitions"] == {}
    status, internal, _ = call(u, "GET", f"{T}/{name}/partitioned-internalStats")
    assert status == 200 and internal["metadata"] == {"partitions": 2, "deleted": False}
    assert sum(p["numberOfEntries"] for p in internal["partitions"].values()) == 4
    assert all("sub" in p["cursors"] for p in internal["partitions"].values())
    consumer.close()
    producer.close()
    # Not a partitioned topic: 404, as Pulsar.
    plain = local(new_topic("plain"))
    assert call(u, "PUT", f"{T}/{plain}")[0] == 204
    assert call(u, "GET", f"{T}/{plain}/partitioned-stats")[:2] == (
        404,
        {"reason": f"Partitioned Topic persistent://public/default/{plain} not found"},
    )


# -- last message id ---------------------------------------------------------------------------------------
def test_last_message_id_is_what_the_official_producer_was_given(web: Broker, client: pulsar.Client) -> None:
    u = url(web)
    topic = new_topic("lastid")
    name = local(topic)
    assert call(u, "PUT", f"{T}/{name}")[0] == 204
    # Pulsar's MessageIdImpl as its REST API writes it; never written: the current ledger, entry -1
    # (GET_LAST_MESSAGE_ID answers -1:-1 there, as Pulsar's binary protocol does).
    status, body, _ = call(u, "GET", f"{T}/{name}/lastMessageId")
    assert status == 200
    assert body == {
        "ledgerId": body["ledgerId"],
        "entryId": -1,
        "partitionIndex": -1,
        "batchIndex": -1,
        "batchSize": 0,
    }
    single = client.create_producer(topic, batching_enabled=False)
    single.send(b"a")
    last = single.send(b"b")
    assert call(u, "GET", f"{T}/{name}/lastMessageId")[1] == {
        "ledgerId": last.ledger_id(),
        "entryId": last.entry_id(),
        "partitionIndex": -1,
        "batchIndex": -1,
        "batchSize": 0,
    }
    batched = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    ids = send_all(batched, [b"c", b"d", b"e"])
    body = call(u, "GET", f"{T}/{name}/lastMessageId")[1]
    assert (body["ledgerId"], body["entryId"], body["batchIndex"]) == position(ids[-1])
    assert body["batchSize"] == body["outstandingAcksInSameBatch"] == body["originalBatchSize"] == 0
    # A partitioned topic is not a topic with messages; a missing topic is 404.
    parted = local(new_topic("lastid-p"))
    assert call(u, "PUT", f"{T}/{parted}/partitions", 2)[0] == 204
    assert call(u, "GET", f"{T}/{parted}/lastMessageId")[:2] == (
        404,
        {"reason": f"Topic persistent://public/default/{parted} not found"},
    )


# -- examine / peek ------------------------------------------------------------------------------------------
def _ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def test_peek_and_examine_answer_the_entry_with_pulsars_headers(web: Broker, client: pulsar.Client) -> None:
    u = url(web)
    topic = new_topic("peek")
    name = local(topic)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    lz4 = client.create_producer(topic, batching_enabled=False, compression_type=pulsar.CompressionType.LZ4)
    first = lz4.send(b"x" * 2000, properties={"Colour": "red"}, partition_key="k1", event_timestamp=1234)
    batched = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    batch_ids = send_all(batched, [b"b0", b"b1", b"b2"])
    received = receive_n(consumer, 4)

    status, body, items = request(u, "GET", f"{T}/{name}/subscription/sub/position/1")
    h = headers_of(items)
    assert status == 200 and h["Content-Type"] == "application/octet-stream"
    assert h["X-Pulsar-Message-ID"] == f"{first.ledger_id()}:{first.entry_id()}"
    assert body == b"x" * 2000  # decompressed, as Pulsar answers
    assert h["X-Pulsar-compression"] == "LZ4" and h["X-Pulsar-uncompressed-size"] == "2000"
    assert json.loads(h["X-Pulsar-PROPERTY"]) == {"Colour": "red"}  # Pulsar 4: one JSON object
    assert h["X-Pulsar-partition-key"] == "k1"
    assert _ms(h["X-Pulsar-event-time"]) == 1234
    assert _ms(h["X-Pulsar-publish-time"]) == received[0].publish_timestamp()
    assert h["X-Pulsar-Is-Encrypted"] == "false"
    assert "X-Pulsar-producer-name" in h and "X-Pulsar-sequence-id" in h

    # The second unacknowledged entry is the batch: whole, with its message count.
    status, body, items = request(u, "GET", f"{T}/{name}/subscription/sub/position/2")
    h = headers_of(items)
    assert h["X-Pulsar-num-batch-message"] == "3"
    assert h["X-Pulsar-Message-ID"] == f"{batch_ids[0].ledger_id()}:{batch_ids[0].entry_id()}"
    assert split_batch(body, 3)[1] == [b"b0", b"b1", b"b2"]
    assert request(u, "GET", f"{T}/{name}/subscription/sub/position/3")[:2] == (
        404,
        b'{"reason": "Message not found"}',
    )
    # Acknowledged entries are skipped, as Pulsar's peek skips individually deleted entries.
    consumer.acknowledge(received[0])  # grouped by the client: sent within 100 ms

    def first_unacked() -> str:
        return headers_of(request(u, "GET", f"{T}/{name}/subscription/sub/position/1")[2])[
            "X-Pulsar-Message-ID"
        ]

    wait_until(lambda: first_unacked() == f"{batch_ids[0].ledger_id()}:{batch_ids[0].entry_id()}")

    # examinemessage counts from either end of the topic; get-message-by-id reads one position.
    h = headers_of(
        request(u, "GET", f"{T}/{name}/examinemessage?initialPosition=earliest&messagePosition=1")[2]
    )
    assert h["X-Pulsar-Message-ID"] == f"{first.ledger_id()}:{first.entry_id()}"
    h = headers_of(request(u, "GET", f"{T}/{name}/examinemessage")[2])  # latest, 1
    assert h["X-Pulsar-num-batch-message"] == "3"
    byid = request(u, "GET", f"{T}/{name}/ledger/{first.ledger_id()}/entry/{first.entry_id()}")
    assert byid[0] == 200 and byid[1] == b"x" * 2000
    h = headers_of(request(u, "GET", f"{T}/{name}/examinemessage?initialPosition=middle")[2])
    assert h["X-Pulsar-num-batch-message"] == "3"  # anything but earliest is latest, as Pulsar reads it
    h = headers_of(
        request(u, "GET", f"{T}/{name}/examinemessage?initialPosition=earliest&messagePosition=99")[2]
    )
    assert h["X-Pulsar-num-batch-message"] == "3"  # past the end from the earliest: the last, as Pulsar
    empty = local(new_topic("empty"))
    assert call(u, "PUT", f"{T}/{empty}")[0] == 204
    assert call(u, "GET", f"{T}/{empty}/examinemessage")[:2] == (
        412,
        {"reason": "Could not examine messages due to the total message is zero"},
    )

    # Peeking a subscription that does not exist creates it at the earliest position, as Pulsar does.
    h = headers_of(request(u, "GET", f"{T}/{name}/subscription/new/position/1")[2])
    assert h["X-Pulsar-Message-ID"] == f"{first.ledger_id()}:{first.entry_id()}"
    assert sorted(call(u, "GET", f"{T}/{name}/subscriptions")[1]) == ["new", "sub"]
    # What Pulsar refuses: a partitioned or non-persistent topic 405.
    parted = local(new_topic("peek-p"))
    assert call(u, "PUT", f"{T}/{parted}/partitions", 2)[0] == 204
    assert call(u, "GET", f"{T}/{parted}/subscription/sub/position/1")[1] == {
        "reason": "Peek messages on a partitioned topic is not allowed"
    }
    np = f"/admin/v2/non-persistent/public/default/{local(new_topic('np'))}"
    assert call(u, "GET", f"{np}/examinemessage")[0] == 405
    # Path and query values Pulsar reads as Java longs: anything else is 400, never a 500.
    for bad in ("ledger/abc/entry/1", "ledger/1/entry/99999999999999999999", "subscription/sub/position/x"):
        assert call(u, "GET", f"{T}/{name}/{bad}")[0] == 400
    assert call(u, "GET", f"{T}/{name}/examinemessage?messagePosition=1e3")[0] == 400
    consumer.close()


# -- create subscription, reset cursor ---------------------------------------------------------------------
def test_create_subscription_at_a_position_is_where_the_official_consumer_starts(
    web: Broker, client: pulsar.Client
) -> None:
    u = url(web)
    topic = new_topic("createsub")
    name = local(topic)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    at = {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id(), "partitionIndex": -1}
    assert call(u, "PUT", f"{T}/{name}/subscription/at2", at)[0] == 204
    assert call(u, "PUT", f"{T}/{name}/subscription/first", {"ledgerId": -1, "entryId": -1})[0] == 204
    assert call(u, "PUT", f"{T}/{name}/subscription/last")[0] == 204  # no body: latest
    assert call(u, "PUT", f"{T}/{name}/subscription/at2", at)[:2] == (
        409,
        {"reason": "Subscription already exists for topic"},
    )
    assert sorted(call(u, "GET", f"{T}/{name}/subscriptions")[1]) == ["at2", "first", "last"]
    # The official consumer's initial position does not matter: the subscription exists.
    latest = pulsar.InitialPosition.Latest
    c2 = client.subscribe(topic, "at2", initial_position=latest)
    assert [m.data() for m in receive_n(c2, 3)] == [b"m2", b"m3", b"m4"]
    c0 = client.subscribe(topic, "first", initial_position=latest)
    assert receive_n(c0, 1)[0].data() == b"m0"
    c9 = client.subscribe(topic, "last", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"m5")
    assert receive_n(c9, 1)[0].data() == b"m5"
    assert receive_n(c2, 1)[0].data() == b"m5"  # nothing left in c2's receive queue

    # reset-cursor to a message id (ResetCursorData's "excluded": after it); the consumers are
    # disconnected and resume there.
    body = {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id(), "excluded": False}
    assert call(u, "POST", f"{T}/{name}/subscription/at2/resetcursor", body)[0] == 204
    assert receive_n(c2, 1)[0].data() == b"m1"
    body["excluded"] = True
    assert call(u, "POST", f"{T}/{name}/subscription/at2/resetcursor", body)[0] == 204
    assert receive_n(c2, 1)[0].data() == b"m2"
    for c in (c0, c2, c9):
        c.close()

    # Pulsar's refusals: a non-persistent topic 400, a missing topic without auto-creation 412,
    # a reset by position on a partitioned topic 405, a body that is no ResetCursorData 400.
    np = f"/admin/v2/non-persistent/public/default/{local(new_topic('np'))}"
    assert call(u, "PUT", f"{np}/subscription/s")[1] == {
        "reason": "Create subscription on non-persistent topic can only be done through client"
    }
    assert call(u, "PUT", f"{T}/{name}/subscription/bad", {"ledgerId": "x"})[0] == 400
    parted = local(new_topic("createsub-p"))
    assert call(u, "PUT", f"{T}/{parted}/partitions", 3)[0] == 204
    assert call(u, "PUT", f"{T}/{parted}/subscription/s", {"ledgerId": -1, "entryId": -1})[0] == 204
    stats = call(u, "GET", f"{T}/{parted}/partitioned-stats")[1]
    assert all("s" in p["subscriptions"] for p in stats["partitions"].values())
    assert call(u, "POST", f"{T}/{parted}/subscription/s/resetcursor", {"ledgerId": 1, "entryId": 0})[1] == {
        "reason": "Reset-cursor at position is not allowed for partitioned-topic"
    }
    with Broker(http_port=0, allow_auto_topic_creation=False) as strict:
        missing = local(new_topic("missing"))
        assert call(url(strict), "PUT", f"{T}/{missing}/subscription/s")[:2] == (
            412,
            {"reason": "Topic does not exist and cannot be auto-created"},
        )


def test_subscriptions_of_a_partitioned_topic_list_and_delete(tmp_path: Path) -> None:
    """Also after a restart, when the subscriptions are only saved cursors no consumer reopened yet
    (they were listed, but deleting them answered 404)."""
    with Broker(http_port=0, data_dir=tmp_path) as b:
        u = url(b)
        topic = new_topic("psubs")
        name = local(topic)
        assert call(u, "PUT", f"{T}/{name}/partitions", 3)[0] == 204
        c = make_client(b.service_url)
        try:
            consumer = c.subscribe(topic, "sub")
            assert call(u, "GET", f"{T}/{name}/subscriptions")[:2] == (200, ["sub"])
            assert call(u, "DELETE", f"{T}/{name}/subscription/sub")[:2] == (
                412,
                {"reason": "Subscription has active connected consumers"},
            )
            consumer.close()
            assert call(u, "DELETE", f"{T}/{name}/subscription/sub")[0] == 204
            assert call(u, "GET", f"{T}/{name}/subscriptions")[:2] == (200, [])
            assert call(u, "DELETE", f"{T}/{name}/subscription/sub")[0] == 404
            c.subscribe(topic, "kept").close()
            c.create_producer(topic, batching_enabled=False).send(b"x", partition_key="k")
        finally:
            c.close()
        b.restart()
        assert call(u, "GET", f"{T}/{name}/subscriptions")[:2] == (200, ["kept"])
        stats = call(u, "GET", f"{T}/{name}/partitioned-stats")[1]
        assert stats["subscriptions"]["kept"]["msgBacklog"] == 1
        assert call(u, "DELETE", f"{T}/{name}/subscription/kept")[0] == 204
        assert call(u, "GET", f"{T}/{name}/subscriptions")[:2] == (200, [])


def test_calls_on_a_huge_partitioned_topic_are_bounded(web: Broker) -> None:
    """2**31-1 partitions exist by their count: partitioned stats list only those holding anything,
    a subscription is not created on each of them one by one (405), and a bystander is served."""
    u = url(web)
    name = local(new_topic("huge"))
    assert call(u, "PUT", f"{T}/{name}/partitions", 2**31 - 1)[0] == 204
    status, stats, _ = call(u, "GET", f"{T}/{name}/partitioned-stats")
    assert status == 200 and stats["metadata"]["partitions"] == 2**31 - 1 and stats["partitions"] == {}
    assert call(u, "GET", f"{T}/{name}/partitioned-internalStats")[1]["partitions"] == {}
    status, body, _ = call(u, "PUT", f"{T}/{name}/subscription/s")
    assert status == 405 and "more than the 10000 one call visits" in body["reason"]
    assert call(u, "GET", f"{T}/{name}/subscriptions")[:2] == (200, [])
    assert_bystander_served(web.service_url)


# -- unload --------------------------------------------------------------------------------------------------
def test_unload_disconnects_clients_that_then_come_back(web: Broker, client: pulsar.Client) -> None:
    u = url(web)
    topic = new_topic("unload")
    name = local(topic)
    raw = connect(web.service_url)  # a producer on a raw connection sees the broker's CLOSE_PRODUCER
    try:
        assert producer(raw, topic).type == T_.PRODUCER_SUCCESS
        consumer = client.subscribe(topic, "sub")
        official = client.create_producer(topic, batching_enabled=False)
        official.send(b"before")
        assert call(u, "PUT", f"{T}/{name}/unload")[0] == 204
        raw.expect(T_.CLOSE_PRODUCER)
        official.send(b"after")  # the official client looked the topic up again
        # the consumer came back too ("before", unacknowledged, may come again: at least once)
        got = [consumer.receive(5000).data()]
        while got[-1] != b"after" and len(got) < 5:
            got.append(consumer.receive(5000).data())
        assert got[0] == b"before" and got[-1] == b"after" and set(got) == {b"before", b"after"}
        consumer.close()
    finally:
        raw.close()
    none = new_topic("none")
    assert call(u, "PUT", f"{T}/{local(none)}/unload")[:2] == (404, {"reason": f"Topic {none} not found"})


# -- HTTP lookup ------------------------------------------------------------------------------------------
def test_http_lookup_of_a_missing_topic_is_404_without_auto_creation() -> None:
    with Broker(http_port=0, allow_auto_topic_creation=False) as strict:
        u = url(strict)
        missing = new_topic("missing")
        assert call(u, "GET", f"/lookup/v2/topic/persistent/public/default/{local(missing)}")[:2] == (
            404,
            {"reason": f"Topic not found {missing}"},  # TopicLookupBase's words
        )
        assert call(u, "PUT", f"{T}/{local(missing)}")[0] == 204
        assert call(u, "GET", f"/lookup/v2/topic/persistent/public/default/{local(missing)}")[0] == 200
        # Non-persistent topics have no metadata: Pulsar answers the lookup.
        assert call(u, "GET", f"/lookup/v2/topic/non-persistent/public/default/{local(missing)}")[0] == 200
        # The official client, given an http:// service URL, fails on the missing topic.
        c = pulsar.Client(
            u, operation_timeout_seconds=5, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        try:
            with pytest.raises(pulsar.PulsarException):
                c.create_producer(new_topic("missing"))
        finally:
            c.close()


# -- tenants and namespaces deletion ------------------------------------------------------------------------
def test_tenant_and_namespace_deletion(web: Broker, client: pulsar.Client) -> None:
    u = url(web)
    assert call(u, "PUT", "/admin/v2/tenants/gone", {"adminRoles": []})[0] == 204
    assert call(u, "PUT", "/admin/v2/namespaces/gone/ns")[0] == 204
    assert call(u, "DELETE", "/admin/v2/tenants/gone")[:2] == (
        409,
        {"reason": "The tenant still has active namespaces"},
    )
    producer = client.create_producer("persistent://gone/ns/t")
    producer.send(b"x")
    producer.close()
    assert call(u, "DELETE", "/admin/v2/namespaces/gone/ns")[:2] == (
        409,
        {"reason": "Cannot delete non empty namespace"},
    )
    # Pulsar refuses force by default (forceDeleteNamespaceAllowed=false): delete the topics first.
    assert call(u, "DELETE", "/admin/v2/namespaces/gone/ns?force=true")[:2] == (
        405,
        {"reason": "Broker doesn't allow forced deletion of namespaces"},
    )
    assert call(u, "DELETE", "/admin/v2/persistent/gone/ns/t")[0] == 204
    assert call(u, "DELETE", "/admin/v2/namespaces/gone/ns")[0] == 204
    assert call(u, "GET", "/admin/v2/namespaces/gone")[:2] == (200, [])
    assert call(u, "DELETE", "/admin/v2/namespaces/gone/ns")[:2] == (
        404,
        {"reason": "Namespace gone/ns does not exist."},
    )
    assert call(u, "DELETE", "/admin/v2/tenants/gone")[0] == 204
    assert call(u, "DELETE", "/admin/v2/tenants/gone")[:2] == (404, {"reason": "Tenant doesn't exist"})
    assert "gone" not in call(u, "GET", "/admin/v2/tenants")[1]


# -- permissions ---------------------------------------------------------------------------------------------
def _token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def _can_produce(b: Broker, role: str, topic: str) -> bool:
    c = pulsar.Client(
        b.service_url,
        authentication=pulsar.AuthenticationToken(_token(role)),
        operation_timeout_seconds=5,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        c.create_producer(topic).send(b"x")
        return True
    except pulsar.PulsarException:
        return False
    finally:
        c.close()


def test_grant_and_revoke_permissions_as_the_official_client_sees_them(tmp_path: Path) -> None:
    grants = Grants.of(superusers=["admin"])
    with Broker(http_port=0, auth=TokenAuth(secret=SECRET), grants=grants, data_dir=tmp_path) as b:
        u, admin = url(b), _token("admin")
        ns = "/admin/v2/namespaces/public/default"
        topic, other = new_topic("perm"), new_topic("perm-other")
        assert not _can_produce(b, "carol", topic)
        assert call(u, "POST", f"{ns}/permissions/carol", ["produce"], token=_token("carol"))[0] == 403
        assert call(u, "POST", f"{ns}/permissions/carol", ["produce", "consume"], token=admin)[0] == 204
        assert call(u, "GET", f"{ns}/permissions", token=admin)[:2] == (
            200,
            {"carol": ["produce", "consume"]},  # in AuthAction order,
        )
        assert _can_produce(b, "carol", topic)
        assert call(u, "DELETE", f"{ns}/permissions/carol", token=admin)[0] == 204
        assert call(u, "GET", f"{ns}/permissions", token=admin)[1] == {}
        assert not _can_produce(b, "carol", topic)
        # On one topic only (a partition has its partitioned topic's).
        assert call(u, "POST", f"{T}/{local(topic)}/permissions/dave", ["produce"], token=admin)[0] == 204
        assert _can_produce(b, "dave", topic) and not _can_produce(b, "dave", other)
        assert call(u, "GET", f"{T}/{local(topic)}/permissions", token=admin)[1] == {"dave": ["produce"]}
        # Pulsar's Policies carry them as auth_policies.
        assert call(u, "GET", ns, token=admin)[1]["auth_policies"] == {
            "namespace_auth": {},
            "destination_auth": {topic: {"dave": ["produce"]}},
            "subscription_auth_roles": {},
        }
        # Kept across a restart, as Pulsar keeps auth_policies in its metadata store.
        b.restart()
        assert call(u, "GET", f"{T}/{local(topic)}/permissions", token=admin)[1] == {"dave": ["produce"]}
        assert call(u, "DELETE", f"{T}/{local(topic)}/permissions/dave", token=admin)[0] == 204
        assert not _can_produce(b, "dave", topic)
        # Pulsar's other actions are kept (and grant nothing here); a name that is no action is 400
        # (Pulsar stores it as null), so is a body that is not a list; not JSON is 415.
        assert call(u, "POST", f"{ns}/permissions/erin", ["functions", "produce"], token=admin)[0] == 204
        assert call(u, "GET", f"{ns}/permissions", token=admin)[1] == {"erin": ["produce", "functions"]}
        assert call(u, "DELETE", f"{ns}/permissions/erin", token=admin)[0] == 204
        assert call(u, "POST", f"{ns}/permissions/erin", ["fly"], token=admin)[0] == 400
        assert call(u, "POST", f"{ns}/permissions/erin", {"a": 1}, token=admin)[0] == 400
        status = request(
            u, "POST", f"{ns}/permissions/erin", raw=b"produce", content_type="text/plain", token=admin
        )[0]
        assert status == 415
        assert json.loads(request(u, "GET", f"{ns}/permissions", token=admin)[1]) == {}
