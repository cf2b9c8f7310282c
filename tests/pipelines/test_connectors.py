"""The connector layer's own rules, read from the code: the modules that run every job never name
a kind of source or sink, and the contracts load no Spark.

The proof that they hold in practice is ``tests/pipelines/jobs/test_connector_plugin.py`` (a
connector from outside runs a whole job); this file keeps a change from quietly bringing a
branch on a kind back.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipelines"
#: the modules every job runs through: they talk to connectors, never about kinds
KIND_FREE = (
    "jobs/runner.py",
    "jobs/preflight.py",
    "jobs/config.py",
    "jobs/idle.py",
    "state/exactly_once.py",
    "state/offsets.py",
    "state/checkpoint.py",
)
#: ``job.source.pulsar``, ``sink.kind``, ``source.delta`` ... and the kinds as strings (Spark's
#: ``format("delta")`` is the storage the offset store is written in, not a kind of sink)
NAMES_A_KIND = re.compile(
    r"\b(source|sink)\.(kind|pulsar|delta|console)\b|(?<!format\()[\"'](pulsar|delta|console)[\"']"
)


@pytest.mark.parametrize("module", KIND_FREE)
def test_the_modules_every_job_runs_through_name_no_kind(module: str) -> None:
    lines = (PACKAGE / module).read_text().splitlines()
    found = [f"{module}:{i}: {line.strip()}" for i, line in enumerate(lines, 1) if NAMES_A_KIND.search(line)]
    assert found == []


def test_the_runner_stays_small() -> None:
    assert len((PACKAGE / "jobs" / "runner.py").read_text().splitlines()) <= 450


def test_the_contracts_load_no_spark() -> None:
    code = (
        "import sys\n"
        "import pipelines.connectors.base, pipelines.connectors.section, pipelines.jobs.preflight\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr
