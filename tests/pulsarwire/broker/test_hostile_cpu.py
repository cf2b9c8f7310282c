"""Hostile clients against bounded CPU per request: patterns, sticky ranges, acks, schemas, listeners.

One event loop serves every client, so a request whose cost follows a number the client chose
(a backtracking pattern, 5,000 ranges, a 600k-word ack_set, a definition nested 100k deep)
freezes everyone. Each test sends such a request from this process over a raw socket to a
broker running as its own process, checks the answer Pulsar gives to that request, that the
hostile connection still answers PING, and that a bystander is served promptly. Official-client
tests prove regex subscriptions and Key_Shared sticky ranges still work for real users.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from pulsarwire.broker import Broker
from pulsarwire.broker.schemas import LEGACY_NAME, LOG_NAME, SchemaRegistry
from pulsarwire.broker.server import advertised_host
from pulsarwire.broker.service import BrokerService
from pulsarwire.broker.subscription import MAX_HASH_RANGES_PER_CONSUMER
from pulsarwire.broker.watch import MAX_WATCHERS_PER_CONNECTION
from pulsarwire.codec import Frame, new_command
from pulsarwire.proto import pb
from tests.helpers.hostile import (
    answer,
    assert_bystander_served,
    broker_url,
    connect,
    expect_either,
    ping,
    producer,
)
from tests.helpers.judge import make_client, new_topic
from tests.helpers.raw import RawConnection

T = pb.BaseCommand
SubType = pb.CommandSubscribe.SubType
NS = "public/default"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with broker_url() as u:
        yield u


@pytest.fixture
def conn(url: str) -> Iterator[RawConnection]:
    c = connect(url)
    yield c
    c.close()


def unique(prefix: str) -> str:
    return new_topic(prefix).rsplit("/", 1)[1]


# -- requests --------------------------------------------------------------------------------------
def get_topics(conn: RawConnection, request_id: int, pattern: str) -> Frame:
    cmd, req = new_command(T.GET_TOPICS_OF_NAMESPACE)
    req.request_id = request_id
    req.namespace = NS
    req.topics_pattern = pattern
    conn.send(cmd)
    return expect_either(conn, T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.ERROR)


def watch(conn: RawConnection, request_id: int, watcher_id: int, pattern: str) -> Frame:
    cmd, req = new_command(T.WATCH_TOPIC_LIST)
    req.request_id = request_id
    req.watcher_id = watcher_id
    req.namespace = NS
    req.topics_pattern = pattern
    conn.send(cmd)
    return expect_either(conn, T.WATCH_TOPIC_LIST_SUCCESS, T.ERROR)


def subscribe(
    conn: RawConnection,
    topic: str,
    consumer_id: int,
    *,
    sub_type: int = SubType.Exclusive,
    ranges: list[tuple[int, int]] | None = None,
    subscription: str = "sub",
) -> Frame:
    cmd, req = new_command(T.SUBSCRIBE)
    req.topic = topic
    req.subscription = subscription
    req.subType = sub_type
    req.consumer_id = consumer_id
    req.request_id = 5000 + consumer_id
    req.initialPosition = pb.CommandSubscribe.Earliest
    if ranges is not None:
        req.keySharedMeta.keySharedMode = pb.STICKY
        for start, end in ranges:
            r = req.keySharedMeta.hashRanges.add()
            r.start, r.end = start, end
    conn.send(cmd)
    return expect_either(conn, T.SUCCESS, T.ERROR)


def ack(
    conn: RawConnection,
    consumer_id: int,
    positions: list[tuple[int, int]],
    *,
    ack_set: list[int] | None = None,
    cumulative: bool = False,
    request_id: int = 77,
) -> pb.CommandAckResponse:
    cmd, req = new_command(T.ACK)
    req.consumer_id = consumer_id
    req.ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
    req.request_id = request_id
    for ledger, entry in positions:
        mid = req.message_id.add()
        mid.ledgerId, mid.entryId = ledger % 2**64, entry % 2**64
        if ack_set is not None:
            mid.ack_set.extend(ack_set)
    resp = answer(conn, cmd, T.ACK_RESPONSE).command.ackResponse
    assert resp.request_id == request_id
    return resp


def mark_delete(conn: RawConnection, consumer_id: int) -> tuple[int, int]:
    """The subscription's mark-delete position (GET_LAST_MESSAGE_ID answers it)."""
    cmd, req = new_command(T.GET_LAST_MESSAGE_ID)
    req.consumer_id = consumer_id
    req.request_id = 900 + consumer_id
    md = answer(conn, cmd, T.GET_LAST_MESSAGE_ID_RESPONSE).command.getLastMessageIdResponse
    pos = md.consumer_mark_delete_position
    return (_signed(pos.ledgerId), _signed(pos.entryId))


