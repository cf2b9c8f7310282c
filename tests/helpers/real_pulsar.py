"""Apache Pulsar standalone (the real broker, from Maven Central) for tests.

:func:`pulsar_standalone` runs ``org.apache.pulsar.PulsarStandaloneStarter`` from the jars of
tests/realpeers/pulsar/pom.xml (:mod:`tests.helpers.peers`) with its metadata (RocksDB) and its
one bookie's journal and ledgers under ``home``, no functions worker and no stream storage. The
binary protocol and the admin REST API listen on free loopback ports; the bookie binds the
loopback interface too (``listeningInterface=lo``), on a port Pulsar picks.

Token authentication is on (``AuthenticationProviderToken``, HS256 with :data:`SECRET`) and a
client without credentials gets the role ``anonymous``; authorization is off. So plain clients
work as on a default standalone, a client with a token signed by :data:`SECRET` is the token's
subject, and one with a bad token is refused. :func:`token` signs one.

Ready when the admin API lists the namespace ``public/default`` (the standalone creates it after
the broker started). The seconds the start took are on :class:`RealPulsar`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from tests.helpers import peers
from tests.helpers.jvm_peer import free_port, java_command, run_jvm

#: the HS256 key the standalone verifies tokens with
SECRET = b"pulsarwire-real-pulsar-test-secret-0123456789"
START_TIMEOUT = 120.0
#: what bin/pulsar passes to the JVM on Java 17 (Netty and BookKeeper reach into the JDK)
ADD_OPENS = (
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.net=ALL-UNNAMED",
    "--add-opens",
    "java.management/sun.management=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.platform=ALL-UNNAMED",
)


def token(subject: str, secret: bytes = SECRET) -> str:
    """A JWT for ``subject`` as Pulsar's token provider reads it (HS256, claim ``sub``)."""
    return jwt.encode({"sub": subject}, secret, algorithm="HS256")


@dataclass(frozen=True, slots=True)
class RealPulsar:
    """A running Pulsar standalone: its URLs, version and start time."""

    service_url: str
    web_url: str
    version: str
    start_seconds: float
    home: Path

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """One admin REST call (``/admin/v2/...``); the decoded JSON answer, None when empty."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.web_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read()
        return json.loads(text) if text else None

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """``persistent://tenant/ns/name`` with ``partitions`` partitions, through the admin API."""
        rest = topic.removeprefix("persistent://")
        self.admin("PUT", f"/admin/v2/persistent/{rest}/partitions", partitions)


def standalone_conf(broker_port: int, web_port: int) -> str:
    key = base64.b64encode(SECRET).decode()
    return "\n".join(
        [
            "clusterName=standalone",
            "bindAddress=127.0.0.1",
            "advertisedAddress=127.0.0.1",
            f"brokerServicePort={broker_port}",
            f"webServicePort={web_port}",
            # the bookie: on the loopback interface only
            "listeningInterface=lo",
            "allowLoopback=true",
            "managedLedgerDefaultEnsembleSize=1",
            "managedLedgerDefaultWriteQuorum=1",
            "managedLedgerDefaultAckQuorum=1",
            "functionsWorkerEnabled=false",
            "transactionCoordinatorEnabled=false",
            "loadBalancerOverrideBrokerNicSpeedGbps=1",
            "allowAutoTopicCreation=true",
            "allowAutoTopicCreationType=non-partitioned",
            "brokerDeleteInactiveTopicsEnabled=false",
            "authenticationEnabled=true",
            "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
            f"tokenSecretKey=data:;base64,{key}",
            "anonymousUserRole=anonymous",
            "authorizationEnabled=false",
            "",
        ]
    )


@contextlib.contextmanager
def pulsar_standalone(home: Path) -> Iterator[RealPulsar]:
    """A running Pulsar standalone with its files under ``home``.

    Raises jvm_peer.PeerStartError (exited, not ready in time) and peers.PeerUnavailable.
    """
    broker_port, web_port = free_port(), free_port()
    config = home / "standalone.conf"
    config.write_text(standalone_conf(broker_port, web_port))
    web_url = f"http://127.0.0.1:{web_port}"
    args = [
        "--config",
        str(config),
        "--no-functions-worker",
        "--no-stream-storage",
        "--metadata-dir",
        str(home / "data" / "metadata"),
        "--bookkeeper-dir",
        str(home / "data" / "bookkeeper"),
    ]
    extra = (*ADD_OPENS, "-XX:MaxDirectMemorySize=512m", "-Dpulsar.allocator.exit_on_oom=true")
    command = java_command(
        "pulsar", "org.apache.pulsar.PulsarStandaloneStarter", args, home, heap="1g", extra=extra
    )

    def ready() -> bool:
        with urllib.request.urlopen(f"{web_url}/admin/v2/namespaces/public", timeout=2) as answer:
            return "public/default" in json.loads(answer.read())

    with run_jvm(command, home, ready, name="pulsar standalone", start_timeout=START_TIMEOUT) as run:
        yield RealPulsar(
            service_url=f"pulsar://127.0.0.1:{broker_port}",
            web_url=web_url,
            version=peers.version("pulsar", "pulsar-broker"),
            start_seconds=run.start_seconds,
            home=home,
        )
