"""The training commands' closing summary: a run whose rewards taught nothing says so; a run
whose merged LoRA model failed its check exits 1."""

from __future__ import annotations

import json

from ddai.cli.running import main_summary
from ddai.trainer.runtime.run_warnings import clip_inert, no_signal


def test_no_signal_only_when_no_group_had_reward_variance():
    assert no_signal({"steps": 3, "informative_group_share": 0.25}) is None
    assert no_signal({"steps": 3, "informative_group_share": None}) is None  # no group seen
    assert no_signal({"steps": 0, "informative_group_share": 0.0}) is None
    assert no_signal({"steps": 3}) is None  # not a GRPO/PPO summary
    why = no_signal({"steps": 3, "zero_variance_steps": 3, "informative_group_share": 0.0})
    assert why is not None
    assert "3 step(s)" in why and "learned nothing" in why and "ddai curate focus" in why


def test_ppo_no_signal_reads_its_own_gae_advantages_not_the_groups():
    flat_groups = {"steps": 2, "zero_variance_steps": 2, "informative_group_share": 0.0}
    # PPO with equal rewards but GAE advantages from -0.030 to +0.038: it learned from them
    assert no_signal({**flat_groups, "advantage_abs_max": 0.038}) is None
    assert no_signal({**flat_groups, "advantage_abs_max": None}) is None  # no step ran
    why = no_signal({**flat_groups, "advantage_abs_max": 0.0, "zero_advantage_steps": 2})
    assert why is not None and "every GAE advantage of the run's 2 step(s) was 0" in why
    # mixed groups do not hide all-zero advantages
    mixed = {"steps": 2, "informative_group_share": 0.5, "advantage_abs_max": 0.0}
    assert "learned nothing" in (no_signal(mixed) or "")


def test_the_summary_warns_on_stderr_and_keeps_stdout_json(capsys):
    data = {"steps": 2, "zero_variance_steps": 2, "informative_group_share": 0.0}
    main_summary("ddai train grpo", data, as_json=True)
    out, err = capsys.readouterr()
    assert json.loads(out)["informative_group_share"] == 0.0  # stdout stays parseable
    assert "warning:" in err and "no group of the run's 2 step(s)" in err
    main_summary("ddai train grpo", {**data, "informative_group_share": 0.5}, as_json=True)
    assert "warning" not in capsys.readouterr().err


def test_a_failed_merge_check_exits_1_with_its_message(capsys):
    import pytest
    import typer

    from ddai.cli.running import run_or_fail
    from ddai.trainer.lora_merge import MergeCheckFailed

    def run():
        raise MergeCheckFailed("no merged model written; the final model is the adapter in o/a")

    with pytest.raises(typer.Exit) as e:
        run_or_fail(run)
    assert e.value.exit_code == 1
    assert "the final model is the adapter in o/a" in capsys.readouterr().err


def _clip(**over):
    data = {
        "steps": 4,
        "clip_acted_steps": 0,
        "ratio_spread": 3.9e-5,
        "minibatches_after_update": 2,
        "minibatches_first": 2,
        "epsilon_low": 3e-4,
        "epsilon_high": 4e-4,
    }
    return {**data, **over}


def test_clip_inert_gives_the_spread_and_epsilon():
    why = clip_inert(_clip())
    assert why is not None
    assert "ε_low 0.0003, ε_high 0.0004" in why and "never acted in the run's 4 step(s)" in why
    assert "largest |ratio − 1| was 3.9e-05" in why
    assert "2 mini-batch(es) trained first after their generation" in why and "not counted" in why
    assert clip_inert(_clip(clip_acted_steps=1)) is None
    assert clip_inert(_clip(clip_acted_steps=None)) is None  # a loss type without a clip
    assert clip_inert(_clip(steps=0)) is None
    assert clip_inert({"steps": 3, "informative_group_share": 0.5}) is None  # PPO, SFT


def test_clip_inert_says_when_the_ratio_could_not_move():
    why = clip_inert(_clip(ratio_spread=None, minibatches_after_update=0, minibatches_first=4))
    assert why is not None
    assert "could not" in why and "each of its 4 mini-batch(es) was the first" in why
    assert "steps_per_generation=2" in why and "largest" not in why


def test_clip_stats_count_steps_and_keep_first_minibatches_out_of_the_spread():
    from ddai.trainer.runtime.clip_stats import ClipStats

    stats = ClipStats(3e-4, 4e-4)
    stats.observe(1, after_update=False, spread=0.5, clipped=0.0)  # float noise: not counted
    stats.observe(2, after_update=True, spread=2e-5, clipped=0.0)
    stats.observe(3, after_update=True, spread=1e-3, clipped=0.25)
    stats.observe(3, after_update=True, spread=4e-4, clipped=0.0)
    fields = stats.result_fields()
    assert fields["clip_acted_steps"] == 1 and fields["ratio_spread"] == 1e-3
    assert fields["minibatches_first"] == 1 and fields["minibatches_after_update"] == 3


def test_the_summary_warns_when_the_clip_never_acted(capsys):
    main_summary("ddai train grpo", _clip(informative_group_share=0.5), as_json=True)
    out, err = capsys.readouterr()
    assert json.loads(out)["clip_acted_steps"] == 0
    assert "warning:" in err and "never acted" in err and "no group" not in err


def _options(*path: str) -> set[str]:
    import typer

    from ddai.cli.app import app

    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


def test_every_flag_a_run_warning_names_is_a_flag_of_its_command():
    import re

    grpo, ppo = _options("train", "grpo"), _options("train", "ppo")
    flat = {"steps": 2, "zero_variance_steps": 2, "informative_group_share": 0.0}
    said = {
        "grpo clip, spread inside ε": (clip_inert(_clip()), grpo),
        "grpo clip, ratio 1": (clip_inert(_clip(minibatches_after_update=0)), grpo),
        "grpo no signal": (no_signal(flat), grpo),
        "ppo no signal": (no_signal({**flat, "advantage_abs_max": 0.0}), ppo),
    }
    for what, (why, options) in said.items():
        assert why is not None, what
        named = set(re.findall(r"--[a-z][a-z-]*", why))
        assert named, what
        assert named <= options, f"{what}: {sorted(named - options)} are not flags: {why}"
