"""Test helpers for jobs: ``run_job(path, **overrides)`` runs a job file like ``pipelines run``.

Use it with the ``pulsar_broker`` fixture of pulsarwire's pytest plugin::

    def test_ingest(pulsar_broker, tmp_path, monkeypatch):
        monkeypatch.setenv("PULSAR_URL", pulsar_broker.service_url)
        monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path))
        result = run_job("jobs/orders_ingest.yaml", trigger="availableNow")
        assert result.exit_code == 0

Keyword overrides are ``--set`` values with ``__`` for the dots of the key path
(``sink__delta__path="/tmp/t"`` is ``--set sink.delta.path=/tmp/t``). The job runs in this
process and joins an active SparkSession (the test suite's) instead of starting one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.jobs import runner
from pipelines.jobs.config import load_job
from pipelines.jobs.models import Job
from pipelines.options.bound import parse_bound


@dataclass(frozen=True)
class RunResult:
    job: Job
    exit_code: int


def overrides_of(values: dict[str, Any]) -> list[str]:
    """``{"sink__delta__path": "/t", "spark__conf": {...}}`` → ``["sink.delta.path=/t", ...]``."""
    out = []
    for key, value in values.items():
        text = value if isinstance(value, str) else json.dumps(value)
        out.append(f"{key.replace('__', '.')}={text}")
    return out


def load(path: str | Path, env: str | None = "local", **overrides: Any) -> Job:
    return load_job(str(path), env, overrides_of(overrides))


def run_job(path: str | Path, env: str | None = "local", **overrides: Any) -> RunResult:
    """Load ``path`` with the profile ``env`` and ``overrides``, then run it to its end."""
    job = load(path, env, **overrides)
    return RunResult(job, runner.run_job(job))


def backfill(
    path: str | Path,
    env: str | None = "local",
    start: str | None = None,
    end: str | None = None,
    **overrides: Any,
) -> RunResult:
    """``pipelines backfill`` for tests; ``start``/``end`` as the CLI's ``--from``/``--to``."""
    job = load(path, env, **overrides)
    first = None if start is None else parse_bound(start)
    last = None if end is None else parse_bound(end, end=True)
    return RunResult(job, runner.backfill(job, first, last))
