"""OAuth2 against a hostile issuer on 127.0.0.1 (issue 29, section 2).

The issuer is :class:`~tests.helpers.hostile_http.HostileHttp`: discovery and token answers as
each test scripts them. One deadline holds for a whole token exchange however slowly the issuer
trickles its answer, and the client's operation timeout bounds what a slow issuer can hold; the
client secret never goes out in cleartext; ``expires_in`` is a finite positive number; every
malformed answer is an OAuth2Error.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import jwt
import pytest

from pulsarwire.broker import Broker, Grants, TokenAuth
from pulsarwire.client.blocking import Client
from pulsarwire.client.oauth2 import AuthenticationOauth2
from pulsarwire.errors import InsecureIssuerError, IssuerUnreachableError, OAuth2Error, PulsarWireError
from tests.helpers.hostile_http import HostileHttp, Request, answer, redirect
from tests.helpers.judge import new_topic
from tests.helpers.oauth2_issuer import LocalIssuer

SECRET = "the-oauth2-client-secret"
KEY = b"0123456789abcdef0123456789abcdef"
DISCOVERY = "/.well-known/openid-configuration"
Token = Callable[[Request], Iterable[bytes | float]]


@pytest.fixture
def servers() -> Iterator[list[HostileHttp]]:
    made: list[HostileHttp] = []
    yield made
    for s in made:
        s.stop()


def issuer(
    servers: list[HostileHttp],
    token: Token,
    *,
    tls_cert: Path | None = None,
    token_endpoint: str | None = None,
    discovery: Token | None = None,
) -> HostileHttp:
    """An issuer whose discovery names ``token_endpoint`` (default: its own /token) and whose
    token endpoint answers with ``token``."""
    me: list[HostileHttp] = []

    def respond(r: Request) -> Iterable[bytes | float]:
        if r.target == DISCOVERY:
            if discovery is not None:
                return discovery(r)
            return answer(
                200, {"issuer": me[0].url, "token_endpoint": token_endpoint or me[0].url + "/token"}
            )
        return token(r)

    me.append(HostileHttp(respond, tls_cert=tls_cert))
    servers.append(me[0])
    return me[0]


def recorder(servers: list[HostileHttp]) -> HostileHttp:
    """Where a secret must never arrive: records connections, answers a token anyway."""
    server = HostileHttp(lambda r: answer(200, {"access_token": "stolen", "expires_in": 60}))
    servers.append(server)
    return server


def oauth2(url: str, tls_files: dict[str, Path] | None = None, **kw: object) -> AuthenticationOauth2:
    context = ssl.create_default_context(cafile=str(tls_files["ca"])) if tls_files else None
    return AuthenticationOauth2(
        issuer_url=url,
        private_key=LocalIssuer.data_url("alice", SECRET),
        retry_delay=0.05,
        ssl_context=context,
        **kw,  # type: ignore[arg-type]
    )


def trickled(body: bytes, pause: float = 0.25) -> Token:
    """A token answer whose head comes at once and whose body one byte per ``pause`` seconds."""

    def respond(r: Request) -> Iterable[bytes | float]:
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        for i in range(len(body)):
            yield pause
            yield body[i : i + 1]

    return respond


def alice_token() -> bytes:
    token = jwt.encode({"sub": "alice"}, KEY, algorithm="HS256")
    return b'{"access_token": "%s", "expires_in": 600}' % token.encode()


# -- one deadline ---------------------------------------------------------------------------------------
def test_one_deadline_for_a_whole_token_exchange(servers: list[HostileHttp]) -> None:
    """Each read gets a byte well within http_timeout; the exchange as a whole does not finish in it."""
    slow = issuer(servers, trickled(alice_token()))
    auth = oauth2(slow.url, http_timeout=1.0, retries=0)
    with pytest.raises(IssuerUnreachableError, match="no complete answer in time") as info:
        auth.auth_data()
    assert slow.url in str(info.value) and SECRET not in str(info.value)


@pytest.mark.parametrize("service", ["binary", "http"])
def test_a_slow_issuer_does_not_hold_creation_past_the_operation_timeout(
    start_broker: Callable[..., Broker], servers: list[HostileHttp], service: str
) -> None:
    """The issuer trickles a valid token for longer than the default http_timeout (10 s); the
    client's 2 s operation timeout ends create_producer (through the connection pool, or the HTTP
    lookup's credential) with the typed error."""
    b = start_broker(http_port=0, auth=TokenAuth(KEY), grants=Grants.of("alice:public/default:produce"))
    slow = issuer(servers, trickled(alice_token(), pause=0.3))
    url = b.service_url if service == "binary" else b.http_url
    assert url is not None
    client = Client(url, authentication=oauth2(slow.url), operation_timeout_seconds=2)
    try:
        with pytest.raises(IssuerUnreachableError):
            client.create_producer(new_topic())
    finally:
        client.close()


