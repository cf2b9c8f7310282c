"""The real peers' jars: resolved by Maven from Maven Central, cached outside the repository.

Each peer is a small pom under ``tests/realpeers/<name>/pom.xml`` naming exact versions (Delta
Lake's Spark jars, Apache Kafka's broker, Apache Pulsar's broker). :func:`jars` returns the jars
of one peer, fetching them first when the cache does not have them::

    mvn -s tests/realpeers/settings.xml -B -q -C -f tests/realpeers/<name>/pom.xml \\
        dependency:copy-dependencies dependency:list

``-C`` makes Maven fail on a checksum mismatch. The jars land in
``$PULSARWIRE_PEERS_CACHE`` (default ``~/.cache/pulsarwire-peers``) under
``<name>-<hash of the pom>/``, so changing a version in a pom fetches anew and old caches stay
valid for old checkouts; Maven's own repository (``~/.m2``) keeps the downloads. A file lock
makes concurrent callers (pytest-xdist workers, ``make peers``) fetch once. A directory is used
only once complete (the ``deps.txt`` listing is written last, then the directory is renamed into
place).

``python -m tests.helpers.peers [name ...]`` fetches (all peers by default) and prints where;
``make peers`` runs it, and ``make test`` does first, so a fresh machine fetches them itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POMS = ROOT / "tests" / "realpeers"
SETTINGS = POMS / "settings.xml"
CACHE_ENV = "PULSARWIRE_PEERS_CACHE"
NAMES = ("delta", "kafka", "pulsar")
#: seconds one Maven run may take (Pulsar's first download is ~235 MB)
FETCH_TIMEOUT = 1200.0
#: the Maven plugin that copies and lists the jars, pinned like the jars themselves
PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


class PeerUnavailable(RuntimeError):
    """A peer's jars could not be fetched (no mvn, no network, an artifact missing)."""


@dataclass(frozen=True, slots=True)
class Artifact:
    """One resolved jar: its Maven coordinates and where the cache holds it."""

    group_id: str
    artifact_id: str
    version: str
    classifier: str
    path: Path


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "pulsarwire-peers")


def pom(name: str) -> Path:
    if name not in NAMES:
        raise ValueError(f"unknown peer {name!r}; one of {', '.join(NAMES)}")
    return POMS / name / "pom.xml"


def cache_dir(name: str) -> Path:
    """Where ``name``'s jars are cached: keyed by the pom's (and the settings') content."""
    digest = hashlib.sha256(pom(name).read_bytes() + SETTINGS.read_bytes()).hexdigest()[:12]
    return cache_root() / f"{name}-{digest}"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch(name: str) -> Path:
    """The cache directory of ``name`` with its jars, fetched by Maven if not there yet.

    Raises PeerUnavailable naming the command and Maven's last lines when it fails.
    """
    target = cache_dir(name)
    if (target / "deps.txt").is_file():
        return target
    with _locked(target.with_name(target.name + ".lock")):
        if (target / "deps.txt").is_file():  # another process fetched while this one waited
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise PeerUnavailable(f"{name}: mvn is not on PATH; install Maven to fetch {pom(name)}")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        command = [
            mvn,
            "-s",
            str(SETTINGS),
            "-B",
            "-q",
            "-C",
            "-f",
            str(pom(name)),
            f"{PLUGIN}:copy-dependencies",
            f"{PLUGIN}:list",
            f"-DoutputDirectory={partial / 'jars'}",
            f"-DoutputFile={partial / 'deps.txt'}",
            "-DincludeScope=runtime",
            "-DoutputAbsoluteArtifactFilename=false",
        ]
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as exc:
            raise PeerUnavailable(f"{name}: Maven did not finish within {FETCH_TIMEOUT:.0f} s") from exc
        if done.returncode != 0 or not (partial / "deps.txt").is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
            raise PeerUnavailable(f"{name}: `{' '.join(command)}` exited {done.returncode}:\n{tail}")
        (partial / "fetch-seconds").write_text(f"{time.monotonic() - started:.1f}\n")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        return target


def artifacts(name: str) -> list[Artifact]:
    """Every jar of ``name`` (fetched if needed), from Maven's dependency listing, in its order."""
    home = fetch(name)
    found: list[Artifact] = []
    for line in (home / "deps.txt").read_text().splitlines():
        parts = line.strip().split(":")
        if len(parts) not in (5, 6) or parts[2] != "jar":
            continue  # the header and blank lines
        group, artifact, _type = parts[:3]
        classifier = parts[3] if len(parts) == 6 else ""
        version = parts[-2]
        file = f"{artifact}-{version}{'-' + classifier if classifier else ''}.jar"
        found.append(Artifact(group, artifact, version, classifier, home / "jars" / file))
    missing = [a.path.name for a in found if not a.path.is_file()]
    if not found or missing:
        raise PeerUnavailable(f"{name}: the cache {home} is incomplete (missing {missing[:3]}); delete it")
    return found


def jars(name: str) -> list[Path]:
    """The jar files of ``name`` (fetched if needed)."""
    return [a.path for a in artifacts(name)]


def version(name: str, artifact_id: str) -> str:
    """The resolved version of ``artifact_id`` among ``name``'s jars."""
    for a in artifacts(name):
        if a.artifact_id == artifact_id:
            return a.version
    raise KeyError(f"{name}: no artifact {artifact_id}")


def spark_jars_dir() -> Path:
    """pyspark's own jars (the classpath the suite's Spark starts with)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def delta_jars() -> list[Path]:
    """The Delta Lake jars Spark lacks: delta-spark and what it needs that pyspark does not ship.

    Jars of an artifact pyspark already has (Hadoop, Parquet, Jackson, Scala, log4j, ...) are
    left out: Spark loads its own first anyway, and fewer jars start faster.
    """
    shipped = {p.name for p in spark_jars_dir().glob("*.jar")}

    def in_spark(artifact_id: str) -> bool:
        prefix = artifact_id + "-"
        return any(n.startswith(prefix) and n[len(prefix) : len(prefix) + 1].isdigit() for n in shipped)

    return [a.path for a in artifacts("delta") if not in_spark(a.artifact_id)]


def delta_spark_conf() -> dict[str, str]:
    """Spark conf for a session with Delta Lake from the cached jars (no network at start)."""
    return {
        "spark.jars": ",".join(str(p) for p in delta_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }


def main(argv: list[str]) -> int:
    names = argv or list(NAMES)
    failed = 0
    for name in names:
        started = time.monotonic()
        try:
            found = artifacts(name)
        except (PeerUnavailable, ValueError) as exc:
            print(f"peers: {exc}", file=sys.stderr)
            failed += 1
            continue
        size = sum(a.path.stat().st_size for a in found) / 2**20
        print(
            f"peers: {name}: {len(found)} jars, {size:.0f} MiB in {cache_dir(name)} "
            f"({time.monotonic() - started:.1f} s)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
