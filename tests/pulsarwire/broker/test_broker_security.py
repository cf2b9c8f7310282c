"""Token authentication (static list and HS256 JWT), auth refresh by AUTH_CHALLENGE, TLS, authorization.

Hostile clients against authentication and grants: test_hostile_tenancy.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pulsar
import pytest
import trustme

from pulsarwire.broker import Broker, Grants
from pulsarwire.broker.auth import TokenAuth
from pulsarwire.proto import pb
from tests.helpers.judge import QUIET, assert_exactly, new_topic, payloads, receive_n, send_all
from tests.helpers.raw import RawConnection

SECRET = b"0123456789abcdef0123456789abcdef"
#: With authentication on, a role may do only what it is granted.
ALICE = Grants.of("alice:public/default:produce,consume")


def make_jwt(secret: bytes, subject: str, expires_at: float | None = None) -> str:
    """An HS256 JWT as Pulsar's token tools make them (PyJWT signs; ``sub`` is the role)."""
    claims: dict[str, Any] = {"sub": subject}
    if expires_at is not None:
        claims["exp"] = int(expires_at)
    return jwt.encode(claims, secret, algorithm="HS256")


def token_client(url: str, token: str | Callable[[], str], **kw: Any) -> pulsar.Client:
    kw.setdefault("operation_timeout_seconds", 5)
    auth = pulsar.AuthenticationToken(token)
    return pulsar.Client(url, authentication=auth, logger=pulsar.ConsoleLogger(QUIET), **kw)


def raw_connect_with(url: str, token: str | None) -> pb.BaseCommand:
    """CONNECT with a token over a bare socket; returns the broker's first answer."""
    conn = RawConnection.to(url, connect=False)
    try:
        cmd = pb.BaseCommand(type=pb.BaseCommand.CONNECT)
        cmd.connect.client_version = "tests"
        cmd.connect.protocol_version = 21
        if token is not None:
            cmd.connect.auth_method_name = "token"
            cmd.connect.auth_data = token.encode()
        conn.send(cmd)
        deadline = time.monotonic() + 5
        while not conn.frames and time.monotonic() < deadline and not conn.closed:
            conn._read(0.1)
        assert conn.frames, "no answer to CONNECT"
        answer = conn.frames[0].command
        if answer.type == pb.BaseCommand.ERROR:
            assert conn.wait_closed(5), "the broker must close the connection after refusing it"
        return answer
    finally:
        conn.close()


