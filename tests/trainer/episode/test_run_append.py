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


@pytest.mark.parametrize(
    ("flags", "setting", "old", "new"),
    [
        (["--max-turns", "4"], "--max-turns", "3", "4"),
        (["--crop-pad", "28"], "--crop-pad", "0", "28"),
        (["--no-force-completion"], "--force-completion", "True", "False"),
        (["--search-k", "2"], "--search-k", "5", "2"),
        (["--temperature", "0.9"], "--temperature", "0.6", "0.9"),
        (["--w-ndcg", "0.5"], "--w-ndcg", "0.9", "0.5"),
        (["--observation", "text", "--generator-max-images", "2"], "--generator-max-images",
         "8", "2"),
    ],
)  # fmt: skip
def test_collect_append_under_other_episode_rules_exits_2_naming_them(
    existing, flags, setting, old, new
):
    """Rollouts of other rules would mix under one run id: refused before anything loads,
    naming the run, the setting, both values and the fix; the run keeps its rows."""
    logs, collect, _ = existing
    before = n_rows(logs)
    res = collect("--append", *flags)
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert f"run 'seen' was made with {setting} {old}" in out
    assert f"this run's is {new}" in out
    assert "a new --run-id" in out and f"own {setting} {old}" in out
    assert n_rows(logs) == before


def test_collect_append_records_its_rules_in_every_commit(existing):
    from ddai.pipelines.store import run_manifest
    from ddai.trainer.episode.run_rules import recorded

    logs, _, _ = existing
    commits = recorded(run_manifest(logs, "seen"))
    assert commits and all(c["max_turns"] == 3 and c["crop_pad"] == 0 for c in commits)
    assert all(c["temperature"] == 0.6 and c["top_k"] == 7 for c in commits)
    assert all(c["generate_via"] == "pol" and c["w_ndcg"] == 0.9 for c in commits)
    assert all(c["search"]["kind"] == "bm25" and c["judge"] is None for c in commits)


def test_collect_append_to_a_run_that_recorded_no_rules_is_accepted_with_a_note(existing):
    """A run from before the rules were recorded (here: its crop padding only) takes the
    rollouts, saying which settings it could not check; the one it recorded is still checked."""
    from ddai.pipelines import store

    logs, collect, _ = existing
    row = {"uid": "train_1", "rollout_idx": 0, "sample_idx": 0}
    store.write_run(logs, "legacy", [row], append=True, manifest={"crop_pad": 0})
    refused = collect("--run-id", "legacy", "--append", "--crop-pad", "5")
    assert refused.exit_code == 2 and "was made with --crop-pad 0" in refused.output
    with pytest.warns(UserWarning, match=r"run 'legacy' records no value of --max-turns") as w:
        ok = collect("--run-id", "legacy", "--append")
    assert ok.exit_code == 0, ok.output
    assert "--crop-pad" not in str(w[0].message)  # recorded, so checked, not noted
    assert read_rollouts(logs, ["legacy"]).num_rows == 7


def test_eval_append_with_another_crop_pad_exits_2(existing):
    logs, _, (_, data, tiny) = existing
    args = ["eval", "--model", str(tiny), "--data", str(data / "dataset.parquet"),
            "--corpus", str(data / "pages.parquet"), "--logs", str(logs), "--run-id", "ev",
            "--generate-via", "pol", "--reward", "ddai-phase1", "--limit", "1",
            "--max-turns", "3", "--max-turn-tokens", "40", "--max-completion-tokens", "400",
            "--obs-max-tokens", "12", "--skip-preflight", "--json"]  # fmt: skip
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    mixed = runner.invoke(app, [*args, "--append", "--crop-pad", "0"])
    assert mixed.exit_code == 2, mixed.output
    out = " ".join(mixed.output.split())
    assert "run 'ev' was made with --crop-pad 28" in out and "this run's is 0" in out
    again = runner.invoke(app, [*args, "--append"])
    assert again.exit_code == 0, again.output
    assert read_rollouts(logs, ["ev"]).num_rows == 2


@pytest.mark.parametrize("cmd", ["grpo", "ppo"])
def test_train_append_or_resume_under_other_episode_rules_exits_2(existing, tmp_path, cmd):
    """``train grpo/ppo --append`` into a run of other rules, and a ``--resume`` under other rules
    than the checkpointed run's ``run_config.json``, are refused before any model loads."""
    import json

    logs, _, (_, data, tiny) = existing
    base = ["train", cmd, "--model", str(tiny), "--data", str(data / "dataset.parquet"),
            "--corpus", str(data / "pages.parquet"), "--logs", str(logs)]  # fmt: skip
    res = runner.invoke(app, [*base, "--run-id", "seen", "--append", "--max-turns", "4",
                              "--out-dir", str(tmp_path / "a")])  # fmt: skip
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert "run 'seen' was made with --max-turns 3" in out and "this run's is 4" in out
    run = tmp_path / "r"
    (run / "checkpoint-1").mkdir(parents=True)
    (run / "run_config.json").write_text(json.dumps({"rules": {"max_turns": 3}}), "utf-8")
    res = runner.invoke(app, [*base, "--run-id", "r", "--resume", "--max-turns", "4",
                              "--out-dir", str(run)])  # fmt: skip
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert f"the run in {run} was made with --max-turns 3" in out and "this run's is 4" in out
    assert "Resume with the run's own --max-turns 3" in out
