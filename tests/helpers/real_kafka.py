"""Apache Kafka (the real broker, from Maven Central) as a single-node KRaft cluster for tests.

:func:`kafka_cluster` formats a storage directory under ``home`` with ``kafka.tools.StorageTool``
(a new cluster id each time), then runs ``kafka.Kafka`` as broker and controller in one JVM with
three listeners on free loopback ports:

* ``PLAINTEXT`` — no authentication (:attr:`RealKafka.bootstrap`);
* ``SASL_PLAINTEXT`` — SASL/PLAIN against the users in :data:`USERS` (:attr:`RealKafka.sasl_bootstrap`);
* ``CONTROLLER`` — the KRaft quorum's own listener.

Internal topics have one partition and one replica (one broker), and a group's first rebalance
is not delayed. It is ready when its log says ``Kafka Server started``; the seconds the format
and the start took are on :class:`RealKafka`. The jars are those of tests/realpeers/kafka/pom.xml
(:mod:`tests.helpers.peers`).
"""

from __future__ import annotations

import base64
import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import peers
from tests.helpers.jvm_peer import PeerStartError, free_port, java_command, run_jvm

#: SASL/PLAIN users of the SASL_PLAINTEXT listener: name → password
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
START_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class RealKafka:
    """A running Kafka: where to connect and what it took to start."""

    bootstrap: str
    sasl_bootstrap: str
    version: str
    format_seconds: float
    start_seconds: float
    home: Path

    def sasl_config(self, user: str, password: str | None = None) -> dict[str, str]:
        """librdkafka settings for ``user`` on the SASL_PLAINTEXT listener."""
        return {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user] if password is None else password,
        }


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def server_properties(data: Path, plain: int, sasl: int, controller: int) -> str:
    jaas = " ".join(
        [
            "org.apache.kafka.common.security.plain.PlainLoginModule required",
            *(f'user_{name}="{password}"' for name, password in USERS.items()),
        ]
    )
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller}",
            f"listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},"
            f"CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "sasl.enabled.mechanisms=PLAIN",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas};",
            f"log.dirs={data}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=true",
            "",
        ]
    )


@contextlib.contextmanager
def kafka_cluster(home: Path) -> Iterator[RealKafka]:
    """A formatted, running single-node Kafka with its files under ``home``.

    Raises PeerStartError (format failed, exited, not ready in time) and peers.PeerUnavailable.
    """
    plain, sasl, controller = free_port(), free_port(), free_port()
    config = home / "server.properties"
    config.write_text(server_properties(home / "data", plain, sasl, controller))
    started = time.monotonic()
    fmt = subprocess.run(
        java_command(
            "kafka",
            "kafka.tools.StorageTool",
            ["format", "-t", _cluster_id(), "-c", str(config)],
            home,
            heap="256m",
        ),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if fmt.returncode != 0:
        raise PeerStartError(
            f"kafka storage format exited {fmt.returncode}: {fmt.stdout[-800:]}{fmt.stderr[-800:]}"
        )
    formatted = time.monotonic() - started
    log = home / "peer.log"

    def ready() -> bool:
        return log.is_file() and "Kafka Server started" in log.read_text(errors="replace")

    command = java_command("kafka", "kafka.Kafka", [str(config)], home, heap="512m")
    with run_jvm(command, home, ready, name="kafka", start_timeout=START_TIMEOUT) as run:
        yield RealKafka(
            bootstrap=f"127.0.0.1:{plain}",
            sasl_bootstrap=f"127.0.0.1:{sasl}",
            version=peers.version("kafka", "kafka_2.13"),
            format_seconds=formatted,
            start_seconds=run.start_seconds,
            home=home,
        )
