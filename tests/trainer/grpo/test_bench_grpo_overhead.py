"""The GRPO overhead bench's accounting (not its timing claim, which needs the full run): one
round on a tiny model, the policy tokens it counts on each side against what each side produced
(plain TRL's fixed length, TRL's tool loop's turns and answers, ddai's rollout log), the ABBA
order and the ratio's arithmetic."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from support.toy_world import tiny_on_toy

BENCH = Path(__file__).parents[3] / "bench" / "bench_grpo_overhead.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_grpo_overhead", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_grpo_overhead"] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("pairs", "sides", "order"),
    [
        (4, "pd", ["p0", "d0", "d1", "p1", "p2", "d2", "d3", "p3"]),
        (2, "pod", ["p0", "o0", "d0", "d1", "o1", "p1"]),
    ],
)
def test_sides_alternate_order_abba(pairs, sides, order):
    bench = _bench()
    calls: list[str] = []

    def side(name):
        def run(i):
            calls.append(f"{name}{i}")
            return bench.SideRun(name)

        return run

    runs = bench.interleaved(pairs, *(side(name) for name in sides))
    assert calls == order
    assert [tuple(r.side for r in rnd) for rnd in runs] == [tuple(sides)] * pairs


def test_step_clock_counts_the_work_after_a_step_in_that_step(monkeypatch):
    """A step runs from its on_step_begin to the next one's (or the epoch's end): what callbacks
    do after on_step_end (ddai's commit of the step's rollouts, its metrics) is in the step."""
    bench = _bench()
    now = {"wall": 0.0, "cpu": 0.0}
    monkeypatch.setattr(bench.time, "perf_counter", lambda: now["wall"])
    monkeypatch.setattr(bench.time, "process_time", lambda: now["cpu"])
    run = bench.SideRun("x")
    clock = bench.StepClock(run)

    def tick(wall, cpu):
        now["wall"] += wall
        now["cpu"] += cpu

    for step_s, after_s in ((1.0, 0.25), (2.0, 0.5)):
        clock.on_step_begin(None, None, None)
        tick(step_s, step_s / 2)
        clock.on_step_end(None, None, None)
        tick(after_s, after_s)  # a later callback's commit, then on_log
    clock.on_epoch_end(None, None, None)
    clock.on_train_end(None, None, None)  # nothing left open: no extra step
    assert run.wall == [1.25, 2.5]
    assert run.cpu == [0.75, 1.5]


def test_ratio_is_seconds_per_policy_token_over_timed_steps():
    bench = _bench()
    # warm-up step first: its 9 s and 10 tokens are left out
    p = bench.SideRun("plain", wall=[9.0, 2.0, 2.0], cpu=[1, 1, 1], tokens=[10, 100, 100])
    p.rollouts, p.sequence = [4, 4, 4], [10, 100, 100]
    d = bench.SideRun("ddai", wall=[9.0, 3.0, 3.0], cpu=[1, 2, 2], tokens=[10, 100, 50])
    d.rollouts, d.sequence = [4, 4, 4], [20, 200, 100]
    assert p.s_per_token == pytest.approx(4.0 / 200)
    assert d.s_per_token == pytest.approx(6.0 / 150)
    assert d.tokens_per_rollout == pytest.approx(150 / 8)
    assert d.sequence_per_rollout == pytest.approx(300 / 8)
    assert d.s_per_sequence_token == pytest.approx(6.0 / 300)
    s = bench.Spread.of([1.0, 2.0, 3.0, 4.0, 10.0])
    assert (s.median, s.lo, s.hi, s.q1, s.q3) == (3.0, 1.0, 10.0, 2.0, 4.0)
    with pytest.raises(RuntimeError, match="1 generations counted"):
        bench.SideRun("x", wall=[1.0, 1.0], tokens=[5]).timed()


@pytest.mark.slow
def test_one_pair_counts_the_policy_tokens_each_side_produced(tmp_path, capsys):
    from ddai.pipelines import store
    from ddai.trainer import toy

    bench = _bench()
    args = bench.parse(
        ["--steps", "1", "--batch-size", "4", "--n-agent", "2", "--turn-tokens", "8",
         "--max-turns", "2", "--obs-max-tokens", "16"]
    )  # fmt: skip
    data = toy.write_toy(tmp_path / "toy")
    model = tiny_on_toy(tmp_path / "tiny")
    plain = bench.plain_trl(model, toy.dataset_rows(), tmp_path / "plain", args)
    tools = bench.trl_tool_loop(model, toy.dataset_rows(), tmp_path / "tools", args)
    ddai = bench.ddai_multiturn(model, data, tmp_path / "ddai", args)

    # plain TRL: eos cannot end a completion early, so every rollout is exactly P = 2 × 8 tokens
    assert plain.tokens == [4 * 16, 4 * 16]
    assert plain.rollouts == [4, 4] and plain.sequence == plain.tokens
    assert len(plain.wall) == len(plain.cpu) == 2
    # ddai: the counted policy tokens are those its rollout log records, step by step
    rows = store.read_rollouts(tmp_path / "ddai" / "logs", ["overhead"]).to_pylist()
    per_step: dict[int, int] = {}
    seq: dict[int, int] = {}
    for r in rows:
        extra = json.loads(r["extra"])
        per_step[r["step"]] = per_step.get(r["step"], 0) + extra["policy_tokens"]
        seq[r["step"]] = seq.get(r["step"], 0) + extra["completion_tokens"]
    assert ddai.tokens == [per_step[1], per_step[2]]
    assert ddai.sequence == [seq[1], seq[2]]
    assert ddai.rollouts == [4, 4] and len(ddai.wall) == 2
    # at most P policy tokens per rollout; observations make the sequence longer
    assert all(0 < t <= 4 * 16 for t in ddai.tokens)
    assert all(s > t for s, t in zip(ddai.sequence, ddai.tokens, strict=True))

    # TRL's tool loop: P policy tokens (2 turns of exactly 8), one tool answer between them,
    # masked out of the loss, sized to fill ddai's budget S = 2 × (8 + OBS_ROOM)
    from ddai.trainer.modeling import load_policy

    _, tok = load_policy(str(model))
    tok.chat_template = bench.TOOL_TEMPLATE
    budget = 2 * (8 + bench.OBS_ROOM)
    answer = bench.tool_suffix(tok, bench.observation_text(tok, budget - 16))
    assert budget - 3 <= 16 + len(answer) <= budget
    assert tools.tokens == [4 * 16, 4 * 16] and tools.rollouts == [4, 4]
    assert tools.sequence == [4 * (16 + len(answer))] * 2
    assert all(s <= 4 * budget for s in ddai.sequence)

    # every step's phases are clocked: the rollout holds the generation (and ddai's prefill)
    for side in (plain, tools, ddai):
        assert len(side.phases) == len(side.wall)
        for p in side.phases:
            assert 0 < p["generate"] + p["prefill"] <= p["rollout"] and p["loss"] > 0
            assert p["backward"] > 0
    assert all(p["prefill"] == 0 for p in plain.phases + tools.phases)
    assert all(p["prefill"] > 0 for p in ddai.phases)

    three = bench.report([(plain, tools, ddai)], args)
    text = capsys.readouterr().out
    overhead = ddai.s_per_token / tools.s_per_token
    assert three["overhead"]["ratio"].median == pytest.approx(overhead)
    assert three["observations"]["ratio"].median == pytest.approx(
        tools.s_per_token / plain.s_per_token
    )
    assert (
        f"ddai / TRL's tool loop (ddai's overhead at equal work): wall s per "
        f"policy token median {overhead:.3f}" in text
    )

    out = bench.report([(plain, ddai)], args)
    text = capsys.readouterr().out
    ratio = ddai.s_per_token / plain.s_per_token
    assert out["ratio"].median == pytest.approx(ratio)
    seq_ratio = ddai.s_per_sequence_token / plain.s_per_sequence_token
    assert out["sequence_ratio"].median == pytest.approx(seq_ratio)
    assert f"median {ratio:.3f}" in text
    assert "16 policy tokens per rollout" in text


def test_tool_loop_reads_every_turn_as_one_search_call(tmp_path):
    """The tool-loop side's response template: any sampled text is one ``search`` call whose
    query is that text (the tiny random policy writes no tool-call syntax), and TRL accepts the
    side's chat template for tool calling."""
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    from ddai.trainer.modeling import load_policy

    bench = _bench()
    _, tok = load_policy(str(tiny_on_toy(tmp_path / "tiny")))
    tok.chat_template = bench.TOOL_TEMPLATE
    tok.response_template = bench.EVERY_TURN_SEARCHES
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    prefix = tok.apply_chat_template(
        [{"role": "user", "content": "q"}],
        tokenize=True,
        return_dict=False,
        add_generation_prompt=True,
    )
    parsed = tok.parse_response(tok.encode("revenue 2019 chart"), prefix=prefix)
    call = {"name": "search", "arguments": {"query": "revenue 2019 chart"}}
    assert parsed == {"role": "assistant", "tool_calls": [{"type": "function", "function": call}]}


def test_phase_ms_splits_each_timed_step():
    """Mean ms per timed step (warm-up dropped): the rollout less what generate and the prefill
    took inside it, and the step less the rollout, the loss pass and the backward."""
    bench = _bench()
    warm = dict(rollout=9.0, generate=8.0, prefill=0.5, loss=0.1, backward=0.1)
    one = dict(rollout=0.6, generate=0.4, prefill=0.1, loss=0.1, backward=0.2)
    two = dict(rollout=0.8, generate=0.6, prefill=0.1, loss=0.1, backward=0.2)
    run = bench.SideRun("ddai", wall=[10.0, 1.0, 1.2], phases=[warm, one, two])
    ms = bench.phase_ms(run)
    assert ms["step"] == pytest.approx(1100.0)
    assert ms["generate"] == pytest.approx(500.0) and ms["prefill"] == pytest.approx(100.0)
    assert ms["rest of rollout"] == pytest.approx(700.0 - 500.0 - 100.0)
    assert ms["loss forward"] == pytest.approx(100.0) and ms["backward"] == pytest.approx(200.0)
    assert ms["rest of step"] == pytest.approx(1100.0 - 700.0 - 100.0 - 200.0)
