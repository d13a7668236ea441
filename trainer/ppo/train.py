"""``ddai train ppo``: PPO over the multi-turn search environment with a value head as critic
(seed 003). TRL 1.16 has no PPO trainer, so this is ddai's own compact loop over the trainer's
pieces: the same environment, lock-step rollouts, streamed judge reward and rollout log as
``ddai train grpo``; the PPO clipped token loss of ``losses``, ``gae`` of ``advantages``.

One step:

1. rollouts: ``batch_size`` episodes (``batch_size / n_agent`` prompts) sampled from the policy;
   each is scored with the GRPO reward (format gate, judge, NDCG);
2. with no gradient: the policy's log-probs of its own tokens (the "old" policy), the frozen
   reference's, and the critic's values, all aligned to completion tokens, in micro-batches of
   ``experience_micro_batch`` rollouts (``experience_passes``);
3. per-token rewards: ``−β·KL(π_old ‖ π_ref)`` on every policy token (k1, k2 or k3) plus the
   outcome (optionally normalized over the batch, ``--reward-norm``) on the last policy token;
   observation tokens get nothing. With ``--kl-mode loss`` the KL leaves the rewards and becomes a
   policy-loss term instead (``ppo_terms``);
4. GAE(γ, λ) over policy tokens only: observation spans are skipped, not episode ends, so the next
   policy token's value bootstraps across them; advantages optionally whitened over the batch;
5. ``ppo_epochs`` passes over shuffled mini-batches: the clipped surrogate for the policy and the
   (optionally clipped) value loss for the critic, each with its own optimizer;
   the policy loss adds the KL term (``--kl-mode loss``) and the entropy bonus (``--entropy-coef``).

``--resume`` continues from ``<out>/checkpoint-N`` (``ppo_checkpoint``): steps N+1..``max_steps``
with the saved policy, critic, optimizer and random states (``ppo.rng``: the steps an uninterrupted
run would have taken, bit for bit), the same run id and the original reference.

With ``--observation image`` the policy is a VLM (``episode.pages.observation_policy``) and the
critic a value head on its trunk: every pass above (experience micro-batches, training
mini-batches) carries its rows' page images and the model's 3-D M-RoPE positions
(``ddai.trainer.vlm_inputs``), so the training pass scores the rollout as it was shown.

Dropout is off in every forward pass (seed 003: it makes ratios and KL unreliable).
Metrics go to ``<out>/metrics.jsonl``; the policy is saved to ``<out>``, the critic to
``<out>/critic`` (a value checkpoint), every step's rollouts to the log store.

Longer than 400 lines because the PPO step's pieces (log-prob and value passes, experience, the
update) and the loop that calls them share one namespace, which the tests patch
(``token_logprobs``) to check the update against hand-computed ratios; the settings are
``ppo.config``'s, the objective terms ``ppo.terms``'s.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ddai.pipelines.store import workspace
from ddai.trainer.advantages import gae
from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.tasks import Task
from ddai.trainer.ppo import sharding
from ddai.trainer.ppo.clip_stats import RATIO_DEV_MAX, ClipStats
from ddai.trainer.ppo.config import CRITIC_DIR, PPOResult, PPORunConfig
from ddai.trainer.ppo.rng import PromptOrder, restore_rng, rng_state
from ddai.trainer.ppo.terms import (
    actor_loss,
    normalize_scores,
    token_entropy,
)
from ddai.trainer.rlmath import masked_mean, masked_whiten, selected_logprobs
from ddai.trainer.runtime.metrics_log import MetricsLog
from ddai.trainer.value.critic import (
    Batch,
    ValueModel,
    clipped_value_loss,
    kl_penalized_rewards,
    pad_batch,
    sequence_mean,
)
from ddai.trainer.vlm_inputs import forward_inputs, select_images

# ---------------------------------------------------------------------------- forward passes


def _base_forward(model: Any) -> Any:
    """The ``forward`` whose signature says what ``model`` accepts (through DDP's and peft's
    wrappers and ``AdapterDisabled``)."""
    from ddai.trainer.vlm_inputs import unwrap

    inner = unwrap(model)
    return getattr(inner, "forward", inner)


def completion_logits(model: Any, batch: Batch) -> Tensor:
    """The logits that predict each completion token: ``[B,T,V]`` in the model's dtype (the
    positions ``P−1 … L−2``). Only those positions reach the LM head where the model takes
    ``logits_to_keep`` (transformers' causal LMs), not the prompt's. A VLM policy also gets the
    rows' page images and its 3-D M-RoPE positions (``vlm_inputs.forward_inputs``)."""
    import inspect

    T = batch.input_ids.shape[1] - batch.prompt_len
    kwargs: dict[str, Any] = {}
    if "logits_to_keep" in inspect.signature(_base_forward(model)).parameters:
        kwargs["logits_to_keep"] = T + 1  # positions L−T−1 = P−1 … L−1
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        use_cache=False,
        **forward_inputs(model, batch.input_ids, batch.attention_mask, batch.images),
        **kwargs,
    )
    return out.logits[:, -(T + 1) : -1]


