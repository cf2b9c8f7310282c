"""``python -m pulsarwire.kafka.broker`` as its users start it: the ready line with the bootstrap
address, one-line errors with their exit status (2 for a flag, 1 for a port taken or a data dir
that cannot be used), 130 on SIGINT and 143 on SIGTERM. And the in-process ``Broker`` and the
``kafka_broker`` fixture, judged by confluent-kafka in a process of its own.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pulsarwire.kafka.broker import Broker
from pulsarwire.kafka.errors import ERROR_CODES as E
from pulsarwire.testing.process import kafka_broker_subprocess
from tests.helpers.kafka_judge import run_judge
from tests.helpers.kafka_raw import KafkaRaw, bystander

CMD = [sys.executable, "-m", "pulsarwire.kafka.broker"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ready_line_and_interrupts(sig: signal.Signals) -> None:
    with kafka_broker_subprocess("--host", "127.0.0.1") as (address, proc):
        host, _, port = address.rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert bystander(address)["error_code"] == 0
        proc.send_signal(sig)
        assert proc.wait(10) == 128 + sig


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_a_bad_flag_is_one_line_and_status_2() -> None:
    done = run("--port", "-3")
    assert done.returncode == 2
    assert "--port" in one_line(done.stderr)
    done = run("--auto-create-topics", "perhaps")
    assert done.returncode == 2
    assert "perhaps" in one_line(done.stderr)


def test_a_taken_port_and_an_unusable_data_dir_are_one_line_and_status_1(tmp_path: Path) -> None:
    with kafka_broker_subprocess() as (address, _proc):
        port = address.rpartition(":")[2]
        done = run("--port", port)
        assert done.returncode == 1
        line = one_line(done.stderr)
        assert f"127.0.0.1:{port}" in line and "address already in use" in line
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    done = run("--port", "0", "--data-dir", str(not_a_dir))
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert str(not_a_dir) in line and "--data-dir" in line


def test_in_process_broker_restarts_on_its_data_dir(tmp_path: Path) -> None:
    with Broker(data_dir=tmp_path, num_partitions=5) as broker:
        run_judge("confluent", "produce", broker.bootstrap_servers, "inproc")
        broker.restart()
        assert broker.topic_names() == ["inproc"]
        result = run_judge("kafkapython", "consume", broker.bootstrap_servers, "inproc")
        assert result["ends"] == [12, 12, 12, 13, 12]
        with KafkaRaw(broker.bootstrap_servers) as conn:
            deleted = conn.request("DeleteTopics", 6, {"topics": [{"name": "inproc"}], "timeout_ms": 1000})
            assert deleted["responses"][0]["error_code"] == 0
        broker.restart()
        assert broker.topic_names() == []  # a deleted topic stays deleted
        assert list((tmp_path / "topics").iterdir()) == []


def test_the_kafka_broker_fixture_serves_a_judge(kafka_broker: Broker) -> None:
    kafka_broker.create_topic("fixture", 1)
    result = run_judge("aiokafka", "consume", kafka_broker.bootstrap_servers, "fixture")
    assert result == {"records": [], "ends": [0]}


def test_auto_create_off_leaves_missing_topics_missing() -> None:
    with (
        kafka_broker_subprocess("--auto-create-topics", "false") as (address, _proc),
        KafkaRaw(address) as conn,
    ):
        answer = conn.request(
            "Metadata", 12, {"topics": [{"name": "absent"}], "allow_auto_topic_creation": True}
        )
        assert answer["topics"][0]["error_code"] == E["UNKNOWN_TOPIC_OR_PARTITION"]
        listed = conn.request("Metadata", 12, {"topics": None, "allow_auto_topic_creation": True})
        assert listed["topics"] == []


def test_a_damaged_state_file_is_one_line_naming_it_and_status_1(tmp_path: Path) -> None:
    for name, text in (("topics/orders/topic.json", '{"id": "zz"}'), ("transactions.json", "[1")):
        data = tmp_path / name.replace("/", "-")
        (data / name).parent.mkdir(parents=True)
        (data / name).write_text(text)
        done = run("--port", "0", "--data-dir", str(data))
        assert done.returncode == 1
        line = one_line(done.stderr)
        assert str(data / name) in line and "repair the file" in line
