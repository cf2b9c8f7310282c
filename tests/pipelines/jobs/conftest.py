"""Fixtures of the job tests: the local profile's data in a temporary directory, a broker.

* ``project`` — ``PIPELINES_DATA_DIR`` at the test's ``tmp_path``, the working directory the
  repository (``jobs/``, ``conf/``).
* ``broker`` — the ``pulsar_broker`` fixture with ``PULSAR_URL`` pointing at it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarwire.broker import Broker
from tests.helpers.cli import ROOT


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The local profile pointed at ``tmp_path`` for data; the working directory is the repo."""
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("PIPELINES_PROJECT_DIR", raising=False)
    monkeypatch.chdir(ROOT)
    return tmp_path


@pytest.fixture
def broker(pulsar_broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Broker:
    monkeypatch.setenv("PULSAR_URL", pulsar_broker.service_url)
    return pulsar_broker
