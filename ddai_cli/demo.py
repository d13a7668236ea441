"""CLI: ``ddai demo``: the whole loop on the synthetic world, end to end, offline.

Makes the synthetic world (if missing), ingests its runs, runs the funnel, distills rare
successes, writes the HTML report, and prints where every result is. Each step is a small
function returning a summary dict; the demo stops at the first failing step with exit code 1.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ddai.cli.app import top_command
from ddai.cli.common import EXIT_FAILED, JsonOpt, err_console, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.fixtures.world_config import WorldSpec
from ddai.pipelines.store import workspace


@dataclass(kw_only=True)
class DemoConfig(WorldSpec):
    """``ddai demo``: the synthetic world (``WorldSpec``) and the loop's results under
    ``<home>/demo``."""

    home: Path
    fresh: bool = False
    """Rebuild the synthetic world even if present."""
    train: bool = False
    """Also train before the report: a tiny model, an SFT start and 2 GRPO steps on the learning
    bench's task (ddai.trainer.learn_task: search the topic the question asks about, not the one
    it rules out), logged as run demo_grpo; adds a few CPU minutes."""

    @property
    def world(self) -> Path:
        return self.home / "demo" / "world"

    @property
    def logs(self) -> Path:
        return self.home / "demo" / "logs"

    @property
    def out(self) -> Path:
        return self.home / "demo" / "out"


def existing_world(world: Path) -> tuple[int, str] | None:
    """The (seed, size) the world in ``world`` was made with (its ``truth.json``), or None."""
    import json

    try:
        gen = json.loads((world / "truth.json").read_text())["generator"]
        return int(gen["seed"]), str(gen["size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def step_world(cfg: DemoConfig) -> dict[str, Any]:
    """Make the world unless one with the same seed and size is there (``--fresh`` always makes
    it): asking for ``--size medium`` over a small world rebuilds it, and the summary says which."""
    import shutil

    from ddai.pipelines import fixtures

    have = existing_world(cfg.world)
    want = (cfg.seed, str(cfg.size))
    if have == want and not cfg.fresh:
        action = "reused (same seed and size; --fresh rebuilds it)"
    else:
        if have is None:
            action = "built"
        elif have != want:
            action = f"rebuilt (it had seed {have[0]}, size {have[1]})"
        else:
            action = "rebuilt (--fresh)"
        if cfg.world.exists():  # a smaller world's run files must not linger beside the new ones
            shutil.rmtree(cfg.world)
        fixtures.make_world(cfg.world, seed=cfg.seed, size=cfg.size)
    return {
        "world": str(cfg.world),
        "seed": cfg.seed,
        "size": str(cfg.size),
        "world_action": action,
    }


def step_ingest(cfg: DemoConfig) -> dict[str, Any]:
    from ddai.pipelines.ingest import IngestConfig, ingest

    sources = sorted((cfg.world / "logs").glob("*.jsonl"))
    res = ingest(IngestConfig(sources, cfg.logs, progress=False))
    return {
        "log store": str(cfg.logs),
        "rollouts": res.rollouts_out,
        "runs": sorted(res.runs),
        "quarantined": sum(res.quarantined.values()),
    }


def step_funnel(cfg: DemoConfig) -> dict[str, Any]:
    from ddai.pipelines.funnel import run_funnel_demo

    return run_funnel_demo(cfg.world, cfg.logs, cfg.out / "funnel")


def step_distill(cfg: DemoConfig) -> dict[str, Any]:
    from ddai.pipelines.distill import DistillConfig, run_distill

    out = cfg.out / "sft" / "focused_r1.train1.parquet"
    res = run_distill(DistillConfig(logs=cfg.logs, runs=["focused_r1"], out=out))
    keep = ("rollouts read", "selected rollouts", "samples written", "rewriter")
    return {"sft file": str(out), **{k: res[k] for k in keep if k in res}}


def step_report(cfg: DemoConfig) -> dict[str, Any]:
    from ddai.reports import demo_report

    return demo_report(cfg.logs, cfg.out / "report.html", datasets_dir=cfg.out / "funnel")


def step_train(cfg: DemoConfig) -> dict[str, Any]:
    """``--train`` (``DemoConfig.train``): an SFT start that writes the valid format, then GRPO
    logged as run ``demo_grpo``. Groups with mixed outcomes are what GRPO learns from; the summary
    counts them (``informative_group_share``) and the weights that changed."""
    from ddai.trainer import learn_task
    from ddai.trainer.grpo.train import run_grpo

    root = cfg.out / "train"
    sft = learn_task.start(root, seed=cfg.seed, sft_steps=DEMO_SFT_STEPS)
    grpo = run_grpo(
        learn_task.grpo_config(
            sft,
            root,
            arm="grpo",
            generations=2,
            seed=cfg.seed,
            logs=cfg.logs,
            run_id="demo_grpo",
            prompts=4,
            n_agent=4,
        ),
        learn_task.backends(),
    )
    return {
        "model": grpo.output_dir,
        "sft steps": DEMO_SFT_STEPS,
        "grpo steps": grpo.steps,
        "rollouts logged": grpo.rollouts_logged,
        "run": "demo_grpo",
        "changed_parameters": grpo.changed_parameters,
        "informative_group_share": grpo.informative_group_share,
        "reward first step": grpo.reward_first,
        "reward last step": grpo.reward_last,
    }


DEMO_SFT_STEPS = 300
"""SFT steps of the demo's start: enough for the valid format (1–2 CPU minutes); the bench's start
trains ``learn_task.SFT_STEPS``, until it searches one of the question's two topics about half the
time."""


STEPS: list[tuple[str, Callable[[DemoConfig], dict[str, Any]]]] = [
    ("synthetic world", step_world),
    ("ingest", step_ingest),
    ("funnel", step_funnel),
    ("distill", step_distill),
    ("train", step_train),
    ("report", step_report),
]


def run_demo(cfg: DemoConfig, *, on_step: Callable[[str, dict[str, Any], float], None]) -> bool:
    for name, fn in STEPS:
        if fn is step_train and not cfg.train:
            continue
        t0 = time.perf_counter()
        try:
            # Steps' own progress displays go to stderr: stdout carries only the summary.
            with contextlib.redirect_stdout(sys.stderr):
                result = fn(cfg)
        except Exception as e:  # the demo reports which step failed and why, then stops
            on_step(name, {"error": f"{type(e).__name__}: {e}"}, time.perf_counter() - t0)
            return False
        on_step(name, result, time.perf_counter() - t0)
    return True


def next_commands(cfg: DemoConfig) -> dict[str, str]:
    """What to run after the demo, exact for this workspace: the commands read the demo's store
    without ``--logs`` when the default store falls back to it (no ``<home>/logs`` yet)."""
    same = workspace.logs_dir(None, demo_fallback=True, note=False) == cfg.logs
    logs = "" if same else f" --logs {shlex.quote(str(cfg.logs))}"
    return {
        "open the report": str(cfg.out / "report.html"),
        "serve the store": f"ddai serve{logs}",
        "list the runs": f"ddai runs{logs}",
        "query it": f'ddai query{logs} "SELECT run_id, count(*) FROM rollouts GROUP BY 1"',
    }


DEMO_FLAGS = config_flags(
    DemoConfig,
    {
        "seed": None,
        "size": None,
        "fresh": "--fresh/--no-fresh",
        "train": "--train/--no-train",
    },
)


@with_groups({"settings": DEMO_FLAGS})
def demo_cmd(*, settings: dict[str, Any], as_json: JsonOpt = False) -> None:
    """Run the whole loop on the synthetic world: world → ingest → funnel → distill (→ train) → report."""
    cfg = DemoConfig(home=workspace.home(), **settings)
    results: dict[str, Any] = {}

    def on_step(name: str, result: dict[str, Any], seconds: float) -> None:
        results[name] = {**result, "seconds": round(seconds, 1)}
        if not as_json:
            err_console.print(f"[dim]done[/] {name} ({seconds:.1f}s)")

    ok = run_demo(cfg, on_step=on_step)
    if ok:
        results["next"] = next_commands(cfg)
    summary("ddai demo", results, as_json=as_json)
    if not ok:
        raise typer.Exit(EXIT_FAILED)


register = top_command("demo", demo_cmd)
