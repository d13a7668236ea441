"""Benchmark: ddai's multi-turn GRPO step against plain TRL GRPO, at equal policy tokens.

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

A third side separates what carrying observations costs from what ddai's machinery costs:

- TRL + observations: plain TRL's own single-call generation of exactly ``P`` tokens, then the
  observation tokens appended (masked out of the loss through ``env_mask``, as ddai's are) up to
  ddai's completion budget ``S`` (which every ddai rollout of this bench fills: the tiny random
  policy's every action is invalid and its corrective observation fills the room left for it).
  Its loss pass runs over the same sequence as ddai's.

So TRL + observations / plain TRL is the cost of the observations in the loss pass (the work
plain TRL never does), and ddai / TRL + observations is ddai's multi-turn machinery at equal
sequence: one ``generate`` per turn with the observations prefilled into the KV cache (the
prefill itself is the observations' cost too, which this side cannot have), the environment, the
reward, the rollout log's commit per step and the per-step metrics.

Policy tokens are counted the same way on every side, from what TRL's ``_generate`` returns:
a rollout's ``env_mask`` ones (ddai, TRL + observations) or its completion length (plain TRL),
per step. The primary figure is wall seconds per policy token over the timed steps (each side
run: one warm-up step, then ``--steps``); a step is timed from its ``on_step_begin`` to the next
one's, so the work of callbacks after a step (ddai's commit of the step's rollouts, its metrics)
counts. Seconds per step and CPU seconds per policy token are shown beside it. The sides take
turns over ``--pairs`` rounds in ABBA order (plain first in even rounds, ddai first in odd ones),
so load changes fall on all alike; the machine's load average is recorded before and after each
side run. Printed: per round the rates and ratios, then the median ratio ddai / plain with its
min-max and interquartile range, against the 1.15 target, the ratio per completion token
(observations included), and the two ratios through TRL + observations.

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
"""ddai's wall seconds per policy token may be at most this multiple of plain TRL's."""
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


class count_tokens:
    """Within the block, every ``GRPOTrainer._generate`` (plain TRL's and ddai's subclass alike)
    adds its batch's policy tokens and rollouts to ``run``."""

    def __init__(self, run: SideRun) -> None:
        self.run = run

    def __enter__(self) -> None:
        from trl import GRPOTrainer

        self._cls, self._orig = GRPOTrainer, GRPOTrainer._generate
        run, orig = self.run, self._orig

        def counted(trainer: Any, prompts: list) -> Any:
            out = orig(trainer, prompts)
            completion_ids, tool_mask = out[1], out[2]
            run.tokens.append(policy_tokens(completion_ids, tool_mask))
            run.rollouts.append(len(completion_ids))
            run.sequence.append(sum(len(ids) for ids in completion_ids))
            return out

        GRPOTrainer._generate = counted

    def __exit__(self, *exc: object) -> None:
        self._cls._generate = self._orig


