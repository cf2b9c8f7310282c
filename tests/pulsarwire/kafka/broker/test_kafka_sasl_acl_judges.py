"""SASL logins and ACL refusals judged by confluent-kafka, kafka-python and aiokafka, each in a
process of its own, against ``python -m pulsarwire.kafka.broker --sasl-users FILE --grant ...``.

Each client logs in with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 and round-trips a record
through a group; a wrong password is refused with the client's authentication error; with
grants, a topic the user may not write and a group it may not use give the client's
TOPIC_AUTHORIZATION_FAILED and GROUP_AUTHORIZATION_FAILED errors, and the broker's log never
holds a password.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pulsarwire.testing.process import kafka_broker_subprocess
from tests.helpers.kafka_group_judge import run

USERS = "# the judges' users\nalice:alice-secret\nbob:b:o:b=,x\n"
#: what each client calls a failed login and the two ACL refusals
AUTH_FAILED = {
    "confluent": "_AUTHENTICATION",
    "kafkapython": "SaslAuthenticationFailedError",
    "aiokafka": "SaslAuthenticationFailed",
}
TOPIC_DENIED = {
    "confluent": "TOPIC_AUTHORIZATION_FAILED",
    "kafkapython": "TopicAuthorizationFailedError",
    "aiokafka": "TopicAuthorizationFailedError",
}
GROUP_DENIED = {
    "confluent": "GROUP_AUTHORIZATION_FAILED",
    "kafkapython": "GroupAuthorizationFailedError",
    "aiokafka": "GroupAuthorizationFailedError",
}
CLIENTS = ["confluent", "kafkapython", "aiokafka"]


def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.txt"
    path.write_text(USERS)
    return path


#: each client logs in with one mechanism and is refused with another (every make test); the
#: full matrix runs under the long marker
ONE_EACH = [
    ("confluent", "SCRAM-SHA-512", "PLAIN"),
    ("aiokafka", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    ("kafkapython", "PLAIN", "SCRAM-SHA-256"),
]
REASON = {
    "PLAIN": "Invalid username or password",
    "SCRAM-SHA-256": "invalid credentials",
    "SCRAM-SHA-512": "invalid credentials",
}


def check_logins(tmp_path: Path, client: str, good: list[str], bad: list[str], unknown_user: bool) -> None:
    log = tmp_path / "broker.log"
    args = ("--port", "0", "--sasl-users", str(users_file(tmp_path)), "--log-level", "debug")
    with log.open("w") as err, kafka_broker_subprocess(*args, stderr=err) as (bootstrap, _proc):
        for mechanism in good:
            user, password = (
                ("bob", "b:o:b=,x") if mechanism == "SCRAM-SHA-256" else ("alice", "alice-secret")
            )
            got = run(
                client,
                "roundtrip",
                bootstrap,
                sasl=[mechanism, user, password],
                topic=f"t-{mechanism}",
                group=f"g-{mechanism}",
            )
            assert got == {"value": "hello", "error": None}, (mechanism, got)
        for mechanism in bad:
            got = run(
                client, "roundtrip", bootstrap, sasl=[mechanism, "alice", "wrong-one"], topic="t", group="g"
            )
            assert got["error"] == AUTH_FAILED[client], (mechanism, got)
            assert REASON[mechanism] in got["message"], got  # the broker's words reach the client
        if unknown_user:
            got = run(
                client, "roundtrip", bootstrap, sasl=["SCRAM-SHA-512", "mallory", "x"], topic="t", group="g"
            )
            assert got["error"] == AUTH_FAILED[client]
    text = log.read_text()
    assert "authenticated as " in text and "login of 'alice' failed" in text
    for secret in ("alice-secret", "wrong-one", "b:o:b=,x"):
        assert secret not in text  # debug logging on: still no password in the broker's log


@pytest.mark.parametrize(("client", "good", "bad"), ONE_EACH)
def test_sasl_login_and_a_wrong_password(tmp_path: Path, client: str, good: str, bad: str) -> None:
    check_logins(tmp_path, client, [good], [bad], unknown_user=False)


@pytest.mark.long  # every mechanism with every client: about a minute
@pytest.mark.parametrize("client", CLIENTS)
def test_sasl_every_mechanism_and_refusal(tmp_path: Path, client: str) -> None:
    check_logins(tmp_path, client, list(REASON), ["PLAIN", "SCRAM-SHA-256"], unknown_user=True)


@pytest.mark.parametrize(
    "client",
    ["confluent", "aiokafka", pytest.param("kafkapython", marks=pytest.mark.long)],  # ~20 s: long
)
def test_acl_refusals_reach_the_client_as_authorization_errors(tmp_path: Path, client: str) -> None:
    grants = [
        "--grant",
        "User:alice:topic:mine:read,write,create",
        "--grant",
        "User:alice:topic:theirs:describe",
        "--grant",
        "User:alice:group:ok-*:read",
        "--grant",
        "alice:topic:open:all",
    ]
    args = ("--port", "0", "--sasl-users", str(users_file(tmp_path)), *grants, "--superuser", "User:admin")
    sasl = ["PLAIN", "alice", "alice-secret"]
    with kafka_broker_subprocess(*args) as (bootstrap, _proc):
        allowed = run(client, "roundtrip", bootstrap, sasl=sasl, topic="mine", group="ok-1")
        assert allowed == {"value": "hello", "error": None}
        denied_topic = run(client, "denied", bootstrap, sasl=sasl, topic="theirs", group="ok-2")
        assert denied_topic["produce"] == TOPIC_DENIED[client]
        denied_group = run(client, "denied", bootstrap, sasl=sasl, topic="open", group="not-ok")
        assert denied_group["produce"] is None
        assert denied_group["consume"] == GROUP_DENIED[client]


def test_bad_grant_and_users_file_fail_at_start_in_one_line(tmp_path: Path) -> None:
    import sys

    bad_users = tmp_path / "bad.txt"
    bad_users.write_text("alice\n")
    for args, expected in [
        (["--grant", "User:alice:queue:orders:read"], "unknown resource type 'queue'"),
        (["--sasl-users", str(bad_users)], f"{bad_users}:1: a user line reads NAME:PASSWORD"),
        (["--sasl-mechanisms", "GSSAPI", "--sasl-users", str(bad_users)], "unknown SASL mechanism 'GSSAPI'"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "pulsarwire.kafka.broker", "--port", "0", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode != 0 and expected in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
