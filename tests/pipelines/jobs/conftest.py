"""Fixtures of the job tests that run the repository's own job files.

* ``repo_data`` — the repository's jobs and local profile, their data under ``tmp_path``;
* ``broker`` — the ``pulsar_broker`` fixture (our broker, deduplication on) with ``PULSAR_URL``
  pointing at it, so that the local profile's jobs read from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarwire.broker import Broker

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def repo_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository's jobs and local profile with their data under ``tmp_path`` (returned);
    the working directory is the repository."""
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("PIPELINES_PROJECT_DIR", raising=False)
    monkeypatch.chdir(ROOT)
    return tmp_path


@pytest.fixture
def broker(pulsar_broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Broker:
    monkeypatch.setenv("PULSAR_URL", pulsar_broker.service_url)
    return pulsar_broker
