"""Shared test helpers: paths to the repository's fixtures and to ../shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = (ROOT / ".." / "shared").resolve()
FIXTURES = ROOT / "fixtures"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The suite runs one pytest worker per core; tiny torch models are far slower when each worker
# also spreads its kernels over every core.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(
            f"shared data folder {SHARED} is missing; tests expect ../shared beside the repo"
        )
    return SHARED


@pytest.fixture(autouse=True)
def _isolated_workspace(tmp_path_factory, monkeypatch):
    """Every test gets its own workspace, so nothing writes into ./ddai-work."""
    home = tmp_path_factory.mktemp("ddai-home")
    monkeypatch.setenv("DDAI_HOME", str(home))
    monkeypatch.delenv("DDAI_LOGS", raising=False)
    monkeypatch.delenv("DDAI_CONFIG", raising=False)
