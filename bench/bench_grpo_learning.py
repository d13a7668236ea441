"""Benchmark: does GRPO learn a rule that holds on questions it never trained on?

The task is ``ddai.trainer.learn_task``: one page per topic, questions that name the topic they ask
about and a distractor topic they rule out, one-result search; the right first query is the asked
topic, a different word per question, so no fixed first query scores well. Questions are split by
topic pair into train and held-out ones; an SFT start on the train questions (both queries, equally)
writes the valid format and searches one of the question's two topics.

From that one start, for each seed, every arm trains ``--generations`` rollout batches
(``--prompts`` × ``--n-agent`` rollouts of train questions, DDAI's Phase-1 reward ``0.1 +
0.9·NDCG`` gated on format), then its final model is evaluated on every held-out question
(``--eval-n-agent`` rollouts each, temperature 1, ``ddai collect``):

- ``control``: GRPO at learning rate 0 (the start itself, under the same sampling);
- ``grpo``: token-level ratio, one optimizer step per rollout batch, at ``--lr``;
- ``gspo-ddai``: the seed's preset (sequence-level ratio, clip 3e-4/4e-4, two optimizer steps per
  rollout batch) at ``--lr``;
- ``gspo-ddai@preset``: the same at the preset's own learning rate (``--preset-lr``, 1e-6), which
  leaves the clip inert at this scale (its clip share says so).

Printed: per arm the held-out reward (mean over seeds), the gain over the control on held-out
questions (per seed: the arm's held-out mean minus the control's with the same seed; mean ± standard
error over seeds, gain/SE, "learns" above 3 SE), the train reward per rollout batch, the clip share
(TRL's ``clip_ratio/region_mean``, mean over optimizer steps), the share of groups with mixed
outcomes, the valid-format share and where held-out first searches land (the asked topic's page,
the distractor's); then the best fixed first query on held-out questions, scored
exactly (``learn_task.fixed_query_rewards``), against the control. Figures go to
``bench/out/grpo_learning.json`` and the train curves to ``bench/out/grpo_learning.html``.

    python bench/bench_grpo_learning.py               # 5 seeds, 4 arms: about 15 min on 2 busy cores
    python bench/bench_grpo_learning.py --arms grpo   # control and grpo: about 7 min
    python bench/bench_grpo_learning.py --seeds 2 --generations 4

Settings (``learn_task``: lr 3e-4, 8 rollouts per question, 32 rollout batches) were picked once,
from one seed's train and held-out first-search shares, between lr 3e-4 and 1e-3.
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

ARMS = ("control", "grpo", "gspo-ddai", "gspo-ddai@preset")
"""Bench arm → ``learn_task`` arm: ``gspo-ddai@preset`` is ``gspo-ddai`` at ``--preset-lr``."""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, default=5, help="GRPO seeds (each runs every arm)")
    ap.add_argument("--generations", type=int, default=None, help="rollout batches per run")
    ap.add_argument("--sft-steps", type=int, default=None, help="SFT steps of the shared start")
    ap.add_argument("--lr", type=float, default=None, help="learning rate of the trained arms")
    ap.add_argument("--preset-lr", type=float, default=1e-6, help="gspo-ddai's own learning rate")
    ap.add_argument("--prompts", type=int, default=None, help="train questions per rollout batch")
    ap.add_argument("--n-agent", type=int, default=None, help="rollouts per question")
    ap.add_argument("--eval-n-agent", type=int, default=4, help="rollouts per held-out question")
    ap.add_argument(
        "--arms",
        nargs="+",
        choices=ARMS,
        default=list(ARMS),
        help="arms to run (the control always runs: every gain is measured against it)",
    )
    ap.add_argument("--sft", type=Path, default=None, help="an SFT start to reuse (learn_task's)")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="folder for the figures")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a temp one)")
    args, _ = ap.parse_known_args(argv)
    args.arms = ["control", *(a for a in ARMS if a in args.arms and a != "control")]
    from ddai.trainer import learn_task

    # Unset: learn_task's own settings (the demo's too).
    for name, value in (
        ("generations", learn_task.GENERATIONS),
        ("lr", learn_task.LEARNING_RATE),
        ("prompts", learn_task.PROMPTS),
        ("n_agent", learn_task.N_AGENT),
    ):
        if getattr(args, name) is None:
            setattr(args, name, value)
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


def first_page_shares(logs: Path, run: str) -> dict[str, float]:
    """Shares of a run's rollouts whose first search found the asked topic's page, the
    distractor's, another page, or none (no search): what a reward gain is made of."""
    from ddai.pipelines.store import read_rollouts
    from ddai.trainer import learn_task

    rows = read_rollouts(logs, runs=[run], columns=["uid", "retrieved_pages"]).to_pylist()
    counts = dict.fromkeys(("asked", "distractor", "other", "none"), 0)
    for r in rows:
        asked, distractor = r["uid"].split("_")[-2:]
        first = (r["retrieved_pages"] or [None])[0]
        key = (
            "none"
            if first is None
            else "asked"
            if first == learn_task.page_id(asked)
            else "distractor"
            if first == learn_task.page_id(distractor)
            else "other"
        )
        counts[key] += 1
    if not rows:
        raise RuntimeError(f"run {run!r} logged no rollouts under {logs}")
    return {k: v / len(rows) for k, v in counts.items()}


