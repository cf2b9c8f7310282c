"""The newest pyspark that pyproject claims, in a venv of its own (issue 28, 7; marker newest_pyspark).

``make setup`` pins pyspark 4.2.0 (delta-spark's pin: constraints.txt), while ``pip install
'pulsarwire[spark]'`` resolves the newest release in the claimed range. This test builds that
install: a new venv, the project from this tree with the ``spark`` extra, every other package
at its constraints.txt pin and pyspark left to pip. It checks that pip took the newest release
the claim allows (asking the index which exist), that it has every data source API pipelines
uses (tests/helpers/pyspark_api.py), and runs a small job through the installed ``pipelines``
command: 20 orders on our broker into a Delta table, counted with deltalake. Not part of ``make
test`` (a venv and pyspark's install take minutes): ``make test-newest-pyspark``, which .ci/run
runs after the suite with its time printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from deltalake import DeltaTable
from packaging.requirements import Requirement
from packaging.version import Version

from jobs.demo import produce
from pulsarwire.broker import Broker
from tests.helpers.cli import ROOT

pytestmark = [pytest.mark.newest_pyspark, pytest.mark.timeout(1800)]

#: pins not to apply: pyspark is what is tested, py4j comes with it, delta-spark pins pyspark
UNPINNED = ("pyspark", "py4j", "delta-spark", "delta_spark")


def _run(*args: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=1500, **kw)  # type: ignore[call-overload,no-any-return]


def claimed_pyspark() -> Requirement:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (req,) = [Requirement(r) for r in extras["spark"] if r.startswith("pyspark")]
    return req


def newest_allowed(python: Path, req: Requirement) -> Version:
    index = _run(python, "-m", "pip", "index", "versions", "pyspark")
    assert index.returncode == 0, index.stderr
    listed = re.search(r"Available versions: (.+)", index.stdout)
    assert listed is not None, index.stdout
    versions = [Version(v.strip()) for v in listed.group(1).split(",")]
    return max(v for v in versions if req.specifier.contains(v))


def test_the_newest_claimed_pyspark_runs_a_job(tmp_path: Path) -> None:
    started = time.monotonic()
    constraints = tmp_path / "constraints.txt"
    kept = [
        line
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if not line.lower().startswith(tuple(f"{name}==" for name in UNPINNED))
    ]
    constraints.write_text("\n".join(kept) + "\n")
    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", venv).returncode == 0
    python = venv / "bin" / "python"
    installed = _run(python, "-m", "pip", "install", "--quiet", "-c", constraints, f"{ROOT}[spark]")
    assert installed.returncode == 0, installed.stderr[-3000:]
    version = _run(python, "-c", "import pyspark; print(pyspark.__version__)").stdout.strip()
    claim = claimed_pyspark()
    newest = newest_allowed(python, claim)
    print(f"\nnewest pyspark claimed ({claim}): {newest}; installed {version}")
    assert Version(version) == newest

    api = _run(
        python,
        "-c",
        "import json, pyspark, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from tests.helpers.pyspark_api import missing; "
        "print(json.dumps(missing(Path(pyspark.__file__).parent.parent)))",
        ROOT,
        cwd=tmp_path,
    )
    assert api.returncode == 0 and json.loads(api.stdout) == [], api.stdout + api.stderr

    with Broker() as broker:
        produce(broker.service_url, "orders", 20)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "PULSAR_", "PYSPARK_"))}
        env.update(PULSAR_URL=broker.service_url, PIPELINES_DATA_DIR=str(tmp_path / "data"))
        env.pop("PYTHONPATH", None)  # the venv's own install, not this tree's modules
        ran = _run(venv / "bin" / "pipelines", "run", "jobs/orders_ingest.yaml", cwd=ROOT, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    table = DeltaTable(str(tmp_path / "data" / "tables" / "orders_raw")).to_pyarrow_table()
    assert sorted(table.column("order_id").to_pylist()) == list(range(20))
    print(f"pyspark {version}: venv, install and a 20-order job in {time.monotonic() - started:.0f} s")
