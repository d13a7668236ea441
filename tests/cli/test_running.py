"""The training commands' closing summary: a run whose rewards taught nothing says so; a run
whose merged LoRA model failed its check exits 1."""

from __future__ import annotations

import json

from ddai.cli.running import main_summary, no_signal


def test_no_signal_only_when_no_group_had_reward_variance():
    assert no_signal({"steps": 3, "informative_group_share": 0.25}) is None
    assert no_signal({"steps": 3, "informative_group_share": None}) is None  # no group seen
    assert no_signal({"steps": 0, "informative_group_share": 0.0}) is None
    assert no_signal({"steps": 3}) is None  # not a GRPO/PPO summary
    why = no_signal({"steps": 3, "zero_variance_steps": 3, "informative_group_share": 0.0})
    assert why is not None
    assert "3 step(s)" in why and "learned nothing" in why and "ddai curate focus" in why


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
