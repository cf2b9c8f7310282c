"""Hostile clients against tenancy and authentication (issue 13, "Tenancy and authentication").

The broker runs as ``python -m pulsarwire.broker`` in its own process (tests/helpers/hostile.py);
hostile requests are raw frames from this process. What is checked:

* every command that reveals or changes a topic is authorized as Apache Pulsar authorizes it
  (lookup = produce or consume, producer = produce, subscribe/seek/unsubscribe/last id = consume,
  topic lists and watchers = produce or consume on the namespace, GET_OR_CREATE_SCHEMA = produce);
  a refused role gets that request's own answer with AuthorizationError and learns nothing — the
  answer is the same for a topic that exists and one that does not, and carries no topic name,
  partition count or schema; the connection stays up;
* granted roles work with the official client (``pulsar.AuthenticationToken``);
* the role is fixed at CONNECT: AUTH_RESPONSE with another role's token, or a second CONNECT,
  closes the connection before anything pipelined behind it runs;
* connections that do not complete CONNECT in time are closed however they trickle bytes;
  connections beyond ``--max-connections`` get ERROR NotAllowedError and are closed;
* the token secret comes from a file or the environment (nothing secret in ``ps``), keys in
  Pulsar's formats, tokens signed by PyJWT (HS256 with a key ending in a newline byte, RS256,
  ES256), ``exp`` honoured, algorithm confusion refused; CLI mistakes are one line, exit 2.

Each test ends by checking that a bystander connection is served promptly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import logging
import os
import select
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pulsar
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from pulsarwire.broker import Broker, Grants
from pulsarwire.broker.auth import TokenAuth, TokenKeyError, read_key
from pulsarwire.codec import Frame, encode_command, new_command
from pulsarwire.codec.frames import sub_command
from pulsarwire.errors import AuthenticationError
from pulsarwire.proto import pb
from tests.helpers.broker_cli import cli_broker
from tests.helpers.hostile import (
    answer,
    assert_bystander_served,
    broker_url,
    connect,
    expect_either,
    ping,
    producer,
)
from tests.helpers.judge import QUIET, assert_exactly, payloads, receive_n, send_all
from tests.helpers.raw import RawConnection

T = pb.BaseCommand
E = pb.ServerError
#: The broker's secret key: 32 bytes whose last is a newline byte, which is part of the key.
SECRET = b"tenancy-suite-secret-0123456789\n"
NS = "tenant-a/ns"
OTHER_NS = "tenant-b/ns"
GRANTS = [
    f"alice:{NS}:produce,consume",
    f"writer:{NS}:produce",
    f"reader:{NS}:consume",
    "wide:tenant-b/*:consume",
    "bystander:public/default:consume",
]
REQUEST_ID_NONE = 2**64 - 1  # "-1": answers that belong to no request (CONNECT, refused connections)
_ids = itertools.count(1)


def token(role: str | None, key: Any = SECRET, algorithm: str = "HS256", **claims: Any) -> str:
    """A JWT signed by PyJWT, as Pulsar's token tools make them (``sub`` = role)."""
    body: dict[str, Any] = {} if role is None else {"sub": role}
    body.update(claims)
    return jwt.encode(body, key, algorithm=algorithm)


def official(url: str, tok: str, **kw: Any) -> pulsar.Client:
    kw.setdefault("operation_timeout_seconds", 5)
    return pulsar.Client(
        url, authentication=pulsar.AuthenticationToken(tok), logger=pulsar.ConsoleLogger(QUIET), **kw
    )


def unique(prefix: str, ns: str = NS) -> str:
    return f"persistent://{ns}/{prefix}-{uuid.uuid4().hex[:10]}"


def as_role(url: str, role: str) -> RawConnection:
    return connect(url, token=token(role))


def bystander(url: str) -> None:
    assert_bystander_served(url, token=token("bystander"))


# -- the shared broker: a secret key file, grants, one superuser --------
@dataclass(frozen=True)
class Tenancy:
    url: str
    seeded: str  # NS: a STRING schema and a message
    seeded_b: str  # the same in OTHER_NS
    parted: str  # NS: a partitioned topic of 3 partitions


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secret") / "token-secret.key"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def tenancy(secret_file: Path) -> Iterator[Tenancy]:
    parted = f"persistent://{NS}/parted"
    args = ["--auth-token-secret-file", str(secret_file), "--superuser", "admin"]
    args += ["--namespace", NS, "--namespace", OTHER_NS]  # tenant-void/ns is never created
    for grant in GRANTS:
        args += ["--grant", grant]
    with broker_url(*args, "--partitioned-topic", f"{parted}=3") as url:
        env = Tenancy(url, unique("seeded"), unique("seeded", OTHER_NS), parted)
        admin = official(url, token("admin"))
        try:
            for topic in (env.seeded, env.seeded_b):
                admin.create_producer(topic, schema=pulsar.schema.StringSchema()).send("not for you")
        finally:
            admin.close()
        yield env


