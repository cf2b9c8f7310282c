"""Fixtures of the job tests that run the repository's own job files."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def repo_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository's jobs and local profile with their data under ``tmp_path`` (returned);
    the working directory is the repository."""
    monkeypatch.setenv("PIPELINES_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("PIPELINES_PROJECT_DIR", raising=False)
    monkeypatch.chdir(ROOT)
    return tmp_path
