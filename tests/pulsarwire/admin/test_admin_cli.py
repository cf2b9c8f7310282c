"""``pulsarwire-admin`` (issue 29, section 5): pulsar-admin's everyday verbs as a subprocess.

Each test runs ``python -m pulsarwire.admin`` in its own process against a broker with token
authentication (a superuser ``admin``) and checks the exit code, stdout and stderr; the official
client (``pulsar-client``) judges the effect of what the command changed: where a consumer
resumes after ``reset-cursor`` or ``create-subscription``, whether a role may produce after
``grant-permission``.
"""

from __future__ import annotations

import importlib.metadata
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pulsar
import pytest

from pulsarwire.broker import Broker, Grants
from pulsarwire.broker.auth import TokenAuth
from tests.helpers.certs import server_certificates
from tests.helpers.cli import ROOT, Ran, command_env, no_trace, pulsarwire_admin
from tests.helpers.judge import new_topic, receive_n

SECRET = b"a" * 32
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(http_port=0, auth=TokenAuth(secret=SECRET), grants=Grants.of(superusers=["admin"])) as b:
        yield b


def admin(b: Broker, *args: str, role: str = "admin") -> Ran:
    assert b.http_url is not None
    return pulsarwire_admin(
        "--admin-url",
        b.http_url,
        "--auth-plugin",
        TOKEN_PLUGIN,
        "--auth-params",
        f"token:{token(role)}",
        *args,
    )


def ok(ran: Ran) -> Ran:
    assert ran.code == 0, ran.err
    assert ran.err == ""
    return ran


def client_as(b: Broker, role: str) -> pulsar.Client:
    return pulsar.Client(
        b.service_url,
        authentication=pulsar.AuthenticationToken(token(role)),
        operation_timeout_seconds=5,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def can_produce(b: Broker, role: str, topic: str) -> bool:
    c = client_as(b, role)
    try:
        c.create_producer(topic).send(b"x")
        return True
    except pulsar.PulsarException:
        return False
    finally:
        c.close()


def test_tenants_namespaces_topics_lifecycle(broker: Broker) -> None:
    assert ok(admin(broker, "tenants", "create", "shop", "-r", "alice,bob")).out == ""
    assert {"public", "shop"} <= set(ok(admin(broker, "tenants", "list")).out_lines)
    info = json.loads(ok(admin(broker, "tenants", "get", "shop")).out)
    assert info["adminRoles"] == ["alice", "bob"]
    ok(admin(broker, "namespaces", "create", "shop/orders"))
    assert ok(admin(broker, "namespaces", "list", "shop")).out_lines == ["shop/orders"]
    events = "persistent://shop/orders/events"
    ok(admin(broker, "topics", "create-partitioned-topic", events, "-p", "2"))
    ok(admin(broker, "topics", "create", "persistent://shop/orders/audit"))
    assert ok(admin(broker, "topics", "list-partitioned-topics", "shop/orders")).out_lines == [events]
    assert ok(admin(broker, "topics", "list", "shop/orders")).out_lines == [
        "persistent://shop/orders/audit",
        f"{events}-partition-0",
        f"{events}-partition-1",
    ]
    stats = json.loads(ok(admin(broker, "topics", "partitioned-stats", events, "--per-partition")).out)
    assert stats["metadata"]["partitions"] == 2 and len(stats["partitions"]) == 2
    assert json.loads(ok(admin(broker, "topics", "get-partitioned-topic-metadata", events)).out) == {
        "partitions": 2,
        "deleted": False,
    }
    # Deleting in the wrong order fails as Pulsar does, naming the call and Pulsar's reason.
    refused = admin(broker, "tenants", "delete", "shop")
    assert refused.code == 1 and refused.out == ""
    reason = "409 The tenant still has active namespaces"
    assert refused.err_lines == [
        f"pulsarwire-admin: DELETE {broker.http_url}/admin/v2/tenants/shop: {reason}"
    ]
    ok(admin(broker, "topics", "delete-partitioned-topic", events))
    forced = admin(broker, "namespaces", "delete", "shop/orders", "-f")  # refused, as Pulsar by default
    assert forced.code == 1 and "405 Broker doesn't allow forced deletion of namespaces" in forced.err
    ok(admin(broker, "topics", "delete", "persistent://shop/orders/audit"))
    ok(admin(broker, "namespaces", "delete", "shop/orders"))
    ok(admin(broker, "tenants", "delete", "shop"))
    assert "shop" not in ok(admin(broker, "tenants", "list")).out_lines


def test_peek_and_reset_cursor_as_the_official_consumer_sees_them(broker: Broker) -> None:
    topic = new_topic("cli-cursor")
    c = client_as(broker, "admin")
    try:
        producer = c.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode(), properties={"n": str(i)}) for i in range(5)]
        consumer = c.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        for m in receive_n(consumer, 5):
            consumer.acknowledge(m)
        consumer.close()  # closing flushes the acks

        assert ok(admin(broker, "topics", "peek-messages", topic, "-s", "sub")).out == ""  # all acknowledged
        m2 = f"{ids[2].ledger_id()}:{ids[2].entry_id()}"
        ok(admin(broker, "topics", "reset-cursor", topic, "-s", "sub", "-m", m2))
        peeked = ok(admin(broker, "topics", "peek-messages", topic, "--subscription", "sub", "--count", "2"))
        lines = peeked.out_lines
        assert [line for line in lines if line.startswith("Message ID: ")] == [
            f"Message ID: {m2}",
            f"Message ID: {ids[3].ledger_id()}:{ids[3].entry_id()}",
        ]
        assert (
            '  "n" : "2"' in lines
            and "|00000000| 6d 32                                           |m2              |" in lines
        )
        assert "-" * 73 in lines  # pulsar-admin's separator between messages
        consumer = c.subscribe(topic, "sub")
        assert [m.data() for m in receive_n(consumer, 3)] == [b"m2", b"m3", b"m4"]
        consumer.close()

        ok(admin(broker, "topics", "reset-cursor", topic, "-s", "sub", "-t", "1h"))  # back an hour: all
        consumer = c.subscribe(topic, "sub")
        assert receive_n(consumer, 1)[0].data() == b"m0"
        consumer.close()

        ok(admin(broker, "topics", "create-subscription", topic, "-s", "fresh", "-m", "earliest"))
        consumer = c.subscribe(topic, "fresh", initial_position=pulsar.InitialPosition.Latest)
        assert receive_n(consumer, 1)[0].data() == b"m0"
        consumer.close()
        assert ok(admin(broker, "topics", "subscriptions", topic)).out_lines == ["fresh", "sub"]
        last = json.loads(ok(admin(broker, "topics", "last-message-id", topic)).out)
        assert (last["ledgerId"], last["entryId"]) == (ids[4].ledger_id(), ids[4].entry_id())
        examined = ok(
            admin(broker, "topics", "examine-message", topic, "-i", "earliest", "-m", "2")
        ).out_lines
        assert examined[0] == f"Message ID: {ids[1].ledger_id()}:{ids[1].entry_id()}"
        ok(admin(broker, "topics", "unload", topic))
        producer.send(b"after unload")  # the official producer came back
    finally:
        c.close()


