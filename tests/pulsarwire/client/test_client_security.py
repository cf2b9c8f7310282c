"""pulsarwire's client with token authentication (incl. refresh by AUTH_CHALLENGE) and TLS."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest
import trustme

from pulsarwire.broker import Broker, Grants, TokenAuth
from pulsarwire.client.auth import AuthenticationToken
from pulsarwire.client.blocking import Client
from pulsarwire.errors import AuthenticationError, ConnectError
from tests.helpers.judge import new_topic, payloads, read_all

SECRET = b"0123456789abcdef0123456789abcdef"
ALICE = Grants.of("alice:public/default:produce,consume")


def make_jwt(secret: bytes, subject: str, expires_at: float | None = None) -> str:
    claims: dict[str, object] = {"sub": subject}
    if expires_at is not None:
        claims["exp"] = int(expires_at)
    return jwt.encode(claims, secret, algorithm="HS256")


def test_wrong_token_is_rejected_with_authentication_error(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(auth=TokenAuth(SECRET), grants=ALICE)
    for token in (make_jwt(b"x" * 32, "mallory"), make_jwt(SECRET, "alice", time.time() - 5)):
        client = Client(b.service_url, authentication=AuthenticationToken(token), operation_timeout_seconds=5)
        try:
            with pytest.raises(AuthenticationError):
                client.create_producer(new_topic())
        finally:
            client.close()


def test_expiring_token_refreshed_by_auth_challenge_while_producing(
    start_broker: Callable[..., Broker],
) -> None:
    b = start_broker(auth=TokenAuth(SECRET), grants=ALICE)
    issued: list[str] = []

    def supplier() -> str:
        issued.append(make_jwt(SECRET, "alice", time.time() + 1.5))
        return issued[-1]

    topic = new_topic()
    client = Client(b.service_url, authentication=AuthenticationToken(supplier))
    sent: list[bytes] = []
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        deadline = time.monotonic() + 4.5
        i = 0
        while time.monotonic() < deadline:
            sent.append(f"m-{i}".encode())
            producer.send(sent[-1])
            i += 1
            time.sleep(0.02)
    finally:
        client.close()
    assert b.auth_refreshes >= 2 and len(issued) >= 3
    assert b.connections_accepted == 1  # refreshed on the same connection
    reader_url = b.service_url
    b.config.auth = None  # let the official reader in without credentials
    assert read_all(reader_url, topic, len(sent)) == sent


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    files = {"ca": d / "ca.pem", "good": d / "good.pem", "wrong": d / "wrong.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(files["good"]))
    ca.issue_cert("wrong.example").private_key_and_cert_chain_pem.write_to_path(str(files["wrong"]))
    return files


def test_tls_produce_with_hostname_verification(
    start_broker: Callable[..., Broker], tls: dict[str, Path]
) -> None:
    b = start_broker(tls_port=0, tls_cert_file=tls["good"], tls_key_file=tls["good"])
    client = Client(f"pulsar+ssl://localhost:{b.tls_port}", tls_trust_certs_file_path=str(tls["ca"]))
    topic = new_topic()
    try:
        producer = client.create_producer(topic)
        for v in payloads(10):
            producer.send_async(v, None)
        producer.flush()
    finally:
        client.close()
    assert read_all(b.service_url, topic, 10) == payloads(10)


def test_tls_wrong_hostname_rejected_unless_verification_off(
    start_broker: Callable[..., Broker], tls: dict[str, Path]
) -> None:
    b = start_broker(tls_port=0, tls_cert_file=tls["wrong"], tls_key_file=tls["wrong"])
    url = f"pulsar+ssl://localhost:{b.tls_port}"
    strict = Client(url, tls_trust_certs_file_path=str(tls["ca"]), operation_timeout_seconds=3)
    try:
        with pytest.raises(ConnectError, match=r"(?i)hostname|certificate"):
            strict.create_producer(new_topic())
    finally:
        strict.close()
    lax = Client(url, tls_trust_certs_file_path=str(tls["ca"]), tls_validate_hostname=False)
    try:
        lax.create_producer(new_topic()).send(b"ok")
    finally:
        lax.close()
