"""Benchmark: does GRPO learn? Trained runs against an lr-0 control from the same SFT start.

The task is ``ddai.trainer.learn_task``: the toy decks with one-result search, where the right
first query is a phrase of the question and a distractor query finds a page no question asks about;
an SFT start on both trajectories writes the valid format and picks the right query about half the
time. From that one start, for each seed, three runs of ``--generations`` rollout batches
(``--prompts`` × ``--n-agent`` rollouts each, DDAI's Phase-1 reward ``0.1 + 0.9·NDCG`` gated on
format):

- ``control``: GRPO at learning rate 0 (the start's own reward under the same sampling);
- ``grpo``: token-level ratio, one optimizer step per rollout batch;
- ``gspo-ddai``: the seed's preset (sequence-level ratio, clip 3e-4/4e-4, two optimizer steps per
  rollout batch), at ``--lr`` instead of its 1e-6, which moves a tiny model nowhere in a few steps.

Printed: each arm's mean reward per rollout batch (averaged over seeds), the gain of each trained
arm over the control over the last 20% of batches (mean over seeds ± standard error; "learns"
when above 3 standard errors), the mean clip ratio per arm (TRL's ``clip_ratio/region_mean``), the
share of groups with mixed outcomes, and the valid-format share. Figures go to
``bench/out/grpo_learning.json`` and the curves to ``bench/out/grpo_learning.html``.

    python bench/bench_grpo_learning.py                        # ~7 min on 2 busy CPU cores
    python bench/bench_grpo_learning.py --seeds 3 --generations 6
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# One thread: on a few shared cores a tiny model runs faster without torch's spinning pool.
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
# The gain-over-control statistic is test scaffolding under tests/support (not in the package).
sys.path.insert(0, str(HERE.parent / "tests"))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, default=3, help="GRPO seeds (each runs all three arms)")
    ap.add_argument("--generations", type=int, default=15, help="rollout batches per run")
    ap.add_argument("--sft-steps", type=int, default=300, help="SFT steps of the shared start")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate of the trained arms")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per rollout batch")
    ap.add_argument("--n-agent", type=int, default=4, help="rollouts per prompt")
    ap.add_argument("--tail", type=float, default=0.2, help="share of last batches compared")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="folder for the figures")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a temp one)")
    args, _ = ap.parse_known_args(argv)
    return args


def curve(logs: Path, run: str) -> tuple[list[float], list[float]]:
    """Mean reward and valid-format share per rollout batch (logged step) of a run."""
    from ddai.pipelines.store import read_rollouts

    rows = read_rollouts(logs, runs=[run], columns=["step", "reward", "format_ok"]).to_pylist()
    steps = sorted({r["step"] for r in rows})
    reward, fmt = [], []
    for s in steps:
        mine = [r for r in rows if r["step"] == s]
        scored = [r["reward"] for r in mine if r["reward"] is not None]
        reward.append(sum(scored) / len(scored) if scored else float("nan"))
        fmt.append(sum(bool(r["format_ok"]) for r in mine) / len(mine))
    return reward, fmt


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Train the start and every (seed, arm); return the figures."""
    from support.learning_gain import gain_over_control

    from ddai.trainer import learn_task, toy
    from ddai.trainer.grpo.train import run_grpo

    sft = learn_task.start(work, seed=0, sft_steps=args.sft_steps)
    runs: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in learn_task.ARMS}
    for seed in range(args.seeds):
        for arm in learn_task.ARMS:
            cfg = learn_task.grpo_config(
                sft,
                work,
                arm=arm,
                generations=args.generations,
                seed=seed,
                learning_rate=args.lr,
                run_id=f"{arm}_s{seed}",
                prompts=args.prompts,
                n_agent=args.n_agent,
                output_dir=work / f"grpo-{arm}-s{seed}",
            )
            res = run_grpo(cfg, toy.local_backends(toy.corpus()))
            reward, fmt = curve(work / "logs", cfg.run_id)
            runs[arm][seed] = {
                "reward": reward,
                "format_ok": fmt,
                "clip_ratio": res.clip_ratio,
                "informative_group_share": res.informative_group_share,
                "changed_parameters": res.changed_parameters,
                "steps": res.steps,
            }
    control = {s: r["reward"] for s, r in runs["control"].items()}
    out: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}, "arms": {}}
    for arm in learn_task.ARMS:
        per = runs[arm]
        entry: dict[str, Any] = {
            "reward_per_batch": _mean_curve([r["reward"] for r in per.values()]),
            "format_ok_per_batch": _mean_curve([r["format_ok"] for r in per.values()]),
            "clip_ratio": _mean([r["clip_ratio"] for r in per.values()]),
            "informative_group_share": _mean([r["informative_group_share"] for r in per.values()]),
            "optimizer_steps": per[0]["steps"],
            "changed_parameters": [r["changed_parameters"] for r in per.values()],
        }
        if arm != "control":
            g = gain_over_control({s: r["reward"] for s, r in per.items()}, control, tail=args.tail)
            entry.update(
                gain=g.mean, gain_se=g.se, gain_per_seed=list(g.per_seed), learns=g.above()
            )
        out["arms"][arm] = entry
    return out


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _mean_curve(curves: list[list[float]]) -> list[float]:
    n = min(len(c) for c in curves)
    return [sum(c[i] for c in curves) / len(curves) for i in range(n)]