# -- the commands, as raw frames --------
def namespace_of(topic: str) -> str:
    return "/".join(topic.split("://", 1)[1].split("/")[:2])


def cmd_partitioned_metadata(topic: str) -> pb.BaseCommand:
    cmd, r = new_command(T.PARTITIONED_METADATA)
    r.topic, r.request_id = topic, next(_ids)
    return cmd


def cmd_lookup(topic: str) -> pb.BaseCommand:
    cmd, r = new_command(T.LOOKUP)
    r.topic, r.request_id = topic, next(_ids)
    return cmd


def cmd_topics_of_namespace(topic: str) -> pb.BaseCommand:
    cmd, r = new_command(T.GET_TOPICS_OF_NAMESPACE)
    r.namespace, r.request_id = namespace_of(topic), next(_ids)
    return cmd


def cmd_watch(topic: str, watcher_id: int = 1) -> pb.BaseCommand:
    cmd, r = new_command(T.WATCH_TOPIC_LIST)
    r.namespace, r.request_id, r.watcher_id = namespace_of(topic), next(_ids), watcher_id
    r.topics_pattern = f"{namespace_of(topic)}/.*"
    return cmd


def cmd_get_schema(topic: str) -> pb.BaseCommand:
    cmd, r = new_command(T.GET_SCHEMA)
    r.topic, r.request_id = topic, next(_ids)
    return cmd


def cmd_get_or_create_schema(topic: str) -> pb.BaseCommand:
    cmd, r = new_command(T.GET_OR_CREATE_SCHEMA)
    r.topic, r.request_id = topic, next(_ids)
    r.schema.name, r.schema.type = "hostile", pb.Schema.Json
    r.schema.schema_data = json.dumps({"type": "record", "name": "X", "fields": []}).encode()
    return cmd


def cmd_producer(topic: str, producer_id: int = 1) -> pb.BaseCommand:
    cmd, r = new_command(T.PRODUCER)
    r.topic, r.request_id, r.producer_id = topic, next(_ids), producer_id
    return cmd


def cmd_subscribe(topic: str, consumer_id: int = 1) -> pb.BaseCommand:
    cmd, r = new_command(T.SUBSCRIBE)
    r.topic, r.request_id, r.consumer_id = topic, next(_ids), consumer_id
    r.subscription, r.subType = "hostile-sub", pb.CommandSubscribe.Exclusive
    r.initialPosition = pb.CommandSubscribe.Earliest
    return cmd


def cmd_seek(consumer_id: int) -> pb.BaseCommand:
    cmd, r = new_command(T.SEEK)
    r.consumer_id, r.request_id = consumer_id, next(_ids)
    r.message_id.ledgerId, r.message_id.entryId = 0, 0
    return cmd


def cmd_unsubscribe(consumer_id: int) -> pb.BaseCommand:
    cmd, r = new_command(T.UNSUBSCRIBE)
    r.consumer_id, r.request_id = consumer_id, next(_ids)
    return cmd


def cmd_last_message_id(consumer_id: int) -> pb.BaseCommand:
    cmd, r = new_command(T.GET_LAST_MESSAGE_ID)
    r.consumer_id, r.request_id = consumer_id, next(_ids)
    return cmd


def cmd_auth_response(tok: str) -> pb.BaseCommand:
    cmd, r = new_command(T.AUTH_RESPONSE)
    r.response.auth_method_name, r.response.auth_data = "token", tok.encode()
    r.protocol_version, r.client_version = 21, "tests"
    return cmd


def cmd_connect(tok: str | None) -> pb.BaseCommand:
    cmd, c = new_command(T.CONNECT)
    c.client_version, c.protocol_version = "tests", 21
    if tok is not None:
        c.auth_method_name, c.auth_data = "token", tok.encode()
    return cmd


#: command -> (builder, the answer type that carries its refusal)
TOPIC_COMMANDS: dict[str, tuple[Callable[[str], pb.BaseCommand], int]] = {
    "PARTITIONED_METADATA": (cmd_partitioned_metadata, T.PARTITIONED_METADATA_RESPONSE),
    "LOOKUP": (cmd_lookup, T.LOOKUP_RESPONSE),
    "GET_TOPICS_OF_NAMESPACE": (cmd_topics_of_namespace, T.ERROR),
    "WATCH_TOPIC_LIST": (cmd_watch, T.ERROR),
    "GET_SCHEMA": (cmd_get_schema, T.GET_SCHEMA_RESPONSE),
    "GET_OR_CREATE_SCHEMA": (cmd_get_or_create_schema, T.GET_OR_CREATE_SCHEMA_RESPONSE),
    "PRODUCER": (cmd_producer, T.ERROR),
    "SUBSCRIBE": (cmd_subscribe, T.ERROR),
}
#: every answer type a granted request could get (a refused one must get none of them)
SUCCESS_TYPES = (
    T.PRODUCER_SUCCESS,
    T.SUCCESS,
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
    T.WATCH_TOPIC_LIST_SUCCESS,
    T.WATCH_TOPIC_UPDATE,
    T.GET_LAST_MESSAGE_ID_RESPONSE,
    T.MESSAGE,
)