def _signed(v: int) -> int:
    return v - 2**64 if v >= 2**63 else v


def publish(url: str, topic: str, n: int) -> list[tuple[int, int]]:
    """``n`` single (non-batch) messages through the official client; their positions."""
    client = make_client(url)
    try:
        p = client.create_producer(topic, batching_enabled=False)
        ids = [p.send(f"m-{i}".encode()) for i in range(n)]
        return [(m.ledger_id(), m.entry_id()) for m in ids]
    finally:
        client.close()


def error_of(frame: Frame) -> tuple[int, str]:
    assert frame.type == T.ERROR, T.Type.Name(frame.type)
    return frame.command.error.error, frame.command.error.message


# -- topic-list patterns -----------------------------------------------------------------------------
BACKTRACKING = [
    pytest.param("(a+)+$", "a" * 40 + "!", "a" * 12, id="nested-plus"),
    pytest.param("(x+x+)+y", "x" * 40, "xxy", id="overlapping-plus"),
]


@pytest.mark.parametrize(("pattern", "trap", "hit"), BACKTRACKING)
def test_topics_pattern_runs_in_linear_time(
    url: str, conn: RawConnection, pattern: str, trap: str, hit: str
) -> None:
    # Python's re needs ~2^40 steps for these against the trap topic; RE2 a few hundred.
    prefix = unique("bt")
    for local in (f"{prefix}-{trap}", f"{prefix}-{hit}"):
        assert producer(conn, f"persistent://{NS}/{local}", producer_id=len(local)).type == T.PRODUCER_SUCCESS
    resp = get_topics(conn, 1, f"persistent://{NS}/{prefix}-{pattern}").command.getTopicsOfNamespaceResponse
    assert resp.filtered
    assert list(resp.topics) == [f"persistent://{NS}/{prefix}-{hit}"]
    ping(conn)
    assert_bystander_served(url)


@pytest.mark.parametrize(("pattern", "trap", "hit"), BACKTRACKING)
def test_watcher_pattern_runs_in_linear_time_on_every_topic_creation(
    url: str, conn: RawConnection, pattern: str, trap: str, hit: str
) -> None:
    prefix = unique("bw")
    ok = watch(conn, 1, 1, f"{NS}/{prefix}-{pattern}")
    assert ok.type == T.WATCH_TOPIC_LIST_SUCCESS and not ok.command.watchTopicListSuccess.topic
    creator = connect(url)
    try:
        for i in range(20):  # each creation is matched against the watcher's pattern
            assert producer(creator, f"persistent://{NS}/{prefix}-{trap}{i}", producer_id=i + 1).type == (
                T.PRODUCER_SUCCESS
            )
        assert (
            producer(creator, f"persistent://{NS}/{prefix}-{hit}", producer_id=99).type == T.PRODUCER_SUCCESS
        )
    finally:
        creator.close()
    update = conn.expect(T.WATCH_TOPIC_UPDATE).command.watchTopicUpdate
    assert list(update.new_topics) == [f"persistent://{NS}/{prefix}-{hit}"]
    ping(conn)
    assert_bystander_served(url)


