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

Policy tokens are counted the same way on both sides, from what TRL's ``_generate`` returns:
a rollout's ``env_mask`` ones (ddai) or its completion length (plain TRL), per step. The primary
figure is wall seconds per policy token over the timed steps (each side run: one warm-up step,
then ``--steps``); seconds per step and CPU seconds per policy token are shown beside it. The two
sides take turns over ``--pairs`` pairs in ABBA order (plain first in even pairs, ddai first in
odd ones), so load changes fall on both alike; the machine's load average is recorded before and
after each side run. Printed: per pair the two rates and their ratio, then the median ratio
ddai / plain with its min-max and interquartile range, against the 1.15 target. Beside it, the
ratio per completion token: ddai's rollouts also carry the observations (prefilled in
generation, run through the loss pass, masked out of it), which plain TRL has none of; with the
tiny random policy every action is invalid and its corrective observation is about twice the
turn's tokens, so the two ratios bound the overhead from both sides.

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
    """Wall and CPU seconds of each optimizer step into ``run``."""

    def __init__(self, run: SideRun) -> None:
        self.run = run
        self._t = self._c = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._t, self._c = time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.run.wall.append(time.perf_counter() - self._t)
        self.run.cpu.append(time.process_time() - self._c)


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


def plain_trl(model_dir: Path, data_rows: list[dict], out: Path, args: Any) -> SideRun:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from ddai.trainer.modeling import load_policy

    run = SideRun("plain")
    model, tok = load_policy(str(model_dir))
    n = args.max_turns * args.turn_tokens
    cfg = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.n_agent,
        max_completion_length=n,
        # every completion exactly n policy tokens: eos cannot end one early
        generation_kwargs={"min_new_tokens": n},
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
    )
    with count_tokens(run):
        trainer.train()
    return run


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
            max_turns=args.max_turns,
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


def interleaved(pairs: int, plain: Any, ddai: Any) -> list[tuple[SideRun, SideRun]]:
    """``pairs`` (plain, ddai) runs, ABBA: plain first in even pairs, ddai first in odd ones."""
    out = []
    for i in range(pairs):
        if i % 2 == 0:
            p = side_run(plain, i)
            d = side_run(ddai, i)
        else:
            d = side_run(ddai, i)
            p = side_run(plain, i)
        out.append((p, d))
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


def report(runs: list[tuple[SideRun, SideRun]], args: Any) -> dict[str, Any]:
    """Print the per-pair table and the summary; return the figures."""
    n = args.max_turns * args.turn_tokens
    print(
        f"{args.batch_size} rollouts per step ({args.n_agent} per prompt), {args.steps} timed steps "
        f"per side run after one warm-up; plain TRL: {n} policy tokens per rollout; ddai: "
        f"{args.max_turns} turns of at most {args.turn_tokens}"
    )
    head = (
        f"{'pair':>4} {'order':>6} {'plain ms/tok':>13} {'ddai ms/tok':>12} {'ratio':>6}"
        f" {'cpu ratio':>9} {'plain tok/ro':>12} {'ddai tok/ro':>11} {'plain s/step':>12}"
        f" {'ddai s/step':>11} {'ddai seq/ro':>11} {'load':>10}"
    )
    print(head)
    ratios, cpu_ratios = [], []
    for i, (p, d) in enumerate(runs):
        r, rc = d.s_per_token / p.s_per_token, d.cpu_per_token / p.cpu_per_token
        ratios.append(r)
        cpu_ratios.append(rc)
        loads = (*p.load, *d.load)
        print(
            f"{i:>4} {'AB' if i % 2 == 0 else 'BA':>6} {p.s_per_token * 1e3:>13.2f}"
            f" {d.s_per_token * 1e3:>12.2f} {r:>6.3f} {rc:>9.3f} {p.tokens_per_rollout:>12.1f}"
            f" {d.tokens_per_rollout:>11.1f} {p.s_per_step:>12.2f} {d.s_per_step:>11.2f}"
            f" {d.sequence_per_rollout:>11.1f} {min(loads):>4.1f}-{max(loads):<4.1f}"
        )
    s, c = Spread.of(ratios), Spread.of(cpu_ratios)
    step = Spread.of([d.s_per_step / p.s_per_step for p, d in runs])
    seq = Spread.of([d.s_per_sequence_token / p.s_per_sequence_token for p, d in runs])
    verdict = "within" if s.median <= TARGET else "ABOVE"
    print(
        f"\nddai / plain TRL, wall s per policy token: median {s.median:.3f} "
        f"(min-max {s.lo:.3f}-{s.hi:.3f}, IQR {s.q1:.3f}-{s.q3:.3f}) over {len(runs)} pairs; "
        f"{verdict} the {TARGET} target"
    )
    print(
        f"CPU s per policy token: median {c.median:.3f} (min-max {c.lo:.3f}-{c.hi:.3f}); "
        f"s per step: median {step.median:.3f} (min-max {step.lo:.3f}-{step.hi:.3f}); "
        f"s per completion token (observations included): median {seq.median:.3f} "
        f"(min-max {seq.lo:.3f}-{seq.hi:.3f})"
    )
    loads = [x for p, d in runs for x in (*p.load, *d.load)]
    print(
        f"load average (1 min) over the runs: {min(loads):.1f}-{max(loads):.1f}; torch threads "
        f"{args.threads}; ddai seq/ro: completion tokens per ddai rollout, observations included "
        "(plain TRL's are its policy tokens)"
    )
    return {"ratio": s, "cpu_ratio": c, "step_ratio": step, "sequence_ratio": seq, "runs": runs}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=5, help="interleaved (plain, ddai) pairs")
    ap.add_argument("--steps", type=int, default=2, help="timed steps per side run (+1 warm-up)")
    ap.add_argument("--turn-tokens", type=int, default=32, help="policy tokens per ddai turn")
    ap.add_argument("--max-turns", type=int, default=4, help="turns per ddai episode")
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
            lambda i: ddai_multiturn(model_dir, data, root / f"ddai{i}", args),
        )
        return report(runs, args)


if __name__ == "__main__":
    main()
    raise SystemExit(0)
