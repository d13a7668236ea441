"""What a finished training run's summary says went wrong, worded for the person who ran it: no
learning signal from the rewards (``no_signal``), a GRPO clip that never acted (``clip_inert``; PPO's
is ``ddai.trainer.ppo.clip_stats.clip_never_acted``), images a text model read as text
(``images_flattened``). Each reads the summary dict alone and returns the warning or None; the
commands print them after the summary."""

from __future__ import annotations

from typing import Any


def no_signal(data: dict[str, Any]) -> str | None:
    """Why a GRPO/PPO run got no learning signal from its rewards, or None. GRPO: no group of any
    step had reward variance (``informative_group_share`` 0), so every group advantage was 0 and
    whatever changed in the weights came from other terms (KL, weight decay), not from the
    rewards; each step warned as it went, the summary alone reads like a finished run. PPO (its
    summary has ``advantage_abs_max``): its advantages are GAE's over the critic's values, non-zero
    with equal rewards, so it warns only when every one of them was 0."""
    steps = data.get("steps") or 0
    ppo = "advantage_abs_max" in data  # PPO: its own GAE advantages, not the groups' variance
    signal = data.get("advantage_abs_max" if ppo else "informative_group_share")
    if signal is None or signal != 0 or steps <= 0:
        return None
    if ppo:
        return (
            f"every GAE advantage of the run's {steps} step(s) was 0 (zero_advantage_steps "
            f"{data.get('zero_advantage_steps', steps)}): the policy learned nothing from its "
            "rewards. Check the reward backends and --reward weights, the critic (--critic) and "
            "--gamma/--lam"
        )
    return (
        f"no group of the run's {steps} step(s) had reward variance "
        f"(zero_variance_steps {data.get('zero_variance_steps', steps)}): every advantage was 0 "
        "and the policy learned nothing from its rewards. SFT the policy first, check the reward "
        "backends and --reward weights, or train on prompts with mixed outcomes "
        "(`ddai curate focus`)"
    )


def images_flattened(data: dict[str, Any]) -> str | None:
    """Why a text SFT run never saw the images its rows show, or None: ``image_turns_flattened``
    turns were read as ``[image: path]`` text."""
    n = data.get("image_turns_flattened") or 0
    if n <= 0:
        return None
    return (
        f"{n} turn(s) of the training rows show images, which this text model read as "
        "`[image: path]` text, never as pixels; train a VLM (a model folder with a processor, "
        "e.g. Qwen2.5-VL) with --image-root DIR to keep them images"
    )


def clip_inert(data: dict[str, Any]) -> str | None:
    """Why a GRPO/GSPO run's clip never acted, or None: no step clipped a token (a sequence, under
    GSPO), so the update was an unclipped policy gradient. Says whether the ratio moved less than
    ε (the spread it reached) or could not move at all (every mini-batch was the first trained
    after its generation, where the ratio is 1); those first mini-batches never count toward the
    spread. A PPO summary (its bounds are ``clip_low``/``clip_high``) is worded by
    ``ddai.trainer.ppo.clip_stats``, which knows PPO's epochs and mini-batches."""
    acted = data.get("clip_acted_steps")
    steps = data.get("steps") or 0
    if acted is None or acted > 0 or steps <= 0:
        return None
    lo, hi = data.get("epsilon_low"), data.get("epsilon_high")
    first = data.get("minibatches_first") or 0
    moved = data.get("minibatches_after_update") or 0
    spread = data.get("ratio_spread")
    head = f"the clip (ε_low {lo:g}, ε_high {hi:g}) never acted in the run's {steps} step(s)"
    if moved == 0 or spread is None:
        return (
            f"{head}, and could not: each of its {first} mini-batch(es) was the first trained after "
            "its rollouts were generated, so the importance ratio was 1 and the update a plain "
            "policy gradient. --preset gspo-ddai (or --set steps_per_generation=2) trains each "
            "generation in two mini-batches, the second after an optimizer step, where it can act"
        )
    return (
        f"{head}: over the {moved} mini-batch(es) trained after an optimizer step since their "
        f"generation, the largest |ratio − 1| was {spread:.2g}, inside ε; the {first} "
        "mini-batch(es) trained first after their generation (ratio 1, no clip can act) are not "
        "counted. The update was an unclipped policy gradient: if a trust region is meant, raise "
        "--lr or lower --clip-low/--clip-high"
    )
