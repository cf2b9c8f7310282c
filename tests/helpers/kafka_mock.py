"""librdkafka's in-memory mock Kafka cluster (``test.mock.num.brokers``) as a process of its own,
for comparing our broker's answers with a second opinion.

``python -m tests.helpers.kafka_mock`` prints ``ready on HOST:PORT`` (the mock broker's
address, from the holder client's metadata) and keeps the cluster up until its stdin closes;
:func:`mock_cluster` runs it for a ``with`` block and yields the address.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def mock_cluster() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.kafka_mock"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready on "), line
        yield line.split()[-1]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    from confluent_kafka import Producer

    holder = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(holder.list_topics(timeout=10).brokers.values()))
    print(f"ready on {broker.host}:{broker.port}", flush=True)
    sys.stdin.read()  # until the test closes it


if __name__ == "__main__":
    main()