def refusal(frame: Frame) -> tuple[int, str]:
    """(error code, message) of a refusal; asserts that the answer carries nothing but the refusal."""
    c = frame.command
    if c.type == T.PARTITIONED_METADATA_RESPONSE:
        r = c.partitionMetadataResponse
        assert r.response == pb.CommandPartitionedTopicMetadataResponse.Failed
        assert not r.HasField("partitions"), "a refused role learned the partition count"
        return r.error, r.message
    if c.type == T.LOOKUP_RESPONSE:
        r = c.lookupTopicResponse
        assert r.response == pb.CommandLookupTopicResponse.Failed
        assert not r.HasField("brokerServiceUrl")
        return r.error, r.message
    if c.type == T.GET_SCHEMA_RESPONSE:
        r = c.getSchemaResponse
        assert not r.HasField("schema") and not r.HasField("schema_version"), "a refused role saw a schema"
        return r.error_code, r.error_message
    if c.type == T.GET_OR_CREATE_SCHEMA_RESPONSE:
        r = c.getOrCreateSchemaResponse
        assert not r.HasField("schema_version")
        return r.error_code, r.error_message
    assert c.type == T.ERROR, T.Type.Name(c.type)
    return c.error.error, c.error.message


def refused(conn: RawConnection, cmd: pb.BaseCommand, answer_type: int) -> tuple[int, str]:
    conn.send(cmd)
    frame = expect_either(conn, answer_type, *SUCCESS_TYPES)
    assert frame.type == answer_type, f"a refused role got {T.Type.Name(frame.type)}"
    return refusal(frame)


def target_of(cmd: pb.BaseCommand) -> str:
    """The topic or namespace a command names."""
    request = sub_command(cmd)
    return str(request.namespace if cmd.type in NAMESPACE_COMMANDS else request.topic)


NAMESPACE_COMMANDS = (T.GET_TOPICS_OF_NAMESPACE, T.WATCH_TOPIC_LIST)


# -- authorization: every command, refused roles learn nothing --------
@pytest.mark.parametrize("command", list(TOPIC_COMMANDS))
@pytest.mark.parametrize(
    ("role", "ns"),
    [("mallory", NS), ("alice", OTHER_NS), ("wide", NS)],
    ids=["no-grant", "granted-elsewhere", "other-tenant-wildcard"],
)
def test_a_role_without_the_grant_is_refused_and_learns_nothing(
    tenancy: Tenancy, command: str, role: str, ns: str
) -> None:
    build, answer_type = TOPIC_COMMANDS[command]
    if ns == NS:
        existing = tenancy.parted if command == "PARTITIONED_METADATA" else tenancy.seeded
    else:
        existing = tenancy.seeded_b
    # a topic that does not exist, or for the namespace commands a namespace without topics
    missing = unique("missing", "tenant-void/ns" if "NAMESPACE" in command or "WATCH" in command else ns)
    conn = as_role(tenancy.url, role)
    try:
        answers = []
        for target in (existing, missing):
            cmd = build(target)
            code, message = refused(conn, cmd, answer_type)
            assert code == E.AuthorizationError, (command, E.Name(code), message)
            # Nothing in the answer but the name the client sent itself.
            shown = message.replace(target_of(cmd), "<target>")
            for secret in (tenancy.seeded, tenancy.parted, "seeded-", "parted", "partition"):
                assert secret not in shown, f"{command} refusal reveals {secret!r}: {message!r}"
            answers.append(shown)
        assert answers[0] == answers[1], "the refusal tells an existing topic from a missing one"
        ping(conn)  # the connection stays up
        assert not [f for f in conn.frames if f.type in SUCCESS_TYPES]
    finally:
        conn.close()
    bystander(tenancy.url)


def test_consumer_commands_of_a_role_that_may_not_consume_find_no_consumer(tenancy: Tenancy) -> None:
    conn = as_role(tenancy.url, "writer")  # produce only
    try:
        code, _ = refused(conn, cmd_subscribe(tenancy.seeded, consumer_id=7), T.ERROR)
        assert code == E.AuthorizationError
        for cmd in (cmd_seek(7), cmd_last_message_id(7), cmd_unsubscribe(7)):
            code, message = refused(conn, cmd, T.ERROR)
            assert code == E.ConsumerNotFound and "seeded" not in message, message
        ping(conn)
        assert not [f for f in conn.frames if f.type in SUCCESS_TYPES]
    finally:
        conn.close()
    bystander(tenancy.url)


