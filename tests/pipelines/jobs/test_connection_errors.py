"""Connection mistakes say what is wrong, in one line (issue 28, point 13).

Each test points the ``pipelines`` command (its own process: ``run --dry-run`` or
``validate --plan``, which connect and stop before Spark) at a real local server of the wrong
kind and checks the exit code and the one line: TLS to a plaintext port, plaintext to a TLS
port, a ``pulsar://`` URL on an HTTP port (our broker's web service and a plain Python HTTP
server), a token file that does not exist, a project without ``conf/``. The classification is
pulsarwire's (typed errors of the io/client layer), so the client API is checked too.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import pulsarwire
from pulsarwire.broker import Broker
from tests.helpers.cli import ROOT, Ran, no_trace, pipelines

INGEST = "jobs/orders_ingest.yaml"
KEY = "jobs/orders_ingest.yaml: source.pulsar.service_url: cannot reach "


def create_producer(url: str) -> None:
    """What the official client's API (``pulsarwire.Client``) does at ``url``: raises its error."""
    client = pulsarwire.Client(url, operation_timeout_seconds=5)
    try:
        client.create_producer("orders")
    finally:
        client.close()


def one_line(ran: Ran) -> str:
    """The one line a failed command printed (``validate`` prints its problems to stdout)."""
    lines = ran.err_lines + ran.out_lines
    assert ran.code == 1, ran
    assert no_trace(ran.err + ran.out) and len(lines) == 1, ran
    return lines[0]


def dry_run(url: str, data: Path, *more: str) -> Ran:
    return pipelines("run", "--dry-run", INGEST, *more, PULSAR_URL=url, PIPELINES_DATA_DIR=str(data))


@pytest.fixture
def web_broker(pulsar_broker_factory: Callable[..., Broker]) -> Broker:
    """Our broker with its web service (admin REST API) on a port of its own."""
    return pulsar_broker_factory(http_port=0)


def test_tls_to_a_plaintext_port_says_the_server_did_not_answer_tls(
    pulsar_broker: Broker, tmp_path: Path
) -> None:
    url = pulsar_broker.service_url.replace("pulsar://", "pulsar+ssl://")
    line = one_line(dry_run(url, tmp_path))
    assert line.startswith(KEY + url) and "the server did not answer TLS" in line, line
    assert "plaintext port" in line
    with pytest.raises(pulsarwire.NotTlsError):  # the client API tells the same
        create_producer(url)


def test_plaintext_to_a_tls_port_says_use_pulsar_ssl(
    pulsar_broker_factory: Callable[..., Broker], tls_files: dict[str, Path], tmp_path: Path
) -> None:
    b = pulsar_broker_factory(tls_port=0, tls_cert_file=tls_files["cert"], tls_key_file=tls_files["cert"])
    url = f"pulsar://127.0.0.1:{b.tls_port}"
    line = one_line(dry_run(url, tmp_path))
    # Python's TLS server (like Netty's SslHandler) drops a client that does not start with a TLS
    # hello without a word: all the client sees is a close before any answer
    assert line.startswith(KEY + url), line
    said = "closed the connection without answering the Pulsar handshake (a TLS port? then use pulsar+ssl://)"
    assert said in line


def test_a_server_answering_with_a_tls_alert_is_named(tmp_path: Path) -> None:
    """A TLS server that answers a plaintext hello with an alert record (as some do)."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    alert = b"\x15\x03\x03\x00\x02\x02\x46"  # TLS 1.2 alert record: fatal, protocol_version

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(alert)

    threading.Thread(target=answer, daemon=True).start()
    url = f"pulsar://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(pulsarwire.NotPulsarError) as info:
            create_producer(url)
    finally:
        listener.close()
    assert info.value.protocol == "TLS" and "use pulsar+ssl://" in str(info.value)


def test_a_pulsar_url_on_the_brokers_http_port_says_it_is_http(web_broker: Broker, tmp_path: Path) -> None:
    assert web_broker.http_url is not None
    url = web_broker.http_url.replace("http://", "pulsar://")
    ran = dry_run(url, tmp_path)
    line = one_line(ran)
    assert line.startswith(KEY + url) and "the server answered HTTP, not the Pulsar protocol" in line, line
    assert ran.seconds < 10  # answered at once, not a time-out
    with pytest.raises(pulsarwire.NotPulsarError) as info:
        create_producer(url)
    assert info.value.protocol == "HTTP"


def test_validate_plan_on_a_http_port_server(http_port: int, tmp_path: Path) -> None:
    url = f"pulsar://127.0.0.1:{http_port}"
    ran = pipelines("validate", "--plan", INGEST, PULSAR_URL=url, PIPELINES_DATA_DIR=str(tmp_path))
    assert ran.code == 1 and no_trace(ran.err + ran.out)
    assert [line for line in ran.out_lines if "answered HTTP" in line], ran.out


def test_a_missing_token_file_is_file_not_found_not_refused(pulsar_broker: Broker, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token.jwt"
    ran = pipelines(
        "validate",
        "--plan",
        INGEST,
        "--set",
        f"pulsar.client.auth_token_file={missing}",
        PULSAR_URL=pulsar_broker.service_url,
        PIPELINES_DATA_DIR=str(tmp_path),
    )
    assert ran.code == 1 and no_trace(ran.err + ran.out), ran
    assert ran.out_lines == [
        f"{KEY}{pulsar_broker.service_url} (source.pulsar.service_url ← pulsar.service_url (conf/local.yaml) "
        f"← $PULSAR_URL): cannot read the token file {missing}: file not found"
    ]
    assert "refused" not in ran.out
    assert pulsar_broker.connections_accepted == 0  # the broker was never asked


def test_a_project_without_conf_says_how_to_create_a_profile(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    shutil.copy(ROOT / INGEST, tmp_path / INGEST)
    for args in (("run", "--dry-run", INGEST), ("validate",)):
        line = one_line(pipelines(*args, cwd=tmp_path))
        assert "there is no conf directory" in line and "create conf/local.yaml" in line, line
        assert "--conf-dir" in line and "PIPELINES_PROJECT_DIR" in line
