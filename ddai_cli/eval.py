"""CLI: ``ddai eval``: a Searcher policy (local, or served with ``--generate-via NAME``) over a test
set in DDAI's format, logged as a run and scored by the set's own categories
(``trainer/episode/evaluate.py``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from ddai.cli.app import top_command
from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.options import PREFLIGHT, default_of, episode_groups, nested_configs, require_inputs
from ddai.cli.running import run_or_fail
from ddai.trainer.episode.collect_config import EvalConfig

EVAL_FLAGS = config_flags(
    EvalConfig,
    {
        **{name: None for name in ("n_agent", "batch_size", "temperature", "top_p", "top_k")},
        **dict.fromkeys(("limit", "by", "append")),
    },
)


@with_groups(
    {
        "run": config_flags(
            EvalConfig,
            dict.fromkeys(("model", "data", "run_id", "seed", "corpus", "generate_via")),
        ),
        "policy": config_flags(EvalConfig, {"dtype": None}),
        # the episode flags, --crop-pad with eval's own default (DDAI's evaluation's)
        "nested": with_groups(episode_groups(crop_pad=default_of(EvalConfig, "episode").crop_pad))(
            nested_configs
        ),
        "settings": EVAL_FLAGS,
        "preflight": config_flags(EvalConfig, PREFLIGHT),
    }
)
def eval_command(
    *,
    run: dict[str, Any],
    logs: LogsOpt = default_of(EvalConfig, "logs"),
    policy: dict[str, Any],
    progress: ProgressOpt = default_of(EvalConfig, "progress"),
    as_json: JsonOpt = False,
    settings: dict[str, Any],
    nested: dict[str, Any],
    preflight: dict[str, Any],
) -> None:
    """Evaluate a Searcher policy on a test set: accuracy, judge and NDCG by its categories."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ddai.trainer.episode.evaluate import run_eval

    require_inputs(run["data"], run["corpus"])
    cfg = EvalConfig(
        **run,
        **policy,
        **nested,
        **settings,
        **preflight,
        logs=logs,
        progress=progress and not as_json,
    )
    summary("ddai eval", asdict(run_or_fail(run_eval, cfg)), as_json=as_json)


register = top_command("eval", eval_command)