def test_grant_permission_is_what_the_official_client_may_then_do(broker: Broker, tmp_path: Path) -> None:
    topic = new_topic("cli-perm")
    assert not can_produce(broker, "carol", topic)
    ok(
        admin(
            broker,
            "namespaces",
            "grant-permission",
            "public/default",
            "--role",
            "carol",
            "--actions",
            "produce",
        )
    )
    assert json.loads(ok(admin(broker, "namespaces", "permissions", "public/default")).out) == {
        "carol": ["produce"]
    }
    assert can_produce(broker, "carol", topic)
    ok(admin(broker, "namespaces", "revoke-permission", "public/default", "--role", "carol"))
    assert not can_produce(broker, "carol", topic)
    # A topic's grant, with the superuser's token read from a file (file:...), as pulsar-admin reads it.
    token_file = tmp_path / "admin.jwt"
    token_file.write_text(token("admin") + "\n")
    assert broker.http_url is not None
    ran = pulsarwire_admin(
        "--admin-url", broker.http_url, "--auth-plugin", TOKEN_PLUGIN, "--auth-params", f"file:{token_file}",
        "topics", "grant-permission", topic, "--role", "dan", "--actions", "produce,consume",
    )  # fmt: skip
    ok(ran)
    assert can_produce(broker, "dan", topic) and not can_produce(broker, "dan", new_topic("cli-perm"))
    # A role without the right gets a 403 line saying what to do.
    refused = admin(
        broker,
        "namespaces",
        "grant-permission",
        "public/default",
        "--role",
        "x",
        "--actions",
        "produce",
        role="carol",
    )
    assert refused.code == 1 and len(refused.err_lines) == 1
    assert "403" in refused.err and "permission" in refused.err


def test_https_admin_url_with_the_tls_options(tmp_path: Path) -> None:
    files = server_certificates(tmp_path)
    tls = {"tls_port": 0, "tls_cert_file": files["cert"], "tls_key_file": files["key"]}
    with Broker(https_port=0, **tls) as b:
        assert b.http_url_tls is not None and b.http_url_tls.startswith("https://")
        trusted = pulsarwire_admin(
            "--admin-url", b.http_url_tls, "--tls-trust-cert-path", str(files["ca"]), "tenants", "list"
        )
        assert ok(trusted).out_lines == ["public"]
        untrusted = pulsarwire_admin("--admin-url", b.http_url_tls, "tenants", "list")
        assert untrusted.code == 1 and len(untrusted.err_lines) == 1
        assert b.http_url_tls in untrusted.err and "--tls-trust-cert-path" in untrusted.err
        insecure = pulsarwire_admin("--admin-url", b.http_url_tls, "--tls-allow-insecure", "tenants", "list")
        assert ok(insecure).out_lines == ["public"]


