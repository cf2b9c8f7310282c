"""The client's HTTP lookup against a hostile web service on 127.0.0.1 (issue 29, section 1).

The web service is :class:`~tests.helpers.hostile_http.HostileHttp`: raw answers, recorded
requests and connections. Redirects never carry the credential to another origin nor go from
https to http or to another scheme; an https service URL uses only a ``pulsar+ssl://``
``brokerUrlTls``; chunked and close-delimited answers are read; every malformed answer is a
typed error of the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.auth import AuthenticationToken
from pulsarwire.client.blocking import Client
from pulsarwire.client.http_lookup import HttpLookup
from pulsarwire.errors import (
    MalformedLookupAnswerError,
    PulsarWireError,
    TlsDowngradeError,
    UnsafeRedirectError,
)
from tests.helpers.hostile_http import HostileHttp, Request, answer, redirect
from tests.helpers.judge import new_topic

TOKEN = "the-clients-bearer-token"
TOPIC = "persistent://public/default/t"
PARTITIONS = "/admin/v2/persistent/public/default/t/partitions?checkAllowAutoCreation=true"
LOOKUP = "/lookup/v2/topic/persistent/public/default/t"


@pytest.fixture
def servers() -> Iterator[list[HostileHttp]]:
    made: list[HostileHttp] = []
    yield made
    for s in made:
        s.stop()


def serve(servers: list[HostileHttp], respond: object, tls_cert: Path | None = None) -> HostileHttp:
    server = HostileHttp(respond, tls_cert=tls_cert)  # type: ignore[arg-type]
    servers.append(server)
    return server


def client(url: str, tls_files: dict[str, Path] | None = None) -> Client:
    return Client(
        url,
        authentication=AuthenticationToken(TOKEN),
        operation_timeout_seconds=3,
        tls_trust_certs_file_path=str(tls_files["ca"]) if tls_files else None,
    )


def partitions_of(url: str, tls_files: dict[str, Path] | None = None) -> int:
    c = client(url, tls_files)
    try:
        return len(c.get_topic_partitions(TOPIC))
    finally:
        c.close()


@pytest.mark.parametrize("same_origin", [True, False])
def test_the_credential_never_follows_a_redirect_to_another_origin(
    servers: list[HostileHttp], same_origin: bool
) -> None:
    other = serve(servers, lambda r: answer(200, {"partitions": 3}))

    def first(r: Request) -> Iterable[bytes]:
        if r.target.startswith("/moved"):
            return answer(200, {"partitions": 3})
        return redirect(307, "/moved" + r.target if same_origin else other.url + r.target)

    origin = serve(servers, first)
    assert partitions_of(origin.url) == 3
    assert origin.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
    if same_origin:
        assert origin.requests[1].headers["authorization"] == f"Bearer {TOKEN}"
    else:
        assert len(other.requests) == 1 and "authorization" not in other.requests[0].headers
        assert TOKEN.encode() not in other.requests[0].raw


def test_https_lookup_is_never_redirected_to_cleartext_http(
    servers: list[HostileHttp], tls_files: dict[str, Path]
) -> None:
    cleartext = serve(servers, lambda r: answer(200, {"partitions": 3}))
    origin = serve(servers, lambda r: redirect(302, cleartext.url + r.target), tls_cert=tls_files["cert"])
    with pytest.raises(UnsafeRedirectError, match="cleartext http"):
        partitions_of(origin.url, tls_files)
    assert len(origin.requests) == 1  # not retried: the same answer would come again
    assert cleartext.connections == 0


@pytest.mark.parametrize("scheme", ["ftp", "file", "gopher"])
def test_a_redirect_to_another_scheme_is_not_followed(servers: list[HostileHttp], scheme: str) -> None:
    target = serve(servers, lambda r: answer(200, {"partitions": 3}))
    origin = serve(servers, lambda r: redirect(301, f"{scheme}://127.0.0.1:{target.port}/x"))
    with pytest.raises(UnsafeRedirectError, match="only http"):
        partitions_of(origin.url)
    assert target.connections == 0


@pytest.mark.parametrize("tls_field", ["absent", "empty", "plaintext"])
def test_https_lookup_uses_only_a_pulsar_ssl_broker_url(
    servers: list[HostileHttp], tls_files: dict[str, Path], tls_field: str
) -> None:
    broker = serve(servers, lambda r: [])  # where a client that downgrades would connect
    plain = f"pulsar://127.0.0.1:{broker.port}"
    body: dict[str, str] = {"brokerUrl": plain, "httpUrl": "http://127.0.0.1:1"}
    if tls_field == "empty":
        body["brokerUrlTls"] = ""
    elif tls_field == "plaintext":
        body["brokerUrlTls"] = plain

    def web(r: Request) -> Iterable[bytes]:
        return answer(200, {"partitions": 0} if "/partitions" in r.target else body)

    service = serve(servers, web, tls_cert=tls_files["cert"])
    c = client(service.url, tls_files)
    try:
        with pytest.raises(TlsDowngradeError, match="refusing to connect in clear"):
            c.create_producer(TOPIC)
    finally:
        c.close()
    assert broker.connections == 0
    assert [r.target for r in service.requests] == [PARTITIONS, LOOKUP]


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_chunked_and_close_delimited_answers_are_read(servers: list[HostileHttp], framing: str) -> None:
    names = [f"persistent://public/default/topic-with-a-long-name-{i:05d}" for i in range(3000)]

    def web(r: Request) -> Iterable[bytes | float]:
        doc: object = names if "/topics" in r.target else {"partitions": 4}
        raw = b"".join(answer(200, doc, framing=framing))
        # a pause in the middle: the answer arrives in several reads, as from a real server
        return [raw[: len(raw) // 2], 0.1, raw[len(raw) // 2 :]]

    service = serve(servers, web)
    assert partitions_of(service.url) == 4
    lookup = HttpLookup(service.url, timeout=5)
    assert asyncio.run(lookup.topics_of_namespace("public/default")) == names


HOSTILE_BODIES = [
    b'{"partitions": "3"}',
    b'{"partitions": [3]}',
    b'{"partitions": 2.5}',
    b'{"partitions": true}',
    b'{"partitions": -1}',
    b'{"partitions": 1e400}',
    b'{"partitions": NaN}',
    b'{"partitions": Infinity}',
    b'{"partitions": 99999999999999999999999}',
    b'{"partitions": ' + b"9" * 5000 + b"}",
    b"[3]",
    b'"three"',
    b"\xff\xfe not utf-8",
    b"[" * 100_000 + b"]" * 100_000,
]


@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=lambda b: repr(b[:24]))
def test_hostile_partition_answers_are_typed_errors(servers: list[HostileHttp], body: bytes) -> None:
    service = serve(servers, lambda r: answer(200, body))
    with pytest.raises(MalformedLookupAnswerError):
        partitions_of(service.url)
    assert len(service.requests) == 1  # not retried


@pytest.mark.parametrize(
    "body",
    [
        {"brokerUrl": 6650},
        {"brokerUrl": ["pulsar://127.0.0.1:6650"]},
        {"brokerUrl": None, "brokerUrlTls": {"url": "x"}},
        ["pulsar://127.0.0.1:6650"],
    ],
    ids=str,
)
def test_hostile_lookup_answers_are_typed_errors(servers: list[HostileHttp], body: object) -> None:
    def web(r: Request) -> Iterable[bytes]:
        return answer(200, {"partitions": 0} if "/partitions" in r.target else body)

    service = serve(servers, web)
    c = client(service.url)
    try:
        with pytest.raises(MalformedLookupAnswerError):
            c.create_producer(TOPIC)
    finally:
        c.close()


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 20_000 + b"Content-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 abc OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999999\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n{}",
        b"\x16\x03\x01 not http at all\r\n\r\n",
    ],
    ids=lambda r: repr(r[:30]),
)
def test_malformed_http_answers_are_typed_errors(servers: list[HostileHttp], raw: bytes) -> None:
    service = serve(servers, lambda r: [raw])
    with pytest.raises(PulsarWireError) as info:
        partitions_of(service.url)
    assert isinstance(info.value, MalformedLookupAnswerError), repr(info.value)


def test_https_lookup_follows_a_pulsar_ssl_broker_url(
    start_broker: Callable[..., Broker], servers: list[HostileHttp], tls_files: dict[str, Path]
) -> None:
    """The control of the refusals above: an https web service answering a pulsar+ssl://
    brokerUrlTls sends the client over TLS to the broker, and it produces and consumes."""
    b = start_broker(tls_port=0, tls_cert_file=tls_files["cert"], tls_key_file=tls_files["cert"])
    body = {"brokerUrl": b.service_url, "brokerUrlTls": f"pulsar+ssl://localhost:{b.tls_port}"}

    def web(r: Request) -> Iterable[bytes]:
        return answer(200, {"partitions": 0} if "/partitions" in r.target else body)

    service = serve(servers, web, tls_cert=tls_files["cert"])
    c = client(service.url, tls_files)
    try:
        topic = new_topic("https-lookup")
        consumer = c.subscribe(topic, "s")
        c.create_producer(topic).send(b"over tls")
        assert consumer.receive(5000).data() == b"over tls"
    finally:
        c.close()
