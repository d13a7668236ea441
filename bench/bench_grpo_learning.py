"""Benchmark: learning on an easy fixture task: SFT warm-start, then GRPO; mean reward per step.

A tiny Qwen2-architecture model (built locally) is first fine-tuned for ``--sft-steps`` on one
golden trajectory per question of the toy task (``ddai.trainer.toy``), then trained with GRPO for
``--grpo-steps`` over the real search environment (local BM25 search) with DDAI's Phase-1 reward
without its format gate (``0.1 + 0.9·NDCG``: a tiny model rarely gets a whole episode's format
right, while each useful search already pays). Printed: the mean reward of every GRPO step
(from the run's rollout log), the mean of the last third against the first third as a ratio, and
the share of format-valid rollouts; the curve is plotted to ``bench/out/grpo_learning.html``.

    python bench/bench_grpo_learning.py                      # ~20 min on 2 busy CPU cores
    python bench/bench_grpo_learning.py --sft-steps 30 --grpo-steps 10
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sft-steps", type=int, default=80, help="SFT warm-start steps")
    ap.add_argument("--grpo-steps", type=int, default=20, help="GRPO steps")
    ap.add_argument("--n-agent", type=int, default=4, help="rollouts per prompt")
    ap.add_argument(
        "--batch-size", type=int, default=32, help="rollouts per GRPO step (32 = all 8 prompts × 4)"
    )
    ap.add_argument("--grpo-lr", type=float, default=5e-4, help="GRPO learning rate")
    ap.add_argument("--temperature", type=float, default=0.7, help="GRPO sampling temperature")
    ap.add_argument("--seed", type=int, default=0, help="seed of the model and the runs")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="folder for the plot")
    args, _ = ap.parse_known_args()

    import plotly.graph_objects as go

    from ddai.pipelines.store import read_rollouts
    from ddai.trainer import toy
    from ddai.trainer.grpo import GRPORunConfig, run_grpo
    from ddai.trainer.sft import SFTRunConfig, run_sft
    from ddai.trainer.tiny import TinySpec, build_tiny

    with tempfile.TemporaryDirectory(prefix="ddai-bench-learn-") as tmp:
        root = Path(tmp)
        data = toy.write_toy(root / "toy")
        tiny = build_tiny(
            root / "tiny",
            texts=[r["messages"] for r in toy.sft_rows()],
            spec=TinySpec(seed=args.seed),
        )
        run_sft(
            SFTRunConfig(
                model=str(tiny),
                data=[data / "sft.parquet"],
                output_dir=root / "sft",
                max_steps=args.sft_steps,
                learning_rate=5e-3,
                batch_size=8,
                max_length=256,
                save_steps=10_000,
                logging_steps=max(1, args.sft_steps // 4),
                report_to="none",
                seed=args.seed,
            )
        )
        result = run_grpo(
            GRPORunConfig(
                model=str(root / "sft"),
                data=data / "dataset.parquet",
                corpus=data / "pages.parquet",
                output_dir=root / "grpo",
                logs=root / "logs",
                run_id="learning",
                reward="ddai-phase1",
                gate=False,
                temperature=args.temperature,
                n_agent=args.n_agent,
                batch_size=args.batch_size,
                max_steps=args.grpo_steps,
                learning_rate=args.grpo_lr,
                max_turns=3,
                max_turn_tokens=40,
                max_completion_tokens=240,
                obs_max_tokens=24,
                save_steps=10_000,
                report_to="none",
                seed=args.seed,
            ),
            toy.local_backends(toy.corpus()),
        )
        rows = read_rollouts(
            root / "logs", runs=["learning"], columns=["step", "reward", "format_ok"]
        ).to_pylist()

    steps = sorted({r["step"] for r in rows})
    mean = {
        s: sum(r["reward"] for r in rows if r["step"] == s) / sum(r["step"] == s for r in rows)
        for s in steps
    }
    fmt = {
        s: sum(bool(r["format_ok"]) for r in rows if r["step"] == s)
        / sum(r["step"] == s for r in rows)
        for s in steps
    }
    print(f"{'step':>5} {'mean reward':>12} {'format ok':>10}")
    for s in steps:
        print(f"{s:>5} {mean[s]:>12.4f} {fmt[s]:>10.2f}")
    third = max(1, len(steps) // 3)
    first = sum(mean[s] for s in steps[:third]) / third
    last = sum(mean[s] for s in steps[-third:]) / third
    ratio = last / first if first > 0 else float("inf")
    print(
        f"\nmean reward, first {third} steps: {first:.4f}; last {third} steps: {last:.4f}; ratio last/first: {ratio:.2f}"
    )
    print(
        f"weights changed: {result.changed_parameters} tensors; rollouts logged: {result.rollouts_logged}"
    )

    args.out.mkdir(parents=True, exist_ok=True)
    fig = go.Figure()
    fig.add_scatter(x=steps, y=[mean[s] for s in steps], mode="lines+markers", name="mean reward")
    fig.add_scatter(
        x=steps, y=[fmt[s] for s in steps], mode="lines+markers", name="format ok share"
    )
    fig.update_layout(
        title="GRPO on the toy search task after SFT warm-start", xaxis_title="GRPO step"
    )
    path = args.out / "grpo_learning.html"
    fig.write_html(path, include_plotlyjs="cdn")
    print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
