"""CLI: ``ddai train plan``: per-rank memory of a training run under each accelerate config,
from a model config on the meta device (no weights, no GPU)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, console, print_rows, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.running import run_or_fail
from ddai.trainer.runtime.plan_config import PlanConfig

PLAN_FLAGS = config_flags(
    PlanConfig,
    {
        "model": None,
        "dtype": None,
        "lora": "--lora/--no-lora",
        **dict.fromkeys(("lora_r", "lora_target", "accelerate", "gpus", "gpu_memory")),
        **dict.fromkeys(("batch_size", "micro_batch", "max_prompt_length")),
        **dict.fromkeys(("max_completion_length",)),
        "gradient_checkpointing": "--gradient-checkpointing/--no-gradient-checkpointing",
        "attention_scores": "--attention-scores/--no-attention-scores",
        **dict.fromkeys(("logits_chunk", "images", "image_size", "image_max_pixels")),
    },
)

GIB_COLUMNS = {
    "weights_bytes": "weights",
    "grads_bytes": "grads",
    "optimizer_bytes": "optimizer",
    "gathered_bytes": "gathered",
    "activations_bytes": "activations",
    "logits_bytes": "logits",
    "vision_bytes": "vision",
    "sampler_bytes": "sampler",
    "generation_weights_bytes": "gen weights",
    "peak_bytes": "peak",
    "headroom_bytes": "headroom",
}
"""The table's columns (GiB per rank) and their headers."""


def _table_rows(strategies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in strategies:
        row: dict[str, Any] = {"config": s["strategy"], "ranks": s["ranks"]}
        row.update({head: round(s[k] / (1 << 30), 2) for k, head in GIB_COLUMNS.items()})
        row["fits"] = "yes" if s["fits"] else "NO"
        rows.append(row)
    return rows


@with_groups({"settings": PLAN_FLAGS})
def train_plan(*, settings: dict[str, Any], as_json: JsonOpt = False) -> None:
    """Per-rank GPU memory of a training run before it starts: the policy built on the meta
    device from a model config (configs/models/*.json or a model folder), its weights,
    gradients, optimizer state, LoRA adapter, activations, loss-pass logits, sampler KV
    cache and images under each accelerate config, and whether it fits --gpus GPUs of
    --gpu-memory."""
    from ddai.trainer.runtime.memory_plan import plan

    result = asdict(run_or_fail(plan, PlanConfig(**settings)))
    if as_json:
        summary("ddai train plan", result, as_json=True)
        return
    head = {k: v for k, v in result.items() if k not in ("strategies", "fits")}
    summary("ddai train plan", head)
    print_rows("per-rank memory, GiB", _table_rows(result["strategies"]))
    fits = result["fits"]
    console.print(
        f"fits {result['gpus']} × {result['gpu_memory_bytes'] / (1 << 30):.0f} GiB: "
        + (", ".join(fits) if fits else "none of the planned configs"),
        markup=False,
        highlight=False,
    )


register = subcommand("train", "plan", train_plan)
