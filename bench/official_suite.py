"""The acceptance run: the official Python client's own test suite against this broker, configured
as upstream's CI configures a standalone Pulsar for it.

apache/pulsar-client-python runs ``tests/*_test.py`` against a standalone started from
``tests/test-conf/standalone-ssl.conf`` and set up by
``build-support/start-test-service-inside-container.sh``:
ports 6650 / 6651 (TLS) / 8080 / 8443 (HTTPS), advertised as ``localhost``; TLS, token and basic
authentication (``tests/test-conf/.htpasswd``), ``anonymousUserRole=anonymous``, superusers
``localhost,superUser,admin``, authorization on; tenant ``public`` with admin role ``anonymous``,
``public/default`` and ``public/default-2`` where ``anonymous`` may produce and consume, tenant
``private`` without admins and ``private/auth`` where ``token-principal`` may produce and consume;
the suite reads a token for ``token-principal`` from ``tests/.test-token.txt``. This script starts
``python -m pulsarwire.broker`` with exactly that and runs the suite's files with pytest, one
process each, and prints each file's counts and the total.

    python bench/official_suite.py PATH/TO/pulsar-client-python [FILE_test.py ...]

PATH is a checkout (or a bare git directory: its ``tests`` are extracted from HEAD). The ports
must be free; the files are those upstream's ``tests/run-unit-tests.sh`` runs, and need
``pulsar-client``, ``pytest-timeout`` and ``requests`` (schema_test.py imports it; upstream's
runner gets it with testcontainers). Two tests cannot pass in a sandbox without network: the
connect timeout aimed at 192.0.2.1 and the failover test that starts Pulsar containers.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import jwt

PORTS = {"--port": "6650", "--tls-port": "6651", "--http-port": "8080", "--https-port": "8443"}
SUITE = (
    "pulsar_test.py",
    "schema_test.py",
    "reader_test.py",
    "table_view_test.py",
    "asyncio_test.py",
    "custom_logger_test.py",
    "debug_logger_test.py",
    "interrupted_test.py",
    "auto_cluster_failover_test.py",
)


def tests_dir(source: Path, work: Path) -> Path:
    """The suite's ``tests`` directory: in a checkout, or extracted from a bare repository's HEAD."""
    if (source / "tests" / "pulsar_test.py").exists():
        return source / "tests"
    archive = subprocess.run(
        ["git", "--git-dir", str(source), "archive", "HEAD", "tests"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
    return work / "tests"


def broker_args(conf: Path, secret_file: Path) -> list[str]:
    """standalone-ssl.conf and the CI script's tenants, namespaces and grants as this broker's flags."""
    return [
        *[x for flag, port in PORTS.items() for x in (flag, port)],
        "--host",
        "0.0.0.0",
        "--advertised-address",
        "localhost",
        "--tls-cert",
        str(conf / "broker-cert.pem"),
        "--tls-key",
        str(conf / "broker-key.pem"),
        "--tls-trust-certs",
        str(conf / "cacert.pem"),
        "--auth-tls",
        "--auth-token-secret-file",
        str(secret_file),
        "--auth-basic-file",
        str(conf / ".htpasswd"),
        "--anonymous-role",
        "anonymous",
        *["--superuser", "localhost", "--superuser", "superUser", "--superuser", "admin"],
        *["--tenant", "public:anonymous", "--tenant", "private"],
        *["--namespace", "public/default-2", "--namespace", "private/auth"],
        *["--grant", "anonymous:public/default:produce,consume"],
        *["--grant", "anonymous:public/default-2:produce,consume"],
        *["--grant", "token-principal:private/auth:produce,consume"],
    ]


def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[2].strip(), file=sys.stderr)
        return 2
    source, files = Path(argv[0]), argv[1:] or list(SUITE)
    with tempfile.TemporaryDirectory(prefix="official-suite-") as tmp:
        work = Path(tmp)
        tests = tests_dir(source, work)
        secret = secrets.token_bytes(32)
        secret_file = work / "secret.key"
        secret_file.write_bytes(secret)
        (tests / ".test-token.txt").write_text(
            jwt.encode({"sub": "token-principal"}, secret, algorithm="HS256")
        )
        log = open(work / "broker.log", "w")  # noqa: SIM115 - open for the broker's whole life
        broker = subprocess.Popen(
            [sys.executable, "-m", "pulsarwire.broker", *broker_args(tests / "test-conf", secret_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        totals = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
        try:
            wait_ready("http://localhost:8080/metrics")
            for name in files:
                report = work / f"{name}.txt"
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pytest",
                        "-q",
                        "-p",
                        "no:cacheprovider",
                        "-o",
                        "addopts=",
                        "--rootdir",
                        str(tests),
                        "--timeout",
                        "120",
                        "-rfE",
                        name,
                    ],
                    cwd=tests,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                )
                report.write_text(done.stdout + done.stderr)
                summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "(no output)"
                print(f"{name}: {summary}")
                for line in done.stdout.splitlines():
                    if line.startswith(("FAILED", "ERROR")):
                        print(f"    {line[:200]}")
                for count, label in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary):
                    totals["error" if label.startswith("error") else label] += int(count)
        finally:
            broker.terminate()
            broker.wait(timeout=30)
            log.close()
        print("total: " + ", ".join(f"{v} {k}" for k, v in totals.items()))
        return 0 if totals["failed"] == totals["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