def train_trl(
    run: SideRun,
    model: Any,
    tok: Any,
    data_rows: list[dict],
    out: Path,
    args: Any,
    completion: int,
    generation_kwargs: dict[str, int],
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


def observation_filler(tok: Any, n: int) -> list[int]:
    """``n`` token ids of the environment's corrective observation text, repeated: what a ddai
    rollout of this bench carries between its turns (no end-of-sequence token among them)."""
    from ddai.trainer.episode.env import INVALID_ACTION

    ids = tok.encode(INVALID_ACTION.format(reason="no action"), add_special_tokens=False)
    stop = {tok.eos_token_id, tok.pad_token_id}
    ids = [i for i in ids if i not in stop]
    return (ids * (n // len(ids) + 1))[:n]


def trl_with_observations(model_dir: Path, data_rows: list[dict], out: Path, args: Any) -> SideRun:
    """Plain TRL's work plus ddai's observation tokens: TRL's own single-call generation of
    exactly ``P`` tokens per rollout, then ``S - P`` observation tokens appended, masked out of
    the loss (``env_mask`` 0) as ddai's are, ``S`` being ddai's completion budget (every ddai
    rollout of this bench fills it). The loss pass runs over the same sequence length as ddai's;
    what ddai adds beyond this side is its multi-turn machinery: one ``generate`` per turn, the
    observations prefilled into the KV cache, the environment, the reward and the rollout log."""
    from ddai.trainer.modeling import load_policy

    run = SideRun("trl+obs")
    model, tok = load_policy(str(model_dir))
    n = args.max_turns * args.turn_tokens
    total = args.max_turns * (args.turn_tokens + OBS_ROOM)
    filler = observation_filler(tok, total - n)

    def rollout(prompts: list, trainer: Any) -> dict[str, list]:
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
        ids, _ = trainer._generate_single_turn(prompt_ids, None, {}, trainer.num_generations)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": [c + filler for c in ids],
            "logprobs": None,
            "env_mask": [[1] * len(c) + [0] * len(filler) for c in ids],
        }

    # TRL's generation samples exactly n tokens; the observations fill the rest
    gen = {"min_new_tokens": n, "max_new_tokens": n}
    return train_trl(run, model, tok, data_rows, out, args, total, gen, rollout_func=rollout)


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
    ddai) or (plain, TRL + observations, ddai)."""
    n = args.max_turns * args.turn_tokens
    print(
        f"{args.batch_size} rollouts per step ({args.n_agent} per prompt), {args.steps} timed steps "
        f"per side run after one warm-up; plain TRL: {n} policy tokens per rollout; ddai: "
        f"{args.max_turns} turns of at most {args.turn_tokens}"
    )
    obs = len(runs[0]) == 3
    head = (
        f"{'pair':>4} {'order':>6} {'plain ms/tok':>13} {'ddai ms/tok':>12} {'ratio':>6}"
        f" {'cpu ratio':>9} {'plain tok/ro':>12} {'ddai tok/ro':>11} {'plain s/step':>12}"
        f" {'ddai s/step':>11} {'ddai seq/ro':>11}"
    )
    if obs:
        head += f" {'+obs ms/tok':>11} {'+obs seq/ro':>11} {'ddai/+obs':>9}"
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
        if obs:
            o = r[1]
            line += (
                f" {o.s_per_token * 1e3:>11.2f} {o.sequence_per_rollout:>11.1f}"
                f" {d.s_per_token / o.s_per_token:>9.3f}"
            )
        print(line + f" {min(loads):>4.1f}-{max(loads):<4.1f}")
    out: dict[str, Any] = {**_ratios(runs, 0, len(runs[0]) - 1), "runs": runs}
    s, step, seq = out["ratio"], out["step_ratio"], out["sequence_ratio"]
    verdict = "within" if s.median <= TARGET else "ABOVE"
    print(
        f"\nddai / plain TRL, wall s per policy token: median {s.median:.3f} "
        f"(min-max {s.lo:.3f}-{s.hi:.3f}, IQR {s.q1:.3f}-{s.q3:.3f}) over {len(runs)} pairs; "
        f"{verdict} the {TARGET} target"
    )
    c = out["cpu_ratio"]
    print(
        f"CPU s per policy token: median {c.median:.3f} (min-max {c.lo:.3f}-{c.hi:.3f}); "
        f"s per step: median {step.median:.3f} (min-max {step.lo:.3f}-{step.hi:.3f}); "
        f"s per completion token (observations included): median {seq.median:.3f} "
        f"(min-max {seq.lo:.3f}-{seq.hi:.3f})"
    )
    if obs:
        out["observations"] = _ratios(runs, 0, 1)
        out["machinery"] = _ratios(runs, 1, 2)
        print(_line("TRL + observations / plain TRL (the observations' cost)", out["observations"]))
        m = out["machinery"]["ratio"].median
        print(
            _line(
                "ddai / TRL + observations (ddai's machinery at equal sequence)", out["machinery"]
            )
            + f"; {'within' if m <= TARGET else 'ABOVE'} {TARGET}"
        )
    loads = [x for r in runs for side in r for x in side.load]
    print(
        f"load average (1 min) over the runs: {min(loads):.1f}-{max(loads):.1f}; torch threads "
        f"{args.threads}; ddai seq/ro: completion tokens per ddai rollout, observations included "
        "(plain TRL's are its policy tokens)"
    )
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=5, help="interleaved (plain, ddai) pairs")
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
            lambda i: trl_with_observations(model_dir, rows, root / f"obs{i}", args),
            lambda i: ddai_multiturn(model_dir, data, root / f"ddai{i}", args),
        )
        return report(runs, args)


if __name__ == "__main__":
    main()
    raise SystemExit(0)
