"""The command line broker: flags documented, and what got a receipt survives ``kill -9``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pulsar

from tests.helpers.broker_cli import cli_broker
from tests.helpers.judge import (
    assert_exactly,
    make_client,
    new_topic,
    payloads,
    read_n,
    receive_n,
)

FLAGS = [
    "--port",
    "--data-dir",
    "--tls-port",
    "--tls-cert",
    "--tls-key",
    "--auth-token-secret",
    "--auth-token-secret-file",
    "--auth-token-public-key",
    "--auth-tokens",
    "--grant",
    "--superuser",
    "--connect-timeout",
    "--max-connections",
    "--default-partitions",
    "--dedup",
    "--max-message-size",
    "--entries-per-ledger",
    "--fsync",
    "--cache-size-mb",
    "--max-open-logs",
    "--keepalive",
    "--stats",
    "--tenant",
    "--max-partitions-per-topic",
    "--https-port",
]


def test_help_documents_every_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pulsarwire.broker", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for flag in FLAGS:
        assert flag in out, flag


def test_kill_minus_9_loses_nothing_that_got_a_receipt(tmp_path: Path) -> None:
    topic = new_topic()
    values = payloads(200)
    with cli_broker("--data-dir", str(tmp_path), "--entries-per-ledger", "50") as (proc, url):
        client = make_client(url)
        try:
            consumer = client.subscribe(topic, "durable", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(topic, batching_enabled=False)
            for v in values:
                producer.send(v)  # returns after the receipt
            got = receive_n(consumer, 80, ack=True)
            assert_exactly(got, values[:80])
            time.sleep(0.5)  # past the cursor flush (0.1 s) and the client's ack grouping (0.1 s)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            client.close()
    with cli_broker("--data-dir", str(tmp_path)) as (_proc, url):
        client = make_client(url)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert_exactly(read_n(reader, 200), values)
            assert not reader.has_message_available()
            consumer = client.subscribe(topic, "durable")
            assert_exactly(receive_n(consumer, 120, ack=True), values[80:])
        finally:
            client.close()


def test_stats_dump_prints_topic_counters(tmp_path: Path) -> None:
    topic = new_topic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pulsarwire.broker",
            "--port",
            "0",
            "--stats",
            "0.2",
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = proc.stdout.readline().split("ready on", 1)[1].split()[0]
        client = make_client(url)
        try:
            client.create_producer(topic).send(b"x")
        finally:
            client.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if topic in line and '"msg_in": 1' in line:
                break
        else:
            raise AssertionError("no stats line for the topic")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
