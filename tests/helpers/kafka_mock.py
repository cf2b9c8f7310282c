"""librdkafka's mock Kafka cluster in a process of its own, the judge of our Kafka client.

``python -m tests.helpers.kafka_mock BROKERS`` creates the cluster with confluent-kafka (a
``Producer`` configured with ``test.mock.num.brokers`` keeps it alive), prints its bootstrap
address on one line and serves until its stdin closes. :func:`mock_cluster` starts it and yields
the address; the process is stopped (stdin closed, then killed if need be) on exit. The mock
creates a topic on first use with 4 partitions.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

START_TIMEOUT = 20.0


@contextlib.contextmanager
def mock_cluster(brokers: int = 1) -> Iterator[str]:
    """A running mock cluster's ``bootstrap.servers``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.kafka_mock", str(brokers)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line:
            raise RuntimeError(f"the mock cluster did not start (exit code {proc.poll()})")
        yield line
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    from confluent_kafka import Producer

    keeper = Producer({"test.mock.num.brokers": int(sys.argv[1]) if len(sys.argv) > 1 else 1, "log_level": 0})
    metadata = keeper.list_topics(timeout=START_TIMEOUT)
    assert metadata.orig_broker_name is not None
    print(metadata.orig_broker_name.split("/")[0], flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or dies)
    keeper.flush(1)


if __name__ == "__main__":
    main()
