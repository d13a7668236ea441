"""``ddai train grpo``'s settings: the run config (its episode, reward and backend settings nested
from ``ddai.trainer.episode.config``), the optimiser presets, and the TRL ``GRPOConfig``
built from defaults < preset < config file < flags < ``--set``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ddai.trainer import common
from ddai.trainer.episode.config import (
    EpisodeBackends,
    EpisodeConfig,
    EpisodeInputs,
    EpisodeSettings,
    PageSettings,
    PreflightSettings,
    RewardOverrides,
)
from ddai.trainer.episode.run_result import LoggedRunResult
from ddai.trainer.run_settings import PolicyRun, TrlKnobs

# Seed 000's focused-round optimiser: sequence-level ratio (GSPO), clip 3e-4/4e-4, lr 1e-6, no KL,
# no entropy bonus, and its mini-batch structure: verl's ``ppo_mini_batch_size=8`` prompts out of a
# 16-prompt rollout batch (focused round 1) is two optimizer steps per rollout batch. Without it the
# old log-probs equal the current ones at every step and the tiny clip never acts. TRL's
# ``steps_per_generation``: one generation of ``batch_size × steps_per_generation`` rollouts, then
# that many optimizer steps of ``batch_size`` rollouts each (round 3's 32/8 is ``--set
# steps_per_generation=4``).
TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    "gspo-ddai": {
        "steps_per_generation": 2,
        "importance_sampling_level": "sequence",
        "loss_type": "grpo",
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
        "learning_rate": 1e-6,
        "beta": 0.0,
        "entropy_coef": 0.0,
    },
    "grpo": {"importance_sampling_level": "token", "loss_type": "grpo", "beta": 0.0},
}


CHOICE_FLAGS = {"loss_type": "--loss-type", "importance_sampling_level": "--ratio-level"}
"""TRL knobs with a fixed set of values (``trl_compat.CHOICES``) -> the flag that sets each."""


def train_preset(name: str | None) -> dict[str, Any]:
    if name is None:
        return {}
    try:
        return dict(TRAIN_PRESETS[name])
    except KeyError:
        raise common.TrainConfigError(
            f"unknown --preset {name!r}; known: {', '.join(sorted(TRAIN_PRESETS))}"
        ) from None


@dataclass
class GRPORunConfig(
    TrlKnobs, PreflightSettings, EpisodeSettings, PageSettings, EpisodeInputs, PolicyRun
):
    """One GRPO run; every field has a flag in ``ddai train grpo``, the nested ``episode``,
    ``rewards`` and ``backends`` (``EpisodeSettings``) field by field, the page settings
    (``PageSettings``: ``--observation``, ``--image-root``, ``--generator-max-images``), and the
    inputs, preflight, policy and TRL knobs every run of its kind shares (``EpisodeInputs``,
    ``PreflightSettings``, ``ddai.trainer.run_settings``)."""

    run_id: str | None = None
    """Run id of the rollout log. Default: grpo_<timestamp>."""
    preset: str | None = None
    """Optimiser preset: gspo-ddai (seed defaults: sequence ratio, clip 3e-4/4e-4, lr 1e-6, KL 0,
    entropy 0, two optimizer steps of --batch-size rollouts per rollout batch) or grpo."""
    n_agent: int | None = None
    """Rollouts per prompt (the GRPO group)."""
    batch_size: int | None = None
    """Rollouts per device optimizer step (prompts × n_agent); under --launch N the step's global
    batch is N × this. A rollout batch is this × steps_per_generation (1, or 2 under --preset
    gspo-ddai)."""
    epsilon: float | None = None
    """Lower clip ε (ratio ≥ 1 − ε)."""
    epsilon_high: float | None = None
    """Upper clip ε (ratio ≤ 1 + ε)."""
    beta: float | None = None
    """KL coefficient to the reference model."""
    entropy_coef: float | None = None
    """Entropy bonus coefficient."""
    importance_sampling_level: str | None = None
    """Importance ratio: sequence (GSPO) or token."""
    loss_type: str | None = None
    """TRL loss_type (grpo, dapo, bnpo, dr_grpo, …)."""
    temperature: float | None = None
    """Sampling temperature."""
    vllm: str | None = None
    """``server``: generate through a running ``trl vllm-serve`` (GPU)."""
    vllm_server_base_url: str | None = None
    """Base URL of the vLLM server."""
    progress: bool = True
    """TRL's tqdm bars on stderr (``--no-progress`` sets its ``disable_tqdm``)."""
    lora_dropout: float = 0.0
    repetition_penalty: float | None = None
    """Sampling repetition penalty (default 1: none). Applied explicitly, and the sampled log-probs
    and the loss's are both of the penalized distribution (on-policy); the checkpoint's own
    generation_config never applies."""

    def check(self) -> None:
        """Fail on bad settings before any model is loaded; messages name the flag."""
        self.check_pages()
        self.check_episode()
        self.check_lora()
        for key, flag in CHOICE_FLAGS.items():
            _check_choice(key, getattr(self, key), f"{flag} ")


