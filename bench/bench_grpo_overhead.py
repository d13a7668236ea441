"""Benchmark: one GRPO step of ddai's multi-turn rollout against plain TRL GRPO.

Both runs use the same tiny model, prompts, batch (``--batch-size`` rollouts, ``--n-agent`` per
prompt) and token budget: plain TRL generates one completion of up to ``--budget`` tokens per
rollout with its own ``generate`` and scores it with a constant reward; ddai runs multi-turn
episodes (lock-step batched generation, the search environment, observation tokens, the reward
function and rollout logging) under the same total budget per rollout. Each side runs one warm-up
step, then ``--steps`` timed steps. Printed: seconds per step of each and the ratio ddai / plain
(the overhead; the work differs in shape, so the ratio is what matters, not the absolute times).

    python bench/bench_grpo_overhead.py
    python bench/bench_grpo_overhead.py --steps 5 --budget 256
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from ddai.trainer.search.config import EpisodeConfig, RewardOverrides

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from transformers import TrainerCallback


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._t = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._t = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._t)


def plain_trl(model_dir: Path, data_rows: list[dict], out: Path, args) -> list[float]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from ddai.trainer.modeling import load_policy

    model, tok = load_policy(str(model_dir))
    timer = StepTimer()
    cfg = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.n_agent,
        max_completion_length=args.budget,
        max_steps=args.steps + 1,
        loss_type="grpo",
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [float(len(str(c)) % 2) for c in completions],
        args=cfg,
        train_dataset=Dataset.from_list([{"prompt": r["prompt"]} for r in data_rows]),
        processing_class=tok,
        callbacks=[timer],
    )
    trainer.train()
    return timer.times[1:]


def ddai_multiturn(model_dir: Path, data: Path, out: Path, args) -> list[float]:
    from ddai.trainer import toy
    from ddai.trainer.grpo import train as grpo
    from ddai.trainer.runtime import metrics_file

    timer = StepTimer()
    original = metrics_file.build_callbacks

    def with_timer(output_dir, metrics_file, **kwargs):
        return [*original(output_dir, metrics_file, **kwargs), timer]

    metrics_file.build_callbacks = with_timer
    try:
        grpo.run_grpo(
            grpo.GRPORunConfig(
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
                    max_turn_tokens=max(8, args.budget // args.max_turns),
                    max_completion_tokens=args.budget,
                    obs_max_tokens=24,
                ),
                rewards=RewardOverrides(reward="ddai-phase1"),
            ),
            toy.local_backends(toy.corpus()),
        )
    finally:
        metrics_file.build_callbacks = original
    return timer.times[1:]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=3, help="timed steps per side (after one warm-up)")
    ap.add_argument("--budget", type=int, default=128, help="completion tokens per rollout")
    ap.add_argument("--batch-size", type=int, default=8, help="rollouts per step")
    ap.add_argument("--n-agent", type=int, default=4, help="rollouts per prompt")
    ap.add_argument("--max-turns", type=int, default=4, help="turns per ddai episode")
    args, _ = ap.parse_known_args()

    from ddai.trainer import toy
    from ddai.trainer.tiny import build_tiny

    with tempfile.TemporaryDirectory(prefix="ddai-bench-overhead-") as tmp:
        root = Path(tmp)
        data = toy.write_toy(root / "toy")
        model_dir = build_tiny(root / "tiny", texts=[r["messages"] for r in toy.sft_rows()])
        plain = plain_trl(model_dir, toy.dataset_rows(), root / "plain", args)
        ours = ddai_multiturn(model_dir, data, root / "ddai", args)

    p, o = sum(plain) / len(plain), sum(ours) / len(ours)
    print(f"{'side':<22} {'s/step':>8}")
    print(f"{'plain TRL GRPO':<22} {p:>8.3f}")
    print(f"{'ddai multi-turn GRPO':<22} {o:>8.3f}")
    print(
        f"\noverhead ratio ddai / plain: {o / p:.2f} (budget {args.budget} tokens, batch {args.batch_size})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