def test_invalid_pattern_is_answered_as_pulsar_does_and_the_connection_stays(
    url: str, conn: RawConnection
) -> None:
    code, message = error_of(get_topics(conn, 1, f"persistent://{NS}/bad-(-pattern"))
    assert code == pb.MetadataError and "Invalid topics pattern" in message
    code, message = error_of(watch(conn, 2, 1, f"persistent://{NS}/bad-(-pattern"))
    assert code == pb.InvalidTopicName and "Invalid topics pattern" in message
    ping(conn)
    assert_bystander_served(url)


def test_patterns_the_broker_does_not_evaluate(url: str, conn: RawConnection) -> None:
    prefix = unique("ne")
    assert producer(conn, f"persistent://{NS}/{prefix}-a").type == T.PRODUCER_SUCCESS
    too_long = f"persistent://{NS}/{prefix}-" + "a?" * 600 + ".*"
    look_around = f"persistent://{NS}/{prefix}-(?=a).*"
    for rid, pattern in enumerate((too_long, look_around), 1):
        # As Pulsar for a pattern it does not evaluate: the whole namespace, filtered=false,
        # and the client filters (the official clients always do).
        resp = get_topics(conn, rid, pattern).command.getTopicsOfNamespaceResponse
        assert not resp.filtered and f"persistent://{NS}/{prefix}-a" in resp.topics
    code, message = error_of(watch(conn, 3, 1, too_long))
    assert code == pb.NotAllowedError and "Pattern longer than maximum" in message
    code, message = error_of(watch(conn, 4, 2, look_around))
    assert code == pb.InvalidTopicName and "linear time" in message
    ping(conn)
    assert_bystander_served(url)


def test_watchers_per_connection_are_capped(url: str, conn: RawConnection) -> None:
    pattern = f"{NS}/{unique('cap')}-.*"
    for wid in range(MAX_WATCHERS_PER_CONNECTION):
        assert watch(conn, wid + 1, wid, pattern).type == T.WATCH_TOPIC_LIST_SUCCESS
    # An id already registered is answered again (as Pulsar), it takes no new place.
    assert watch(conn, 500, 0, pattern).type == T.WATCH_TOPIC_LIST_SUCCESS
    code, message = error_of(watch(conn, 501, 1000, pattern))
    assert code == pb.NotAllowedError and "watchers on this connection" in message
    cmd, req = new_command(T.WATCH_TOPIC_LIST_CLOSE)
    req.request_id, req.watcher_id = 502, 0
    assert answer(conn, cmd, T.SUCCESS).command.success.request_id == 502
    assert watch(conn, 503, 1000, pattern).type == T.WATCH_TOPIC_LIST_SUCCESS
    other = connect(url)
    try:  # the cap is per connection
        assert watch(other, 1, 1, pattern).type == T.WATCH_TOPIC_LIST_SUCCESS
    finally:
        other.close()
    ping(conn)
    assert_bystander_served(url)


