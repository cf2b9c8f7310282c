"""Hostile peers against the broker's web service, and tenants as Pulsar has them (issue 29, sections 3-4).

Every request here is raw HTTP or a raw protocol frame from this process to a broker on 127.0.0.1
(in-process on its own loop thread, or a separate process where a resource limit is the point).
What is checked:

* partition counts are refused as Pulsar refuses them (not a 32-bit int: 400; not above 0 or over
  ``--max-partitions-per-topic``: 406) and creating 2**31-1 partitions is one metadata write: a
  bystander connection is served meanwhile;
* framing: a Content-Length that is not ASCII digits, or two that disagree, is 400 (never a
  dropped connection, a wait, or a traceback); path values read as Java longs are 400 when they
  are not ASCII digits (never a 500); retention values past Pulsar's types are 400;
* a body that is not ``application/json`` is 415, as Pulsar's JAX-RS resources answer;
* a connection that never sends a byte is closed at the connect deadline; the number of HTTP
  connections follows the process's descriptor limit, so a binary client is still served;
* a basic credential over the cap is refused without hashing, and does not stall a bystander;
* tenants have admin roles (``--tenant``, ``PUT/GET/POST /admin/v2/tenants/{t}``) who administrate
  their tenant and nothing else; a missing tenant is TopicNotFound for every role, as Pulsar.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import resource
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pulsar
import pytest

from pulsarwire.broker import Broker, Grants
from pulsarwire.broker.auth import Authentication, TokenAuth
from pulsarwire.broker.htpasswd import MAX_CREDENTIAL_BYTES, BasicAuth, apr1_crypt
from pulsarwire.codec import new_command
from pulsarwire.proto import pb
from tests.helpers.certs import server_certificates
from tests.helpers.hostile import assert_bystander_served, broker_url
from tests.helpers.raw import RawConnection

T = pb.BaseCommand
E = pb.ServerError
SECRET = b"s" * 32


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def request(
    port: int,
    method: str,
    path: str,
    body: Any = None,
    *,
    tok: str | None = None,
    content_type: str | None = "application/json",
) -> tuple[int, Any]:
    """(status, JSON answer or text) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if tok is not None:
        headers["Authorization"] = f"Bearer {tok}"
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    try:
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        text = r.read()
    finally:
        conn.close()
    if r.getheader("Content-Type", "").startswith("application/json") and text:
        return r.status, json.loads(text)
    return r.status, text.decode()


def raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a new connection; what the broker answers until it closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture(scope="module")
def web() -> Iterator[Broker]:
    with Broker(http_port=0, namespaces=("public/default", "big/ns"), connect_timeout=1.0) as b:
        yield b


def port_of(b: Broker) -> int:
    assert b.web is not None
    return b.web.port


# -- bounded work: partition counts -------------------------------------------------------------


def test_partition_counts_are_refused_as_pulsar_refuses_them(web: Broker) -> None:
    port = port_of(web)
    path = "/admin/v2/persistent/public/default/{}/partitions"
    assert request(port, "PUT", path.format("p-too-big"), 2**31)[0] == 400  # not a Java int
    assert request(port, "PUT", path.format("p-huge"), 10**40)[0] == 400
    for n in (0, -1, -(2**31)):
        status, body = request(port, "PUT", path.format("p-nonpositive"), n)
        assert (status, body["reason"].split(" and ")[0]) == (
            406,
            "Number of partitions should be more than 0",
        )
    assert request(port, "PUT", path.format("p-ok"), 3)[0] == 204
    assert request(port, "POST", path.format("p-ok"), 2**31)[0] == 400


def test_two_billion_partitions_are_one_metadata_write_and_a_bystander_is_served(web: Broker) -> None:
    port = port_of(web)
    path = "/admin/v2/persistent/big/ns/huge/partitions"
    assert request(port, "PUT", path, 2**31 - 1)[0] == 204
    assert request(port, "GET", path) == (200, {"partitions": 2**31 - 1, "deleted": False})
    assert_bystander_served(web.service_url)
    # What asks about every partition asks those that hold anything: here one.
    client = pulsar.Client(web.service_url, operation_timeout_seconds=10)
    try:
        client.subscribe("persistent://big/ns/huge-partition-7", "s").close()
    finally:
        client.close()
    subs = "/admin/v2/persistent/big/ns/huge/subscriptions"
    assert request(port, "GET", subs) == (200, ["s"])
    assert request(port, "DELETE", path) == (204, "")
    assert request(port, "GET", path)[0] == 404
    assert_bystander_served(web.service_url)


