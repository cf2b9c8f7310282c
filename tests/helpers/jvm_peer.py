"""A real peer (Apache Kafka, Apache Pulsar) as a JVM subprocess: started, awaited, stopped.

:func:`run_jvm` starts ``java -cp <the peer's cached jars> MAIN args`` (tests/helpers/peers.py)
with a log4j2 configuration that writes the peer's log to ``<home>/peer.log``, polls ``ready()``
until it is true, and yields the process with the seconds the start took; the process is stopped
(SIGTERM, then SIGKILL) when the block ends. A peer that exits or is not ready in
``start_timeout`` seconds raises :class:`PeerStartError` with its log's last lines.

The JVM options fit 2 shared cores and small tests: the C1 compiler only (the peers' start
and short runs are faster without C2) and the serial collector.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pulsarwire.testing.process import stop_process
from tests.helpers import peers

JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xshare:auto",
    "-Djava.net.preferIPv4Stack=true",
)

LOG4J2 = """\
<Configuration status="warn">
  <Appenders>
    <File name="file" fileName="{log}">
      <PatternLayout pattern="%d{{HH:mm:ss.SSS}} %-5level [%t] %c{{1}} - %msg%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="info"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


class PeerStartError(RuntimeError):
    """A real peer exited, or was not ready, before its deadline."""


@dataclass(frozen=True, slots=True)
class Started:
    """A running peer: its process, home directory and how long its start took."""

    proc: subprocess.Popen[bytes]
    home: Path
    start_seconds: float

    @property
    def log(self) -> Path:
        return self.home / "peer.log"


def free_port() -> int:
    """A port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise PeerStartError("java is not on PATH (the real peers need Java 17)")
    return found


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def java_command(
    peer: str, main: str, args: Sequence[str], home: Path, *, heap: str, extra: Sequence[str] = ()
) -> list[str]:
    """The ``java`` command line of ``main`` on ``peer``'s jars, logging to ``home/peer.log``."""
    log4j = home / "log4j2.xml"
    log4j.write_text(LOG4J2.format(log=home / "peer.log"))
    classpath = ":".join(str(p) for p in peers.jars(peer))
    return [
        java(),
        f"-Xmx{heap}",
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Djava.io.tmpdir={home}",
        *extra,
        "-cp",
        classpath,
        main,
        *args,
    ]


@contextlib.contextmanager
def run_jvm(
    command: list[str],
    home: Path,
    ready: Callable[[], bool],
    *,
    name: str,
    start_timeout: float,
) -> Iterator[Started]:
    """Run ``command`` in ``home`` until the block ends; yields once ``ready()`` is true."""
    started = time.monotonic()
    with open(home / "stdout.txt", "wb") as out:
        proc = subprocess.Popen(command, cwd=home, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = started + start_timeout
        while True:
            if proc.poll() is not None:
                raise PeerStartError(
                    f"{name} exited with {proc.returncode} while starting; log tail:\n"
                    f"{tail(home / 'peer.log')}\n{tail(home / 'stdout.txt', 10)}"
                )
            with contextlib.suppress(Exception):
                if ready():
                    break
            if time.monotonic() > deadline:
                raise PeerStartError(
                    f"{name} was not ready within {start_timeout:g} s; log tail:\n{tail(home / 'peer.log')}"
                )
            time.sleep(0.2)
        yield Started(proc, home, time.monotonic() - started)
    finally:
        stop_process(proc, grace=15.0)


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True
