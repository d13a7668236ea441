"""CLI: ``ddai pointer eval``: held-out VQA accuracy of each selector's pairs."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, ProgressOpt, RetryFailedOpt, bad_input_exits
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.pointer import INPUTS, VQA_FIELDS, vqa_summary, with_vqa
from ddai.trainer.pointer.config import EvalConfig, parse_models

EVAL_FLAGS = config_flags(
    EvalConfig,
    {
        "models": {
            "decl": "--model",
            "metavar": "<name=checkpoint>",
            "type": list[str],
            "parse": parse_models,
        },
        **INPUTS,
        **dict.fromkeys(("split", "num_beams", "seed")),
        "out": {"decl": "--out-dir", "metavar": "<dir>"},
        **dict.fromkeys(VQA_FIELDS),
    },
)


@with_groups({"settings": EVAL_FLAGS})
def eval_cmd(
    *,
    settings: dict[str, Any],
    retry_failed: RetryFailedOpt = False,
    progress: ProgressOpt = default_of(EvalConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Held-out VQA accuracy of each selector's pairs, and how the picked indices moved.

    Selectors: each --model's greedy pick, the first model's top beam, the two nearest
    demonstrations, and a random pair.
    """
    from ddai.trainer.pointer.evaluate import run_eval

    with bad_input_exits():
        cfg = EvalConfig(**settings, progress=progress and not as_json)
        data = with_vqa(run_eval, cfg, retry_failed)
    vqa_summary("ddai pointer eval", data, dry_run=cfg.dry_run, as_json=as_json)


register = subcommand("pointer", "eval", eval_cmd)