def test_max_partitions_per_topic() -> None:
    with Broker(http_port=0, max_partitions_per_topic=100) as b:
        path = "/admin/v2/persistent/public/default/capped/partitions"
        status, body = request(port_of(b), "PUT", path, 101)
        assert (status, body["reason"]) == (406, "Number of partitions should be less than or equal to 100")
        assert request(port_of(b), "PUT", path, 100)[0] == 204
        assert request(port_of(b), "POST", path, 101)[0] == 406


# -- framing, path values, media type --------------------------------------------------------------


HEAD = "PUT /admin/v2/persistent/public/default/framing/partitions HTTP/1.1\r\nHost: x\r\n"
JSON = "Content-Type: application/json\r\n"


def test_malformed_or_conflicting_content_length_is_400(
    web: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    port = port_of(web)
    caplog.set_level(logging.ERROR)
    for lengths in (["\xb9"], ["1", "2"], ["+1"], ["1 1"]):
        head = HEAD + JSON + "".join(f"Content-Length: {n}\r\n" for n in lengths) + "\r\n"
        answer = raw(port, head.encode("latin-1") + b"2")
        assert answer.startswith(b"HTTP/1.1 400 "), (lengths, answer[:80])
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert_bystander_served(web.service_url)


def test_path_values_that_are_not_java_longs_are_400_never_500(
    web: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    port = port_of(web)
    caplog.set_level(logging.ERROR)
    assert request(port, "PUT", "/admin/v2/persistent/public/default/paths")[0] == 204
    for value in ("%C2%B9", "%C2%B2%C2%B3", "9" * 19, "1e3", "-"):
        reset = f"/admin/v2/persistent/public/default/paths/subscription/s/resetcursor/{value}"
        assert request(port, "POST", reset)[0] == 400, value
        version = f"/admin/v2/schemas/public/default/paths/schema/{value}"
        assert request(port, "GET", version)[0] == 400, value
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_retention_values_are_bounded_as_pulsars_types(web: Broker) -> None:
    port = port_of(web)
    path = "/admin/v2/namespaces/public/default/retention"
    too_long = {"retentionTimeInMinutes": 2**31, "retentionSizeInMB": 1}  # an int in Pulsar
    assert request(port, "POST", path, too_long)[0] == 400
    too_big = {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2**63}  # a long in Pulsar
    assert request(port, "POST", path, too_big)[0] == 400
    assert (
        request(port, "POST", path, {"retentionTimeInMinutes": 2**31 - 1, "retentionSizeInMB": -1})[0] == 204
    )


def test_a_body_that_is_not_json_is_415(web: Broker) -> None:
    port = port_of(web)
    path = "/admin/v2/persistent/public/default/media/partitions"
    assert request(port, "PUT", path, 2, content_type="text/plain")[0] == 415
    assert request(port, "PUT", path, 2, content_type=None)[0] == 415  # a body without a type
    assert request(port, "PUT", "/admin/v2/tenants/media", b"{}", content_type="application/xml")[0] == 415
    assert request(port, "PUT", path, 2, content_type="application/json; charset=utf-8")[0] == 204


# -- connections ---------------------------------------------------------------------------------


def test_an_http_connection_that_never_sends_a_byte_is_closed_at_the_connect_deadline(web: Broker) -> None:
    # connect_timeout is 1 s and keepalive 30 s: the silent connection must not get the keepalive.
    with socket.create_connection(("127.0.0.1", port_of(web)), timeout=10) as s:
        started = time.monotonic()
        assert s.recv(1) == b""  # closed by the broker, not by our 10 s timeout
        closed_after = time.monotonic() - started
    assert closed_after < 10


def _low_descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))