def show(res: dict[str, Any]) -> str:
    """The figures as the plain text the README records."""
    s = res["settings"]
    width = max(
        len(" ".join(f"{v:.2f}" for v in e["reward_per_batch"])) for e in res["arms"].values()
    )
    width = max(width, len("reward per batch (mean over seeds)"))
    lines = [
        f"{s['seeds']} seeds × {s['generations']} rollout batches of {s['prompts']}×{s['n_agent']} "
        f"rollouts, one SFT start ({s['sft_steps']} steps), lr {s['lr']} (control: 0); "
        f"gain over the last {float(s['tail']):.0%} of batches",
        "",
        f"{'arm':<10} {'reward per batch (mean over seeds)':<{width}} {'gain ± se':>16} "
        f"{'learns':>6} {'clip':>6} {'mixed':>6} {'format':>6}",
    ]
    for arm, e in res["arms"].items():
        curve_txt = " ".join(f"{v:.2f}" for v in e["reward_per_batch"])
        gain = (
            f"{e['gain']:+.3f} ± {e['gain_se']:.3f}"
            if e.get("gain_se") is not None
            else (f"{e['gain']:+.3f}" if "gain" in e else "")
        )
        learns = ("yes" if e["learns"] else "no") if "learns" in e else ""
        clip = f"{e['clip_ratio']:.3f}" if e["clip_ratio"] is not None else "-"
        mixed = (
            f"{e['informative_group_share']:.2f}"
            if e["informative_group_share"] is not None
            else "-"
        )
        fmt = e["format_ok_per_batch"]
        lines.append(
            f"{arm:<10} {curve_txt:<{width}} {gain:>16} {learns:>6} {clip:>6} {mixed:>6} "
            f"{sum(fmt) / len(fmt):>6.2f}"
        )
    lines.append("")
    for arm, e in res["arms"].items():
        if "gain_per_seed" in e:
            seeds = " ".join(f"{g:+.3f}" for g in e["gain_per_seed"])
            lines.append(f"{arm} gain per seed: {seeds}")
    lines.append(
        "clip: mean share clipped per optimizer step; mixed: share of groups with mixed outcomes; "
        "format: valid-format share"
    )
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for arm, e in res["arms"].items():
        ys = e["reward_per_batch"]
        fig.add_scatter(x=list(range(1, len(ys) + 1)), y=ys, mode="lines+markers", name=arm)
    fig.update_layout(
        title="Mean reward per rollout batch (mean over seeds), trained arms against the lr-0 control",
        xaxis_title="rollout batch",
        yaxis_title="mean reward",
    )
    fig.write_html(path, include_plotlyjs="cdn")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        res = run(args, args.work)
    else:
        with tempfile.TemporaryDirectory(prefix="ddai-bench-learn-") as tmp:
            res = run(args, Path(tmp))
    print(show(res))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grpo_learning.json").write_text(json.dumps(res, indent=1), "utf-8")
    plot(res, args.out / "grpo_learning.html")
    print(f"figures: {args.out / 'grpo_learning.json'}; plot: {args.out / 'grpo_learning.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