def test_regex_subscription_with_the_official_client(url: str) -> None:
    prefix = new_topic("rx")
    client = make_client(url)
    try:
        for suffix in ("a", "b"):
            client.create_producer(f"{prefix}-{suffix}").close()
        client.create_producer(f"{prefix}x-c").close()
        consumer = client.subscribe(
            re.compile(prefix + r"-[a-z]"),
            "sub",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for suffix in ("a", "b", "c"):
            p = client.create_producer(f"{prefix}-{suffix}" if suffix != "c" else f"{prefix}x-c")
            p.send(suffix.encode())
        got = sorted(consumer.receive(5000).data() for _ in range(2))
        assert got == [b"a", b"b"]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
    finally:
        client.close()


# -- Key_Shared sticky ranges ---------------------------------------------------------------------------
def test_too_many_sticky_ranges_are_refused(url: str, conn: RawConnection) -> None:
    ranges = [(i, i) for i in range(5000)]
    frame = subscribe(conn, new_topic("ranges"), 1, sub_type=SubType.Key_Shared, ranges=ranges)
    code, message = error_of(frame)
    assert code == pb.ConsumerAssignError and f"at most {MAX_HASH_RANGES_PER_CONSUMER}" in message
    ping(conn)
    assert_bystander_served(url)


def test_sticky_ranges_overlapping_within_one_consumer_are_refused(url: str, conn: RawConnection) -> None:
    ranges = [(10 * i, 10 * i + 5) for i in range(MAX_HASH_RANGES_PER_CONSUMER - 1)] + [(7000, 7003)]
    frame = subscribe(conn, new_topic("ranges"), 1, sub_type=SubType.Key_Shared, ranges=ranges)
    code, message = error_of(frame)
    assert code == pb.ConsumerAssignError and "overlap between [7000, 7003] and [7000, 7005]" in message
    ping(conn)
    assert_bystander_served(url)


def test_many_consumers_with_many_sticky_ranges(url: str, conn: RawConnection) -> None:
    # 64 consumers x 1,000 ranges = 64,000 ranges; each new consumer is checked against all of
    # them by bisection, never pairwise (which would be 4 * 10^9 comparisons for the last ones).
    topic = new_topic("ranges")
    for k in range(64):
        ranges = [(k * 1024 + j, k * 1024 + j) for j in range(1000)]
        assert subscribe(conn, topic, k + 1, sub_type=SubType.Key_Shared, ranges=ranges).type == T.SUCCESS
    clash = [(j, j) for j in range(1000, 1024)] + [(64 * 1000 + 5, 64 * 1000 + 5)]
    code, message = error_of(subscribe(conn, topic, 100, sub_type=SubType.Key_Shared, ranges=clash))
    assert code == pb.ConsumerAssignError and "Range conflict with consumer" in message
    free = [(j, j) for j in range(1000, 1024)]
    assert subscribe(conn, topic, 101, sub_type=SubType.Key_Shared, ranges=free).type == T.SUCCESS
    ping(conn)
    assert_bystander_served(url)


def test_key_shared_sticky_with_the_official_client(url: str) -> None:
    from pulsarwire.codec.hashing import murmur3_32

    topic = new_topic("sticky")
    client = make_client(url)
    try:
        halves = [[(0, 32767)], [(32768, 65535)]]

        def sticky(ranges: list[tuple[int, int]]) -> pulsar.Consumer:
            return client.subscribe(
                topic,
                "sub",
                consumer_type=pulsar.ConsumerType.KeyShared,
                initial_position=pulsar.InitialPosition.Earliest,
                key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                    key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=ranges
                ),
            )

        consumers = [sticky(r) for r in halves]
        with pytest.raises(pulsar.ConsumerAssignError):
            sticky([(30000, 40000)])
        p = client.create_producer(topic, batching_enabled=False)
        keys = [f"key-{i}" for i in range(40)]
        for k in keys:
            p.send(k.encode(), partition_key=k)
        for (lo, hi), consumer in zip((h[0] for h in halves), consumers, strict=True):
            mine = sorted(k for k in keys if lo <= murmur3_32(k.encode()) % 65536 <= hi)
            got = sorted(consumer.receive(5000).data().decode() for _ in mine)
            assert got == mine
    finally:
        client.close()


# -- acknowledgements --------------------------------------------------------------------------------
def test_a_huge_ack_set_costs_only_the_entry_s_real_size(url: str, conn: RawConnection) -> None:
    topic = new_topic("ackset")
    positions = publish(url, topic, 3)
    assert subscribe(conn, topic, 1).type == T.SUCCESS
    before = mark_delete(conn, 1)
    # 600,000 words claim a batch of 38 million messages for a single-message entry: every word
    # but the first is ignored, and that one says "index 0 still unacked" -- nothing changes.
    resp = ack(conn, 1, [positions[0]], ack_set=[1] + [0] * 600_000)
    assert not resp.HasField("error")
    assert mark_delete(conn, 1) == before
    # Index 0 acknowledged (bit clear): the entry is.
    ack(conn, 1, [positions[0]], ack_set=[0] * 600_001)
    assert mark_delete(conn, 1) == positions[0]
    ping(conn)
    assert_bystander_served(url)