def test_web_clients_cannot_take_the_descriptors_binary_clients_need(tmp_path: Path) -> None:
    http_port = _free_port()
    args = ("--http-port", str(http_port), "--connect-timeout", "30", "--data-dir", str(tmp_path))
    with broker_url(*args, preexec_fn=_low_descriptor_limit) as url:
        held = []
        try:
            for _ in range(120):  # more than the whole limit
                try:
                    s = socket.create_connection(("127.0.0.1", http_port), timeout=5)
                except OSError:
                    break
                held.append(s)
            refused = sum(1 for s in held if _answer(s).startswith(b"HTTP/1.1 503 "))
            assert refused > 0
            assert_bystander_served(url)  # a binary client still gets a descriptor
            client = pulsar.Client(url, operation_timeout_seconds=10)
            try:
                client.create_producer("fd-cap").send(b"served")
            finally:
                client.close()
        finally:
            for s in held:
                s.close()


def _answer(s: socket.socket) -> bytes:
    s.settimeout(0.2)
    try:
        return s.recv(64)
    except (TimeoutError, ConnectionResetError):
        return b""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- password hashing ---------------------------------------------------------------------------------


def test_a_huge_basic_password_is_refused_unhashed_and_stalls_no_one(tmp_path: Path) -> None:
    basic = BasicAuth({"alice": apr1_crypt(b"right", "saltsalt")})
    auth = Authentication(basic, anonymous_role="anonymous")
    with Broker(auth=auth, grants=Grants.of("anonymous:public/default:produce,consume")) as b:
        conn = RawConnection.to(b.service_url, connect=False)
        try:
            cmd, c = new_command(T.CONNECT)
            c.client_version, c.protocol_version = "tests", 21
            c.auth_method_name, c.auth_data = "basic", b"alice:" + b"x" * (4 * 1024 * 1024)
            conn.send(cmd)
            assert_bystander_served(b.service_url)  # served while that CONNECT is checked
            assert conn.expect(T.ERROR, timeout=10).command.error.error == E.AuthenticationError
        finally:
            conn.close()
        assert MAX_CREDENTIAL_BYTES < 4 * 1024 * 1024
        # A right password still logs in, its hash checked off the loop.
        ok = RawConnection.to(b.service_url, connect=False)
        try:
            cmd, c = new_command(T.CONNECT)
            c.client_version, c.protocol_version = "tests", 21
            c.auth_method_name, c.auth_data = "basic", b"alice:right"
            conn_ping, _ = new_command(T.PING)
            ok.send(cmd)
            ok.send(conn_ping)  # pipelined behind CONNECT: answered after CONNECTED
            ok.expect(T.CONNECTED)
            ok.expect(T.PONG)
        finally:
            ok.close()


# -- tenants and authorization ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured() -> Iterator[Broker]:
    grants = Grants.of("reader:public/default:consume", "wide:*:produce,consume", superusers=["admin"])
    with Broker(
        http_port=0,
        auth=TokenAuth(secret=SECRET),
        grants=grants,
        tenants={"acme": ("alice",)},
        namespaces=("public/default", "acme/app"),
    ) as b:
        yield b


def test_tenant_admins_administrate_their_tenant_and_nothing_else(secured: Broker) -> None:
    port = port_of(secured)
    alice = token("alice")
    assert request(port, "GET", "/admin/v2/tenants/acme", tok=token("admin")) == (
        200,
        {"adminRoles": ["alice"], "allowedClusters": ["standalone"]},
    )
    assert request(port, "PUT", "/admin/v2/namespaces/acme/ops", tok=alice)[0] == 204
    assert request(port, "GET", "/admin/v2/namespaces/acme", tok=alice) == (200, ["acme/app", "acme/ops"])
    assert request(port, "PUT", "/admin/v2/persistent/acme/ops/t/partitions", 2, tok=alice)[0] == 204
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}
    assert request(port, "POST", "/admin/v2/namespaces/acme/ops/retention", retention, tok=alice)[0] == 204
    assert request(port, "DELETE", "/admin/v2/persistent/acme/ops/t/partitions", tok=alice)[0] == 204
    # Not another tenant's, not the tenants themselves.
    assert request(port, "PUT", "/admin/v2/namespaces/public/alice", tok=alice)[0] == 403
    assert request(port, "PUT", "/admin/v2/persistent/public/default/a/partitions", 2, tok=alice)[0] == 403
    assert request(port, "GET", "/admin/v2/tenants", tok=alice)[0] == 403
    assert request(port, "PUT", "/admin/v2/tenants/mine", {"adminRoles": ["alice"]}, tok=alice)[0] == 403
    # A superuser creates a tenant with admins and changes them.
    admin = token("admin")
    assert request(port, "PUT", "/admin/v2/tenants/beta", {"adminRoles": ["bob"]}, tok=admin)[0] == 204
    assert request(port, "PUT", "/admin/v2/namespaces/beta/ns", tok=token("bob"))[0] == 204
    assert request(port, "POST", "/admin/v2/tenants/beta", {"adminRoles": ["carol"]}, tok=admin)[0] == 204
    assert request(port, "PUT", "/admin/v2/namespaces/beta/ns2", tok=token("bob"))[0] == 403
    assert request(port, "GET", "/admin/v2/tenants/beta", tok=admin)[1]["adminRoles"] == ["carol"]
    assert request(port, "POST", "/admin/v2/tenants/nobody", {"adminRoles": []}, tok=admin)[0] == 404


