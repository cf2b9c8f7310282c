"""``make run`` (jobs/demo.py run): a broker process, sample orders, jobs/orders_ingest.yaml, a summary.

Run in this process on the suite's SparkSession (the runner joins an active session), so a
broken demo fails ``make test`` instead of the first user's ``make run``; a second run adds nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobs.demo import run_demo

ROOT = Path(__file__).resolve().parents[3]


def test_make_run_ingests_the_orders_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PULSAR_URL", "pulsar://127.0.0.1:1")  # replaced by the demo's own broker
    assert run_demo(300, tmp_path) == 0
    first = capsys.readouterr().out
    assert "produced 300 orders (300 new, the rest deduplicated)" in first, first
    assert ": 300 rows, 300 orders" in first, first
    assert "offsets of job orders_ingest in " in first, first

    assert run_demo(300, tmp_path) == 0  # make run again: the broker deduplicates, the job resumes
    again = capsys.readouterr().out
    assert "produced 300 orders (0 new, the rest deduplicated)" in again, again
    assert ": 300 rows, 300 orders" in again, again
