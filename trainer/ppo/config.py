"""``ddai train ppo``'s settings: the run config (its episode, reward and backend settings nested
from ``ddai.trainer.episode.config``, as in ``GRPORunConfig``) with its checks, and the result.
Imports no torch, so the CLI reads its defaults (and the help of most flags) from here.

Seed 003's PPO pseudocode sets ``ppo_eps = 0.2`` (``clip_low``/``clip_high`` here),
``critic_weight = 0.5`` (the ½ of ``clipped_value_loss``; ``--vf-clip 0`` is its plain form) and
``kl_beta = 0.1``, and reduces the loss per sequence then over the batch
(``seq-mean-token-mean``), saying that many reductions exist. ddai's defaults differ on two: the
KL coefficient is 0.05 (``kl_coef``; ``--kl 0.1`` is the seed's), and the policy and value losses
are token means over the batch's policy tokens (``token-mean``: every policy token weighs the same
whatever its rollout's length, which a multi-turn search episode varies widely), with no flag.
Advantage whitening is verl's ``masked_whiten`` (``(A − mean)·rsqrt(var + 1e-8)`` over policy
tokens), not the seed's ``whiten`` (``/(std + 1e-8)``, which ``--reward-norm`` uses): the two
agree on a batch with spread, and verl's damps one whose advantages are all about 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.config import (
    EpisodeInputs,
    EpisodeSettings,
    PageSettings,
    PreflightSettings,
)
from ddai.trainer.episode.run_result import LoggedRunResult
from ddai.trainer.run_settings import PolicyRun

KL_MODES = ("reward", "loss")
"""Where the reference KL goes: ``reward`` folds ``−β·KL_t`` into the per-token rewards (seed
003's pseudocode, Stiennon et al. 2020, InstructGPT); ``loss`` adds ``β·KL`` to the policy loss
(the seed: "perhaps more common, and a little simpler")."""

REWARD_NORMS = ("none", "center", "scale", "whiten")
"""How a batch's outcome scores are normalized before GAE (``normalize_scores``)."""


DEFAULT_KL_ESTIMATOR = {"reward": "k1", "loss": "k3"}
"""The estimator a run gets when ``--kl-estimator`` is not given: k1 as a reward penalty (no
gradient flows through it there, and it is unbiased), k3 as a loss term (verl's ``low_var_kl``
for its KL loss): k1's gradient ``∇log π`` has expectation 0 under samples of π."""

CRITIC_DIR = "critic"


@dataclass
class PPORunConfig(PreflightSettings, EpisodeSettings, PageSettings, EpisodeInputs, PolicyRun):
    """One PPO run; every field has a flag in ``ddai train ppo``, the nested ``episode``,
    ``rewards`` and ``backends`` (``EpisodeSettings``) field by field, and the page settings
    (``PageSettings``: with an image corpus or ``--image-root`` the generator is sent the pages
    each episode gathered, as in GRPO; with ``--observation image`` the policy is a VLM shown the
    page images, and every log-prob and value pass carries each rollout's images). With ``lora``
    (``PolicyRun``) the reference is the policy with the adapter disabled (no second copy)."""

    model: str = field(kw_only=True)
    """Starting policy: a local folder or a hub id."""
    output_dir: Path = field(kw_only=True)
    """Output folder: the policy, critic/ and metrics.jsonl."""
    seed: int = field(default=0, kw_only=True)
    """Random seed (sampling, split, head init)."""
    critic: str | None = None
    """A value checkpoint (``ddai train value``); None: a fresh head on the policy's trunk."""
    critic_head: str | None = None
    """Head of the critic: ``linear`` or ``mlp``. Default: linear, or the checkpoint's (a
    different one with --critic is refused)."""
    critic_unfreeze: int | None = None
    """Top critic trunk layers that train; None: the checkpoint's setting, or 2 for a fresh critic."""
    run_id: str | None = None
    """Run id of the rollout log. Default: ppo_<timestamp>."""
    n_agent: int = 1
    """Rollouts per prompt."""
    batch_size: int = 8
    """Rollouts per step (a multiple of --n-agent)."""
    mini_batch_size: int | None = None
    """Rollouts per optimizer step. Default: the whole batch."""
    ppo_epochs: int = 4
    """Passes over each batch on its stored old log-probs."""
    max_steps: int = 10
    """PPO steps (rollout batches)."""
    learning_rate: float = 1e-6
    """Policy learning rate."""
    critic_lr: float = 1e-4
    """Critic head learning rate."""
    critic_trunk_lr: float = 1e-5
    """Learning rate of the critic's unfrozen trunk layers."""
    clip_low: float = 0.2
    """Lower clip ε (ratio ≥ 1 − ε)."""
    clip_high: float = 0.2
    """Upper clip ε (ratio ≤ 1 + ε)."""
    vf_clip: float | None = 0.2
    """Value clip range around the rollout-time values; 0: unclipped ½·(V − R)², which is seed
    003's critic loss (critic weight 0.5)."""
    kl_coef: float = 0.05
    """KL coefficient β of the per-token penalty against the frozen reference (0: off)."""
    kl_estimator: str | None = None
    """KL estimator: k1 (log-ratio), k2 (½·log-ratio²) or k3 (GRPO's low-variance one). Default:
    k1 with --kl-mode reward, k3 with --kl-mode loss (as verl's KL loss); k1 is refused as a loss
    (its gradient is 0 in expectation)."""
    kl_mode: str = "reward"
    """Where the KL goes: reward (−β·KL on each token's reward) or loss (+β·KL added to the
    policy loss, with k3 or k2: their gradients pull towards the reference, k1's is 0 in
    expectation); seed 003 describes both."""
    reward_norm: str = "none"
    """Normalize each batch's outcome rewards: none, center (minus the mean), scale (divide by the
    std, sign kept) or whiten (mean 0, std 1)."""
    entropy_coef: float = 0.0
    """Entropy bonus c_H: the policy loss subtracts c_H·mean entropy (0: off)."""
    resume: bool = False
    """Continue from the last checkpoint-N in --out-dir: steps N+1..--max-steps, same run id."""
    save_steps: int = 0
    """Write a resumable checkpoint-N every this many steps (0: after the last step only)."""
    gamma: float = 1.0
    """GAE discount γ per policy token."""
    lam: float = 0.95
    """GAE λ."""
    whiten_advantages: bool = True
    """Whiten advantages over the batch's policy tokens."""
    temperature: float = 1.0
    """Sampling temperature."""
    grad_accum: int = 1
    """Micro-batches each mini-batch is split into and accumulated into one optimizer step (less
    memory)."""
    experience_micro_batch: int = 4
    """Rollouts per forward pass of the no-gradient experience passes (old and reference
    log-probs, values); only completion positions reach the LM head and the log-softmax is taken
    in chunks of positions, so the memory is about this many rollouts' completion logits in the
    model's dtype."""
    grad_clip: float = 1.0
    """Max gradient norm of each model (0: off)."""
    progress: bool = True

    def __post_init__(self) -> None:
        if self.kl_estimator is None:  # the estimator whose use in this mode is right
            self.kl_estimator = DEFAULT_KL_ESTIMATOR.get(self.kl_mode, "k1")

    def check(self) -> None:
        """Fail on bad settings before any model is loaded; messages name the flag."""
        self.check_pages()
        self.check_episode()
        self.check_lora()
        if self.n_agent < 1 or self.batch_size < 1 or self.batch_size % self.n_agent:
            raise TrainConfigError(
                f"--batch-size {self.batch_size} must be a positive multiple of --n-agent "
                f"{self.n_agent} (rollouts per step = prompts × n_agent)"
            )
        if self.mini_batch_size is not None and not 1 <= self.mini_batch_size <= self.batch_size:
            raise TrainConfigError(
                f"--mini-batch-size must be in 1..--batch-size ({self.batch_size})"
            )
        mb = self.mini_batch_size or self.batch_size
        if (
            self.grad_accum < 1
            or mb % self.grad_accum
            or (self.grad_accum > 1 and self.batch_size % mb)
        ):
            raise TrainConfigError(
                f"--grad-accum {self.grad_accum} must be >= 1 and divide the mini-batch ({mb} "
                "rollouts: --mini-batch-size, or --batch-size), which must then divide "
                "--batch-size"
            )
        for name in ("ppo_epochs", "max_steps", "experience_micro_batch"):
            if getattr(self, name) < 1:
                raise TrainConfigError(f"--{name.replace('_', '-')} must be >= 1")
        from ddai.trainer.rlmath import KL_ESTIMATORS

        if self.kl_estimator not in KL_ESTIMATORS:
            raise TrainConfigError(
                f"--kl-estimator {self.kl_estimator!r}: use one of {', '.join(sorted(KL_ESTIMATORS))}"
            )
        if not (0 <= self.gamma <= 1 and 0 <= self.lam <= 1):
            raise TrainConfigError(
                f"--gamma and --lam must be in [0, 1], got {self.gamma}, {self.lam}"
            )
        if self.clip_low <= 0 or self.clip_high <= 0 or self.kl_coef < 0:
            raise TrainConfigError("--clip-low and --clip-high must be > 0 and --kl >= 0")
        if self.kl_mode not in KL_MODES:
            raise TrainConfigError(f"--kl-mode {self.kl_mode!r}: use one of {', '.join(KL_MODES)}")
        if self.kl_mode == "loss" and self.kl_estimator == "k1":
            raise TrainConfigError(
                "--kl-mode loss --kl-estimator k1: k1's gradient (∇log π) is 0 in expectation, so "
                "the KL loss would not pull the policy towards the reference; use --kl-estimator "
                "k3 (the default with --kl-mode loss, verl's KL loss) or k2 (the gradient of "
                "KL(π ‖ π_ref))"
            )
        if self.reward_norm not in REWARD_NORMS:
            raise TrainConfigError(
                f"--reward-norm {self.reward_norm!r}: use one of {', '.join(REWARD_NORMS)}"
            )
        if self.entropy_coef < 0 or self.save_steps < 0:
            raise TrainConfigError("--entropy-coef and --save-steps must be >= 0")
        from ddai.trainer.value.critic import HEAD_TYPES

        if self.critic_head is not None and self.critic_head not in HEAD_TYPES:
            raise TrainConfigError(
                f"--critic-head {self.critic_head!r}: use one of {', '.join(HEAD_TYPES)}"
            )
        if self.vf_clip is not None and self.vf_clip < 0:
            raise TrainConfigError(f"--vf-clip must be >= 0 (0: unclipped), got {self.vf_clip}")


@dataclass
class PPOResult(LoggedRunResult):
    output_dir: str
    critic_dir: str
    steps: int
    value_loss_first: float | None
    value_loss_last: float | None
    changed_parameters: int
    final_model: dict[str, Any] | None = None
    """What ``output_dir`` holds (``lora_merge.FinalModel.summary``: with LoRA, the float32 merge
    and its check); None on ranks other than the main one."""
    zero_variance_steps: int = 0
    """Steps whose groups all had zero reward variance."""
    preflight: str = "skipped"
    resumed_from: int = 0
    """The checkpoint step this run continued from (0: a fresh run)."""
    informative_group_share: float | None = None
    """Share of prompt groups with reward variance, as in ``GRPOResult`` (None with
    ``n_agent`` 1: a one-rollout group has no variance to measure)."""
    advantage_abs_max: float | None = None
    """The largest |GAE advantage| on a policy token over the run's steps (after whitening):
    PPO's own advantages, non-zero whenever the critic's values differ from the returns, even
    when every group's rewards are equal (None: no step ran)."""
    zero_advantage_steps: int = 0
    """Steps whose GAE advantages were all 0 (no policy gradient from the rewards)."""
    clip_frac_mean: float | None = None
    """Mean over the run's steps of ``actor/clip_frac``, the share of policy tokens whose loss the
    clip changed (``ppo.clip_stats``)."""
    clip_acted_steps: int = 0
    """Steps in which the clip changed at least one token's loss."""
    ratio_spread: float | None = None
    """The largest ``|π_θ/π_old − 1|`` on a policy token over the whole run."""
    clip_low: float = PPORunConfig.clip_low
    clip_high: float = PPORunConfig.clip_high