def test_a_tenant_admin_produces_and_consumes_in_its_tenant(secured: Broker) -> None:
    client = pulsar.Client(
        secured.service_url,
        authentication=pulsar.AuthenticationToken(token("alice")),
        operation_timeout_seconds=10,
    )
    try:
        topic = "persistent://acme/app/own"
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"mine")
        assert consumer.receive(5000).data() == b"mine"
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://public/default/not-mine")
    finally:
        client.close()


def _ask(conn: RawConnection, cmd: pb.BaseCommand, answer: int) -> int:
    conn.send(cmd)
    frame = conn.expect(answer)
    c = frame.command
    if answer == T.ERROR:
        return int(c.error.error)
    sub = c.partitionMetadataResponse if answer == T.PARTITIONED_METADATA_RESPONSE else c.lookupTopicResponse
    return int(sub.error)


@pytest.mark.parametrize("role", ["reader", "wide", "nobody-granted"])
def test_a_missing_tenant_or_namespace_is_topic_not_found_as_pulsar(secured: Broker, role: str) -> None:
    conn = RawConnection.to(secured.service_url, token=token(role))
    try:
        for i, topic in enumerate(["persistent://no-tenant/ns/t", "persistent://acme/no-ns/t"]):
            wide = role == "wide"  # granted on every namespace: also learns a namespace is missing
            expected = E.TopicNotFound if i == 0 or wide else E.AuthorizationError
            cmd, r = new_command(T.PARTITIONED_METADATA)
            r.topic, r.request_id = topic, 10 + i
            assert _ask(conn, cmd, T.PARTITIONED_METADATA_RESPONSE) == expected, (topic, "metadata")
            cmd, r = new_command(T.LOOKUP)
            r.topic, r.request_id = topic, 20 + i
            assert _ask(conn, cmd, T.LOOKUP_RESPONSE) == expected, (topic, "lookup")
            cmd, r = new_command(T.PRODUCER)
            r.topic, r.producer_id, r.request_id = topic, i, 30 + i
            assert _ask(conn, cmd, T.ERROR) == expected, (topic, "producer")
            cmd, r = new_command(T.SUBSCRIBE)
            r.topic, r.subscription, r.consumer_id, r.request_id = topic, "s", i, 40 + i
            r.subType = pb.CommandSubscribe.Exclusive
            assert _ask(conn, cmd, T.ERROR) == expected, (topic, "subscribe")
    finally:
        conn.close()


def test_tenant_flag_and_admin_roles_survive_a_restart(tmp_path: Path) -> None:
    with Broker(
        http_port=0,
        data_dir=tmp_path,
        auth=TokenAuth(secret=SECRET),
        grants=Grants(superusers=frozenset({"admin"})),
    ) as b:
        assert (
            request(port_of(b), "PUT", "/admin/v2/tenants/kept", {"adminRoles": ["kim"]}, tok=token("admin"))[
                0
            ]
            == 204
        )
    with Broker(
        http_port=0,
        data_dir=tmp_path,
        auth=TokenAuth(secret=SECRET),
        grants=Grants(superusers=frozenset({"admin"})),
    ) as b:
        assert request(port_of(b), "GET", "/admin/v2/tenants/kept", tok=token("admin"))[1]["adminRoles"] == [
            "kim"
        ]
        assert request(port_of(b), "PUT", "/admin/v2/namespaces/kept/ns", tok=token("kim"))[0] == 204


