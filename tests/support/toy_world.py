"""The toy world the trainer's tests run on: its dataset and corpus (``ddai.trainer.toy``), a
tiny model whose tokenizer was trained on the toy's SFT texts, and the fields a training config
needs to run on them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddai.trainer import toy
from ddai.trainer.tiny import TinySpec, build_tiny


def tiny_on_toy(out: Path, **spec: Any) -> Path:
    """A tiny model at ``out``, its tokenizer trained on the toy's SFT texts; ``spec``: TinySpec
    fields (its defaults otherwise)."""
    return build_tiny(out, texts=[r["messages"] for r in toy.sft_rows()], spec=TinySpec(**spec))


def make_world(root: Path, **spec: Any) -> tuple[Path, Path, Path]:
    """``(root, toy data folder, tiny model)`` written under ``root``."""
    return root, toy.write_toy(root / "toy"), tiny_on_toy(root / "tiny", **spec)


def run_fields(model: Any, data: Path, out: Path, logs: Path, run_id: str) -> dict[str, Any]:
    """A GRPO/PPO config's inputs and outputs for a run on the toy world in ``data``."""
    return dict(
        model=str(model),
        data=data / "dataset.parquet",
        corpus=data / "pages.parquet",
        output_dir=out,
        logs=logs,
        run_id=run_id,
    )


QUIET = dict(save_steps=10, report_to="none", skip_preflight=True, progress=False)
"""A short test run's quiet settings: no checkpoint before step 10, no metrics report, no
preflight, no progress bar."""


def run_args(model: Any, data: Path, corpus: Path) -> list[str]:
    """The command-line twin of ``run_fields``' inputs: ``--model``, ``--data`` (a prompt file)
    and ``--corpus``."""
    return ["--model", str(model), "--data", str(data), "--corpus", str(corpus)]


def gspo_clip_run(model: Any, data: Path, root: Path, name: str, **over: Any) -> dict[str, Any]:
    """The summary (a dict) of a 4-step gspo-ddai run at its preset lr 1e-6 (ε 3e-4 / 4e-4, two
    mini-batches per generation) on the toy world in ``data``, with ``toy_backends`` and judge-only
    rewards, written under ``root / name``: what the clip did. ``over``: config fields that differ
    (the CPU test's tiny episode by default; the GPU check's larger one, dtype and LoRA)."""
    from dataclasses import asdict

    from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
    from ddai.trainer.grpo.train import GRPORunConfig, run_grpo
    from support.backends import toy_backends

    fields: dict[str, Any] = dict(
        preset="gspo-ddai",
        n_agent=2,
        batch_size=2,
        max_steps=4,
        **QUIET,
        episode=EpisodeConfig(
            max_turns=2, max_turn_tokens=12, max_completion_tokens=64, obs_max_tokens=8
        ),
        rewards=RewardOverrides(reward="judge-only"),
    )
    run = run_fields(model, data, root / name, root / "logs", name)
    return asdict(run_grpo(GRPORunConfig(**run, **(fields | over)), toy_backends()))


def curriculum_world(root: Path, system_prompt: str) -> Path:
    """The repository's curriculum log (``fixtures/logs/curriculum.jsonl``) stored as run ``cur``
    in ``root/logs``, ``system_prompt`` in ``root/system.txt``, and a tiny model whose tokenizer
    was trained on the log's texts (returned)."""
    import json

    from ddai.pipelines.store import write_run
    from ddai.trainer.tiny import read_texts

    src = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "curriculum.jsonl"
    rows = [json.loads(line) for line in src.read_text("utf-8").splitlines()]
    write_run(root / "logs", "cur", rows, sources=[{"path": str(src)}])
    (root / "system.txt").write_text(system_prompt, encoding="utf-8")
    spec = TinySpec(vocab_size=1024, hidden_size=32, num_hidden_layers=2)
    return build_tiny(root / "tiny", texts=read_texts([src]), spec=spec)


def run_rank(main: Callable[[], None]) -> None:
    """A launched worker's ``main``, then its process group ended and freed as ``ddai`` does
    (``dist.shutdown``): a gloo group left to interpreter teardown can abort a finished rank.

    A rank whose ``main`` finished then leaves without the interpreter's teardown (its results
    are written and its streams flushed by then): the tests that launch these workers judge the
    run, not teardown, so a rare teardown abort cannot fail them. What proves the teardown fix is
    ``test_shutdown_frees_a_group_that_torch_objects_still_hold`` (tests/trainer/runtime)."""
    import os

    from ddai.trainer.runtime import dist

    try:
        main()
    finally:
        dist.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