def test_a_client_conf_as_first_argument(broker: Broker, tmp_path: Path) -> None:
    conf = tmp_path / "client.conf"
    conf.write_text(
        f"# as pulsar-admin reads conf/client.conf\nwebServiceUrl={broker.http_url}\n"
        f"authPlugin={TOKEN_PLUGIN}\nauthParams=token:{token('admin')}\n"
    )
    assert "public" in ok(pulsarwire_admin(str(conf), "tenants", "list")).out_lines


def test_failures_are_one_line_with_what_where_and_why(broker: Broker) -> None:
    missing = new_topic("cli-missing")
    ran = admin(broker, "topics", "stats", missing)
    assert ran.code == 1 and ran.out == ""
    path = missing.replace("://", "/")
    assert ran.err_lines == [
        f"pulsarwire-admin: GET {broker.http_url}/admin/v2/{path}/stats: 404 Topic {missing} not found"
    ]
    # A wrong credential: 401, and the credential is never printed.
    assert broker.http_url is not None
    bad = pulsarwire_admin(
        "--admin-url", broker.http_url, "--auth-plugin", TOKEN_PLUGIN, "--auth-params", "token:s3cr3t-t0ken",
        "tenants", "list",
    )  # fmt: skip
    assert bad.code == 1 and len(bad.err_lines) == 1 and "401" in bad.err and "--auth-params" in bad.err
    assert "s3cr3t" not in bad.err + bad.out
    # User info in the URL is not printed either.
    host = broker.http_url.removeprefix("http://")
    leaked = pulsarwire_admin("--admin-url", f"http://user:pa55word@{host}", "tenants", "list")
    assert leaked.code == 1 and "pa55word" not in leaked.err + leaked.out
    # peek-messages on a topic that does not exist fails (pulsar-admin would print nothing).
    peek = admin(broker, "topics", "peek-messages", missing, "-s", "s")
    assert peek.code == 1 and peek.out == "" and peek.err_lines[0].endswith(f"404 Topic {missing} not found")
    # -v: the same line after the traceback.
    verbose = admin(broker, "-v", "topics", "stats", missing)
    assert verbose.code == 1 and "Traceback" in verbose.err and verbose.err_lines[-1] == ran.err_lines[0]
    assert no_trace(ran.err)
    # Nothing listening: one line naming the URL and what to check.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = pulsarwire_admin("--admin-url", f"http://127.0.0.1:{port}", "tenants", "list")
    assert down.code == 1 and len(down.err_lines) == 1
    assert f"http://127.0.0.1:{port}/admin/v2/tenants" in down.err and "--admin-url" in down.err
    # Bad arguments: argparse's usage error (2), or one line naming the value.
    assert admin(broker, "topics", "peek-messages", missing).code == 2  # -s/--subscription is required
    bad_id = admin(broker, "topics", "reset-cursor", missing, "-s", "x", "-m", "one:two")
    assert bad_id.code == 1 and bad_id.err_lines == [
        "pulsarwire-admin: message id 'one:two' is not ledgerId:entryId (or latest, earliest)"
    ]
    unknown = admin(broker, "topics", "peek-messages", "non-persistent://public/default/x", "-s", "s")
    assert unknown.code == 1 and "need a persistent topic name" in unknown.err


@pytest.mark.parametrize(
    ("sent", "code", "line"),
    [
        (signal.SIGINT, 130, "pulsarwire-admin: interrupted"),
        (signal.SIGTERM, 143, "pulsarwire-admin: terminated"),
    ],
)
def test_ctrl_c_is_130_and_sigterm_143(sent: signal.Signals, code: int, line: str) -> None:
    """A broker that never answers: Ctrl-C (SIGTERM) ends the command with 130 (143) and one line."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        conn, _ = server.accept()
        held.append(conn)
        accepted.set()

    threading.Thread(target=accept, daemon=True).start()
    port = server.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pulsarwire.admin",
            "--admin-url",
            f"http://127.0.0.1:{port}",
            "tenants",
            "list",
        ],
        cwd=ROOT,
        env=command_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert accepted.wait(10)
        time.sleep(0.2)  # the request is sent, the command waits for the answer
        proc.send_signal(sent)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
        server.close()
        for conn in held:
            conn.close()
    assert proc.returncode == code
    assert err.strip().splitlines() == [line] and out == ""


def test_the_console_script_is_registered() -> None:
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="pulsarwire-admin")
    assert script.value == "pulsarwire.admin.cli:main"
    path = Path(sys.executable).parent / "pulsarwire-admin"
    ran = subprocess.run([str(path), "topics", "--help"], capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0
    for verb in ("peek-messages", "reset-cursor", "grant-permission", "subscriptions", "stats"):
        assert verb in ran.stdout
