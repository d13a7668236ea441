"""CLI: ``ddai pointer process``: flatten raw records into per-pointer rows with a reward."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, bad_input_exits, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.cli.pointer import OUT
from ddai.trainer.pointer.config import ProcessConfig, RewardConfig

PROCESS_FLAGS = config_flags(
    ProcessConfig, {"out": OUT, "raw": {"argument": True, "metavar": "FILE"}, "force": None}
)
REWARD_FLAGS = config_flags(
    RewardConfig,
    {
        "alpha": None,
        "beta": None,
        "correctness_mode": "--correctness",
        "quality": None,
        "use_acc_score": "--use-acc-score/--no-use-acc-score",
        "clip": "--reward-clip",
    },
)


@with_groups({"settings": PROCESS_FLAGS, "reward": REWARD_FLAGS})
def process_cmd(
    *,
    settings: dict[str, Any],
    reward: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Flatten raw records into per-pointer rows with a reward, plus per-method statistics.

    The statistics table (beside --out) has mean correctness and index-selection bias per
    gen_method.
    """
    from ddai.trainer.pointer.data import run_process

    with bad_input_exits():
        cfg = ProcessConfig(**settings, reward=RewardConfig(**reward))
        data = run_process(cfg)
    summary("ddai pointer process", data, as_json=as_json)


register = subcommand("pointer", "process", process_cmd)
