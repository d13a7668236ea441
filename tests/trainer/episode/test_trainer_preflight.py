"""The preflight refuses to train blind: each check on hand-made inputs, DDAI's real SlideVQA set
against the synthetic world's corpus through the CLI (exit 2 before training, naming the missing
golden pages), and a run that skips it records so and counts its flat steps."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from support.backends import toy_backends
from support.toy_world import run_args, run_fields, tiny_on_toy
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.backends import JudgeResult
from ddai.trainer import toy
from ddai.trainer.episode.chat import CHATML_TEMPLATE
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
from ddai.trainer.episode.preflight import (
    PreflightError,
    PreflightReport,
    SampledEpisode,
    check_chat_template,
    check_episodes,
    check_golden_pages,
    check_search,
)
from ddai.trainer.episode.tasks import Task
from ddai.trainer.runtime.run_warnings import no_signal
from ddai.trainer.runtime.zero_variance import ZeroVarianceSteps
from ddai.trainer.tiny import FIXTURE_TEXT, build_tiny, train_tokenizer

PROMPT = ({"role": "user", "content": "Which year?"},)


def _task(uid, pages, question="Which year?"):
    return Task(uid=uid, messages=PROMPT, question=question, reference_pages=tuple(pages))


class ListSearch:
    def __init__(self, results=None, fail=False):
        self.results, self.fail, self.calls = results or [], fail, 0

    def search(self, query, k=5, doc=None):
        self.calls += 1
        if self.fail:
            raise ConnectionError("refused")
        return [(p, 1.0) for p in self.results[:k]]


def test_golden_pages_missing_is_an_error_naming_them():
    report = PreflightReport()
    check_golden_pages(report, [_task("a", ["1_1"]), _task("b", ["9_9"])], {"1_1"}, "pages.pq")
    [err] = report.errors
    assert err.check == "golden pages" and "9_9" in err.message and "1 of 2 prompts" in err.message
    with pytest.raises(PreflightError, match="9_9") as e:
        report.raise_errors()
    assert "--skip-preflight" in str(e.value)


def test_search_must_return_a_golden_page_for_some_question():
    tasks = [_task("a", ["1_1"]), _task("b", ["2_1"])]
    ok = PreflightReport()
    search = ListSearch(["5_5", "2_1"])
    check_search(ok, tasks, search, k=3)
    assert ok.findings == [] and ok.checks["search"]["with_golden_hit"] == 1 and search.calls == 2
    blind = PreflightReport()
    check_search(blind, tasks, ListSearch(["5_5"]), k=3)
    assert "returned no golden page" in blind.errors[0].message
    empty = PreflightReport()
    check_search(empty, tasks, ListSearch([]), k=3)
    assert "returned nothing" in empty.errors[0].message
    down = PreflightReport()
    check_search(down, tasks, ListSearch(fail=True), k=3)
    assert "ConnectionError: refused" in down.errors[0].message


def test_chat_template_must_render_and_decode_the_tags():
    tok = train_tokenizer([FIXTURE_TEXT])
    good = PreflightReport()
    check_chat_template(good, lambda m: tok.apply_chat_template(m, tokenize=False), tok, PROMPT)
    assert good.findings == [] and good.checks["chat template"]["problems"] == 0
    # A template that drops the think of assistant turns (as some reasoning templates do).
    tok.chat_template = CHATML_TEMPLATE.replace(
        "message['content'] + '<|im_end|>'",
        "message['content'].split('</think>')[-1] + '<|im_end|>'",
    )
    stripped = PreflightReport()
    check_chat_template(stripped, lambda m: tok.apply_chat_template(m, tokenize=False), tok, PROMPT)
    assert len(stripped.errors) == 3 and "verbatim" in stripped.errors[0].message
    # Tags as special tokens vanish when the rollout decodes with skip_special_tokens.
    special = train_tokenizer([FIXTURE_TEXT])
    special.add_special_tokens({"additional_special_tokens": ["<search>", "</search>"]})
    dropped = PreflightReport()
    check_chat_template(
        dropped, lambda m: special.apply_chat_template(m, tokenize=False), special, PROMPT
    )
    assert [e.message for e in dropped.errors] == [
        "the tags of '<think>I need the chart.</think>\\n<search>revenue by year</search>' do "
        "not survive decoding (special tokens?): parsed as invalid"
    ]


def test_episodes_flat_rewards_warn_and_failed_scoring_errors():
    flat = PreflightReport()
    check_episodes(flat, [SampledEpisode(g, 0.0, False, False) for g in (0, 0, 1, 1)])
    assert flat.errors == [] and "all 4 sampled rewards are 0" in flat.warnings[0].message
    assert flat.checks["episodes"]["zero_variance_groups"] == 2
    flat.raise_errors()  # a warning does not stop the run
    mixed = PreflightReport()
    check_episodes(mixed, [SampledEpisode(0, r, True, True) for r in (0.0, 1.0)])
    assert mixed.findings == [] and mixed.checks["episodes"]["zero_variance_groups"] == 0
    broken = PreflightReport()
    check_episodes(broken, [SampledEpisode(0, 0.0, True, True, "judge: HTTP 500")] * 2)
    assert "failed on all 2" in broken.errors[0].message and "HTTP 500" in broken.errors[0].message


def test_zero_variance_steps_count_steps_whose_groups_are_all_flat():
    z = ZeroVarianceSteps()
    assert z.observe(1, [[0.0, 0.0], [1.0, 1.0]]) is True
    assert z.observe(2, [[0.0, 0.5], [1.0, 1.0]]) is False
    assert z.observe(3, [[0.2, 0.2]]) is True
    assert z.observe(3, [[0.2, 0.7]]) is False  # a second batch of step 3 has signal
    assert z.count == 1
    # 6 groups seen, of which [0, 0.5] and [0.2, 0.7] are mixed.
    assert z.groups == 6 and z.informative_share == pytest.approx(2 / 6)
    assert ZeroVarianceSteps().informative_share is None
    # A generation trained over two optimizer steps: a flat one leaves both without a signal.
    two = ZeroVarianceSteps()
    assert two.observe(1, [[0.0, 0.0]], span=2) is True
    assert two.observe(3, [[0.0, 1.0]], span=2) is False
    assert two.count == 2 and sorted(two.steps) == [1, 2, 3, 4]


def test_cli_grpo_on_slidevqa_with_the_world_corpus_exits_2_naming_missing_pages(shared, tmp_path):
    runner = CliRunner()
    world = tmp_path / "world"
    assert runner.invoke(app, ["fixtures", "make", str(world)]).exit_code == 0
    tiny = build_tiny(tmp_path / "tiny")
    out = tmp_path / "out"
    res = runner.invoke(
        app,
        [
            "train",
            "grpo",
            *run_args(
                tiny, shared / "ddai-data" / "slidevqa_train_6667.parquet", world / "pages.parquet"
            ),
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "preflight failed before training" in text and "[golden pages]" in text
    assert "of 6667 prompts have golden pages missing from the corpus" in text
    assert "14_7" in text  # train_0's golden page (14.pdf, page 7)
    assert "--skip-preflight" in text
    assert not out.exists()  # nothing trained, nothing written


class CountingJudge:
    name = "counting"

    def __init__(self, score=None, error=None):
        self.score, self.error, self.calls = score, error, 0

    async def judge(self, reqs):
        self.calls += len(reqs)
        return [JudgeResult(score=self.score, error=self.error) for _ in reqs]


def _grpo(tmp_path, judge, **kw):
    from ddai.trainer.grpo.train import GRPORunConfig, run_grpo

    data = toy.write_toy(tmp_path / "toy")
    tiny = tiny_on_toy(tmp_path / "tiny")
    backends = toy_backends(judge)
    cfg = GRPORunConfig(
        **run_fields(tiny, data, tmp_path / "grpo", tmp_path / "logs", "pf"),
        n_agent=2,
        **{"batch_size": 4, "max_steps": 1, **kw},
        episode=EpisodeConfig(
            max_turns=2, max_turn_tokens=8, max_completion_tokens=48, obs_max_tokens=8
        ),
        rewards=RewardOverrides(reward="judge-only"),
    )
    return run_grpo(cfg, backends)


@pytest.mark.slow
def test_failing_judge_stops_grpo_before_training(tmp_path):
    judge = CountingJudge(error="HTTP 500")
    with pytest.raises(PreflightError, match=r"\[episodes\].*HTTP 500"):
        _grpo(tmp_path, judge)
    assert judge.calls == 4  # the preflight's 2 prompts x n_agent 2, then nothing
    assert not (tmp_path / "grpo" / "checkpoint-1").exists()
    assert not (tmp_path / "grpo" / "run_config.json").exists()


@pytest.mark.slow
def test_skipped_preflight_is_recorded_and_flat_steps_are_counted(tmp_path):
    judge = CountingJudge(score=1.0)  # every rollout the same reward: no learning signal
    result = _grpo(tmp_path, judge, skip_preflight=True)
    assert judge.calls == 4  # one step of 4 rollouts; no preflight calls
    assert result.preflight == "skipped" and result.zero_variance_steps == 1
    # the closing summary says the run learned nothing from its rewards
    assert result.informative_group_share == 0.0
    assert "learned nothing" in (no_signal(asdict(result)) or "")
    run_config = json.loads((tmp_path / "grpo" / "run_config.json").read_text("utf-8"))
    assert run_config["skip_preflight"] is True and run_config["config"]["skip_preflight"]
    assert run_config["command"] == "train grpo" and run_config["preflight"]["checks"] == {}


@pytest.mark.slow
def test_flat_steps_count_every_optimizer_step_of_a_generation(tmp_path):
    # gspo-ddai trains each generation in two optimizer steps: 3 steps are generations at steps
    # 1 (steps 1, 2) and 3 (step 3; its step 4 never runs), every group flat.
    judge = CountingJudge(score=1.0)
    result = _grpo(
        tmp_path, judge, skip_preflight=True, preset="gspo-ddai", batch_size=2, max_steps=3
    )
    assert judge.calls == 8 and result.steps == 3
    assert result.zero_variance_steps == 3
    assert "(zero_variance_steps 3)" in (no_signal(asdict(result)) or "")


def test_a_report_as_recorded_in_run_config():
    report = PreflightReport()
    report.checks["search"] = {"questions": 2, "with_golden_hit": 0, "empty": 2}
    report.add("search", "error", "returned nothing", "index the corpus")
    report.add("episodes", "warning", "flat")
    assert report.to_dict() == {
        "skipped": False,
        "checks": {"search": {"questions": 2, "with_golden_hit": 0, "empty": 2}},
        "findings": [
            {
                "check": "search",
                "level": "error",
                "message": "returned nothing",
                "fix": "index the corpus",
            },
            {"check": "episodes", "level": "warning", "message": "flat", "fix": ""},
        ],
    }
    assert list(report.to_dict()) == ["skipped", "checks", "findings"]