@dataclass
class GRPOResult(LoggedRunResult):
    output_dir: str
    steps: int
    changed_parameters: int
    final_model: dict[str, Any] | None = None
    """What ``output_dir`` holds (``lora_merge.FinalModel.summary``: with LoRA, the float32 merge
    and its check); None on ranks other than the main one."""
    zero_variance_steps: int = 0
    """Steps whose groups all had zero reward variance (no learning signal)."""
    preflight: str = "skipped"
    """``passed``, ``passed with warnings: …`` or ``skipped``."""
    search_errors: int = 0
    """Searches that failed (service errors, timeouts) and were shown as ``[System Error: …]``."""
    unscorable: int = 0
    """Rollouts that needed a judge score and got none (timeout, failure): no reward, left out of
    group normalization."""
    informative_group_share: float | None = None
    """Share of prompt groups with reward variance (the only ones GRPO learns from)."""
    clip_ratio: float | None = None
    """Mean over logged steps of TRL's ``clip_ratio/region_mean`` (share clipped; per step in the
    run's ``train_metrics`` side table)."""
    clip_acted_steps: int | None = None
    """Optimizer steps in which the clip acted on some token (sequence, under GSPO); None: the
    loss type has no clip (``ddai.trainer.runtime.clip_stats``)."""
    ratio_spread: float | None = None
    """Largest |ratio − 1| over the mini-batches trained after an optimizer step since their
    generation (None: none was, so the ratio was 1 throughout)."""
    minibatches_after_update: int | None = None
    """Mini-batches trained after an optimizer step since their generation (the ratio can move)."""
    minibatches_first: int | None = None
    """Mini-batches trained first after their generation (ratio 1: no clip can act)."""
    epsilon_low: float | None = None
    """The clip's lower ε (ratio ≥ 1 − ε)."""
    epsilon_high: float | None = None
    """The clip's upper ε (ratio ≤ 1 + ε)."""


def episode_flags() -> dict[str, str]:
    """``field -> --flag`` of the nested episode, reward and backend settings (for the message
    when one is given as a TRL knob in ``--config`` or ``--set``)."""
    renamed = {"bias": "--reward-bias"}
    return {
        f.name: renamed.get(f.name, "--" + f.name.replace("_", "-"))
        for part in (EpisodeConfig, RewardOverrides, EpisodeBackends)
        for f in dataclasses.fields(part)
    }


def grpo_args(cfg: GRPORunConfig) -> Any:
    """TRL ``GRPOConfig`` from defaults < preset < config file < flags < ``--set``."""
    from trl import GRPOConfig

    file_layer, overrides = common.user_layers(GRPOConfig, cfg, episode_flags())
    flags = {
        "num_generations": cfg.n_agent,
        "per_device_train_batch_size": cfg.batch_size,
        "max_steps": cfg.max_steps,
        "learning_rate": cfg.learning_rate,
        "epsilon": cfg.epsilon,
        "epsilon_high": cfg.epsilon_high,
        "beta": cfg.beta,
        "entropy_coef": cfg.entropy_coef,
        "importance_sampling_level": cfg.importance_sampling_level,
        "loss_type": cfg.loss_type,
        "temperature": cfg.temperature,
        "repetition_penalty": cfg.repetition_penalty,
        "save_steps": cfg.save_steps,
        "logging_steps": cfg.logging_steps,
        "report_to": cfg.report_to,
    }
    if cfg.vllm is not None:
        if cfg.vllm != "server":
            raise common.TrainConfigError(f"--vllm {cfg.vllm!r}: only `server` is supported")
        flags.update(
            use_vllm=True, vllm_mode="server", vllm_server_base_url=cfg.vllm_server_base_url
        )
    defaults = {
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "loss_type": "grpo",
        "logging_steps": 1,
        "save_steps": 30,
        "save_strategy": "steps",
        "save_total_limit": 2,
        "disable_tqdm": not cfg.progress,
        "max_completion_length": cfg.episode.max_completion_tokens,
        # Activations recomputed in the backward pass: a training forward keeps one layer's
        # activations instead of all of them (``--set activation_checkpointing=false`` to trade
        # back; transformers' new name for gradient checkpointing).
        "activation_checkpointing": True,
        **common.device_defaults(),
    }
    preset = train_preset(cfg.preset)
    if any(layer.get("generation_batch_size") is not None for layer in (file_layer, overrides)):
        # TRL takes one of the two; the user's generation batch wins over the preset's structure.
        preset.pop("steps_per_generation", None)
    merged = common.merge_layers(defaults, preset, file_layer, flags, overrides)
    common.checkpointing_name(merged, {**file_layer, **overrides})
    batch, group = merged["per_device_train_batch_size"], merged["num_generations"]
    if batch % group:
        raise common.TrainConfigError(
            f"--batch-size {batch} must be a multiple of --n-agent {group} "
            "(rollouts per step = prompts × n_agent)"
        )
    for key, flag in CHOICE_FLAGS.items():
        if key in overrides:
            where = f"--set {key}="
        elif key in file_layer:
            where = f"{cfg.config_file}: {key}="
        else:
            where = f"{flag} "
        _check_choice(key, merged.get(key), where)
    args = common.trl_config(GRPOConfig, merged, cfg)
    if args.generation_kwargs:
        # TRL's own generation reads it; ddai's rollout samples with its explicit processors only
        # (``episode.sampling``), and the loss scores the rollouts under those same processors.
        raise common.TrainConfigError(
            f"generation_kwargs {args.generation_kwargs!r}: ddai samples with explicit knobs "
            "only and would ignore it; set temperature, top_p, top_k, min_p or "
            "repetition_penalty instead (--set top_p=0.9, --repetition-penalty 1.1)"
        )
    return args


def _check_choice(key: str, value: Any, where: str) -> None:
    """Refuse a ``key`` value TRL would take and fail on only inside its loss, a step into the
    run; ``where``: the flag or layer that set it (``"--loss-type "``, ``"--set loss_type="``)."""
    from ddai.trainer.trl_compat import CHOICES

    if value is not None and value not in CHOICES[key]:
        raise common.TrainConfigError(
            f"{where}{value!r} is not supported; use one of: {', '.join(CHOICES[key])}"
        )