def test_jwt_token_accepted_and_wrong_token_rejected(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(auth=TokenAuth(SECRET), grants=ALICE)
    topic = new_topic()
    good = token_client(b.service_url, make_jwt(SECRET, "alice"))
    try:
        good.create_producer(topic).send(b"hello")
    finally:
        good.close()
    bad_tokens = [
        make_jwt(b"another-secret-another-secret-xx", "mallory"),
        "not-a-jwt",
        make_jwt(SECRET, "alice", time.time() - 10),  # expired
    ]
    for bad_token in bad_tokens:
        # The broker's answer, exactly: ERROR AuthenticationError, then the connection closes.
        answer = raw_connect_with(b.service_url, bad_token)
        assert answer.type == pb.BaseCommand.ERROR
        assert answer.error.error == pb.AuthenticationError
        # The official client (as against Apache Pulsar) sees a closed handshake and gives up.
        bad = token_client(b.service_url, bad_token, operation_timeout_seconds=2)
        try:
            with pytest.raises(pulsar.PulsarException):
                bad.create_producer(topic)
        finally:
            bad.close()
    assert raw_connect_with(b.service_url, make_jwt(SECRET, "alice")).type == pb.BaseCommand.CONNECTED
    assert b.stats(topic)["msg_in"] == 1  # nothing from the refused clients


def test_no_credentials_rejected(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(
        auth=TokenAuth(tokens={"static-token": "svc"}), grants=Grants.of("svc:public/default:produce")
    )
    answer = raw_connect_with(b.service_url, None)
    assert answer.type == pb.BaseCommand.ERROR and answer.error.error == pb.AuthenticationError
    ok = token_client(b.service_url, "static-token")
    try:
        ok.create_producer(new_topic()).send(b"x")
    finally:
        ok.close()


def test_expiring_token_is_refreshed_by_auth_challenge_while_producing(
    start_broker: Callable[..., Broker],
) -> None:
    b = start_broker(auth=TokenAuth(SECRET), grants=ALICE)
    issued: list[str] = []

    def supplier() -> str:
        tok = make_jwt(SECRET, "alice", time.time() + 2)
        issued.append(tok)
        return tok

    topic = new_topic()
    client = token_client(b.service_url, supplier)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        sent: list[bytes] = []
        deadline = time.monotonic() + 5
        i = 0
        while time.monotonic() < deadline:
            v = f"m-{i}".encode()
            producer.send(v)
            sent.append(v)
            i += 1
            time.sleep(0.05)
        assert_exactly(receive_n(consumer, len(sent), ack=True), sent)
        # the broker challenged at least twice (token lifetime 2 s) and kept the same connection
        assert b.auth_refreshes >= 2
        assert len(issued) >= 3
        assert b.connections_accepted == 1
    finally:
        client.close()


def test_authorization_error_for_a_namespace_the_role_may_not_use(
    start_broker: Callable[..., Broker],
) -> None:
    b = start_broker(auth=TokenAuth(SECRET), grants=ALICE, namespaces=("public/default", "other/ns"))
    client = token_client(b.service_url, make_jwt(SECRET, "alice"))
    try:
        client.create_producer(new_topic())  # allowed namespace
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://other/ns/forbidden")
        # A tenant that does not exist is TopicNotFound, whatever the role may do (as Pulsar's
        # authorization provider answers "Tenant does not exist" before reading any grant).
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer("persistent://nobody/ns/forbidden")
    finally:
        client.close()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    files = {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem", "wrong": d / "wrong.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(files["cert"]), append=True)
    cert.private_key_pem.write_to_path(str(files["key"]))
    wrong = ca.issue_cert("wrong.example")
    wrong.private_key_and_cert_chain_pem.write_to_path(str(files["wrong"]))
    return files


def test_tls_produce_consume(start_broker: Callable[..., Broker], tls_files: dict[str, Path]) -> None:
    b = start_broker(tls_port=0, tls_cert_file=tls_files["cert"], tls_key_file=tls_files["key"])
    url = f"pulsar+ssl://localhost:{b.tls_port}"
    client = pulsar.Client(
        url,
        tls_trust_certs_file_path=str(tls_files["ca"]),
        tls_validate_hostname=True,
        operation_timeout_seconds=5,
        logger=pulsar.ConsoleLogger(QUIET),
    )
    try:
        topic = new_topic()
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        values = payloads(20)
        send_all(producer, values)
        assert_exactly(receive_n(consumer, 20, ack=True), values)
    finally:
        client.close()


def test_tls_wrong_hostname_rejected_unless_validation_off(
    start_broker: Callable[..., Broker], tls_files: dict[str, Path]
) -> None:
    b = start_broker(tls_port=0, tls_cert_file=tls_files["wrong"], tls_key_file=tls_files["wrong"])
    url = f"pulsar+ssl://localhost:{b.tls_port}"
    strict = pulsar.Client(
        url,
        tls_trust_certs_file_path=str(tls_files["ca"]),
        tls_validate_hostname=True,
        operation_timeout_seconds=3,
        logger=pulsar.ConsoleLogger(QUIET),
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            strict.create_producer(new_topic())
    finally:
        strict.close()
    lax = pulsar.Client(
        url,
        tls_trust_certs_file_path=str(tls_files["ca"]),
        tls_validate_hostname=False,
        operation_timeout_seconds=5,
        logger=pulsar.ConsoleLogger(QUIET),
    )
    try:
        lax.create_producer(new_topic()).send(b"ok")
    finally:
        lax.close()