def test_acks_for_positions_that_are_not_stored_change_nothing(url: str, conn: RawConnection) -> None:
    topic = new_topic("ghost")
    (ledger, entry), *_ = publish(url, topic, 2)
    assert subscribe(conn, topic, 1).type == T.SUCCESS
    before = mark_delete(conn, 1)
    ghosts = [(ledger, entry + 2), (ledger, 2**62), (ledger + 1, 0), (2**63 - 1, 2**63 - 1)]
    assert not ack(conn, 1, ghosts, ack_set=[0] * 100_000).HasField("error")
    assert not ack(conn, 1, ghosts).HasField("error")
    assert mark_delete(conn, 1) == before
    # The position named by a ghost ack is written later: it must still be delivered.
    later = publish(url, topic, 1)[0]
    assert later == (ledger, entry + 2)
    flow(conn, 1, 10)
    got = [conn.expect(T.MESSAGE).command.message.message_id for _ in range(3)]
    assert [(m.ledgerId, m.entryId) for m in got][-1] == later
    ping(conn)
    assert_bystander_served(url)


def flow(conn: RawConnection, consumer_id: int, permits: int) -> None:
    cmd, req = new_command(T.FLOW)
    req.consumer_id, req.messagePermits = consumer_id, permits
    conn.send(cmd)


def test_a_cumulative_ack_past_the_end_is_refused_and_skips_nothing(url: str, conn: RawConnection) -> None:
    topic = new_topic("past")
    (ledger, entry), *_ = publish(url, topic, 1)
    assert subscribe(conn, topic, 1).type == T.SUCCESS
    for beyond in [(ledger, entry + 1), (ledger, 2**63 - 1), (2**63 - 1, 0)]:
        resp = ack(conn, 1, [beyond], cumulative=True)
        assert resp.error == pb.NotAllowedError and "Invalid mark deleted position" in resp.message
    resp = ack(conn, 1, [(ledger, entry), (ledger, entry)], cumulative=True)
    assert resp.error == pb.NotAllowedError and "one message id" in resp.message
    assert mark_delete(conn, 1) < (ledger, entry)
    later = publish(url, topic, 1)[0]
    flow(conn, 1, 10)
    got = [conn.expect(T.MESSAGE).command.message.message_id for _ in range(2)]
    assert [(m.ledgerId, m.entryId) for m in got] == [(ledger, entry), later]
    assert not ack(conn, 1, [later], cumulative=True).HasField("error")
    assert mark_delete(conn, 1) == later
    ping(conn)
    assert_bystander_served(url)


def test_acks_and_redeliveries_for_unknown_consumers_or_positions(url: str, conn: RawConnection) -> None:
    resp = ack(conn, 404, [(1, 1)])
    assert resp.error == pb.ConsumerNotFound
    topic = new_topic("redeliver")
    publish(url, topic, 2)
    assert subscribe(conn, topic, 1).type == T.SUCCESS
    flow(conn, 1, 10)
    first = [conn.expect(T.MESSAGE).command.message.message_id for _ in range(2)]
    cmd, req = new_command(T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    req.consumer_id = 1
    for i in range(100_000):
        mid = req.message_ids.add()
        mid.ledgerId, mid.entryId = 2**64 - 1 - i, i
    mid = req.message_ids.add()
    mid.CopyFrom(first[1])
    conn.send(cmd)
    again = conn.expect(T.MESSAGE).command.message
    assert (again.message_id.entryId, again.redelivery_count) == (first[1].entryId, 1)
    ping(conn)
    assert_bystander_served(url)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param({"message_id": (2**64 - 1, 2**64 - 1)}, id="latest"),
        pytest.param({"message_id": (2**63, 0)}, id="negative-ledger"),
        pytest.param({"message_id": (5, 2**63 + 7)}, id="negative-entry"),
        pytest.param({"message_publish_time": 2**64 - 1}, id="far-future"),
    ],
)
def test_seek_to_absurd_positions(url: str, conn: RawConnection, target: dict[str, Any]) -> None:
    topic = new_topic("seek")
    publish(url, topic, 2)
    assert subscribe(conn, topic, 1).type == T.SUCCESS
    cmd, req = new_command(T.SEEK)
    req.consumer_id, req.request_id = 1, 42
    if "message_id" in target:
        req.message_id.ledgerId, req.message_id.entryId = target["message_id"]
    else:
        req.message_publish_time = target["message_publish_time"]
    assert answer(conn, cmd, T.SUCCESS).command.success.request_id == 42
    ping(conn)
    assert_bystander_served(url)