def test_seek_unsubscribe_and_last_message_id_need_the_consume_grant(
    start_broker: Callable[..., Broker],
) -> None:
    """The role's grants are checked again on SEEK / UNSUBSCRIBE / GET_LAST_MESSAGE_ID (here after
    the broker's grants changed under a live consumer)."""
    bystander_grant = "bystander:public/default:consume"
    b = start_broker(
        auth=TokenAuth(SECRET),
        grants=Grants.of(f"reader:{NS}:consume", bystander_grant),
        namespaces=("public/default", NS),
    )
    topic = unique("revoked")
    conn = as_role(b.service_url, "reader")
    try:
        conn.send(cmd_subscribe(topic, consumer_id=3))
        assert expect_either(conn, T.SUCCESS, T.ERROR).type == T.SUCCESS
        b.call(setattr, b.config, "grants", Grants.of(f"reader:{NS}:produce", bystander_grant))
        for cmd in (cmd_seek(3), cmd_last_message_id(3), cmd_unsubscribe(3)):
            code, message = refused(conn, cmd, T.ERROR)
            assert code == E.AuthorizationError, message
        ping(conn)
    finally:
        conn.close()
    assert "hostile-sub" in b.stats(topic)["subscriptions"]  # the refused UNSUBSCRIBE removed nothing
    assert_bystander_served(b.service_url, token=token("bystander"))


