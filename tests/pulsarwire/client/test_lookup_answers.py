"""Lookup answers the client must not follow: TLS downgrades and malformed broker URLs.

A scripted fake broker (``fake_broker.ScriptedBroker``, TLS where the client is on
``pulsar+ssl://``) answers LOOKUP as each test says. A client on TLS uses only the TLS URL of an
answer, as the Java client does: an answer carrying only a plaintext URL (or a ``pulsar://`` URL
in the TLS field), for a Connect or a Redirect, fails the lookup with TlsDowngradeError, and a
plaintext listener standing where the answer points sees no connection at all. A malformed URL
fails with InvalidBrokerUrlError, a typed pulsarwire error. Neither is retried: one LOOKUP each.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsarwire.client.blocking import Client
from pulsarwire.client.core import parse_service_url
from pulsarwire.errors import (
    BadLookupAnswerError,
    InvalidBrokerUrlError,
    InvalidConfigurationError,
    PulsarWireError,
    TlsDowngradeError,
)
from pulsarwire.proto import pb
from tests.helpers.fake_broker import ScriptedBroker, lookup_answer

T = pb.BaseCommand
TOPIC = "persistent://public/default/looked-up"


class Listener:
    """A plaintext TCP listener that only counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.accepted = 0
        self.sock.settimeout(0.05)  # accept() wakes up to see close()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.closed.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture
def tls_broker(tls_files: dict[str, Path]) -> Iterator[ScriptedBroker]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(tls_files["cert"]))
    with ScriptedBroker(tls=ctx) as b:
        yield b
    assert not b.errors, f"the fake broker failed while serving: {b.errors!r}"


@pytest.fixture
def plain_broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as b:
        yield b
    assert not b.errors, f"the fake broker failed while serving: {b.errors!r}"


def create_fails(url: str, ca: Path | None = None) -> PulsarWireError:
    kw: dict[str, object] = {"operation_timeout_seconds": 10}
    if ca is not None:
        kw["tls_trust_certs_file_path"] = str(ca)
    client = Client(url, **kw)
    try:
        with pytest.raises(PulsarWireError) as info:
            client.create_producer(TOPIC)
    finally:
        client.close()
    return info.value


# -- TLS: never in clear -------------------------------------------------------------------------


@pytest.mark.parametrize("redirect", [False, True], ids=["connect", "redirect"])
def test_tls_client_refuses_an_answer_with_only_a_plaintext_url(
    tls_broker: ScriptedBroker, tls_files: dict[str, Path], listener: Listener, redirect: bool
) -> None:
    tls_broker.script(T.LOOKUP, lookup_answer(url=listener.url, redirect=redirect))
    error = create_fails(tls_broker.url, tls_files["ca"])
    assert isinstance(error, TlsDowngradeError), repr(error)
    assert listener.url in str(error) and "clear" in str(error)
    assert listener.accepted == 0, "the client connected in clear"
    assert len(tls_broker.frames(T.LOOKUP)) == 1, "a refusal is not retried"
    assert not tls_broker.frames(T.PRODUCER)


def test_tls_client_refuses_a_plaintext_url_in_the_tls_field(
    tls_broker: ScriptedBroker, tls_files: dict[str, Path], listener: Listener
) -> None:
    tls_broker.script(T.LOOKUP, lookup_answer(url=listener.url, url_tls=listener.url))
    error = create_fails(tls_broker.url, tls_files["ca"])
    assert isinstance(error, TlsDowngradeError), repr(error)
    assert listener.accepted == 0


def test_tls_client_follows_the_tls_url(tls_broker: ScriptedBroker, tls_files: dict[str, Path]) -> None:
    """The control: an answer with both URLs is followed, over TLS, to the TLS one."""
    tls_broker.script(T.LOOKUP, lookup_answer(url="pulsar://127.0.0.1:1", url_tls=tls_broker.url))
    client = Client(
        tls_broker.url, tls_trust_certs_file_path=str(tls_files["ca"]), operation_timeout_seconds=10
    )
    try:
        client.create_producer(TOPIC).send(b"over tls")
    finally:
        client.close()
    assert len(tls_broker.frames(T.SEND)) == 1


# -- malformed URLs ---------------------------------------------------------------------------------

BAD_URLS = [
    pytest.param("", id="empty"),
    pytest.param("http://127.0.0.1:6650", id="wrong-scheme"),
    pytest.param("pulsar://", id="no-host"),
    pytest.param("pulsar://127.0.0.1:notaport", id="port-not-a-number"),
    pytest.param("pulsar://127.0.0.1:99999", id="port-out-of-range"),
    pytest.param("pulsar://[::1", id="broken-ipv6"),
    pytest.param("pulsar://127.0.0.1:6650/some/path", id="path"),
]


@pytest.mark.parametrize("url", BAD_URLS)
@pytest.mark.parametrize("redirect", [False, True], ids=["connect", "redirect"])
def test_malformed_broker_url_in_an_answer_is_a_typed_error(
    plain_broker: ScriptedBroker, url: str, redirect: bool
) -> None:
    plain_broker.script(T.LOOKUP, lookup_answer(url=url, redirect=redirect))
    error = create_fails(plain_broker.url)
    assert isinstance(error, InvalidBrokerUrlError) and isinstance(error, BadLookupAnswerError), repr(error)
    assert not isinstance(error, ValueError)
    assert TOPIC in str(error)
    assert len(plain_broker.frames(T.LOOKUP)) == 1, "a malformed answer is not retried"


@pytest.mark.parametrize(
    "url", ["http://h:1", "pulsar://", "pulsar://h:99999", "pulsar://h1:1,,h2:2", "pulsar://h:x"]
)
def test_malformed_service_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(InvalidConfigurationError):
        parse_service_url(url)