# -- failures no handler foresaw ----------------------------------------------------------------------
def test_an_unexpected_failure_is_logged_once_with_its_traceback_and_fails_that_request_only(
    start_broker: Callable[..., Broker],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(Topic names too long for the file system used to be such a failure; they are stored now,
    see test_hostile_resources.py.) A broker bug is simulated where a topic is opened."""
    real_get_topic = BrokerService.get_topic

    def get_topic(self: BrokerService, name: str, *, create: bool) -> object:
        if name.endswith("/doomed"):
            raise OSError(errno.ENAMETOOLONG, "File name too long")
        return real_get_topic(self, name, create=create)

    monkeypatch.setattr(BrokerService, "get_topic", get_topic)
    b = start_broker(data_dir=tmp_path)
    conn = RawConnection.to(b.service_url)
    try:
        with caplog.at_level(logging.ERROR, logger="pulsarwire.broker"):
            frame = producer(conn, f"persistent://{NS}/doomed")
        code, message = error_of(frame)
        assert code == pb.InvalidTopicName and "too long" in message
        assert producer(conn, new_topic("fine"), producer_id=3).type == T.PRODUCER_SUCCESS
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and errors[0].exc_info is not None
        assert "PRODUCER" in errors[0].getMessage()
        ping(conn)
    finally:
        conn.close()


# -- schemas --------------------------------------------------------------------------------------------
def get_or_create_schema(conn: RawConnection, topic: str, data: bytes, kind: int = pb.Schema.Avro) -> Any:
    cmd, req = new_command(T.GET_OR_CREATE_SCHEMA)
    req.request_id = 61
    req.topic = topic
    req.schema.name = "s"
    req.schema.type = kind
    req.schema.schema_data = data
    return answer(conn, cmd, T.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse


def record(*fields: dict[str, Any], name: str = "Order") -> bytes:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)}).encode()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="arrays-100k-deep"),
        pytest.param(b'{"a":' * 100_000 + b"1" + b"}" * 100_000, id="objects-100k-deep"),
        pytest.param(b'{"type":' * 150 + b'"int"' + b"}" * 150, id="150-deep"),
    ],
)
def test_a_schema_nested_too_deep_is_refused(url: str, conn: RawConnection, data: bytes) -> None:
    topic = new_topic("deep")
    resp = get_or_create_schema(conn, topic, data)
    assert resp.error_code == pb.IncompatibleSchema and "nested deeper" in resp.error_message
    cmd, req = new_command(T.PRODUCER)
    req.topic, req.producer_id, req.request_id = topic, 1, 62
    req.schema.name, req.schema.type, req.schema.schema_data = "s", pb.Schema.Json, data
    code, message = error_of(answer(conn, cmd, T.ERROR))
    assert code == pb.IncompatibleSchema and "nested deeper" in message
    ping(conn)
    assert_bystander_served(url)


def test_a_schema_over_the_size_cap_is_refused(url: str, conn: RawConnection) -> None:
    note = {"name": "note", "type": "string", "default": "x" * (1024 * 1024)}
    resp = get_or_create_schema(conn, new_topic("big"), record(note))
    assert resp.error_code == pb.IncompatibleSchema and "at most 1048576" in resp.error_message
    ping(conn)
    assert_bystander_served(url)


def _version(k: int) -> pb.Schema:
    # Constant-size versions, each FULL-compatible with the one before (fields with defaults).
    id_ = {"name": "id", "type": "long"}
    return pb.Schema(
        name="s", type=pb.Schema.Avro, schema_data=record(id_, {"name": f"f{k}", "type": "int", "default": 0})
    )


def _bytes_written() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def test_schema_registry_appends_each_version_once(tmp_path: Path) -> None:
    registry = SchemaRegistry(tmp_path)
    topic = f"persistent://{NS}/many-versions"
    before = _bytes_written()
    versions = [registry.register(topic, _version(k)) for k in range(5000)]
    written = _bytes_written() - before
    assert versions == list(range(5000))
    log_file = tmp_path / LOG_NAME
    size = log_file.stat().st_size
    assert len(log_file.read_bytes().splitlines()) == 5000
    # Each version is written once: rewriting the registry per version would write ~2,500x more.
    assert written < 2 * size
    assert registry.register(topic, _version(17)) == 17  # a known schema keeps its version
    again = SchemaRegistry(tmp_path)
    latest = again.latest(topic)
    assert latest is not None and latest.version == 4999 and again.get(topic, 17) == registry.get(topic, 17)


def test_schema_log_survives_a_torn_last_line(tmp_path: Path) -> None:
    topic = f"persistent://{NS}/torn"
    registry = SchemaRegistry(tmp_path)
    for k in range(3):
        registry.register(topic, _version(k))
    with open(tmp_path / LOG_NAME, "ab") as f:
        f.write(b'{"topic": "persistent://public/default/torn", "vers')  # killed mid-write
    reopened = SchemaRegistry(tmp_path)
    assert reopened.latest(topic) == registry.latest(topic)
    assert reopened.register(topic, _version(3)) == 3
    assert [SchemaRegistry(tmp_path).get(topic, k) for k in range(4)] == [
        reopened.get(topic, k) for k in range(4)
    ]


def test_schemas_json_of_earlier_releases_is_read_once(tmp_path: Path) -> None:
    topic = f"persistent://{NS}/legacy"
    legacy = {topic: [{"schema": _version(k).SerializeToString().hex(), "version": k} for k in range(2)]}
    (tmp_path / LEGACY_NAME).write_text(json.dumps(legacy))
    registry = SchemaRegistry(tmp_path)
    assert not (tmp_path / LEGACY_NAME).exists() and (tmp_path / LOG_NAME).exists()
    assert registry.register(topic, _version(2)) == 2
    assert [v.schema for v in (SchemaRegistry(tmp_path).get(topic, k) for k in range(3)) if v] == [
        _version(k) for k in range(3)
    ]


# -- listener ---------------------------------------------------------------------------------------------
def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsarwire.broker", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_address_in_use_is_one_clear_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("--port", str(port))
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "address already in use" in lines[0]


def test_unknown_host_is_one_clear_line() -> None:
    done = run_cli("--host", "no-such-host.invalid", "--port", "0")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no-such-host.invalid:0" in lines[0] and "unknown host" in lines[0]


def lookup_url(url: str) -> str:
    conn = connect(url)
    try:
        cmd, req = new_command(T.LOOKUP)
        req.topic, req.request_id = new_topic("lookup"), 1
        return str(answer(conn, cmd, T.LOOKUP_RESPONSE).command.lookupTopicResponse.brokerServiceUrl)
    finally:
        conn.close()


def test_a_wildcard_bind_is_not_advertised() -> None:
    with broker_url("--host", "0.0.0.0") as ready:
        port = ready.rsplit(":", 1)[1]
        local = f"pulsar://127.0.0.1:{port}"  # bound on every interface, loopback included
        advertised = lookup_url(local)
        assert "0.0.0.0" not in ready and "0.0.0.0" not in advertised
        assert advertised == ready == f"pulsar://{advertised_host('0.0.0.0')}:{port}"
        assert_bystander_served(local)


def test_advertised_address_is_what_lookups_answer() -> None:
    with broker_url("--advertised-address", "localhost") as ready:
        port = ready.rsplit(":", 1)[1]
        assert ready == f"pulsar://localhost:{port}"
        assert lookup_url(ready) == ready
