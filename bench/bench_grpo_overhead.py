"""Benchmark: ddai's multi-turn GRPO step against TRL's GRPO, at equal policy tokens.

Both sides train the same tiny model on the same prompts and batch (``--batch-size`` rollouts,
``--n-agent`` per prompt). The work is made equal in policy tokens (the tokens the policy samples
and the loss trains on), the unit both sides spend generation and gradient on:

- plain TRL generates exactly ``P = --max-turns × --turn-tokens`` tokens per rollout with its own
  ``generate`` (``min_new_tokens = max_completion_length = P``: the end-of-sequence token cannot
  end a completion early) and scores it with a constant-cost reward;
- ddai runs multi-turn episodes of ``--max-turns`` turns of at most ``--turn-tokens`` sampled tokens
  each (lock-step batched generation, the search environment, observation tokens, the reward and
  the rollout log), with a completion budget that leaves room for every observation, so the
  policy samples up to the same ``P`` tokens per rollout (fewer when a turn samples the
  end-of-turn token early: the environment then answers with a corrective observation).

A third side is plain TRL doing ddai's whole work, the same multi-turn episode through TRL's own
tool loop (``GRPOTrainer(tools=[search])``):

- TRL's tool loop: each rollout's turns of exactly ``--turn-tokens`` sampled tokens (``min_new_tokens
  = max_new_tokens``), every turn read as a ``search`` call (the tokenizer's response template
  takes a turn's text as the query, as ddai's environment takes the text in ``<search>``), the
  tool answering with the same corrective observation text ddai's environment gives this bench's
  random policy, sized so the rollout's sequence is ddai's (``S`` tokens: ``--max-turns`` turns,
  ``--max-turns - 1`` observations), and ``--max-turns - 1`` tool calls per rollout
  (``max_tool_calling_iterations``). TRL masks the observations out of the loss with its
  ``tool_mask``; its loss pass runs over the same sequence as ddai's.

So ddai / TRL's tool loop is ddai's overhead at equal work (equal policy tokens and equal
observation tokens, both sides a multi-turn search episode; the figure held to the target), and
TRL's tool loop / plain TRL is what carrying observations costs TRL itself: the work single-turn
plain TRL never does. ddai / plain TRL, the product of the two, is printed as well.

Policy tokens are counted the same way on every side, from what TRL's ``_generate`` returns:
a rollout's ``env_mask`` or ``tool_mask`` ones (ddai, TRL's tool loop) or its completion length
(plain TRL),
per step. The primary figure is wall seconds per policy token over the timed steps (each side
run: one warm-up step, then ``--steps``); a step is timed from its ``on_step_begin`` to the next
one's, so the work of callbacks after a step (ddai's commit of the step's rollouts, its metrics)
counts. Seconds per step and CPU seconds per policy token are shown beside it. The sides take
turns over ``--pairs`` rounds in ABBA order (plain first in even rounds, ddai first in odd ones),
so load changes fall on all alike; the machine's load average is recorded before and after each
side run. Printed: per round the rates and ratios, then the median ratio ddai / TRL's tool loop with its
min-max and interquartile range, against the 1.15 target, and ddai / plain TRL and TRL's tool
loop / plain TRL likewise, with the ratios per completion token (observations included). Last, a
table of each side's wall ms per timed step by phase (``PHASES``: the rollout with its generation
and ddai's observation prefill inside it, the loss pass's forward, the backward, the rest).

    python bench/bench_grpo_overhead.py
    python bench/bench_grpo_overhead.py --pairs 7 --steps 3
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from transformers import TrainerCallback

from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides

TARGET = 1.15
"""ddai's wall seconds per policy token may be at most this multiple of TRL's at equal work
(its tool loop on the same episodes)."""
OBS_ROOM = 64
"""Completion tokens per ddai turn kept for its observation (``--obs-max-tokens`` of text, the
chat template's turn markers, the environment's forced completion after the last turn)."""


@dataclass
class SideRun:
    """One side's training run: per optimizer step its wall and CPU seconds and policy tokens
    (the first step is the warm-up), and the load average before and after."""

    side: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    rollouts: list[int] = field(default_factory=list)
    sequence: list[int] = field(default_factory=list)
    """Completion tokens per step, observations included (what the loss pass runs over)."""
    load: tuple[float, float] = (0.0, 0.0)
    phases: list[dict[str, float]] = field(default_factory=list)
    """Per step, wall seconds inside each of ``PHASES`` (the first step is the warm-up)."""

    def timed(self) -> tuple[float, float, int, int]:
        """Wall s, CPU s, policy tokens and rollouts of the timed steps (warm-up dropped)."""
        if len(self.wall) < 2 or len(self.tokens) != len(self.wall):
            raise RuntimeError(
                f"{self.side}: {len(self.wall)} steps timed and {len(self.tokens)} generations "
                "counted; expected one generation per step and at least one step after the warm-up"
            )
        return (
            sum(self.wall[1:]),
            sum(self.cpu[1:]),
            sum(self.tokens[1:]),
            sum(self.rollouts[1:]),
        )

    @property
    def s_per_token(self) -> float:
        wall, _, tokens, _ = self.timed()
        return wall / tokens

    @property
    def cpu_per_token(self) -> float:
        _, cpu, tokens, _ = self.timed()
        return cpu / tokens

    @property
    def tokens_per_rollout(self) -> float:
        _, _, tokens, rollouts = self.timed()
        return tokens / rollouts

    @property
    def sequence_per_rollout(self) -> float:
        return sum(self.sequence[1:]) / sum(self.rollouts[1:])

    @property
    def s_per_sequence_token(self) -> float:
        wall, _, _, _ = self.timed()
        return wall / sum(self.sequence[1:])

    @property
    def s_per_step(self) -> float:
        return statistics.fmean(self.wall[1:])


class StepClock(TrainerCallback):
    """Wall and CPU seconds of each optimizer step into ``run``: from the step's
    ``on_step_begin`` to the next one's, or to the epoch's end (``on_epoch_end``, which follows the
    last step's logging), so the work callbacks do after a step (ddai commits the step's rollouts
    to its log and writes the step's metrics in ``on_step_end`` and ``on_log``, whatever the
    callbacks' order) counts in its step."""

    def __init__(self, run: SideRun) -> None:
        self.run = run
        self._t: float | None = None
        self._c = 0.0

    def _close(self) -> None:
        if self._t is not None:
            self.run.wall.append(time.perf_counter() - self._t)
            self.run.cpu.append(time.process_time() - self._c)
            self._t = None

    def on_step_begin(self, args, state, control, **kwargs):
        self._close()
        self.run.phases.append(dict.fromkeys(PHASES, 0.0))
        self._t, self._c = time.perf_counter(), time.process_time()

    def on_epoch_end(self, args, state, control, **kwargs):
        self._close()

    def on_train_end(self, args, state, control, **kwargs):
        self._close()


def policy_tokens(completion_ids: list[list[int]], tool_mask: list[list[int]] | None) -> int:
    """Policy tokens of one generation batch, as TRL counts its completion lengths: the ones of
    each rollout's ``env_mask`` where the rollout has one, else its whole completion."""
    if tool_mask is not None:
        return sum(sum(m) for m in tool_mask)
    return sum(len(ids) for ids in completion_ids)


PHASES = ("rollout", "generate", "prefill", "loss", "backward")
"""What a step's wall time is split into: TRL's ``_generate`` (the whole rollout: generation,
environment or tools, tokenizing), inside it HF ``generate`` and ddai's KV-cache prefill of the
observations (``TurnCache.prepare``), then TRL's ``compute_loss`` (the loss pass's forward) and
the backward pass; the rest of the step is the optimizer, logging and callbacks."""


def _timed(run: SideRun, key: str, fn: Any) -> Any:
    def wrapper(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            if run.phases:
                run.phases[-1][key] += time.perf_counter() - t

    return wrapper


class count_tokens:
    """Within the block, every ``GRPOTrainer._generate`` (plain TRL's and ddai's subclass alike)
    adds its batch's policy tokens and rollouts to ``run``, and each of ``PHASES`` its wall time
    to the current step's."""

    def __init__(self, run: SideRun) -> None:
        self.run = run

    def __enter__(self) -> None:
        from accelerate import Accelerator
        from transformers.generation.utils import GenerationMixin
        from trl import GRPOTrainer

        from ddai.trainer.episode.kv_reuse import TurnCache

        run, orig = self.run, GRPOTrainer._generate

        def counted(trainer: Any, prompts: list) -> Any:
            out = orig(trainer, prompts)
            completion_ids, tool_mask = out[1], out[2]
            run.tokens.append(policy_tokens(completion_ids, tool_mask))
            run.rollouts.append(len(completion_ids))
            run.sequence.append(sum(len(ids) for ids in completion_ids))
            return out

        self._saved = [
            (GRPOTrainer, "_generate", orig, counted, "rollout"),
            (GenerationMixin, "generate", GenerationMixin.generate, None, "generate"),
            (TurnCache, "prepare", TurnCache.prepare, None, "prefill"),
            (GRPOTrainer, "compute_loss", GRPOTrainer.compute_loss, None, "loss"),
            (Accelerator, "backward", Accelerator.backward, None, "backward"),
        ]
        for owner, name, original, inner, key in self._saved:
            setattr(owner, name, _timed(run, key, inner or original))

    def __exit__(self, *exc: object) -> None:
        for owner, name, original, _, _ in self._saved:
            setattr(owner, name, original)


def phase_ms(run: SideRun) -> dict[str, float]:
    """Mean wall milliseconds per timed step: the step, each of ``PHASES`` (``rollout`` less the
    generation and prefill inside it) and the rest of the step."""
    steps, phases = run.wall[1:], run.phases[1 : len(run.wall)]
    mean = {k: 1e3 * statistics.fmean(p[k] for p in phases) for k in PHASES}
    step = 1e3 * statistics.fmean(steps)
    return {
        "step": step,
        "generate": mean["generate"],
        "prefill": mean["prefill"],
        "rest of rollout": mean["rollout"] - mean["generate"] - mean["prefill"],
        "loss forward": mean["loss"],
        "backward": mean["backward"],
        "rest of step": step - mean["rollout"] - mean["loss"] - mean["backward"],
    }


def print_phases(runs: list[tuple[SideRun, ...]]) -> None:
    """Each side's ``phase_ms`` averaged over the rounds, one row a side."""
    names = ["step", "generate", "prefill", "rest of rollout", "loss forward", "backward"]
    names.append("rest of step")
    print("\nwall ms per timed step, by phase (mean over the rounds):")
    print(f"{'side':>10} " + " ".join(f"{n:>15}" for n in names))
    for k in range(len(runs[0])):
        per = [phase_ms(r[k]) for r in runs]
        cells = " ".join(f"{statistics.fmean(p[n] for p in per):>15.1f}" for n in names)
        print(f"{runs[0][k].side:>10} {cells}")


def train_trl(
    run: SideRun,
    model: Any,
    tok: Any,
    data_rows: list[dict],
    out: Path,
    args: Any,
    completion: int,
    generation_kwargs: dict[str, int],
    config: dict[str, Any] | None = None,
    **trainer_kwargs: Any,
) -> SideRun:
    """TRL's ``GRPOTrainer`` on ``data_rows`` for ``--steps`` + 1 steps, its clock and tokens
    counted into ``run`` (``completion``: its ``max_completion_length``)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    cfg = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.n_agent,
        max_completion_length=completion,
        generation_kwargs=generation_kwargs,
        max_steps=args.steps + 1,
        loss_type="grpo",
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=10_000,
        **(config or {}),
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [float(len(str(c)) % 2) for c in completions],
        args=cfg,
        train_dataset=Dataset.from_list([{"prompt": r["prompt"]} for r in data_rows]),
        processing_class=tok,
        callbacks=[StepClock(run)],
        **trainer_kwargs,
    )
    with count_tokens(run):
        trainer.train()
    return run


def plain_trl(model_dir: Path, data_rows: list[dict], out: Path, args: Any) -> SideRun:
    from ddai.trainer.modeling import load_policy

    model, tok = load_policy(str(model_dir))
    n = args.max_turns * args.turn_tokens
    # every completion exactly n policy tokens: eos cannot end one early
    return train_trl(SideRun("plain"), model, tok, data_rows, out, args, n, {"min_new_tokens": n})


TOOL_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls', []) %}"
    "{{- '<search>' + (call['function'] | tojson) + '</search>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""The tiny model's ChatML with tool calls (rendered as the Searcher's ``<search>`` tag) and tool
turns, which TRL's tool loop needs; like ddai's prompt, it spells out no tool schema."""
EVERY_TURN_SEARCHES = {
    "start_anchor": "<|im_start|>assistant\n",
    "defaults": {"role": "assistant"},
    "fields": {
        "tool_calls": {
            "content": "text",
            "transform": [
                {
                    "type": "function",
                    "function": {"name": "search", "arguments": {"query": "{content}"}},
                }
            ],
        }
    },
}
"""A response template (transformers' ``parse_response``) reading a whole turn as one ``search``
call with the turn's text as its query: the random policy's every turn is a tool call."""


def observation_filler(tok: Any, n: int) -> list[int]:
    """``n`` token ids of the environment's corrective observation text, repeated: what a ddai
    rollout of this bench carries between its turns (no end-of-sequence token among them)."""
    from ddai.trainer.episode.env import INVALID_ACTION

    ids = tok.encode(INVALID_ACTION.format(reason="no action"), add_special_tokens=False)
    stop = {tok.eos_token_id, tok.pad_token_id}
    ids = [i for i in ids if i not in stop]
    return (ids * (n // len(ids) + 1))[:n]


def tool_suffix(tok: Any, content: str) -> list[int]:
    """The tokens TRL's tool loop appends for one ``search`` answer: the chat template's tool turn
    and the next assistant header, after the end of the calling turn (as TRL cuts them)."""
    call = [{"type": "function", "function": {"name": "search", "arguments": {"query": "q"}}}]
    turn = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": call},
    ]
    answer = {"role": "tool", "name": "search", "content": content}
    before = tok.apply_chat_template(turn, tokenize=True, return_dict=False)
    full = tok.apply_chat_template(
        [*turn, answer], tokenize=True, return_dict=False, add_generation_prompt=True
    )
    end = max(i for i, t in enumerate(before) if t == tok.eos_token_id)
    return full[end + 1 :]


def observation_text(tok: Any, n: int) -> str:
    """Corrective observation text whose tool answer (``tool_suffix``) is ``n`` tokens, or the
    longest one under ``n`` when no filler length lands on it exactly."""
    best = ""
    for k in range(1, n + 1):
        text = tok.decode(observation_filler(tok, k))
        size = len(tool_suffix(tok, text))
        if size > n:
            break
        best = text
    return best


def trl_tool_loop(model_dir: Path, data_rows: list[dict], out: Path, args: Any) -> SideRun:
    """ddai's episode run by TRL's own tool loop: ``--max-turns`` turns of exactly
    ``--turn-tokens`` sampled tokens, each read as a ``search`` call (``EVERY_TURN_SEARCHES``),
    the first ``--max-turns - 1`` answered with an observation sized so the rollout fills ddai's
    completion budget ``S``; the observations are masked out of the loss (TRL's ``tool_mask``)."""
    from ddai.trainer.modeling import load_policy

    model, tok = load_policy(str(model_dir))
    tok.chat_template = TOOL_TEMPLATE
    tok.response_template = EVERY_TURN_SEARCHES
    n = args.max_turns * args.turn_tokens
    total = args.max_turns * (args.turn_tokens + OBS_ROOM)
    answer = observation_text(tok, (total - n) // max(1, args.max_turns - 1))

    def search(query: str) -> str:
        """Search the corpus.

        Args:
            query: what to look for
        """
        return answer

    gen = {"min_new_tokens": args.turn_tokens, "max_new_tokens": args.turn_tokens}
    cfg = {"max_tool_calling_iterations": args.max_turns - 1}
    return train_trl(
        SideRun("trl-tools"), model, tok, data_rows, out, args, total, gen, cfg, tools=[search]
    )


def ddai_config(model_dir: Path, data: Path, out: Path, args: Any) -> Any:
    """ddai's run: ``--max-turns`` turns of at most ``--turn-tokens`` policy tokens, with room for
    every observation in the completion budget."""
    from ddai.trainer.grpo import train as grpo

    return grpo.GRPORunConfig(
        model=str(model_dir),
        data=data / "dataset.parquet",
        corpus=data / "pages.parquet",
        output_dir=out,
        logs=out / "logs",
        run_id="overhead",
        n_agent=args.n_agent,
        batch_size=args.batch_size,
        max_steps=args.steps + 1,
        save_steps=10_000,
        report_to="none",
        episode=EpisodeConfig(
            max_turns=args.max_turns + 1,  # the last turn is DDAI's forced completion
            max_turn_tokens=args.turn_tokens,
            max_completion_tokens=args.max_turns * (args.turn_tokens + OBS_ROOM),
            obs_max_tokens=args.obs_max_tokens,
        ),
        rewards=RewardOverrides(reward="ddai-phase1"),
    )


def ddai_multiturn(model_dir: Path, data: Path, out: Path, args: Any) -> SideRun:
    from ddai.trainer import toy
    from ddai.trainer.grpo import train as grpo
    from ddai.trainer.runtime import metrics_file

    run = SideRun("ddai")
    original = metrics_file.build_callbacks

    def with_clock(output_dir, metrics_file, **kwargs):
        return [*original(output_dir, metrics_file, **kwargs), StepClock(run)]

    metrics_file.build_callbacks = with_clock
    try:
        with count_tokens(run):
            grpo.run_grpo(ddai_config(model_dir, data, out, args), toy.local_backends(toy.corpus()))
    finally:
        metrics_file.build_callbacks = original
    return run


def side_run(fn: Any, *a: Any) -> SideRun:
    before = os.getloadavg()[0]
    run = fn(*a)
    run.load = (before, os.getloadavg()[0])
    gc.collect()
    return run


def interleaved(pairs: int, *sides: Any) -> list[tuple[SideRun, ...]]:
    """``pairs`` rounds of one run per side, ABBA: the sides in order in even rounds, in reverse
    in odd ones (each side's mean position is the same); each round's runs in ``sides`` order."""
    out = []
    for i in range(pairs):
        order = range(len(sides)) if i % 2 == 0 else reversed(range(len(sides)))
        got = {k: side_run(sides[k], i) for k in order}
        out.append(tuple(got[k] for k in range(len(sides))))
    return out


@dataclass
class Spread:
    median: float
    lo: float
    hi: float
    q1: float
    q3: float

    @classmethod
    def of(cls, xs: list[float]) -> Spread:
        q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
        return cls(statistics.median(xs), min(xs), max(xs), q[0], q[2])


def _ratios(runs: list[tuple[SideRun, ...]], a: int, b: int) -> dict[str, Spread]:
    """Side ``b`` over side ``a`` per round: wall and CPU s per policy token, s per step, s per
    completion token."""
    return {
        "ratio": Spread.of([r[b].s_per_token / r[a].s_per_token for r in runs]),
        "cpu_ratio": Spread.of([r[b].cpu_per_token / r[a].cpu_per_token for r in runs]),
        "step_ratio": Spread.of([r[b].s_per_step / r[a].s_per_step for r in runs]),
        "sequence_ratio": Spread.of(
            [r[b].s_per_sequence_token / r[a].s_per_sequence_token for r in runs]
        ),
    }


def _line(name: str, f: dict[str, Spread]) -> str:
    s, c = f["ratio"], f["cpu_ratio"]
    return (
        f"{name}: wall s per policy token median {s.median:.3f} (min-max {s.lo:.3f}-{s.hi:.3f}, "
        f"IQR {s.q1:.3f}-{s.q3:.3f}); CPU s per policy token median {c.median:.3f} "
        f"(min-max {c.lo:.3f}-{c.hi:.3f})"
    )


def report(runs: list[tuple[SideRun, ...]], args: Any) -> dict[str, Any]:
    """Print the per-round table and the summary; return the figures. Each round is (plain,
    ddai) or (plain, TRL's tool loop, ddai); with the tool loop, the target is held to ddai / it."""
    n = args.max_turns * args.turn_tokens
    print(
        f"{args.batch_size} rollouts per step ({args.n_agent} per prompt), {args.steps} timed steps "
        f"per side run after one warm-up; plain TRL: {n} policy tokens per rollout; ddai: "
        f"{args.max_turns} turns of at most {args.turn_tokens}"
    )
    tools = len(runs[0]) == 3
    head = (
        f"{'pair':>4} {'order':>6} {'plain ms/tok':>13} {'ddai ms/tok':>12} {'ratio':>6}"
        f" {'cpu ratio':>9} {'plain tok/ro':>12} {'ddai tok/ro':>11} {'plain s/step':>12}"
        f" {'ddai s/step':>11} {'ddai seq/ro':>11}"
    )
    if tools:
        head += f" {'tools ms/tok':>12} {'tools seq/ro':>12} {'ddai/tools':>10}"
    print(head + f" {'load':>10}")
    for i, r in enumerate(runs):
        p, d = r[0], r[-1]
        loads = [x for side in r for x in side.load]
        line = (
            f"{i:>4} {'AB' if i % 2 == 0 else 'BA':>6} {p.s_per_token * 1e3:>13.2f}"
            f" {d.s_per_token * 1e3:>12.2f} {d.s_per_token / p.s_per_token:>6.3f}"
            f" {d.cpu_per_token / p.cpu_per_token:>9.3f} {p.tokens_per_rollout:>12.1f}"
            f" {d.tokens_per_rollout:>11.1f} {p.s_per_step:>12.2f} {d.s_per_step:>11.2f}"
            f" {d.sequence_per_rollout:>11.1f}"
        )
        if tools:
            o = r[1]
            line += (
                f" {o.s_per_token * 1e3:>12.2f} {o.sequence_per_rollout:>12.1f}"
                f" {d.s_per_token / o.s_per_token:>10.3f}"
            )
        print(line + f" {min(loads):>4.1f}-{max(loads):<4.1f}")
    out: dict[str, Any] = {**_ratios(runs, 0, len(runs[0]) - 1), "runs": runs}
    s, step, seq = out["ratio"], out["step_ratio"], out["sequence_ratio"]
    print(
        f"\nddai / plain TRL, wall s per policy token: median {s.median:.3f} "
        f"(min-max {s.lo:.3f}-{s.hi:.3f}, IQR {s.q1:.3f}-{s.q3:.3f}) over {len(runs)} pairs"
        + ("" if tools else f"; {'within' if s.median <= TARGET else 'ABOVE'} the {TARGET} target")
    )
    c = out["cpu_ratio"]
    print(
        f"CPU s per policy token: median {c.median:.3f} (min-max {c.lo:.3f}-{c.hi:.3f}); "
        f"s per step: median {step.median:.3f} (min-max {step.lo:.3f}-{step.hi:.3f}); "
        f"s per completion token (observations included): median {seq.median:.3f} "
        f"(min-max {seq.lo:.3f}-{seq.hi:.3f})"
    )
    if tools:
        out["observations"] = _ratios(runs, 0, 1)
        out["overhead"] = _ratios(runs, 1, 2)
        print(_line("TRL's tool loop / plain TRL (the observations' cost)", out["observations"]))
        m = out["overhead"]["ratio"].median
        print(
            _line("ddai / TRL's tool loop (ddai's overhead at equal work)", out["overhead"])
            + f"; {'within' if m <= TARGET else 'ABOVE'} the {TARGET} target"
        )
    print_phases(runs)
    loads = [x for r in runs for side in r for x in side.load]
    print(
        f"load average (1 min) over the runs: {min(loads):.1f}-{max(loads):.1f}; torch threads "
        f"{args.threads}; seq/ro: completion tokens per rollout, observations included "
        "(plain TRL's are its policy tokens)"
    )
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=5, help="interleaved rounds of the three sides")
    ap.add_argument("--steps", type=int, default=2, help="timed steps per side run (+1 warm-up)")
    ap.add_argument("--turn-tokens", type=int, default=32, help="policy tokens per ddai turn")
    ap.add_argument(
        "--max-turns",
        type=int,
        default=4,
        help="policy turns per ddai episode (then the forced one)",
    )
    ap.add_argument("--obs-max-tokens", type=int, default=24, help="ddai observation budget")
    ap.add_argument("--batch-size", type=int, default=8, help="rollouts per step")
    ap.add_argument("--n-agent", type=int, default=4, help="rollouts per prompt")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (1: a tiny model gains nothing from more, and on a shared "
        "machine a thread pool waiting on busy cores makes steps 10x slower and erratic)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.obs_max_tokens + 40 > OBS_ROOM:
        raise SystemExit(f"--obs-max-tokens {args.obs_max_tokens}: at most {OBS_ROOM - 40}")

    import torch

    from ddai.trainer import toy
    from ddai.trainer.tiny import build_tiny

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="ddai-bench-overhead-") as tmp:
        root = Path(tmp)
        data = toy.write_toy(root / "toy")
        model_dir = build_tiny(root / "tiny", texts=[r["messages"] for r in toy.sft_rows()])
        rows = toy.dataset_rows()
        runs = interleaved(
            args.pairs,
            lambda i: plain_trl(model_dir, rows, root / f"plain{i}", args),
            lambda i: trl_tool_loop(model_dir, rows, root / f"tools{i}", args),
            lambda i: ddai_multiturn(model_dir, data, root / f"ddai{i}", args),
        )
        return report(runs, args)


if __name__ == "__main__":
    main()
    raise SystemExit(0)
