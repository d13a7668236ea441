"""A step whose model backend is remote and has no key (its variable unset, no ``base_url``) is
refused before any work: exit 2 naming the variable, the role's flag and its local default,
nothing written, no call; a dry run (which calls nothing) still plans."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.backends import keyless_backend
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.backends import ConfigError, step_backend
from ddai.pipelines.backends.step_configs import RejudgeConfig

runner = CliRunner()
VAR = "DDAI_TEST_UNSET_GEMINI_KEY"
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


@pytest.fixture
def keyless(tmp_path, monkeypatch) -> Path:
    """A ``ddai.toml`` with one Gemini backend ``flash`` whose key variable is unset; the
    workspace (call cache) under ``tmp_path/home``; the working directory ``tmp_path/work``."""
    keyless_backend(tmp_path, monkeypatch, "flash", "gemini", "gemini-x", VAR)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _judge_args(work: Path) -> list[str]:
    logs = work / "logs"
    rows = [
        {"uid": "u0", "rollout_idx": 0, "question": "q", "reference_answer": "1", "answer": "1"}
    ]
    store.write_run(logs, "r1", rows)
    return ["judge", "--logs", str(logs), "--run", "r1", "--judge", "flash"]


def _verify_args(work: Path) -> list[str]:
    return [
        "curate", "verify-gt", "--dataset", str(FIXTURES / "dataset.parquet"),
        "--corpus", str(FIXTURES / "pages.parquet"), "--out-dir", str(work / "out"),
        "--verifier", "flash",
    ]  # fmt: skip


def _vet_args(work: Path) -> list[str]:
    msgs = [
        {"role": "user", "content": "How many?"},
        {"role": "assistant", "content": "<think>look</think>\n<search>users</search>"},
        {"role": "user", "content": "page text"},
        {"role": "assistant", "content": "<think>done</think>\n<search_complete>true</search_complete>"},
    ]  # fmt: skip
    src = work / "sft.parquet"
    table = {"uid": ["a"], "format_version": ["v1"], "messages": [json.dumps(msgs)]}
    pq.write_table(pa.table(table), src)
    return ["distill", "vet", str(src), "--out", str(work / "kept.parquet"), "--vetter", "flash"]


CASES = {
    "judge": (_judge_args, "--judge", "local-judge"),
    "verify-gt": (_verify_args, "--verifier", "local-verifier"),
    "vet": (_vet_args, "--vetter", "local-vetter"),
}


def _tree(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_keyless_remote_backend_is_refused_before_any_work(keyless, case):
    make_args, flag, local = CASES[case]
    args = make_args(keyless)
    before = _tree(keyless.parent)
    res = runner.invoke(app, args)
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"${VAR}" in text and f"{flag} local ({local}" in text, text
    assert _tree(keyless.parent) == before  # no output, no call cache: nothing written


def test_a_dry_run_with_a_keyless_remote_backend_still_plans(keyless):
    res = runner.invoke(app, [*_judge_args(keyless), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["to_call"] == 1


def test_step_backend_refuses_only_what_would_fail_every_call(keyless, monkeypatch):
    cfg = RejudgeConfig(logs=keyless, run="r1", judge="flash")
    with pytest.raises(ConfigError, match=rf"\${VAR}.*--judge local"):
        step_backend("judge", "flash", cfg, "t", cache=False)
    # a dry run calls nothing; a set key, or the local default, is no refusal
    dry = RejudgeConfig(logs=keyless, run="r1", judge="flash", dry_run=True)
    assert step_backend("judge", "flash", dry, "t", cache=False).name == "flash"
    monkeypatch.setenv(VAR, "k")
    assert step_backend("judge", "flash", cfg, "t", cache=False).name == "flash"
    assert step_backend("judge", "local", cfg, "t", cache=False).name == "local"
