"""pulsar-lite (a third-party Rust broker, test dependency) as a fixture for interop suites.

``lite_url`` starts it as a subprocess on a free loopback port, with a ``--config`` TOML that
disables its metrics listener (it would bind 0.0.0.0:8080 otherwise) and keeps its data in a
temporary directory; it is stopped at the end of the module. Where pulsar-lite is not installed
or cannot run here, the tests that use it are skipped with the reason.

Its known gaps (measured): duplicates on Exclusive/Failover live consumption, no dedup, no auth or
TLS, no regex subscriptions, seek acts only on the next publish, no terminate, wrong batch-index
acks (acking part of a batch acks all of it), Key_Shared stalls, chunked messages lost now and
then with a live consumer, an error drops the whole connection, no max_message_size in CONNECTED.
The suites rely only on what it does reliably.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsarwire.testing.process import stop_process


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