# -- HTTPS ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return server_certificates(tmp_path_factory.mktemp("https"))


def test_https_serves_the_admin_api_and_lookups_answer_http_url_tls(tls_files: dict[str, Path]) -> None:
    tls = {"tls_port": 0, "tls_cert_file": tls_files["cert"], "tls_key_file": tls_files["key"]}
    with Broker(http_port=0, https_port=0, **tls) as b:
        assert b.http_url_tls is not None and b.http_url_tls.startswith("https://")
        context = ssl.create_default_context(cafile=str(tls_files["ca"]))
        host, port = b.http_url_tls.removeprefix("https://").rsplit(":", 1)
        conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
        try:
            conn.request("GET", "/lookup/v2/topic/persistent/public/default/tls-lookup")
            answer = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        assert answer["httpUrlTls"] == b.http_url_tls
        assert answer["brokerUrlTls"] == b.service_url_tls
        # The plain listener's lookups name the HTTPS one too.
        assert request(port_of(b), "GET", "/lookup/v2/topic/persistent/public/default/t")[1][
            "httpUrlTls"
        ] == (b.http_url_tls)
        # Something that is not TLS on the HTTPS port is cut, never served in clear.
        assert not raw(int(port), b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
            b"HTTP/1.1 200"
        )
        client = pulsar.Client(
            b.http_url_tls, tls_trust_certs_file_path=str(tls_files["ca"]), operation_timeout_seconds=10
        )
        try:
            client.create_producer("over-https").send(b"ok")
        finally:
            client.close()


def test_authentication_with_only_plain_http_is_one_warning(
    tls_files: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pulsarwire.broker")
    auth = TokenAuth(secret=SECRET)
    with Broker(http_port=0, auth=auth, grants=Grants(superusers=frozenset({"admin"}))):
        pass
    plain = [r for r in caplog.records if "plain HTTP only" in r.getMessage()]
    assert len(plain) == 1 and plain[0].levelno == logging.WARNING
    assert "--https-port" in plain[0].getMessage()
    caplog.clear()
    tls = {"tls_cert_file": tls_files["cert"], "tls_key_file": tls_files["key"]}
    with Broker(http_port=0, https_port=0, auth=auth, grants=Grants(superusers=frozenset({"admin"})), **tls):
        pass
    assert not [r for r in caplog.records if "plain HTTP only" in r.getMessage()]


# -- the command line ------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsarwire.broker", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--tenant", "bad name:alice"], "is not a tenant name"),
        (["--https-port", "0"], "need --tls-cert and --tls-key"),
        (["--max-partitions-per-topic", "-1"], "0 (no limit) or positive"),
        (["--max-partitions-per-topic", "4", "--partitioned-topic", "t=5"], "less than or equal to 4"),
        (["--partitioned-topic", f"t={2**31}"], "32-bit integer"),
        (["--max-partitions-per-topic", "4", "--default-partitions", "8"], "less than or equal to 4"),
    ],
    ids=["bad-tenant", "https-without-cert", "negative-max", "over-max", "past-int32", "default-over-max"],
)
def test_cli_mistakes_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = _cli(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_tenant_flag_gives_its_admins_their_tenant() -> None:
    http_port = _free_port()
    args = ["--http-port", str(http_port), "--auth-token-secret", base64.b64encode(SECRET).decode()]
    with broker_url(*args, "--tenant", "acme:alice,bob", "--superuser", "admin"):
        assert request(http_port, "PUT", "/admin/v2/namespaces/acme/ns", tok=token("bob"))[0] == 204
        assert request(http_port, "GET", "/admin/v2/tenants/acme", tok=token("admin"))[1]["adminRoles"] == [
            "alice",
            "bob",
        ]
        assert request(http_port, "PUT", "/admin/v2/namespaces/public/ns", tok=token("bob"))[0] == 403


def test_expect_100_continue_is_answered(web: Broker) -> None:
    body = b"2"
    head = HEAD + JSON + f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port_of(web)), timeout=5) as s:
        s.sendall(head.replace("framing", "continued").encode())
        assert s.recv(64).startswith(b"HTTP/1.1 100 ")  # asked for the body before it is sent
        s.sendall(body)
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 204 "), answer
