"""OAuth2 client credentials and basic auth, end to end against a local issuer and our broker.

The issuer (tests/helpers/oauth2_issuer.py) signs RS256 JWTs with a short expiry; the broker
verifies them with the issuer's public key and challenges each connection when its token
expires, so a long enough run goes through several refreshes on one connection.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import pulsarwire
import pulsarwire.asyncio
from pulsarwire.broker import Broker, Grants, TokenAuth
from pulsarwire.client.auth import AuthenticationBasic
from pulsarwire.client.blocking import Client
from pulsarwire.client.oauth2 import AuthenticationOauth2
from pulsarwire.errors import (
    AuthenticationError,
    BadCredentialsError,
    CredentialsFileError,
    IssuerUnreachableError,
    OAuth2Error,
    SendTimeoutError,
)
from tests.helpers.hostile import broker_url
from tests.helpers.judge import new_topic
from tests.helpers.oauth2_issuer import LocalIssuer

SECRET = "s3cr3t-client-secret-value"
ALICE = Grants.of("alice:public/default:produce,consume")


@pytest.fixture
def issuer() -> Iterator[LocalIssuer]:
    i = LocalIssuer({"alice": SECRET}, expires_in=2)
    yield i
    i.stop()


def oauth2(issuer_url: str, private_key: Path | str, **kw: object) -> AuthenticationOauth2:
    return AuthenticationOauth2(
        issuer_url=issuer_url,
        private_key=str(private_key),
        audience="urn:pulsar:test",
        retry_delay=0.05,
        **kw,
    )  # type: ignore[arg-type]


def test_produce_and_consume_through_several_token_expiries_on_one_connection(
    start_broker: Callable[..., Broker], issuer: LocalIssuer, tmp_path: Path
) -> None:
    b = start_broker(auth=TokenAuth(public_key=issuer.public_key_pem), grants=ALICE)
    auth = oauth2(issuer.url, issuer.credentials_file(tmp_path, "alice", SECRET))
    topic = new_topic()
    client = Client(b.service_url, authentication=auth)
    sent: list[bytes] = []
    got: list[bytes] = []
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        deadline = time.monotonic() + 6.5
        while time.monotonic() < deadline:
            sent.append(f"m-{len(sent)}".encode())
            producer.send(sent[-1])
            msg = consumer.receive(timeout_millis=5000)
            consumer.acknowledge(msg)
            got.append(msg.data())
            time.sleep(0.02)
    finally:
        client.close()
    assert got == sent
    assert b.connections_accepted == 1  # the data path never reconnected
    assert b.auth_refreshes >= 2  # answered AUTH_CHALLENGE at least twice
    assert len(issuer.issued) >= 3 and all(c["aud"] == "urn:pulsar:test" for c in issuer.issued)


def test_the_token_fetch_never_blocks_the_event_loop(
    start_broker: Callable[..., Broker], issuer: LocalIssuer, tmp_path: Path
) -> None:
    """The issuer answers only after a coroutine on the client's own loop opens its gate:
    were the HTTP request made on the loop, the gate would open only after the issuer gave up."""
    b = start_broker(auth=TokenAuth(public_key=issuer.public_key_pem), grants=ALICE)
    auth = oauth2(issuer.url, issuer.credentials_file(tmp_path, "alice", SECRET))
    issuer.gate = threading.Event()
    gate = issuer.gate
    topic = new_topic()

    async def scenario() -> bytes:
        async def open_gate() -> None:
            while issuer.token_requests == 0:
                await asyncio.sleep(0.01)
            gate.set()

        async with pulsarwire.asyncio.Client(b.service_url, authentication=auth) as client:
            opener = asyncio.create_task(open_gate())
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic)
            await producer.send(b"through the gate")
            msg = await consumer.receive()
            await opener
            return msg.data()

    assert asyncio.run(scenario()) == b"through the gate"
    assert issuer.gate_results == [True]


def test_official_parameter_string_and_data_url(issuer: LocalIssuer) -> None:
    params = f'{{"issuer_url": "{issuer.url}", "private_key": "{issuer.data_url("alice", SECRET)}"}}'
    auth = pulsarwire.AuthenticationOauth2(params)
    assert auth.method == "token"
    token = auth.auth_data()
    assert auth.auth_data() == token  # cached
    assert issuer.token_requests == 1
    assert SECRET not in repr(auth) and "data:" in repr(auth)


def test_wrong_client_secret_is_a_typed_error_within_two_seconds(
    start_broker: Callable[..., Broker], issuer: LocalIssuer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    b = start_broker(auth=TokenAuth(public_key=issuer.public_key_pem), grants=ALICE)
    wrong = "not-the-secret-at-all"
    creds = issuer.credentials_file(tmp_path, "alice", wrong)
    client = Client(b.service_url, authentication=oauth2(issuer.url, creds), operation_timeout_seconds=10)
    caplog.set_level(logging.DEBUG)
    start = time.monotonic()
    try:
        with pytest.raises(BadCredentialsError) as info:
            client.create_producer(new_topic())
    finally:
        client.close()
    assert time.monotonic() - start < 2
    assert issuer.token_requests == 1  # a 401 is not retried
    message = str(info.value)
    assert issuer.url in message and str(creds) in message and "\n" not in message
    assert wrong not in message and wrong not in caplog.text


def test_token_is_refreshed_in_the_background_before_it_expires(
    start_broker: Callable[..., Broker], tmp_path: Path
) -> None:
    issuer = LocalIssuer({"alice": SECRET}, expires_in=10)
    try:
        b = start_broker(auth=TokenAuth(public_key=issuer.public_key_pem), grants=ALICE)
        client = Client(
            b.service_url,
            authentication=oauth2(issuer.url, issuer.credentials_file(tmp_path, "alice", SECRET)),
        )
        try:
            producer = client.create_producer(new_topic(), batching_enabled=False)
            first_exp = issuer.issued[0]["exp"]
            deadline = time.monotonic() + 15
            while len(issuer.issued) < 2 and time.monotonic() < deadline:
                producer.send(b"x")
                time.sleep(0.05)
            # a second token came before the first expired, unasked by the broker
            assert len(issuer.issued) == 2 and issuer.issued[1]["iat"] < first_exp
            assert b.auth_refreshes == 0
            producer.send(b"after")
        finally:
            client.close()
        assert b.connections_accepted == 1
    finally:
        issuer.stop()


def test_established_producer_and_consumer_survive_an_issuer_outage_longer_than_the_token(
    start_broker: Callable[..., Broker], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The issuer is down for longer than the token lifetime: the cached token expires, the broker
    drops the connection, and the producer and consumer keep reconnecting (as the Java client's
    do once created) instead of failing; when the issuer answers again they are back, nothing
    sent before or after is lost. Creating a producer during the outage fails fast, typed."""
    issuer = LocalIssuer({"alice": SECRET}, expires_in=4)
    b = start_broker(
        auth=TokenAuth(public_key=issuer.public_key_pem), grants=ALICE, auth_challenge_timeout=1.0
    )
    auth = oauth2(issuer.url, issuer.credentials_file(tmp_path, "alice", SECRET), retries=1)
    caplog.set_level(logging.INFO)
    client = Client(b.service_url, authentication=auth, operation_timeout_seconds=3)
    topic = new_topic()
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=1000)
        producer.send(b"before")
        expires_at = float(issuer.issued[-1]["exp"])
        issuer.down = True
        producer.send(b"during")  # the cached token still holds
        while time.time() < expires_at + 1.5:  # the outage (~5.5 s) outlives the token (4 s)
            time.sleep(0.1)
        with pytest.raises(IssuerUnreachableError):
            client.create_producer(new_topic())  # creation fails fast
        issuer.down = False
        deadline = time.monotonic() + 20
        while True:
            try:
                producer.send(b"after")
                break
            except SendTimeoutError:  # still reconnecting
                assert time.monotonic() < deadline, "the producer did not come back"
        got = [consumer.receive(timeout_millis=10_000).data() for _ in range(3)]
    finally:
        client.close()
        issuer.stop()
    assert got == [b"before", b"during", b"after"]
    # the refresh was tried while the cached token held, and the outage outlived the token
    assert issuer.refused_at and min(issuer.refused_at) < expires_at < max(issuer.refused_at)
    assert b.connections_accepted > 1  # the broker dropped the connection; it was made again
    assert SECRET not in caplog.text


