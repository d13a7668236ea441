"""The episode's reward backends (generator, judge) refuse a remote backend without its key before
any model loads: exit 2 naming the variable and the role's local default, nothing written, no
call (``default_backends``); every reward call would otherwise fail ``no-key`` (null rewards)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.backends import keyless_backend
from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()
VAR = "DDAI_TEST_UNSET_REWARD_KEY"
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


@pytest.mark.parametrize(
    ("flag", "local"), [("--judge", "local-judge"), ("--generator", "extractive")]
)
def test_a_keyless_remote_reward_backend_is_refused_before_the_model_loads(
    tmp_path, monkeypatch, flag, local
):
    keyless_backend(tmp_path, monkeypatch, "flash", "gemini", "gemini-x", VAR)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    # the model does not exist: loading it would fail differently, so exit 2 here is the refusal
    res = runner.invoke(app, [
        "collect", "--model", str(tmp_path / "no-model"), "--data", str(FIXTURES / "dataset.parquet"),
        "--corpus", str(FIXTURES / "pages.parquet"), "--logs", str(tmp_path / "logs"),
        "--run-id", "c1", "--limit", "2", flag, "flash",
    ])  # fmt: skip
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"${VAR}" in text and f"{flag} local ({local}" in text, text
    assert sorted(tmp_path.rglob("*")) == before  # no log, no call cache
