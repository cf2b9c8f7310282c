"""Suite-wide setup: the repository root importable, the hypothesis profile, Spark tests on one worker.

* ``tests.helpers`` is importable (the repository root goes on ``sys.path``).
* The hypothesis profile named by ``PULSARWIRE_HYPOTHESIS_PROFILE`` (``ci`` by default, ``dev``
  for fewer examples) is loaded before any test module is imported (tests/helpers/examples.py).
* Under pytest-xdist (``-n``, on by default in pyproject's addopts), every test that uses Spark
  is put in the xdist group ``spark``: a test that names the session-scoped ``spark`` fixture, or
  one marked ``spark`` (it starts Spark in a process of its own, or asks for the fixture through
  ``request.getfixturevalue``). With ``--dist loadgroup`` the group runs on one worker, so the
  suite starts the session's JVM once and never runs two Spark drivers at once on 2 cores.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers.examples import ENV as PROFILE_ENV  # noqa: E402  (needs ROOT on sys.path)
from tests.helpers.examples import load_profile  # noqa: E402

PROFILE = load_profile()

# Spark's Python workers must run this interpreter (the one with the project installed).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

#: the xdist group of every test that runs Spark
SPARK_GROUP = "spark"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "spark: the test runs Spark without naming the spark fixture (a Spark process of its own, "
        "or request.getfixturevalue); it runs in the spark xdist group",
    )


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis profile: {PROFILE} (${PROFILE_ENV})"


def tag_group(item: pytest.Item, group: str) -> None:
    """Give ``item`` the node id ``--dist loadgroup`` schedules by: ``<node id>@<group>``.

    pytest-xdist 3.8 tags grouped tests by assigning ``item._nodeid``, which pytest 9.2 no longer
    reads (a node's id is ``item._id`` now), so its ``xdist_group`` marks alone group nothing.
    """
    from _pytest.nodeid import coerce_node_id

    if not item.nodeid.endswith(f"@{group}"):
        item._id = coerce_node_id(f"{item.nodeid}@{group}")


def uses_spark(item: pytest.Item) -> bool:
    return "spark" in getattr(item, "fixturenames", ()) or item.get_closest_marker("spark") is not None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Spark tests into one xdist group, and first: the group is the longest unit of work, so it
    starts while the other worker(s) take the rest."""
    spark = [item for item in items if uses_spark(item)]
    for item in spark:
        item.add_marker(pytest.mark.xdist_group(SPARK_GROUP))
        if config.getvalue("loadgroup"):  # an xdist worker under --dist loadgroup
            tag_group(item, SPARK_GROUP)
    chosen = set(map(id, spark))
    items[:] = spark + [item for item in items if id(item) not in chosen]