def test_issuer_unreachable_is_retried_a_bounded_number_of_times(tmp_path: Path) -> None:
    i = LocalIssuer({"alice": SECRET})
    url = i.url
    i.stop()
    auth = oauth2(url, LocalIssuer.data_url("alice", SECRET), retries=2)
    start = time.monotonic()
    with pytest.raises(IssuerUnreachableError) as info:
        auth.auth_data()
    assert time.monotonic() - start < 2
    assert url in str(info.value) and "3 attempts" in str(info.value)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json " + SECRET, "is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        ('{"client_id": "alice"}', "has no client_secret"),
        ('{"client_secret": "' + SECRET + '"}', "has no client_id"),
    ],
)
def test_malformed_credentials_file_names_the_file(
    issuer: LocalIssuer, tmp_path: Path, content: str, reason: str
) -> None:
    creds = tmp_path / "key.json"
    creds.write_text(content)
    with pytest.raises(CredentialsFileError) as info:
        oauth2(issuer.url, f"file://{creds}").auth_data()
    message = str(info.value)
    assert str(creds) in message and reason in message and SECRET not in message
    assert issuer.token_requests == 0


def test_missing_credentials_file(issuer: LocalIssuer, tmp_path: Path) -> None:
    with pytest.raises(CredentialsFileError, match="cannot read credentials file"):
        oauth2(issuer.url, tmp_path / "absent.json").auth_data()


