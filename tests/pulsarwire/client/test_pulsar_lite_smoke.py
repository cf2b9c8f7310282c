"""Smoke interop on a second, independent broker: pulsar-lite (Rust), judged by the official consumer.

pulsar-lite runs as a subprocess on a free loopback port, with a ``--config`` TOML that disables its
metrics listener (it would bind 0.0.0.0:8080 otherwise) and keeps its data in a temporary directory.
Only what pulsar-lite does reliably is relied on (see shared/guide/TESTING.md): consumers subscribe
Shared (Exclusive/Failover live consumption duplicates). Chunking is not smoke-tested here: pulsar-lite
announces no max_message_size and refuses any chunk whose metadata + payload exceed 5 MiB, and the
official C++ client's chunk size is process-wide state (5 MiB - 10 KiB until a broker announces one),
so the judge itself behaves differently once any test in the process has talked to our broker.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from pulsarwire.client.blocking import Client, CompressionType, Producer
from pulsarwire.codec import MessageId
from pulsarwire.testing.process import stop_process
from tests.pulsarwire.broker.support import assert_exactly, assert_silent, new_topic, position, receive_n


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lite_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        from pulsar_lite.binary_finder import find_pulsar_lite_binary

        binary = find_pulsar_lite_binary()
    except (ImportError, FileNotFoundError) as exc:
        pytest.skip(f"pulsar-lite is not installed here ({exc!r}); `pip install .[test]` brings it")
    home = tmp_path_factory.mktemp("pulsar-lite")
    port = _free_port()
    config = home / "pulsar-lite.toml"
    config.write_text(
        f'addr = "127.0.0.1:{port}"\n'
        f'db_path = "{home / "data"}"\n'
        'log_level = "warn"\n'
        "\n[metrics]\nenabled = false\n"
    )
    log_path = home / "broker.log"
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                [binary, "--config", str(config)],
                stdout=log,
                stderr=log,
                cwd=home,
            )
        except OSError as exc:
            pytest.skip(f"pulsar-lite binary {binary} cannot run here: {exc}")
        try:
            _wait_listening(proc, port, log_path)
            yield f"pulsar://127.0.0.1:{port}"
        finally:
            stop_process(proc)


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            pytest.skip(f"pulsar-lite exited with {proc.returncode} before listening; log tail:\n{tail}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"pulsar-lite did not listen on 127.0.0.1:{port} within 20 s") from None
            time.sleep(0.05)


@pytest.fixture(scope="module")
def official(lite_url: str) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        lite_url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    yield c
    c.close()


@pytest.fixture(scope="module")
def pw(lite_url: str) -> Iterator[Client]:
    c = Client(lite_url, operation_timeout_seconds=10)
    yield c
    c.close()


def _send_all(producer: Producer, values: list[bytes], **kw: object) -> list[MessageId]:
    """send_async every value, flush, wait for the callbacks; the receipts in send order."""
    ids: list[MessageId | None] = [None] * len(values)
    errors: list[BaseException] = []

    def callback_for(i: int) -> Callable[[BaseException | None, MessageId | None], None]:
        def done(err: BaseException | None, mid: MessageId | None) -> None:
            if err is not None:
                errors.append(err)
            ids[i] = mid

        return done

    for i, v in enumerate(values):
        producer.send_async(v, callback_for(i), **kw)
    producer.flush()
    deadline = time.monotonic() + 15
    while any(x is None for x in ids) and not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not errors, f"{len(errors)} sends failed, first: {errors[0]!r}"
    assert all(x is not None for x in ids), "send callbacks missing"
    return [x for x in ids if x is not None]


@pytest.mark.parametrize(
    ("batching", "codec"),
    [(True, CompressionType.LZ4), (False, CompressionType.NONE)],
    ids=["batched-lz4", "single"],
)
def test_pulsarwire_to_official_on_pulsar_lite(
    official: pulsar.Client, pw: Client, batching: bool, codec: int
) -> None:
    topic = new_topic("lite")
    consumer = official.subscribe(topic, "judge", consumer_type=pulsar.ConsumerType.Shared)
    producer = pw.create_producer(
        topic, batching_enabled=batching, compression_type=codec, batching_max_publish_delay_ms=20
    )
    values = [f"lite-{i:04d}-".encode() + b"x" * (i % 200) for i in range(600)]
    ids = _send_all(producer, values, properties={"via": "pulsar-lite"}, partition_key="k")
    producer.close()
    got = receive_n(consumer, len(values), ack=True)
    assert_silent(consumer)
    consumer.close()
    assert_exactly(got, values)
    assert all(m.properties() == {"via": "pulsar-lite"} and m.partition_key() == "k" for m in got)
    receipts = {v: (mid.ledger_id, mid.entry_id, mid.batch_index) for v, mid in zip(values, ids, strict=True)}
    assert {m.data(): position(m.message_id()) for m in got} == receipts
    if batching:
        assert len({(mid.ledger_id, mid.entry_id) for mid in ids}) < len(values), "nothing was batched"
    else:
        assert all(mid.batch_index == -1 for mid in ids)
