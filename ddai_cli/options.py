"""The flag specs (``flags.config_flags``) the training commands share, over the library's shared
configs: the episode, reward and backend groups that build a run's nested configs
(``ddai.trainer.episode.config``), the policy, TRL, input and preflight fields every run config of
its kind derives (``ddai.trainer.run_settings``, ``EpisodeInputs``, ``PreflightSettings``), and
``--launch``. Every type, default and help is the config field's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.cli.common import check_run_ids, fail
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.trainer.episode.config import (
    EpisodeBackends,
    EpisodeConfig,
    RewardOverrides,
)

__all__ = ["default_of"]  # re-exported for the commands that read defaults here

Spec = dict[str, Any]

POLICY: Spec = {"model": None, "output_dir": "--out-dir", "dtype": None, "seed": None}
"""``--model``, ``--out-dir``, ``--dtype``, ``--seed`` (``PolicyRun``, the value configs)."""
LORA: Spec = dict.fromkeys(("lora", "lora_r", "lora_alpha", "lora_target"))
"""The LoRA flags of ``train sft``/``grpo``/``ppo`` (``PolicyRun``)."""
TRL: Spec = {
    **dict.fromkeys(("max_steps", "report_to", "save_steps", "logging_steps", "resume")),
    "learning_rate": "--lr",
    "config_file": "--config",
    "overrides": {"decl": "--set", "metavar": "<key=value>", "type": list[str] | None, "default": None},
}  # fmt: skip
"""TRL's run knobs of ``train sft``/``grpo`` (``TrlKnobs``); ``--set`` is parsed by the command."""
INPUTS: Spec = {"data": None, "corpus": None, "limit": None, "run_id": {"callback": check_run_ids}}
"""What an episode run reads (``EpisodeInputs``) and its run id."""
PREFLIGHT: Spec = {"skip_preflight": None, "preflight_prompts": {"min": 1}}
"""``--skip-preflight``, ``--preflight-prompts`` (``PreflightSettings``)."""


def require_inputs(data: Path, corpus: Path) -> None:
    """Exit 2 naming ``--data`` or ``--corpus`` when it does not exist."""
    for name, path in (("--data", data), ("--corpus", corpus)):
        if not path.exists():
            raise fail(f"{name} {path} not found; make fixture data with `ddai fixtures make OUT`")


EPISODE_GROUPS: dict[str, Any] = {
    "rewards": config_flags(
        RewardOverrides,
        dict.fromkeys(("reward", "w_judge", "w_ndcg", "w_format"))
        | {"bias": "--reward-bias", "gate": "--gate/--no-gate"},
    ),
    "episode": config_flags(
        EpisodeConfig,
        dict.fromkeys(("max_turns", "search_k", "max_turn_tokens", "max_completion_tokens"))
        | {
            "force_completion": "--force-completion/--no-force-completion",
            "restrict_to_doc": "--restrict-to-doc/--no-restrict-to-doc",
            "obs_max_tokens": None,
        },
    ),
    "backends": config_flags(
        EpisodeBackends, dict.fromkeys(("search", "generator", "judge", "reward_timeout"))
    ),
}
"""The episode commands' groups, by the run-config field (a nested config) each fills."""


@with_groups(EPISODE_GROUPS)
def episode_settings(
    *, rewards: dict[str, Any], episode: dict[str, Any], backends: dict[str, Any]
) -> dict[str, Any]:
    """The three groups as one: a run config's nested settings, as keywords (``**nested``)."""
    return {
        "episode": EpisodeConfig(**episode),
        "rewards": RewardOverrides(**rewards),
        "backends": EpisodeBackends(**backends),
    }