def train_and_eval(args: argparse.Namespace, work: Path, sft: Path, arm: str, seed: int) -> dict:
    """One arm, one seed: GRPO on the train questions, then rollouts on the held-out ones."""
    from ddai.trainer import learn_task
    from ddai.trainer.episode.collect import run_collect
    from ddai.trainer.grpo.train import run_grpo

    name = arm.replace("@", "-")
    cfg = learn_task.grpo_config(
        sft,
        work,
        arm=arm.split("@")[0],
        generations=args.generations,
        seed=seed,
        learning_rate=args.preset_lr if arm.endswith("@preset") else args.lr,
        run_id=f"{name}_s{seed}",
        prompts=args.prompts,
        n_agent=args.n_agent,
        output_dir=work / f"grpo-{name}-s{seed}",
    )
    cfg.progress = False
    res = run_grpo(cfg, learn_task.backends())
    reward, fmt = curve(work / "logs", cfg.run_id)
    ev = run_collect(
        learn_task.collect_config(
            res.output_dir,
            work,
            run_id=f"eval_{name}_s{seed}",
            n_agent=args.eval_n_agent,
            seed=seed,
        ),
        learn_task.backends(),
    )
    return {
        "train_reward": reward,
        "format_ok": fmt,
        "heldout_reward": ev.reward_mean,
        "heldout_format_ok": ev.format_ok,
        "heldout_rollouts": ev.rollouts_logged,
        "heldout_first_page": first_page_shares(work / "logs", f"eval_{name}_s{seed}"),
        "clip_ratio": res.clip_ratio,
        "informative_group_share": res.informative_group_share,
        "changed_parameters": res.changed_parameters,
        "steps": res.steps,
    }


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Train the start and every (seed, arm); return the figures."""
    from support.learning_gain import gain_over_control

    from ddai.trainer import learn_task

    sft_steps = args.sft_steps or learn_task.SFT_STEPS
    if args.sft is None:
        sft = learn_task.start(work, seed=0, sft_steps=sft_steps)
    else:
        learn_task.write_task(work / "task")
        sft = args.sft
    runs: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in args.arms}
    for seed in range(args.seeds):
        for arm in args.arms:
            runs[arm][seed] = train_and_eval(args, work, sft, arm, seed)
            print(
                f"seed {seed} {arm}: held-out {runs[arm][seed]['heldout_reward']:.3f}", flush=True
            )
    fixed = learn_task.fixed_query_rewards("heldout")
    best = max(fixed, key=lambda w: fixed[w])
    control = {s: [r["heldout_reward"]] for s, r in runs["control"].items()}
    settings = {k: str(v) for k, v in vars(args).items()}
    settings["sft_steps"] = str(sft_steps)
    out: dict[str, Any] = {
        "settings": settings,
        "task": {
            "train_questions": len(learn_task.split_pairs()["train"]),
            "heldout_questions": len(learn_task.split_pairs()["heldout"]),
            "topics": len(learn_task.TOPICS),
        },
        "arms": {},
    }
    for arm in args.arms:
        per = runs[arm]
        held = [r["heldout_reward"] for r in per.values()]
        entry: dict[str, Any] = {
            "learning_rate": 0.0
            if arm == "control"
            else (args.preset_lr if arm.endswith("@preset") else args.lr),
            "heldout_reward": sum(held) / len(held),
            "heldout_reward_per_seed": held,
            "heldout_format_ok": _mean([r["heldout_format_ok"] for r in per.values()]),
            "heldout_first_page": {
                k: _mean([r["heldout_first_page"][k] for r in per.values()])
                for k in ("asked", "distractor", "other", "none")
            },
            "train_reward_per_batch": _mean_curve([r["train_reward"] for r in per.values()]),
            "format_ok_per_batch": _mean_curve([r["format_ok"] for r in per.values()]),
            "clip_ratio": _mean([r["clip_ratio"] for r in per.values()]),
            "informative_group_share": _mean([r["informative_group_share"] for r in per.values()]),
            "optimizer_steps": per[0]["steps"],
            "changed_parameters": [r["changed_parameters"] for r in per.values()],
        }
        if arm != "control":
            g = gain_over_control({s: [r["heldout_reward"]] for s, r in per.items()}, control)
            entry.update(
                gain=g.mean,
                gain_se=g.se,
                gain_over_se=g.mean / g.se if g.se else None,
                gain_per_seed=list(g.per_seed),
                learns=g.above(3.0),
            )
        out["arms"][arm] = entry
    ctrl = out["arms"]["control"]["heldout_reward"]
    out["fixed_first_query"] = {
        "best_query": best,
        "heldout_reward": fixed[best],
        "below_control": fixed[best] < ctrl,
        "queries_scored": len(fixed),
    }
    return out


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _mean_curve(curves: list[list[float]]) -> list[float]:
    n = min(len(c) for c in curves)
    return [sum(c[i] for c in curves) / len(curves) for i in range(n)]


def show(res: dict[str, Any]) -> str:
    """The figures as the plain text docs/training.md records."""
    s, t = res["settings"], res["task"]
    lines = [
        f"{s['seeds']} seeds; per arm and seed {s['generations']} rollout batches of "
        f"{s['prompts']}×{s['n_agent']} rollouts of {t['train_questions']} train questions, then "
        f"{t['heldout_questions']} held-out questions × {s['eval_n_agent']} rollouts; one SFT "
        f"start ({s['sft_steps']} steps)",
        "",
        f"{'arm':<17} {'lr':>7} {'held-out':>8} {'gain ± se':>16} {'gain/se':>7} {'learns':>6} "
        f"{'clip':>6} {'mixed':>5} {'format':>6} {'asked':>5} {'distr':>5}  "
        "train reward per batch (mean over seeds)",
    ]
    for arm, e in res["arms"].items():
        gain = f"{e['gain']:+.3f} ± {e['gain_se']:.3f}" if e.get("gain_se") is not None else ""
        ratio = f"{e['gain_over_se']:.1f}" if e.get("gain_over_se") is not None else ""
        learns = ("yes" if e["learns"] else "no") if "learns" in e else ""
        clip = f"{e['clip_ratio']:.3f}" if e["clip_ratio"] is not None else "-"
        mixed = (
            f"{e['informative_group_share']:.2f}"
            if e["informative_group_share"] is not None
            else "-"
        )
        fmt = e["heldout_format_ok"]
        curve_txt = " ".join(f"{v:.2f}" for v in e["train_reward_per_batch"])
        fp = e["heldout_first_page"]
        lines.append(
            f"{arm:<17} {e['learning_rate']:>7.0e} {e['heldout_reward']:>8.3f} {gain:>16} "
            f"{ratio:>7} {learns:>6} {clip:>6} {mixed:>5} "
            f"{(f'{fmt:.2f}' if fmt is not None else '-'):>6} {fp['asked']:>5.2f} "
            f"{fp['distractor']:>5.2f}  {curve_txt}"
        )
    f = res["fixed_first_query"]
    lines += [
        "",
        f"best fixed first query on held-out questions (exact, {f['queries_scored']} words): "
        f"{f['best_query']!r} {f['heldout_reward']:.3f} "
        f"({'below' if f['below_control'] else 'NOT below'} the control's "
        f"{res['arms']['control']['heldout_reward']:.3f})",
    ]
    for arm, e in res["arms"].items():
        if "gain_per_seed" in e:
            seeds = " ".join(f"{g:+.3f}" for g in e["gain_per_seed"])
            lines.append(f"{arm} held-out gain per seed: {seeds}")
    lines.append(
        "held-out: mean reward on held-out questions; gain: minus the control's, same seed; "
        "clip: mean share clipped per optimizer step; mixed: share of train groups with mixed "
        "outcomes; format: held-out valid-format share; asked/distr: share of held-out rollouts whose "
        "first search found the asked topic's page / the distractor's"
    )
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for arm, e in res["arms"].items():
        ys = e["train_reward_per_batch"]
        fig.add_scatter(x=list(range(1, len(ys) + 1)), y=ys, mode="lines+markers", name=arm)
    fig.update_layout(
        title="Train reward per rollout batch (mean over seeds); held-out figures in the JSON",
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
