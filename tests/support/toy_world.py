"""The toy world the trainer's tests run on: its dataset and corpus (``ddai.trainer.toy``), a
tiny model whose tokenizer was trained on the toy's SFT texts, and the fields a training config
needs to run on them."""

from __future__ import annotations

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
    """A launched worker's ``main``, then its process group closed as ``ddai`` does: a gloo group
    left to interpreter teardown can abort a finished rank."""
    from ddai.trainer.runtime import dist

    try:
        main()
    finally:
        dist.shutdown()