def test_partial_grants_allow_exactly_their_actions(tenancy: Tenancy) -> None:
    writer, reader, wide = (as_role(tenancy.url, r) for r in ("writer", "reader", "wide"))
    try:
        for conn in (writer, reader):  # lookup-level commands: produce OR consume suffices
            meta = answer(conn, cmd_partitioned_metadata(tenancy.parted), T.PARTITIONED_METADATA_RESPONSE)
            assert meta.command.partitionMetadataResponse.partitions == 3
            look = answer(conn, cmd_lookup(tenancy.seeded), T.LOOKUP_RESPONSE).command.lookupTopicResponse
            assert look.response == pb.CommandLookupTopicResponse.Connect
            listed = answer(conn, cmd_topics_of_namespace(tenancy.seeded), T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
            assert tenancy.seeded in listed.command.getTopicsOfNamespaceResponse.topics
            schema = answer(conn, cmd_get_schema(tenancy.seeded), T.GET_SCHEMA_RESPONSE).command
            assert schema.getSchemaResponse.schema.type == pb.Schema.String
        # the writer produces but may not consume
        assert producer(writer, tenancy.seeded).type == T.PRODUCER_SUCCESS
        assert refused(writer, cmd_subscribe(tenancy.seeded), T.ERROR)[0] == E.AuthorizationError
        # the reader consumes but may neither produce nor register schemas
        assert producer(reader, tenancy.seeded).command.error.error == E.AuthorizationError
        code, _ = refused(reader, cmd_get_or_create_schema(tenancy.seeded), T.GET_OR_CREATE_SCHEMA_RESPONSE)
        assert code == E.AuthorizationError
        reader.send(cmd_subscribe(tenancy.seeded, consumer_id=5))
        assert expect_either(reader, T.SUCCESS, T.ERROR).type == T.SUCCESS
        last = answer(reader, cmd_last_message_id(5), T.GET_LAST_MESSAGE_ID_RESPONSE)
        assert last.command.getLastMessageIdResponse.HasField("last_message_id")
        # a tenant-wide grant covers the tenant's namespaces, and only those
        look = answer(wide, cmd_lookup(tenancy.seeded_b), T.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert look.response == pb.CommandLookupTopicResponse.Connect
        assert refused(wide, cmd_lookup(tenancy.seeded), T.LOOKUP_RESPONSE)[0] == E.AuthorizationError
        for conn in (writer, reader, wide):
            ping(conn)
    finally:
        for conn in (writer, reader, wide):
            conn.close()
    bystander(tenancy.url)


def test_a_namespace_that_is_not_tenant_slash_namespace_lists_nothing(tenancy: Tenancy) -> None:
    conn = as_role(tenancy.url, "alice")  # granted on tenant-a/ns: the tenant alone is not that
    try:
        for namespace in ("tenant-a", "tenant-a/", "tenant-a/ns/extra", "*", ""):
            cmd, r = new_command(T.GET_TOPICS_OF_NAMESPACE)
            r.namespace, r.request_id = namespace, next(_ids)
            assert refused(conn, cmd, T.ERROR)[0] == E.AuthorizationError, namespace
            cmd, w = new_command(T.WATCH_TOPIC_LIST)
            w.namespace, w.request_id, w.watcher_id, w.topics_pattern = namespace, next(_ids), 9, ".*"
            assert refused(conn, cmd, T.ERROR)[0] == E.AuthorizationError, namespace
        ping(conn)
    finally:
        conn.close()
    bystander(tenancy.url)


def test_watchers_never_reveal_topics_of_a_namespace_the_role_may_not_see(tenancy: Tenancy) -> None:
    alice, mallory, admin = (as_role(tenancy.url, r) for r in ("alice", "mallory", "admin"))
    try:
        ok = answer(alice, cmd_watch(tenancy.seeded, watcher_id=1), T.WATCH_TOPIC_LIST_SUCCESS)
        assert tenancy.seeded in ok.command.watchTopicListSuccess.topic
        assert tenancy.seeded_b not in ok.command.watchTopicListSuccess.topic
        assert refused(mallory, cmd_watch(tenancy.seeded, watcher_id=1), T.ERROR)[0] == E.AuthorizationError
        assert refused(alice, cmd_watch(tenancy.seeded_b, watcher_id=2), T.ERROR)[0] == E.AuthorizationError
        # the superuser creates a topic in each namespace
        created_a, created_b = unique("new"), unique("new", OTHER_NS)
        assert producer(admin, created_a, producer_id=1).type == T.PRODUCER_SUCCESS
        assert producer(admin, created_b, producer_id=2).type == T.PRODUCER_SUCCESS
        update = alice.expect(T.WATCH_TOPIC_UPDATE).command.watchTopicUpdate
        assert list(update.new_topics) == [created_a]
        ping(alice)  # PONG comes after anything the broker sent before it
        ping(mallory)
        assert not [f for f in alice.frames + mallory.frames if f.type == T.WATCH_TOPIC_UPDATE]
    finally:
        for c in (alice, mallory, admin):
            c.close()
    bystander(tenancy.url)


def test_granted_roles_work_with_the_official_client(tenancy: Tenancy) -> None:
    topic = unique("official")
    alice = official(tenancy.url, token("alice"))
    reader = official(tenancy.url, token("reader"))
    mallory = official(tenancy.url, token("mallory"))
    try:
        consumer = reader.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        values = payloads(20)
        send_all(alice.create_producer(topic), values)
        assert_exactly(receive_n(consumer, 20, ack=True), values)
        with pytest.raises(pulsar.AuthorizationError):
            reader.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            mallory.subscribe(topic, "s2")
        with pytest.raises(pulsar.AuthorizationError):
            mallory.create_producer(topic)
    finally:
        for c in (alice, reader, mallory):
            c.close()
    bystander(tenancy.url)


# -- the role is fixed at CONNECT --------
def test_auth_response_with_another_role_closes_the_connection(tenancy: Tenancy) -> None:
    conn = as_role(tenancy.url, "alice")
    try:
        # The superuser's token, and behind it a producer only the superuser could create.
        conn.sock.sendall(
            encode_command(cmd_auth_response(token("admin"))) + encode_command(cmd_producer(tenancy.seeded_b))
        )
        assert conn.wait_closed(5), "the broker kept a connection whose role changed"
        assert [T.Type.Name(f.type) for f in conn.frames] == []  # as Pulsar: closed without an answer
    finally:
        conn.close()
    bystander(tenancy.url)


def test_auth_response_with_the_same_role_refreshes_and_keeps_the_connection(tenancy: Tenancy) -> None:
    conn = as_role(tenancy.url, "alice")
    try:
        conn.send(cmd_auth_response(token("alice", exp=int(time.time()) + 600)))
        ping(conn)
        assert producer(conn, tenancy.seeded).type == T.PRODUCER_SUCCESS
    finally:
        conn.close()
    bad = as_role(tenancy.url, "alice")
    try:
        bad.send(cmd_auth_response(token("alice", key=b"not-the-broker-key-not-the-key!!")))
        err = bad.expect(T.ERROR).command.error
        assert err.error == E.AuthenticationError and err.request_id == REQUEST_ID_NONE
        assert bad.wait_closed(5)
    finally:
        bad.close()
    bystander(tenancy.url)


def test_a_second_connect_closes_the_connection(tenancy: Tenancy) -> None:
    conn = as_role(tenancy.url, "alice")
    try:
        conn.sock.sendall(
            encode_command(cmd_connect(token("admin"))) + encode_command(cmd_producer(tenancy.seeded_b))
        )
        assert conn.wait_closed(5), "a second CONNECT was accepted"
        assert not [f for f in conn.frames if f.type in (T.CONNECTED, T.PRODUCER_SUCCESS)]
    finally:
        conn.close()
    bystander(tenancy.url)


# -- connect deadline and connection cap --------
def trickle_until_closed(socks: list[socket.socket], data: bytes, interval: float, give_up: float) -> int:
    """Send ``data`` (cycling) one byte per ``interval`` to each socket until the broker closes them all;
    returns how many it closed within ``give_up`` seconds."""
    open_ = {s: itertools.cycle(data) for s in socks}
    deadline = time.monotonic() + give_up
    while open_ and time.monotonic() < deadline:
        for sock, stream in list(open_.items()):
            try:
                sock.sendall(bytes([next(stream)]))
            except (BrokenPipeError, ConnectionResetError):
                del open_[sock]
        readable, _, _ = select.select(list(open_), [], [], interval)
        for sock in readable:
            try:
                if sock.recv(1024) == b"":
                    del open_[sock]
            except ConnectionResetError:
                del open_[sock]
    return len(socks) - len(open_)


def test_connections_that_never_complete_connect_are_closed_at_the_deadline() -> None:
    deadline = 1.0
    with broker_url("--connect-timeout", str(deadline)) as url:
        host, port = url.split("://", 1)[1].rsplit(":", 1)
        # A frame header announcing 64 KiB, then its body one byte at a time: never a whole frame.
        never_whole = struct.pack(">II", 65536, 65532) + bytes(1000)
        ping_frame = encode_command(new_command(T.PING)[0])  # whole frames, but never a CONNECT
        slow = [socket.create_connection((host, int(port))) for _ in range(4)]
        pingers = [socket.create_connection((host, int(port))) for _ in range(2)]
        honest = RawConnection(host, int(port), connect=False)
        try:
            time.sleep(0.3)
            honest.send(cmd_connect(None))  # CONNECT in time: the deadline no longer applies to it
            honest.expect(T.CONNECTED)
            assert_bystander_served(url)  # served while the slow connections hang on
            # Neither trickled bytes nor whole PING frames extend the deadline: every connection is
            # closed while it is still sending, long before the 8x deadline it would go on for.
            assert trickle_until_closed(slow, never_whole, 0.1, 8 * deadline) == len(slow)
            assert trickle_until_closed(pingers, ping_frame, 0.1, 8 * deadline) == len(pingers)
            ping(honest)  # connected in time: still served after the deadline
        finally:
            for sock in [*slow, *pingers]:
                sock.close()
            honest.close()
        assert_bystander_served(url)


def test_a_tls_handshake_that_never_finishes_is_closed_at_the_deadline(
    start_broker: Callable[..., Broker], tmp_path: Path
) -> None:
    ca = trustme.CA()
    pem = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    b = start_broker(tls_port=0, tls_cert_file=pem, tls_key_file=pem, connect_timeout=1.0)
    # A ClientHello that never comes: the first bytes of a TLS record header, then a byte at a time.
    silent = [socket.create_connection(("127.0.0.1", b.tls_port)) for _ in range(3)]
    try:
        assert_bystander_served(b.service_url)
        assert trickle_until_closed(silent, b"\x16\x03\x01\x40\x00" + bytes(1000), 0.1, 8.0) == len(silent)
    finally:
        for sock in silent:
            sock.close()
    assert_bystander_served(b.service_url)


def test_connections_beyond_the_cap_get_not_allowed_and_are_closed() -> None:
    with broker_url("--max-connections", "3") as url:
        held = [connect(url) for _ in range(3)]
        try:
            extra = RawConnection.to(url, connect=False)
            err = extra.expect(T.ERROR).command.error
            assert err.error == E.NotAllowedError and err.request_id == REQUEST_ID_NONE
            assert err.message == "Reached the maximum number of connections"  # Pulsar's words
            assert extra.wait_closed(5)
            extra.close()
            client = pulsar.Client(url, operation_timeout_seconds=2, logger=pulsar.ConsoleLogger(QUIET))
            try:
                with pytest.raises(pulsar.PulsarException):
                    client.create_producer("persistent://public/default/capped")
            finally:
                client.close()
            for conn in held:
                ping(conn)  # the connections within the cap are unaffected
            held.pop().close()
            assert_bystander_served(url)  # a place is free again: served
        finally:
            for conn in held:
                conn.close()


def test_a_refused_connection_is_one_log_line(
    start_broker: Callable[..., Broker], caplog: pytest.LogCaptureFixture
) -> None:
    b = start_broker(max_connections=1)
    caplog.set_level(logging.INFO, logger="pulsarwire.broker")
    first = connect(b.service_url)
    try:
        extra = RawConnection.to(b.service_url, connect=False)
        assert extra.expect(T.ERROR).command.error.error == E.NotAllowedError
        assert extra.wait_closed(5)
        extra.close()
        lines = [r.getMessage() for r in caplog.records if "maximum number of connections" in r.getMessage()]
        assert len(lines) == 1 and "refusing" in lines[0], lines
        assert b.connections_refused == 1
    finally:
        first.close()


# -- secrets out of ps, key formats --------
def ps_args(pid: int) -> str:
    return subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout


def connect_answer(url: str, tok: str) -> pb.BaseCommand:
    conn = RawConnection.to(url, connect=False)
    try:
        conn.send(cmd_connect(tok))
        return expect_either(conn, T.CONNECTED, T.ERROR).command
    finally:
        conn.close()


@pytest.mark.parametrize("source", ["file", "env"])
def test_the_secret_comes_from_a_file_or_the_environment_and_never_shows_in_ps(
    tmp_path: Path, source: str
) -> None:
    key = os.urandom(40) + b"\n"  # binary, and ending in a newline byte
    while base64.b64encode(key).startswith(b"/"):  # a value starting with / is a path (as in Pulsar)
        key = os.urandom(40) + b"\n"
    path = tmp_path / "secret.key"
    path.write_bytes(key)
    encoded = base64.b64encode(key).decode()
    if source == "file":
        args, env = ["--auth-token-secret-file", str(path)], {}
    else:
        args, env = [], {"PULSARWIRE_TOKEN_SECRET": encoded}
    with cli_broker(*args, "--grant", "alice:public/default:produce,consume", env=env) as (proc, url):
        shown = ps_args(proc.pid)
        assert "pulsarwire.broker" in shown
        assert encoded not in shown and encoded[:12] not in shown and key.hex()[:16] not in shown
        client = official(url, token("alice", key=key))
        try:
            client.create_producer("persistent://public/default/from-" + source).send(b"ok")
        finally:
            client.close()
        # The key is the file's bytes exactly: the same key without its newline byte is another key.
        refused_answer = connect_answer(url, token("alice", key=key.rstrip(b"\n")))
        assert refused_answer.type == T.ERROR and refused_answer.error.error == E.AuthenticationError
        assert_bystander_served(url, token=token("alice", key=key))


def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsarwire.broker", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


AUTH = ["--auth-token-secret", base64.b64encode(SECRET).decode()]


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        ([*AUTH, "--grant", "alice"], {}, "--grant: grant 'alice' is not ROLE:TENANT/NAMESPACE:ACTIONS"),
        ([*AUTH, "--grant", "alice:public:produce"], {}, "scope 'public' is not TENANT/NAMESPACE"),
        ([*AUTH, "--grant", "alice:public/default:write"], {}, "unknown action 'write'"),
        ([*AUTH, "--grant", "alice:a/b/c:produce"], {}, "scope 'a/b/c' is not"),
        ([*AUTH, "--grant", ":public/default:produce"], {}, "needs a role"),
        ([*AUTH, "--grant", "alice:public/default:"], {}, "names no action"),
        ([], {"PULSARWIRE_TOKEN_SECRET": ""}, "PULSARWIRE_TOKEN_SECRET is empty"),
        (AUTH, {"PULSARWIRE_TOKEN_SECRET": AUTH[1]}, "use one of them"),
        (["--auth-token-public-key", "/no/such/key.der"], {}, "no key file /no/such/key.der"),
        (["--auth-token-public-key", "data:;base64,AAAA"], {}, "not an X.509 public key"),
        (["--auth-token-secret", "c2hvcnQ="], {}, "at least 32"),
        (["--auth-token-secret-file", "/no/such/secret"], {}, "cannot read /no/such/secret"),
    ],
    ids=[
        "no-scope",
        "scope-no-slash",
        "bad-action",
        "deep-scope",
        "no-role",
        "no-actions",
        "empty-env",
        "env-and-flag",
        "missing-key-file",
        "not-a-public-key",
        "short-secret",
        "missing-secret-file",
    ],
)
def test_cli_mistakes_are_one_line_and_exit_2(args: list[str], env: dict[str, str], says: str) -> None:
    done = _run_cli(*args, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_grants_without_authentication_are_refused_at_start() -> None:
    for flag in (["--grant", "alice:public/default:produce"], ["--superuser", "admin"]):
        done = _run_cli(*flag)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "need authentication" in lines[0], done.stderr


def test_key_specs_in_pulsars_formats(tmp_path: Path) -> None:
    key = b"\x00binary key\xff" + b"k" * 20 + b"\n"
    path = tmp_path / "k.bin"
    path.write_bytes(key)
    b64 = base64.b64encode(key).decode()
    assert read_key(str(path)) == key  # a path: its bytes exactly, the newline byte included
    assert read_key(f"file://{path}") == key
    assert read_key(f"file:{path}") == key
    assert read_key(f"data:;base64,{b64}") == key
    assert read_key(f"data:application/octet-stream;base64,{b64}") == key
    assert read_key("data:,plain%0A") == b"plain\n"
    assert read_key(b64) == key
    assert read_key(base64.urlsafe_b64encode(key).decode().rstrip("=")) == key
    for bad in ("/no/such/file", "not base64 !", "data:nocomma", f"file://{tmp_path}/missing"):
        with pytest.raises(TokenKeyError):
            read_key(bad)


def _rsa() -> tuple[bytes, bytes, bytes]:
    """(private PEM, public DER, public PEM) of a fresh RSA key."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _pems(private)


def _pems(private: Any) -> tuple[bytes, bytes, bytes]:
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = private.public_key()
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    public_pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem, der, public_pem


def _hs256_with(key: bytes, claims: dict[str, Any]) -> str:
    """An HS256 token MAC'd with ``key`` by hand (PyJWT refuses to use a public key as an HMAC secret)."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b64(json.dumps(claims).encode())
    return head + "." + b64(hmac.new(key, head.encode(), hashlib.sha256).digest())


@pytest.mark.filterwarnings("ignore::jwt.InsecureKeyLengthWarning")  # the 31-byte key signs a refused token
def test_token_verification_rs256_es256_hs256_exp_and_algorithm_confusion() -> None:
    now = time.time()
    rsa_private, rsa_der, rsa_pem = _rsa()
    ec_private, ec_der, _ = _pems(ec.generate_private_key(ec.SECP256R1()))
    by_rsa = TokenAuth(public_key=rsa_der)
    by_rsa_pem = TokenAuth(public_key=rsa_pem)
    by_ec = TokenAuth(public_key=ec_der)
    by_secret = TokenAuth(SECRET)

    def role(auth: TokenAuth, tok: str) -> str:
        return auth.authenticate("token", tok.encode(), now).role

    assert role(by_rsa, token("rsa-user", rsa_private, "RS256")) == "rsa-user"
    assert role(by_rsa_pem, token("rsa-user", rsa_private, "RS256")) == "rsa-user"
    assert role(by_ec, token("ec-user", ec_private, "ES256")) == "ec-user"
    assert role(by_secret, token("hs-user")) == "hs-user"
    assert (
        by_secret.authenticate("token", token("u", exp=int(now) + 60).encode(), now).expires_at
        == int(now) + 60
    )
    refused_tokens = [
        (by_rsa, _hs256_with(rsa_der, {"sub": "admin"})),  # algorithm confusion: HMAC with the public key
        (by_rsa, _hs256_with(rsa_pem, {"sub": "admin"})),
        (by_rsa, token("x", ec_private, "ES256")),  # the wrong kind of key
        (by_ec, token("x", rsa_private, "RS256")),
        (by_secret, token("x", rsa_private, "RS256")),
        (by_rsa, token("x", _rsa()[0], "RS256")),  # another RSA key
        (by_secret, token("x", key=SECRET.rstrip(b"\n"))),  # the secret without its newline byte
        (by_secret, token("x", exp=int(now) - 1)),  # expired
        (by_secret, token("x", nbf=int(now) + 60)),  # not yet valid
        (by_secret, token(None)),  # no role
        (by_secret, token("x", exp="tomorrow")),
        (by_secret, jwt.encode({"sub": "x"}, None, algorithm="none")),  # unsigned
        (by_secret, "not.a.jwt"),
    ]
    for auth, tok in refused_tokens:
        with pytest.raises(AuthenticationError):
            auth.authenticate("token", tok.encode(), now)
    with pytest.raises(TokenKeyError):
        TokenAuth(b"short")


def test_rs256_and_es256_brokers_from_the_cli(tmp_path: Path) -> None:
    rsa_private, rsa_der, _ = _rsa()
    ec_private, _, ec_pem = _pems(ec.generate_private_key(ec.SECP256R1()))
    (tmp_path / "ec.pem").write_bytes(ec_pem)
    grant = ["--grant", "svc:public/default:produce,consume"]
    keys = [
        (f"data:;base64,{base64.b64encode(rsa_der).decode()}", rsa_private, "RS256"),
        (str(tmp_path / "ec.pem"), ec_private, "ES256"),
    ]
    for spec, private, alg in keys:
        with cli_broker("--auth-token-public-key", spec, *grant) as (_proc, url):
            client = official(url, token("svc", private, alg))
            try:
                client.create_producer("persistent://public/default/" + alg).send(b"signed")
            finally:
                client.close()
            forged = connect_answer(url, _hs256_with(rsa_der, {"sub": "svc"}))
            assert forged.type == T.ERROR and forged.error.error == E.AuthenticationError
            assert_bystander_served(url, token=token("svc", private, alg))
