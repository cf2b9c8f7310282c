"""``--tls-cert``: the broker's one listener speaks TLS only (Kafka's SSL listener). Each judge
client, trusting the test CA, produces every codec and reads back over it; a plain-TCP
Kafka request to the TLS port gets no answer; a certificate file that cannot be used stops
the start with one line and status 1.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsarwire.testing.process import kafka_broker_process
from tests.helpers.kafka_judge import CODECS, PER_CODEC, run_judge
from tests.helpers.kafka_raw import KafkaRaw, is_closed


@pytest.fixture(scope="module")
def tls_bootstrap(tls_files: dict[str, Path]) -> Iterator[str]:
    with kafka_broker_process(
        "--tls-cert", str(tls_files["cert"]), "--num-partitions", str(len(CODECS))
    ) as bs:
        yield bs


@pytest.mark.parametrize("client", ["confluent", "kafkapython", "aiokafka"])
def test_clients_produce_and_consume_over_tls(
    tls_bootstrap: str, tls_files: dict[str, Path], client: str
) -> None:
    topic = f"tls-{client}"
    result = run_judge(client, "produce", tls_bootstrap, topic, ca=tls_files["ca"])  # produces, then reads
    assert [(r[4], r[5]) for r in result["earliest"]] == [
        (partition, offset) for partition in range(len(CODECS)) for offset in range(PER_CODEC)
    ]
    assert result["by_time"] == [[1, 7], [2, -1]]
    assert [r[1] for r in result["latest"]] == ["after-the-end"]


def test_plain_tcp_to_the_tls_listener_gets_no_answer(tls_bootstrap: str) -> None:
    with KafkaRaw(tls_bootstrap) as conn:
        conn.send("ApiVersions", 3, {"client_software_name": "plain", "client_software_version": "1"})
        assert is_closed(conn)


def test_an_unusable_certificate_is_one_line_and_status_1(tmp_path: Path) -> None:
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate\n")
    done = subprocess.run(
        [sys.executable, "-m", "pulsarwire.kafka.broker", "--port", "0", "--tls-cert", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in done.stderr