def token_logprobs(model: Any, batch: Batch, temperature: float = 1.0) -> Tensor:
    """Log-probs of the completion tokens under ``model``: ``[B,T]`` float32 (logits at the
    position before each token, divided by the sampling temperature; the log-softmax taken a
    chunk of positions at a time, ``selected_logprobs``)."""
    logits = completion_logits(model, batch)
    return selected_logprobs(logits, batch.input_ids[:, batch.prompt_len :], temperature)


def token_logprobs_entropy(
    model: Any, batch: Batch, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """``token_logprobs`` plus the entropy of each completion position's next-token distribution
    (at the sampling temperature): ``([B,T], [B,T])``, both from one forward pass."""
    logits = completion_logits(model, batch)
    ids = batch.input_ids[:, batch.prompt_len :]
    return selected_logprobs(logits, ids, temperature), token_entropy(logits.float() / temperature)


def select_rows(batch: Batch, idx: Tensor) -> Batch:
    """The rows ``idx`` of a batch (padding kept), with those rows' page images."""
    return Batch(
        batch.input_ids[idx],
        batch.attention_mask[idx],
        batch.mask[idx],
        batch.prompt_len,
        select_images(batch.images, idx),
    )


@dataclass
class Experience:
    """One batch of rollouts ready for PPO epochs (all ``[B,T]`` but ``scores[B]``)."""

    batch: Batch
    old_logp: Tensor
    old_values: Tensor
    advantages: Tensor
    returns: Tensor
    scores: Tensor
    kl: Tensor
    ref_logp: Tensor | None = None
    """``[B,T]`` reference log-probs, kept for ``--kl-mode loss``."""


@torch.no_grad()
def experience_passes(
    policy: Any, ref: Any | None, critic: ValueModel, batch: Batch, cfg: PPORunConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """``(old_logp, ref_logp, values)``, each ``[B,T]`` float32 and masked: the policy's and the
    reference's log-probs of the completion tokens and the critic's values, computed
    ``cfg.experience_micro_batch`` rollouts at a time (the rows keep the batch's padding, so each
    is what one pass over the whole batch gives). ``ref_logp`` is ``old_logp`` without a
    reference."""
    mask, P = batch.mask, batch.prompt_len
    B = mask.shape[0]
    old, refs, vals = [], [], []
    for idx in torch.arange(B, device=mask.device).split(cfg.experience_micro_batch):
        part = select_rows(batch, idx)
        old.append(token_logprobs(policy, part, cfg.temperature))
        if ref is not None:
            refs.append(token_logprobs(ref, part, cfg.temperature))
        v = critic.completion_values(part.input_ids, part.attention_mask, P, part.images)
        vals.append(v.float())
    old_logp = torch.cat(old) * mask
    ref_logp = torch.cat(refs) * mask if ref is not None else old_logp
    return old_logp, ref_logp, torch.cat(vals) * mask


@torch.no_grad()
def make_experience(
    policy: Any,
    ref: Any | None,
    critic: ValueModel,
    batch: Batch,
    scores: Tensor,
    cfg: PPORunConfig,
) -> Experience:
    """Old log-probs, reference KL, values (``experience_passes``), (normalized, KL-penalized)
    rewards and GAE for one batch. With ``kl_mode == "loss"`` the rewards carry no KL (it is
    measured, and the reference log-probs are kept for the loss)."""
    mask = batch.mask
    scores = normalize_scores(scores, cfg.reward_norm)
    old_logp, ref_logp, values = experience_passes(policy, ref, critic, batch, cfg)
    in_reward = cfg.kl_mode == "reward"
    rewards, kl = kl_penalized_rewards(
        scores,
        old_logp,
        ref_logp,
        mask,
        beta=cfg.kl_coef if in_reward else 0.0,
        kind=cfg.kl_estimator,
    )
    adv, returns = gae(rewards, values, mask, cfg.gamma, cfg.lam)
    if cfg.whiten_advantages and int(mask.sum()) > 1:
        adv = masked_whiten(adv, mask) * mask
    keep_ref = ref is not None and not in_reward
    return Experience(
        batch, old_logp, values, adv, returns, scores, kl, ref_logp if keep_ref else None
    )


def train_values(critic: Any, batch: Batch) -> Tensor:
    """``[B,T]`` values through the critic's ``forward`` (so a DDP wrapper syncs its gradients)."""
    P = batch.prompt_len
    return critic(batch.input_ids, batch.attention_mask, batch.images)[:, P - 1 : -1]


def ppo_update(
    policy: Any,
    critic: Any,
    exp: Experience,
    policy_opt: torch.optim.Optimizer,
    critic_opt: torch.optim.Optimizer,
    cfg: PPORunConfig,
    gen: torch.Generator,
    accelerator: Any,
) -> dict[str, float]:
    """``ppo_epochs`` passes of shuffled mini-batches; returns this rank's metrics averaged over
    them. ``policy``/``critic``/optimizers may be ``Accelerator.prepare``d: the backward pass, the
    gradient clip and the step go through ``accelerator`` (DDP all-reduces the gradients), one
    optimizer step per mini-batch, accumulated over ``grad_accum`` micro-batches (the accelerator
    must have been built with that many accumulation steps). Every rank runs the same number of
    micro-batches (equal per-device batches), so the collectives line up."""
    B = exp.batch.input_ids.shape[0]
    mb = cfg.mini_batch_size or B
    seen: list[dict[str, float]] = []
    for _ in range(cfg.ppo_epochs):
        for batch_idx in torch.randperm(B, generator=gen).split(mb):
            for idx in batch_idx.chunk(cfg.grad_accum):
                idx = idx.to(exp.batch.input_ids.device)
                part = select_rows(exp.batch, idx)
                with accelerator.accumulate(policy, critic):
                    entropy = None
                    if cfg.entropy_coef > 0:
                        logp, entropy = token_logprobs_entropy(policy, part, cfg.temperature)
                    else:
                        logp = token_logprobs(policy, part, cfg.temperature)
                    p_loss, metrics = actor_loss(
                        logp,
                        exp.old_logp[idx],
                        exp.advantages[idx],
                        part.mask,
                        eps_low=cfg.clip_low,
                        eps_high=cfg.clip_high,
                        ref_logp=None if exp.ref_logp is None else exp.ref_logp[idx],
                        kl_coef=cfg.kl_coef,
                        kl_kind=cfg.kl_estimator,
                        entropy=entropy,
                        entropy_coef=cfg.entropy_coef,
                    )
                    _step(accelerator, policy, policy_opt, p_loss, cfg.grad_clip)
                    values = train_values(critic, part)
                    v_loss, v_metrics = clipped_value_loss(
                        values,
                        exp.old_values[idx],
                        exp.returns[idx],
                        part.mask,
                        clip=cfg.vf_clip or None,
                    )
                    _step(accelerator, critic, critic_opt, v_loss, cfg.grad_clip)
                seen.append({"actor/loss": float(p_loss.detach()), **metrics, **v_metrics})
    out = {k: sum(m[k] for m in seen) / len(seen) for k in seen[0]}
    out[RATIO_DEV_MAX] = max(m[RATIO_DEV_MAX] for m in seen)  # a max, not a mean
    return out


def _step(
    accelerator: Any, model: Any, opt: torch.optim.Optimizer, loss: Tensor, grad_clip: float
) -> None:
    accelerator.backward(loss)
    if grad_clip > 0 and accelerator.sync_gradients:
        # all of the prepared model's parameters (frozen ones have no gradient and add nothing):
        # accelerate matches them to the model to clip sharded (FSDP) gradients
        accelerator.clip_grad_norm_(list(model.parameters()), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)


# ---------------------------------------------------------------------------- setup


def _load_critic(cfg: PPORunConfig, tok: Any) -> tuple[ValueModel, str]:
    """The critic and where its trunk came from; a checkpoint must share the policy's tokenizer."""
    try:
        return _critic(cfg, tok)
    except ValueError as e:  # the value head's own check names its own command's flag
        if str(e).startswith("--unfreeze "):
            raise TrainConfigError(f"--critic-{str(e)[2:]}") from e
        raise


def _critic(cfg: PPORunConfig, tok: Any) -> tuple[ValueModel, str]:
    from ddai.trainer.value.critic import load_value_model, new_value_model

    if cfg.critic is not None:
        critic, critic_tok = load_value_model(
            cfg.critic, unfreeze=cfg.critic_unfreeze, dtype=cfg.dtype
        )
        if critic_tok.get_vocab() != tok.get_vocab():
            raise TrainConfigError(
                f"--critic {cfg.critic} uses another tokenizer than --model {cfg.model}; train the "
                "value head on this policy's model (ddai train value --model ...)"
            )
        if cfg.critic_head is not None and cfg.critic_head != critic.head_type:
            raise TrainConfigError(
                f"--critic-head {cfg.critic_head}: --critic {cfg.critic} holds a "
                f"{critic.head_type} head; drop --critic-head to use it, or drop --critic for a "
                "fresh head"
            )
        return critic, cfg.critic
    critic, _ = new_value_model(
        cfg.model,
        head_type=cfg.critic_head or "linear",
        unfreeze=2 if cfg.critic_unfreeze is None else cfg.critic_unfreeze,
        dtype=cfg.dtype,
        seed=cfg.seed,
    )
    return critic, cfg.model


def _frozen(model: Any) -> Any:
    model.eval()
    model.requires_grad_(False)
    return model


def prepare_policy(policy: Any, cfg: PPORunConfig) -> tuple[Any, Any | None]:
    """``(policy, reference)`` ready to train: half-precision weights refused where ``lr`` cannot
    move them, LoRA applied (``--lora``), dropout off (seed 003) but train mode, so gradient
    checkpointing recomputes activations in the backward pass. The reference is a frozen copy, or
    the LoRA policy with its adapter disabled; None without a KL term."""
    from ddai.trainer.modeling import AdapterDisabled, check_update_precision, lora_config
    from ddai.trainer.trl_compat import disable_dropout

    disable_dropout(policy)
    ref = None
    if cfg.lora:
        from peft import get_peft_model

        policy = get_peft_model(
            policy,
            lora_config(r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=0.0, target=cfg.lora_target),
        )
        policy.enable_input_require_grads()  # checkpointed layers need a grad-carrying input
        ref = AdapterDisabled(policy) if cfg.kl_coef > 0 else None
    else:
        check_update_precision(policy, cfg.learning_rate)
        ref = _frozen(copy.deepcopy(policy)) if cfg.kl_coef > 0 else None
    policy.activation_checkpointing_enable({"use_reentrant": False})
    policy.train()
    return policy, ref


def _restore_rng(
    ckpt: str, acc: Any, gen: torch.Generator, order: PromptOrder[Task], start: int
) -> None:
    """Put back this rank's random states from the checkpoint, so the resumed steps draw what
    the run would have drawn; a checkpoint without them (or from another number of processes)
    continues on fresh seeds (``seed + start``) and the prompt order replayed, and says so."""
    import warnings

    from ddai.trainer.ppo import checkpoint as ck

    states = ck.load_rng(ckpt)
    if states is not None and len(states) == acc.num_processes:
        restore_rng(states[acc.process_index], gen=gen, order=order)
        return
    why = (
        "has no saved random states"
        if states is None
        else f"was written by {len(states)} process(es), this run has {acc.num_processes}"
    )
    warnings.warn(
        f"--resume: {ckpt} {why}; the resumed steps sample on fresh seeds (--seed + {start}), "
        "so they will not repeat what an uninterrupted run would have drawn",
        stacklevel=2,
    )
    for _ in range(start):  # the prompts of the finished steps: the data order continues
        next(order)


def advantage_abs_max(exp: Experience) -> float:
    """The largest |advantage| on a policy token of one step's experience (GAE, after the
    whitening): 0 means the policy loss had no gradient from the rewards in that step."""
    m = exp.batch.mask
    return float((exp.advantages.abs() * m).max()) if int(m.sum()) else 0.0


def experience_metrics(exp: Experience) -> dict[str, float]:
    """Batch statistics of one step's experience (``ppo/...``)."""
    m = exp.batch.mask
    return {
        "ppo/reward_mean": float(exp.scores.mean()),
        "ppo/kl": float(masked_mean(exp.kl, m)),
        "ppo/returns_mean": float(masked_mean(exp.returns, m)),
        "ppo/values_mean": float(masked_mean(exp.old_values, m)),
        "ppo/policy_tokens": float(m.sum()),
    }


def run_ppo(cfg: PPORunConfig, backends: Any | None = None) -> PPOResult:
    """Train the policy with PPO; save it and its critic; log every rollout to the store.

    Under ``accelerate launch`` every process collects its own ``batch_size`` rollouts (the batch
    is per device, as in TRL) from its share of each global prompt batch, samples with its own seed
    (``seed + rank``), and trains DDP-wrapped policy and critic; the main process alone writes the
    rollout log (every rank's rows, ``sample_idx`` unique over the global batch), the metrics
    (averaged over the ranks), the run config and the checkpoints. Every rank runs the preflight,
    so a failing check stops them all with the same message."""
    from ddai.pipelines.pages.corpus import Corpus
    from ddai.pipelines.records.progress import bar
    from ddai.trainer.common import hf_progress, resume_checkpoint
    from ddai.trainer.episode import preflight as pf
    from ddai.trainer.episode import run_rules
    from ddai.trainer.episode.episodes import Episodes, default_backends
    from ddai.trainer.episode.logrows import RolloutLog, take_rows
    from ddai.trainer.episode.pages import observation_policy, page_images
    from ddai.trainer.episode.preflight_steps import (
        check_policy_template,
        preflight_slots,
        preflight_status,
        run_static_preflight,
        sampled_episodes,
    )
    from ddai.trainer.episode.tasks import load_tasks
    from ddai.trainer.episode.vision import vision_batch
    from ddai.trainer.lora_merge import MergeCheckFailed, full_model, merge_lora
    from ddai.trainer.modeling import changed_parameters, parameter_snapshot
    from ddai.trainer.ppo import checkpoint as ck
    from ddai.trainer.runtime import accel
    from ddai.trainer.runtime.save import save_model
    from ddai.trainer.runtime.zero_variance import ZeroVarianceSteps
    from ddai.trainer.value.critic import save_value_model

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    cfg.check()
    hf_progress(cfg.progress)
    tasks = load_tasks(cfg.data, cfg.limit)
    if not tasks:
        raise TrainConfigError(f"--data {cfg.data}: no prompts")
    resume_from = resume_checkpoint(cfg.output_dir, cfg.resume)
    rules = run_rules.episode_rules(cfg)
    note = (
        run_rules.check_resume(cfg.output_dir, rules, "ddai train ppo")
        if resume_from
        else run_rules.check_append(
            workspace.logs_dir(cfg.logs), cfg.run_id, rules, "ddai train ppo"
        )
    )
    if note is not None:
        warnings.warn(f"ddai train ppo: {note}", stacklevel=2)
    state = ck.read_state(resume_from) if resume_from else None
    start = state.step if state else 0
    if start >= cfg.max_steps:
        raise TrainConfigError(
            f"--resume: {resume_from} already finished step {start}; raise --max-steps above it "
            "to train more steps"
        )
    corpus = Corpus.load(cfg.corpus)
    backends = backends or default_backends(cfg.backends, corpus, cfg.rewards.reward_spec())
    image_of = page_images(cfg, corpus)
    spec = cfg.rewards.reward_spec()
    report = run_static_preflight(cfg, tasks, corpus, backends, spec, image_of is not None)
    acc = sharding.make_accelerator(gradient_accumulation_steps=cfg.grad_accum)
    main = acc.is_main_process
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    # a text LM, or with --observation image a VLM whose processor renders the page images
    policy, tok, vision, box_convention = observation_policy(
        cfg, image_of, model=resume_from or cfg.model
    )
    saved_tok = vision.processor if vision is not None else tok  # a VLM's: its image processor too
    check_policy_template(report, tok, vision, tasks[0].messages)
    policy, ref = prepare_policy(policy, cfg)
    if resume_from and isinstance(ref, torch.nn.Module):
        # the reference stays the run's starting policy, not the checkpoint's
        ref = _frozen(observation_policy(cfg, image_of)[0])
    if isinstance(ref, torch.nn.Module):
        ref.to(acc.device)
    if resume_from:
        critic_cfg = dataclasses.replace(cfg, critic=str(Path(resume_from) / ck.CRITIC_DIR))
        critic = _load_critic(critic_cfg, tok)[0]
        critic_source = state.critic_source
    else:
        critic, critic_source = _load_critic(cfg, tok)
    critic.eval()
    # Digests, not copies, of the trainable weights (with LoRA: the adapter's only).
    before = parameter_snapshot(policy)
    policy_opt = torch.optim.AdamW(
        [p for p in policy.parameters() if p.requires_grad], lr=cfg.learning_rate
    )
    critic_opt = torch.optim.AdamW(
        critic.param_groups(trunk_lr=cfg.critic_trunk_lr, head_lr=cfg.critic_lr)
    )
    policy, critic, policy_opt, critic_opt = sharding.prepare(
        acc, policy, critic, policy_opt, critic_opt
    )
    if resume_from:
        sharding.load_optimizer_states(
            acc, ck.read_optimizers(resume_from), policy, critic, policy_opt, critic_opt
        )
    # Experience uses the bare modules: no-grad passes need no gradient sync (under FSDP their
    # forwards still all-gather each layer: every rank runs as many as the others).
    bare_policy, bare_critic = acc.unwrap_model(policy), acc.unwrap_model(critic)
    accel.rank_seed(cfg.seed + start, acc)  # restored below when the checkpoint has the states
    episodes = Episodes(
        cfg,
        tok,
        corpus,
        backends,
        image_of=image_of,
        vision=vision,
        box_convention=box_convention,
    )
    out = Path(cfg.output_dir)
    try:
        if not cfg.skip_preflight:
            slots = preflight_slots(tasks, cfg.preflight_prompts, cfg.n_agent, cfg.seed)
            with sharding.generation_model(policy, acc) as sampler_model:
                sampled = sampled_episodes(
                    episodes.rollout, slots, None, sampler_model, cfg.backends.reward_timeout
                )
            pf.check_episodes(report, sampled)
            report.raise_errors()
        if main:
            extra = {**accel.run_info(cfg.seed, acc), run_rules.RULES_KEY: rules}
            pf.write_run_config(out, "train ppo", cfg, report, extra=extra)
    except BaseException:
        episodes.close()
        raise
    zero_variance = ZeroVarianceSteps()
    run_id = cfg.run_id or (state.run_id if state else f"ppo_{time.strftime('%Y%m%d_%H%M%S')}")
    run_id = accel.gather_rows([run_id], acc)[0]  # rank 0's timestamp names the run
    log = RolloutLog(workspace.logs_dir(cfg.logs), run_id, record={run_rules.RULES_KEY: rules})
    if start and main:
        log.drop_after(start)
        log.count_kept()  # rollouts_logged: the run's total, steps 1..start included
    kept = ck.keep_metrics_until(out / "metrics.jsonl", start) if main and start else []
    metrics_log = MetricsLog(out / "metrics.jsonl") if main else None
    if kept:
        metrics_log.path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    clips = ClipStats(cfg.clip_low, cfg.clip_high)
    for line in kept:  # a resumed run reports the whole run's clipping
        clips.observe(json.loads(line))
    gen = torch.Generator().manual_seed(cfg.seed + acc.process_index + start)
    per_rank = cfg.batch_size // cfg.n_agent
    batches = PromptOrder(tasks, per_rank * acc.num_processes, cfg.seed)
    if resume_from:
        _restore_rng(resume_from, acc, gen, batches, start)
    first_sample = acc.process_index * cfg.batch_size
    vf_losses: list[float] = []
    advantages_seen: list[float] = []
    """Each step's largest |GAE advantage| over every rank's policy tokens."""
    try:
        with bar("ppo", cfg.max_steps - start, enabled=cfg.progress and main) as advance:
            for step in range(start + 1, cfg.max_steps + 1):
                mine = accel.local_slice(next(batches), acc)
                slots = [(t, g, i) for g, t in enumerate(mine) for i in range(cfg.n_agent)]
                with sharding.generation_model(policy, acc) as sampler_model:
                    trajs, rewards, metrics = episodes.collect(slots, sampler_model)
                groups: dict[int, list[float]] = {}
                for t, r in zip(trajs, rewards, strict=True):
                    groups.setdefault(t.group, []).append(r)
                every_group = accel.gather_rows(list(groups.values()), acc)
                if cfg.n_agent > 1 and main:  # a one-rollout group has no variance to lose
                    zero_variance.observe(step, every_group)
                batch = pad_batch(
                    [t.prompt_ids for t in trajs],
                    [t.completion_ids for t in trajs],
                    [t.env_mask for t in trajs],
                    tok.pad_token_id,
                ).to(acc.device)
                if vision is not None:  # each rollout's page images, for every pass over it
                    shown = [t.images() for t in trajs]
                    images = vision_batch(
                        [im[0] if im else None for im in shown],
                        [im[1] if im else None for im in shown],
                    )
                    batch = dataclasses.replace(batch, images=images)
                scores = torch.tensor(rewards, dtype=torch.float32, device=acc.device)
                exp = make_experience(bare_policy, ref, bare_critic, batch, scores, cfg)
                adv_max = max(accel.gather_rows([advantage_abs_max(exp)], acc))
                advantages_seen.append(adv_max)
                metrics.update(
                    ppo_update(policy, critic, exp, policy_opt, critic_opt, cfg, gen, acc)
                )
                metrics.update(experience_metrics(exp))
                dev = max(accel.gather_rows([metrics[RATIO_DEV_MAX]], acc))
                metrics = {**accel.mean_metrics(metrics, acc), RATIO_DEV_MAX: dev}
                clips.observe(metrics)
                vf_losses.append(metrics["critic/vf_loss"])
                advantages = sequence_mean(exp.advantages, batch.mask).tolist()
                rows = take_rows(
                    episodes.store,
                    [t.key for t in trajs],
                    advantages,
                    run_id=run_id,
                    step=step,
                    first_sample=first_sample,
                )
                rows = accel.gather_rows(rows, acc)
                if main:
                    log.append(rows, step)
                    log.flush()  # a checkpoint of this step has its rows committed
                    metrics_log.log(step, metrics)
                if step == cfg.max_steps or (cfg.save_steps and step % cfg.save_steps == 0):
                    # every rank's random states (a collective), saved by the main process
                    states = accel.gather_rows([rng_state(gen=gen, order=batches)], acc)
                    # under FSDP: weights and optimizer states gathered (collectives)
                    to_save = sharding.saveable(acc, policy, critic)
                    optim = sharding.optimizer_states(acc, policy, critic, policy_opt, critic_opt)
                    if main:
                        ck.save_checkpoint(
                            out,
                            ck.PPOState(step, run_id, str(critic_source)),
                            policy=to_save[0],
                            tok=saved_tok,
                            critic=to_save[1],
                            optimizers=optim,
                            rng=states,
                        )
                    del to_save, optim
                advance(1)
    finally:
        episodes.close()
    changed = len(changed_parameters(before, bare_policy))
    acc.wait_for_everyone()
    # What the main process saves: under FSDP, full copies of the gathered weights (collective).
    bare_policy, bare_critic = sharding.saveable(acc, policy, critic)
    final = failed = None
    if main:
        if cfg.lora:  # merged in float32 and checked against the trained policy
            save_model(bare_policy, saved_tok, out / "adapter")
            try:
                final = merge_lora(
                    out / "adapter",
                    base=cfg.model,
                    dtype=cfg.dtype,
                    tokenizer=saved_tok,
                    out_dir=out,
                    trained=bare_policy,
                )
            except MergeCheckFailed as e:
                failed = e
        else:
            save_model(bare_policy, saved_tok, out)
            final = full_model(out)
        save_value_model(bare_critic, saved_tok, out / CRITIC_DIR, source=critic_source)
    acc.wait_for_everyone()
    if failed is not None:
        raise failed
    return PPOResult(
        output_dir=str(out),
        critic_dir=str(out / CRITIC_DIR),
        steps=cfg.max_steps,
        **log.result_fields(),
        value_loss_first=vf_losses[0] if vf_losses else None,
        value_loss_last=vf_losses[-1] if vf_losses else None,
        changed_parameters=changed,
        final_model=final.summary() if final else None,
        zero_variance_steps=zero_variance.count,
        preflight=preflight_status(report),
        resumed_from=start,
        informative_group_share=zero_variance.informative_share,
        advantage_abs_max=max(advantages_seen) if advantages_seen else None,
        zero_advantage_steps=sum(a == 0 for a in advantages_seen),
        **clips.result_fields(),
    )
