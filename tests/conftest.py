"""Suite-wide setup: the repository root importable, the hypothesis profile, Spark tests on one worker.

* ``tests.helpers`` is importable (the repository root goes on ``sys.path``).
* The hypothesis profile named by ``PULSARWIRE_HYPOTHESIS_PROFILE`` (``ci`` by default, ``dev``
  for fewer examples) is loaded before any test module is imported (tests/helpers/examples.py).
* Under pytest-xdist (``-n``, on by default in pyproject's addopts, with ``--dist loadgroup``)
  every test that uses the session-scoped ``spark`` fixture (by name, or marked ``spark`` when it
  asks for it through ``request.getfixturevalue``) is in the xdist group ``spark``: one worker runs
  them all, so the suite starts the session's JVM once. Tests that start Spark in a child process
  of their own and need no session (marker ``spark_process``: the docs blocks run in a clean
  shell) are the group ``spark-process``, one at a time on another worker: at most two Spark
  drivers run at once on 2 cores.
* Real peers (marker ``real``): ``real_kafka`` (Apache Kafka, KRaft) and ``real_pulsar`` (Apache
  Pulsar standalone), one each per run, started on first use from the jars Maven fetched
  (tests/helpers/peers.py, docs/testing.md). Their tests are the xdist groups ``real-kafka`` and
  ``real-pulsar`` (one worker each starts one JVM). The versions and start times are printed at
  the end of the run. A peer that cannot be fetched or started is an error, not a skip.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers.examples import ENV as PROFILE_ENV  # noqa: E402  (needs ROOT on sys.path)
from tests.helpers.examples import load_profile  # noqa: E402
from tests.helpers.real_kafka import RealKafka, kafka_cluster  # noqa: E402
from tests.helpers.real_pulsar import RealPulsar, pulsar_standalone  # noqa: E402

PROFILE = load_profile()

# Spark's Python workers must run this interpreter (the one with the project installed).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

#: the xdist group of the tests on the suite's SparkSession, and of those that start Spark (a JVM of
#: their own) in a child process without the session
SESSION_GROUP = "spark"
PROCESS_GROUP = "spark-process"
#: the xdist group of the tests on each real peer (by fixture name)
REAL_GROUPS = {"real_kafka": "real-kafka", "real_pulsar": "real-pulsar"}
#: "peer version: started in N s" lines of this process (a worker sends its own to the controller)
_PEER_LINES: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "spark: the test uses the suite's SparkSession without naming the spark fixture "
        "(request.getfixturevalue); it runs in the spark xdist group",
    )
    config.addinivalue_line(
        "markers",
        "spark_process: the test starts Spark in a process of its own (the spark-process xdist group, "
        "or the spark group when it also uses the session)",
    )
    config.addinivalue_line(
        "markers",
        "real: the test runs against a real peer from Maven Central (real_kafka, real_pulsar); "
        "`pytest -m real` runs them alone (docs/testing.md)",
    )


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis profile: {PROFILE} (${PROFILE_ENV})"


def tag_group(item: pytest.Item, group: str) -> None:
    """Give ``item`` the node id ``--dist loadgroup`` schedules by: ``<node id>@<group>``.

    pytest-xdist 3.8 tags grouped tests by assigning ``item._nodeid``, which pytest 9.2 no longer
    reads (a node's id is ``item._id`` now), so its ``xdist_group`` marks alone group nothing.
    """
    if item.nodeid.endswith(f"@{group}"):
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest before 9.2 reads item._nodeid, the attribute xdist sets
        item._nodeid = f"{item.nodeid}@{group}"
        return
    item._id = coerce_node_id(f"{item.nodeid}@{group}")


def spark_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that runs Spark or a real peer; None for one that does none."""
    names = getattr(item, "fixturenames", ())
    if "spark" in names or item.get_closest_marker("spark") is not None:
        return SESSION_GROUP
    if item.get_closest_marker("spark_process") is not None:
        return PROCESS_GROUP
    for fixture, group in REAL_GROUPS.items():
        if fixture in names:
            return group
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Spark tests into their two xdist groups, and first: the groups are the longest units of
    work, so they start while the other workers take the rest.

    One worker runs the session's tests (one JVM for all of them); another the tests whose Spark
    runs in child processes, one at a time: never more than two Spark drivers at once.
    """
    grouped: list[pytest.Item] = []
    for item in items:
        group = spark_group(item)
        if group is None:
            continue
        grouped.append(item)
        item.add_marker(pytest.mark.xdist_group(group))
        if group in REAL_GROUPS.values():  # a test on a real peer is one of make test-real's
            item.add_marker(pytest.mark.real)
        if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
            tag_group(item, group)
    chosen = set(map(id, grouped))
    items[:] = grouped + [item for item in items if id(item) not in chosen]


# --------------------------------------------------------------------------- real peers


def _note_peer(config: pytest.Config, line: str) -> None:
    _PEER_LINES.append(line)
    output = getattr(config, "workeroutput", None)  # an xdist worker: goes to the controller
    if output is not None:
        output["real_peers"] = list(_PEER_LINES)


@pytest.fixture(scope="session")
def real_kafka(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealKafka]:
    """Apache Kafka (KRaft, one node): PLAINTEXT and SASL_PLAINTEXT (PLAIN) listeners on loopback."""
    with kafka_cluster(tmp_path_factory.mktemp("real-kafka")) as kafka:
        _note_peer(
            request.config,
            f"Apache Kafka {kafka.version}: storage formatted in {kafka.format_seconds:.1f} s, "
            f"broker ready in {kafka.start_seconds:.1f} s",
        )
        yield kafka


@pytest.fixture(scope="session")
def real_pulsar(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealPulsar]:
    """Apache Pulsar standalone: token auth (anonymous allowed), metadata and bookie in a temp dir."""
    with pulsar_standalone(tmp_path_factory.mktemp("real-pulsar")) as pulsar:
        _note_peer(
            request.config,
            f"Apache Pulsar {pulsar.version} standalone: ready in {pulsar.start_seconds:.1f} s",
        )
        yield pulsar


def pytest_testnodedown(node: Any, error: Any) -> None:
    """(xdist controller) collect a finished worker's real-peer lines."""
    _PEER_LINES.extend(getattr(node, "workeroutput", {}).get("real_peers", []))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _PEER_LINES and getattr(config, "workerinput", None) is None:
        terminalreporter.section("real peers")
        for line in _PEER_LINES:
            terminalreporter.write_line(line)


# -- servers of other kinds, for what a client meets at a wrong address --------------------------------
@pytest.fixture
def http_port() -> Iterator[int]:
    """A plain HTTP server on a loopback port: a port that speaks another protocol than Pulsar's."""

    class Quiet(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A test CA (``ca``: its certificate) and a certificate for localhost and 127.0.0.1 with its
    key in one PEM file (``cert``)."""
    import trustme

    d = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    files = {"ca": d / "ca.pem", "cert": d / "cert.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(files["cert"]))
    return files
