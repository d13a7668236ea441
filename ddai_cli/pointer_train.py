"""CLI: ``ddai pointer train``: train the pointer selector."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, ProgressOpt, bad_input_exits, summary
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.running import device_options, maybe_relaunch
from ddai.trainer.pointer.config import PointerTrainConfig, RLConfig, TrainSchedule

TRAIN_FLAGS = config_flags(
    PointerTrainConfig,
    {
        "store": "--store",
        "out": {"decl": "--out-dir", "metavar": "<dir>"},
        **{name: f"--{name}" for name in ("world", "data", "init")},
        **dict.fromkeys(("split", "d_model", "scoring")),
    },
)
SCHEDULE_FLAGS = config_flags(
    TrainSchedule,
    {
        "mode": "--mode",
        "epochs": None,
        "phases": "--phases",
        **dict.fromkeys(("lr", "batch_queries", "weight_decay", "seed")),
    },
)
RL_FLAGS = config_flags(
    RLConfig,
    {
        **dict.fromkeys(("norm", "adv_clip", "clip_eps", "kl_coef", "rce_t_start", "rce_t_end")),
        "old_logp": None,
        "reinforcepp_clip": "--reinforcepp-clip/--no-reinforcepp-clip",
    },
)


@with_groups(
    {
        "settings": TRAIN_FLAGS,
        "schedule": SCHEDULE_FLAGS,
        "rl": RL_FLAGS,
        "device": device_options,
    }
)
def train_cmd(
    *,
    settings: dict[str, Any],
    schedule: dict[str, Any],
    rl: dict[str, Any],
    progress: ProgressOpt = default_of(PointerTrainConfig, "progress"),
    device: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Train the pointer selector: SFT from labels, or RL phases on generated data.

    --mode sft learns the labels; --phases rce:2,clipped-group:30 runs an RCE warm-up, then the
    clipped group advantage (or REINFORCE++) from the SFT checkpoint given with --init.
    """
    maybe_relaunch(**device)
    from ddai.trainer.pointer.train import run_train

    with bad_input_exits():
        plan = TrainSchedule(**schedule)
        phases = plan.plan()
        cfg = PointerTrainConfig(
            **settings,
            phases=phases,
            optim=plan.optim(phases),
            rl=RLConfig(**rl),
            progress=progress and not as_json,
        )
        result = run_train(cfg)
    summary("ddai pointer train", result, as_json=as_json)


register = subcommand("pointer", "train", train_cmd)
