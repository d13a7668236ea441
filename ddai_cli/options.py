"""The flag specs (``flags.config_flags``) the training commands share, over the library's shared
configs: the episode, reward and backend groups that build a run's nested configs
(``ddai.trainer.episode.config``), the policy, TRL, input and preflight fields every run config of
its kind derives (``ddai.trainer.run_settings``, ``EpisodeInputs``, ``PreflightSettings``), and
``--launch``. Every type, default and help is the config field's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.cli.common import fail
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.run_specs import INPUTS, LORA, POLICY, PREFLIGHT, TRL
from ddai.trainer.episode.config import (
    EpisodeBackends,
    EpisodeConfig,
    RewardOverrides,
)

# re-exported for the commands that read defaults and the plain specs here
__all__ = ["INPUTS", "LORA", "POLICY", "PREFLIGHT", "TRL", "default_of"]


def require_inputs(data: Path, corpus: Path) -> None:
    """Exit 2 naming ``--data`` or ``--corpus`` when it does not exist."""
    for name, path in (("--data", data), ("--corpus", corpus)):
        if not path.exists():
            raise fail(f"{name} {path} not found; make fixture data with `ddai fixtures make OUT`")


EPISODE_FLAGS: dict[str, Any] = dict.fromkeys(
    ("max_turns", "search_k", "max_turn_tokens", "max_completion_tokens")
) | {
    "force_completion": "--force-completion/--no-force-completion",
    "restrict_to_doc": "--restrict-to-doc/--no-restrict-to-doc",
    "obs_max_tokens": None,
    "crop_pad": None,
    "obs_image_max_pixels": None,
    "obs_image_min_pixels": None,
}
"""The episode group's flags (``config_flags`` specs of ``EpisodeConfig``'s fields)."""


def episode_groups(**defaults: Any) -> dict[str, Any]:
    """The episode commands' groups, by the run-config field (a nested config) each fills;
    ``defaults``: episode fields whose flags take the command's own default (``ddai eval``'s
    ``crop_pad``, DDAI's evaluation's), every other default the field's."""
    episode = {
        name: {"decl": spec, "default": defaults[name]} if name in defaults else spec
        for name, spec in EPISODE_FLAGS.items()
    }
    return {
        "rewards": config_flags(
            RewardOverrides,
            dict.fromkeys(("reward", "w_judge", "w_ndcg", "w_format"))
            | {"bias": "--reward-bias", "gate": "--gate/--no-gate"},
        ),
        "episode": config_flags(EpisodeConfig, episode),
        "backends": config_flags(
            EpisodeBackends, dict.fromkeys(("search", "generator", "judge", "reward_timeout"))
        ),
    }


EPISODE_GROUPS: dict[str, Any] = episode_groups()
"""The episode commands' groups, by the run-config field (a nested config) each fills."""


def nested_configs(
    *, rewards: dict[str, Any], episode: dict[str, Any], backends: dict[str, Any]
) -> dict[str, Any]:
    """The three groups as one: a run config's nested settings, as keywords (``**nested``)."""
    return {
        "episode": EpisodeConfig(**episode),
        "rewards": RewardOverrides(**rewards),
        "backends": EpisodeBackends(**backends),
    }


episode_settings = with_groups(EPISODE_GROUPS)(nested_configs)
"""``nested_configs`` over the episode flags, each with its field's default."""
