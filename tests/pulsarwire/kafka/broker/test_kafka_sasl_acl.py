"""SASL exchanges and ACL decisions driven directly, and the SASL gate over a real socket.

SCRAM-SHA-256 is checked against RFC 7677's example exchange (its salt, nonces and proof), so
the server side is right independently of any client; PLAIN and the gate against our broker
with a raw connection (tests.helpers.kafka_raw), with a bystander served throughout.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pulsarwire.kafka.broker import sasl
from pulsarwire.kafka.broker.acl import Acl, AclSyntaxError, Grant
from pulsarwire.kafka.broker.group_coordinator import OffsetCommitPart
from pulsarwire.kafka.broker.sasl import SaslExchange, SaslFailure, User, Users, scram_credential
from pulsarwire.kafka.errors import ERROR_CODES as E
from tests.helpers.kafka_raw import KafkaRaw, bystander, is_closed

# RFC 7677 section 3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_users() -> Users:
    cred = scram_credential("pencil", "sha256", RFC_SALT, 4096)
    return Users({"user": User("user", b"", {"SCRAM-SHA-256": cred})}, ("SCRAM-SHA-256",))


def test_scram_sha_256_answers_rfc_7677s_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda n: RFC_SERVER_NONCE)
    exchange = SaslExchange(rfc_users(), "SCRAM-SHA-256")
    assert exchange.step(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert exchange.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert exchange.done and exchange.user == "user"


@pytest.mark.parametrize(
    "final",
    [
        RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=eHzb"),  # wrong proof
        RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # another gs2 header than the first message's
        RFC_CLIENT_FINAL.replace(b"r=rOpr", b"r=xOpr"),  # another nonce
        b"c=biws,r=x",  # no proof
        RFC_CLIENT_FINAL[:-4] + b"!!!=",  # proof not base64
    ],
)
def test_scram_refuses_a_bad_final_message(monkeypatch: pytest.MonkeyPatch, final: bytes) -> None:
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda n: RFC_SERVER_NONCE)
    exchange = SaslExchange(rfc_users(), "SCRAM-SHA-256")
    exchange.step(RFC_CLIENT_FIRST)
    with pytest.raises(SaslFailure):
        exchange.step(final)
    assert not exchange.done


@pytest.mark.parametrize(
    "first",
    [
        b"p=tls-server-end-point,,n=user,r=abc",
        b"n,,r=abc",
        b"n,,n=us=er,r=abc",
        b"n,a=other,n=user,r=abc",
        b"\xff",
    ],
)
def test_scram_refuses_a_bad_first_message(first: bytes) -> None:
    with pytest.raises(SaslFailure):
        SaslExchange(rfc_users(), "SCRAM-SHA-256").step(first)


def test_an_unknown_scram_user_looks_like_a_known_one_until_the_proof() -> None:
    users = rfc_users()
    first = SaslExchange(users, "SCRAM-SHA-256").step(b"n,,n=nobody,r=abc")
    again = SaslExchange(users, "SCRAM-SHA-256").step(b"n,,n=nobody,r=abc")
    salt = [part for part in first.split(b",") if part.startswith(b"s=")]
    assert salt == [part for part in again.split(b",") if part.startswith(b"s=")]  # stable made-up salt
    assert b",i=4096" in first


def test_plain_rules() -> None:
    users = Users.from_passwords({"alice": "a:b"}, ("PLAIN",))
    ok = SaslExchange(users, "PLAIN")
    assert ok.step(b"\0alice\0a:b") == b"" and ok.done and ok.user == "alice"
    assert SaslExchange(users, "PLAIN").step(b"alice\0alice\0a:b") == b""  # authzid = the user: fine
    for bad in (b"\0alice\0wrong", b"bob\0alice\0a:b", b"\0alice", b"\0ghost\0a:b", b"\0\0"):
        with pytest.raises(SaslFailure):
            SaslExchange(users, "PLAIN").step(bad)


def test_users_file_format(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text("# comment\n\nalice:pa:ss\n  # indented comment\nbob:x\n")
    users = Users.load(path)
    assert sorted(users.users) == ["alice", "bob"] and users.check_plain("alice", "pa:ss")
    assert set(users.users["bob"].scram) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    path.write_text("alice:1\nalice:2\n")
    with pytest.raises(sasl.SaslConfigError, match=":2: user 'alice' is listed twice"):
        Users.load(path)


def test_acl_decisions() -> None:
    acl = Acl(
        [
            Grant.parse("User:alice:topic:orders:read,write"),
            Grant.parse("alice:group:billing-*:read"),
            Grant.parse("User:*:topic:public:describe"),
            Grant.parse("User:carol:cluster:kafka-cluster:create"),
        ],
        ["User:admin"],
    )
    assert acl.allowed("User:alice", "TOPIC", "orders", "WRITE")
    assert acl.allowed("alice", "TOPIC", "orders", "DESCRIBE")  # implied by read/write
    assert not acl.allowed("User:alice", "TOPIC", "orders", "DELETE")
    assert not acl.allowed("User:alice", "TOPIC", "orders2", "READ")
    assert acl.allowed("User:alice", "GROUP", "billing-eu", "READ")
    assert not acl.allowed("User:alice", "GROUP", "billing", "READ")
    assert acl.allowed("User:bob", "TOPIC", "public", "DESCRIBE")
    assert not acl.allowed("User:bob", "TOPIC", "public", "READ")
    assert not acl.allowed("ANONYMOUS", "TOPIC", "orders", "READ")
    assert acl.allowed("User:admin", "GROUP", "anything", "DELETE")
    assert acl.allowed("User:alice", "CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")  # KIP-679
    assert acl.allowed("User:carol", "TOPIC", "new-one", "CREATE")  # CREATE on the cluster
    assert Acl().allowed("anyone", "TOPIC", "x", "DELETE")  # no grants: authorization off


@pytest.mark.parametrize(
    "spec",
    ["alice:topic:orders", "alice:queue:orders:read", "alice:topic:orders:fly", "alice:topic:or*ders:read"],
)
def test_bad_grants(spec: str) -> None:
    with pytest.raises(AclSyntaxError):
        Grant.parse(spec)


# -- the gate over a socket ------------------------------------------------------------------------


def handshake(conn: KafkaRaw, mechanism: str) -> dict[str, Any]:
    return conn.request("SaslHandshake", 1, {"mechanism": mechanism})


def test_the_sasl_gate_over_a_socket(tmp_path: Path, kafka_broker_factory: Callable[..., Any]) -> None:
    users = tmp_path / "users"
    users.write_text("alice:secret\n")
    broker = kafka_broker_factory(sasl_users=users, sasl_mechanisms="PLAIN,SCRAM-SHA-512")
    address = broker.bootstrap_servers
    with KafkaRaw(address) as conn:  # before logging in, only ApiVersions and SASL
        assert conn.request("ApiVersions", 3, {})["error_code"] == 0
        conn.send("Metadata", 12, {"topics": None})
        assert is_closed(conn)
    with KafkaRaw(address) as conn:
        got = handshake(conn, "GSSAPI")
        assert got == {
            "error_code": E["UNSUPPORTED_SASL_MECHANISM"],
            "mechanisms": ["PLAIN", "SCRAM-SHA-512"],
        }
        assert is_closed(conn)
    with KafkaRaw(address) as conn:
        got = conn.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0secret"})
        assert got["error_code"] == E["ILLEGAL_SASL_STATE"]
        assert is_closed(conn)
    with KafkaRaw(address) as conn:
        assert handshake(conn, "PLAIN")["error_code"] == 0
        got = conn.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0nope"})
        assert got["error_code"] == E["SASL_AUTHENTICATION_FAILED"]
        assert got["error_message"] == "Authentication failed: Invalid username or password"
        assert is_closed(conn)
    with KafkaRaw(address) as conn:
        assert handshake(conn, "PLAIN")["error_code"] == 0
        assert conn.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0secret"})["error_code"] == 0
        assert conn.request("Metadata", 12, {"topics": None})["brokers"]  # now served
        assert handshake(conn, "PLAIN")["error_code"] == E["ILLEGAL_SASL_STATE"]  # no second login
    assert bystander(address)["error_code"] == 0


def test_grants_over_a_socket_without_sasl(kafka_broker_factory: Callable[..., Any]) -> None:
    """No SASL: the connection is User:ANONYMOUS, and grants apply to it like to anyone."""
    grants = ["User:ANONYMOUS:topic:visible:read", "User:ANONYMOUS:group:mine:read"]
    broker = kafka_broker_factory(grant=grants, group_initial_rebalance_delay_ms=0, auto_create_topics=False)
    broker.create_topic("visible", 1)
    broker.create_topic("hidden", 1)

    def someone_elses_group() -> None:  # made by another principal, as far as this one knows
        groups = broker.state.extensions["groups"]
        groups.commit(groups.validate_commit("theirs", -1, "", None, 8), [OffsetCommitPart("visible", 0, 3)])

    broker.call(someone_elses_group)
    with KafkaRaw(broker.bootstrap_servers) as conn:
        every = conn.request("Metadata", 12, {"topics": None})
        assert [t["name"] for t in every["topics"]] == ["visible"]  # DESCRIBE decides what is listed
        asked = conn.request("Metadata", 12, {"topics": [{"name": "hidden"}]})
        assert asked["topics"][0]["error_code"] == E["TOPIC_AUTHORIZATION_FAILED"]

        def commit(group: str, topic: str) -> int:
            parts = [{"partition_index": 0, "committed_offset": 1}]
            got = conn.request(
                "OffsetCommit", 8, {"group_id": group, "topics": [{"name": topic, "partitions": parts}]}
            )
            code: int = got["topics"][0]["partitions"][0]["error_code"]
            return code

        assert commit("mine", "visible") == 0
        assert commit("mine", "hidden") == E["TOPIC_AUTHORIZATION_FAILED"]
        assert commit("theirs", "visible") == E["GROUP_AUTHORIZATION_FAILED"]
        found = conn.request("FindCoordinator", 3, {"key": "theirs", "key_type": 0})
        assert found["error_code"] == E["GROUP_AUTHORIZATION_FAILED"]
        assert (
            conn.request("Heartbeat", 4, {"group_id": "theirs", "generation_id": 1, "member_id": "m"})[
                "error_code"
            ]
            == E["GROUP_AUTHORIZATION_FAILED"]
        )
        fetched = conn.request("OffsetFetch", 8, {"groups": [{"group_id": "theirs", "topics": None}]})
        assert fetched["groups"][0]["error_code"] == E["GROUP_AUTHORIZATION_FAILED"]
        groups = conn.request("ListGroups", 4, {})["groups"]
        assert [g["group_id"] for g in groups] == ["mine"]  # only the groups it may describe
        described = conn.request("DescribeGroups", 5, {"groups": ["theirs"]})["groups"][0]
        assert described["error_code"] == E["GROUP_AUTHORIZATION_FAILED"]
        deleted = conn.request("DeleteGroups", 2, {"groups_names": ["mine"]})["results"][0]
        assert deleted["error_code"] == E["GROUP_AUTHORIZATION_FAILED"]  # read does not give delete