def test_parameters_are_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="issuer_url"):
        AuthenticationOauth2('{"private_key": "/k.json"}')
    with pytest.raises(ValueError, match="private_key"):
        AuthenticationOauth2(issuer_url="https://auth.example")
    with pytest.raises(ValueError, match="not a JSON object"):
        AuthenticationOauth2("issuer_url:https://auth.example")
    assert issubclass(IssuerUnreachableError, OAuth2Error) and issubclass(OAuth2Error, AuthenticationError)


# -- basic auth ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def basic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("basic")
    line = subprocess.run(
        ["openssl", "passwd", "-apr1", "-salt", "abcdefgh", "bob-password"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    passwords = d / "htpasswd"
    passwords.write_text(f"bob:{line}\n")
    with broker_url(
        "--auth-basic-file", str(passwords), "--grant", "bob:public/default:produce,consume"
    ) as url:
        yield url


def test_basic_auth_produces_and_consumes(basic_broker: str) -> None:
    topic = new_topic()
    client = Client(basic_broker, authentication=pulsarwire.AuthenticationBasic("bob", "bob-password"))
    try:
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"hello")
        assert consumer.receive(timeout_millis=5000).data() == b"hello"
    finally:
        client.close()


def test_basic_auth_wrong_password_is_refused(basic_broker: str) -> None:
    auth = AuthenticationBasic(auth_params_string='{"username": "bob", "password": "wrong"}')
    assert auth.auth_data() == b"bob:wrong" and auth.method == "basic"
    assert "wrong" not in repr(auth)
    client = Client(basic_broker, authentication=auth, operation_timeout_seconds=5)
    try:
        with pytest.raises(AuthenticationError):
            client.create_producer(new_topic())
    finally:
        client.close()
