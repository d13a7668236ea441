"""Benchmark: does ``ddai train value`` learn to rank held-out rollouts, and what does unfreezing
trunk layers cost per step?

Builds, in a temp folder, the synthetic world (``make_world``), a log store with its judged runs
(curriculum, focused_r1, focused_r2: mixed outcomes per prompt) and a tiny Qwen2 model whose
tokenizer is trained on the logs' text. Then:

1. quality: trains a value head (``--head``, ``--unfreeze``) for ``--steps`` steps and prints the
   held-out prompts' pairwise accuracy (v⁺ > v⁻) and AUC before and after, against chance (0.5);
2. speed: ``--timing-steps`` steps with ``--unfreeze 0`` (the baseline, measured in the same run)
   and with ``--unfreeze 2``; prints seconds per step and the ratio to the baseline.

    python bench/bench_value.py                  # linear head on detached hidden states
    python bench/bench_value.py --unfreeze 2 --trunk-lr 1e-3
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ddai.pipelines.fixtures import make_world
from ddai.pipelines.store import write_run
from ddai.trainer.tiny import TinySpec, build_tiny, read_texts
from ddai.trainer.value.train import ValueTrainConfig, train_value

JUDGED_RUNS = ("curriculum", "focused_r1", "focused_r2")


def setup(root: Path, seed: int) -> tuple[Path, Path]:
    make_world(root / "world", seed=seed)
    logs = root / "logs"
    files = [root / "world" / "logs" / f"{run}.jsonl" for run in JUDGED_RUNS]
    for run, f in zip(JUDGED_RUNS, files, strict=True):
        rows = [json.loads(line) for line in f.read_text("utf-8").splitlines() if line.strip()]
        write_run(logs, run, rows)
    tiny = build_tiny(
        root / "tiny", texts=read_texts(files), spec=TinySpec(vocab_size=2048, hidden_size=64)
    )
    return logs, tiny


def config(args: argparse.Namespace, logs: Path, tiny: Path, out: Path, **over) -> ValueTrainConfig:
    base = {
        "model": str(tiny),
        "output_dir": out,
        "logs": logs,
        "head": args.head,
        "unfreeze": args.unfreeze,
        "head_lr": args.head_lr,
        "trunk_lr": args.trunk_lr,
        "batch_size": args.batch_size,
        "max_steps": args.steps,
        "eval_steps": args.steps,
        "val_fraction": 0.3,
        "max_length": 1024,
        "seed": args.seed,
        "progress": False,
    }
    return ValueTrainConfig(**{**base, **over})


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=150, help="training steps of the quality run")
    ap.add_argument("--batch-size", type=int, default=8, help="pairs per step")
    ap.add_argument("--head", default="linear", help="linear or mlp")
    ap.add_argument("--unfreeze", type=int, default=0, help="trainable top trunk layers")
    ap.add_argument("--head-lr", type=float, default=3e-3)
    ap.add_argument("--trunk-lr", type=float, default=1e-4)
    ap.add_argument(
        "--timing-steps", type=int, default=8, help="steps per speed measurement (0: skip)"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddai-bench-value-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        logs, tiny = setup(root, args.seed)
        print(f"setup (world, store, tiny model): {time.perf_counter() - t0:.1f}s")

        t0 = time.perf_counter()
        res = train_value(config(args, logs, tiny, root / "value"))
        secs = time.perf_counter() - t0
        b, a = res.eval_before, res.eval_after
        print(
            f"quality: {res.head} head, unfreeze {res.unfreeze}, {res.steps} steps in {secs:.1f}s; "
            f"{res.train_prompts} train / {res.val_prompts} held-out prompts, "
            f"{res.train_pairs} / {res.val_pairs} pairs"
        )
        print(f"{'held-out metric':<26}{'before':>9}{'after':>9}{'chance':>9}")
        for key, label in (
            ("value/eval_pairwise_acc", "pairwise accuracy"),
            ("value/eval_auc", "AUC (value vs success)"),
        ):
            print(f"{label:<26}{b[key]:>9.3f}{a[key]:>9.3f}{0.5:>9.3f}")
        print(f"{'MC MSE':<26}{b['value/eval_mc_mse']:>9.3f}{a['value/eval_mc_mse']:>9.3f}")

        if args.timing_steps:
            per_step = {}
            for n in (0, 2):
                cfg = config(
                    args,
                    logs,
                    tiny,
                    root / f"t{n}",
                    unfreeze=n,
                    max_steps=args.timing_steps,
                    eval_steps=10**9,
                    val_fraction=0.0,
                )
                t0 = time.perf_counter()
                train_value(cfg)
                per_step[n] = (time.perf_counter() - t0) / args.timing_steps
            base = per_step[0]
            print("speed (s/step includes tokenizing and saving, amortized over the steps):")
            for n, s in per_step.items():
                print(f"  unfreeze {n}: {s:.3f} s/step, ratio to unfreeze 0: {s / base:.2f}x")


if __name__ == "__main__":
    main()