# -- no secret in cleartext -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["http://issuer.example.com", "http://10.1.2.3:8080", "http://[2001:db8::1]/"]
)
def test_an_http_issuer_that_is_not_loopback_is_refused_unless_opted_in(url: str) -> None:
    with pytest.raises(InsecureIssuerError, match="allow_insecure_issuer"):
        oauth2(url)
    assert oauth2(url, allow_insecure_issuer=True).issuer_url == url.rstrip("/")


def test_an_https_issuer_whose_discovery_names_an_http_token_endpoint_is_refused(
    servers: list[HostileHttp], tls_files: dict[str, Path]
) -> None:
    thief = recorder(servers)
    tls = issuer(servers, lambda r: [], tls_cert=tls_files["cert"], token_endpoint=thief.url + "/token")
    with pytest.raises(InsecureIssuerError, match="cleartext http") as info:
        oauth2(tls.url, tls_files).auth_data()
    assert thief.connections == 0
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("where", "status"), [("discovery", 302), ("token", 302), ("token", 307), ("token", 308)]
)
def test_an_https_issuer_redirecting_to_http_is_refused(
    servers: list[HostileHttp], tls_files: dict[str, Path], where: str, status: int
) -> None:
    thief = recorder(servers)
    to_thief: Token = lambda r: redirect(status, thief.url + r.target)  # noqa: E731
    if where == "discovery":
        tls = issuer(servers, lambda r: [], tls_cert=tls_files["cert"], discovery=to_thief)
    else:
        tls = issuer(servers, to_thief, tls_cert=tls_files["cert"])
    with pytest.raises(InsecureIssuerError, match="cleartext http"):
        oauth2(tls.url, tls_files).auth_data()
    assert thief.connections == 0


def test_the_token_request_is_not_redirected_to_another_origin(
    servers: list[HostileHttp], tls_files: dict[str, Path]
) -> None:
    other = HostileHttp(
        lambda r: answer(200, {"access_token": "t", "expires_in": 60}), tls_cert=tls_files["cert"]
    )
    servers.append(other)
    tls = issuer(servers, lambda r: redirect(307, other.url + "/token"), tls_cert=tls_files["cert"])
    with pytest.raises(InsecureIssuerError, match="another origin"):
        oauth2(tls.url, tls_files).auth_data()
    assert other.connections == 0


# -- hostile answers ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "expires_in",
    [b"Infinity", b"NaN", b"1e400", b"1" + b"0" * 400],
    ids=lambda v: v[:12].decode(),
)
def test_expires_in_must_be_a_finite_positive_number(servers: list[HostileHttp], expires_in: bytes) -> None:
    body = b'{"access_token": "t", "expires_in": ' + expires_in + b"}"
    bad = issuer(servers, lambda r: answer(200, body))
    with pytest.raises(OAuth2Error, match=r"expires_in|not JSON"):
        oauth2(bad.url).auth_data()


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 abc OK\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    ],
    ids=lambda r: repr(r[:30]),
)
def test_malformed_issuer_answers_are_oauth2_errors(servers: list[HostileHttp], raw: bytes) -> None:
    bad = issuer(servers, lambda r: [raw])
    with pytest.raises(PulsarWireError) as info:
        oauth2(bad.url, retries=0).auth_data()
    assert isinstance(info.value, OAuth2Error), repr(info.value)
