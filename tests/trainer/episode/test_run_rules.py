"""``run_rules``: the rules recorded with a run's rollouts, and the refusal of rollouts (or a
resumed training) under other rules, backends from ``ddai.toml`` included."""

from __future__ import annotations

import json

import pytest

from ddai.pipelines import store
from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.collect_config import CollectConfig
from ddai.trainer.episode.config import EpisodeBackends, RewardOverrides
from ddai.trainer.episode.run_rules import check_append, check_resume, episode_rules


def _rules(tmp_path, monkeypatch, prompt: str, **cfg):
    """The rules of a collection judged by backend ``j`` whose prompt is ``prompt``."""
    toml = tmp_path / f"ddai_{abs(hash(prompt))}.toml"
    toml.write_text(
        f'[backends.j]\nkind = "openai"\nmodel = "judge-1"\nprompt = "{prompt}"\nconcurrency = 3\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DDAI_CONFIG", str(toml))
    config = CollectConfig(
        model="m", data=tmp_path, corpus=tmp_path, backends=EpisodeBackends(judge="j"), **cfg
    )
    return episode_rules(config)


def _run(logs, rules) -> None:
    row = {"uid": "train_1", "rollout_idx": 0, "sample_idx": 0}
    store.write_run(logs, "r", [row], append=True, manifest={"rules": rules})


def test_a_judge_with_another_prompt_is_refused_its_concurrency_is_not(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    rules = _rules(tmp_path, monkeypatch, "Score it.")
    assert rules["judge"]["name"] == "j" and rules["judge"]["model"] == "judge-1"
    assert rules["w_judge"] == 0.8 and rules["gate"] is True  # curriculum, applied
    _run(logs, rules)
    assert check_append(logs, "r", rules, "ddai collect") is None  # same rules, all recorded
    other = _rules(tmp_path, monkeypatch, "Score it kindly.")
    with pytest.raises(TrainConfigError, match=r"run 'r' was made with --judge .*prompt_sha256"):
        check_append(logs, "r", other, "ddai collect")
    # the reward as applied counts: another preset set to the same weights is the same reward
    same = RewardOverrides(reward="judge-only", w_judge=0.8, w_ndcg=0.2, gate=True)
    assert (
        check_append(logs, "r", _rules(tmp_path, monkeypatch, "Score it.", rewards=same), "x")
        is None
    )
    judge_only = _rules(
        tmp_path, monkeypatch, "Score it.", rewards=RewardOverrides(reward="judge-only")
    )
    with pytest.raises(
        TrainConfigError, match=r"--w-judge 0.8 \(its manifest\); this run's is 1.0"
    ):
        check_append(logs, "r", judge_only, "ddai collect")
    assert check_append(logs, "new", other, "ddai collect") is None  # a new run: nothing to mix


def test_a_run_mixed_already_is_refused_on_its_older_value(tmp_path, monkeypatch):
    """Every commit's value counts, not only the folded manifest's latest one."""
    logs = tmp_path / "logs"
    rules = _rules(tmp_path, monkeypatch, "p")
    _run(logs, {**rules, "max_turns": 4})
    row = {"uid": "train_2", "rollout_idx": 0, "sample_idx": 1}
    store.write_run(logs, "r", [row], append=True, manifest={"rules": rules})
    with pytest.raises(TrainConfigError, match="--max-turns 4"):
        check_append(logs, "r", rules, "ddai collect")


def test_resume_under_other_rules_is_refused_and_an_old_run_config_noted(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    rules = _rules(tmp_path, monkeypatch, "p")
    (out / "run_config.json").write_text(json.dumps({"config": {}}), encoding="utf-8")
    note = check_resume(out, rules, "ddai train grpo")
    assert note is not None and "records no value of --max-turns" in note
    (out / "run_config.json").write_text(json.dumps({"rules": rules}), encoding="utf-8")
    assert check_resume(out, rules, "ddai train grpo") is None
    with pytest.raises(TrainConfigError) as e:
        check_resume(out, {**rules, "crop_pad": 28}, "ddai train grpo")
    msg = str(e.value)
    assert f"the run in {out} was made with --crop-pad 0" in msg and "this run's is 28" in msg
    assert "Resume with the run's own --crop-pad 0" in msg
