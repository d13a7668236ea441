"""A training or collection run into an existing ``--run-id`` is refused (exit 2, naming the run and
the fix) unless ``--append`` (or ``--resume``) says to add to it: a second run would log every
prompt's rollouts again. With ``--append`` the rollouts are added."""

from __future__ import annotations

import os

import pytest
from support.fake_vllm import FakeVLLMServer
from test_collect import collect_args
from test_collect import world as world
from test_vllm_server import responder
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts

runner = CliRunner()


@pytest.fixture(scope="module")
def existing(world, tmp_path_factory):
    """A run ``seen`` of 6 rollouts collected through a fake policy server, and how to collect
    into it again."""
    root, data, tiny, tok = world
    home = tmp_path_factory.mktemp("append")
    with FakeVLLMServer(responder(tok), model="served-policy", decode=tok.decode) as server:
        (home / "ddai.toml").write_text(
            f'[backends.pol]\nkind = "openai"\nmodel = "served-policy"\n'
            f'base_url = "{server.url}/v1"\n',
            encoding="utf-8",
        )
        cwd = os.getcwd()
        os.chdir(home)
        try:

            def collect(*extra: str):
                args = [*collect_args(root, data, tiny, "seen"), "--generate-via", "pol"]
                return runner.invoke(app, [*args, "--logs", str(home / "logs"), *extra])

            first = collect()
            assert first.exit_code == 0, first.output
            yield home / "logs", collect, (root, data, tiny)
        finally:
            os.chdir(cwd)


def n_rows(logs) -> int:
    return read_rollouts(logs, ["seen"]).num_rows


def test_train_grpo_and_ppo_into_an_existing_run_exit_2_naming_it(existing):
    logs, _, (_, data, tiny) = existing
    base = ["--model", str(tiny), "--data", str(data / "dataset.parquet")]
    base += ["--corpus", str(data / "pages.parquet"), "--logs", str(logs), "--run-id", "seen"]
    for cmd in ("grpo", "ppo"):
        res = runner.invoke(app, ["train", cmd, *base, "--out-dir", str(logs.parent / cmd)])
        assert res.exit_code == 2, res.output
        assert f"ddai train {cmd}: run 'seen' already exists" in res.output
        assert "--append" in res.output and "--resume" in res.output
        assert not (logs.parent / cmd).exists()
    assert n_rows(logs) == 6
    # --resume continues the run: not refused (here it fails later, for want of a checkpoint).
    res = runner.invoke(
        app, ["train", "grpo", *base, "--out-dir", str(logs.parent / "r"), "--resume"]
    )
    assert "already exists" not in res.output


def test_collect_into_an_existing_run_needs_append_and_then_appends(existing):
    logs, collect, _ = existing
    again = collect()
    assert again.exit_code == 2 and "run 'seen' already exists" in again.output
    assert n_rows(logs) == 6
    appended = collect("--append")
    assert appended.exit_code == 0, appended.output
    assert n_rows(logs) == 12
    # The appended rollouts number after the run's own: no (uid, sample_idx) key repeats.
    keys = read_rollouts(logs, ["seen"], ["uid", "sample_idx"]).to_pylist()
    assert sorted(k["sample_idx"] for k in keys) == list(range(12))


def test_appending_to_a_training_run_warns_that_steps_repeat(tmp_path):
    from ddai.pipelines import store

    logs = tmp_path / "logs"
    row = {"uid": "train_1", "rollout_idx": 0, "sample_idx": 0, "step": 1}
    store.write_run(logs, "trained", [row], append=True, manifest={"step": 1})
    args = ["train", "grpo", "--model", "m", "--data", str(tmp_path / "none.parquet")]
    args += ["--corpus", str(tmp_path), "--logs", str(logs), "--run-id", "trained", "--append"]
    args += ["--out-dir", str(tmp_path / "out")]
    res = runner.invoke(app, args)
    assert "already holds training steps 1..1" in res.stderr
    assert "already exists" not in res.output  # appended, not refused (it stops at --data)
