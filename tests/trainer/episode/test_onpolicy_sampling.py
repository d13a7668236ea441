"""On-policy by construction: a run that samples with a repetition penalty and top-p trains the
distribution it sampled from. Inside the real ``DdaiGRPOTrainer``, the loss's old log-probs and
its first mini-batch's log-probs equal the sampler's recorded log-probs within 1e-5 (TRL's own
pass divides by the temperature only: 0.39 nats per token apart, measured on this setting);
``teacher_forced_logprobs`` equals a per-position recomputation under ``transformers``' own
processors; knobs ddai cannot sample with exit 2 naming them."""

from __future__ import annotations

import pytest
from support.backends import toy_backends
from support.lazy import torch
from support.sampling_reference import recompute_logprobs
from support.toy_world import QUIET, make_world, run_fields

from ddai.trainer import toy
from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
from ddai.trainer.episode.sampling import LOGP_FLOOR, SamplingConfig, teacher_forced_logprobs

PROCESSED = SamplingConfig(temperature=0.9, top_p=0.9, repetition_penalty=1.2)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("onpolicy"))


def test_teacher_forced_logprobs_equal_each_positions_processors(world):
    """Rows of different prompt lengths (left padding the penalty must not count), a token the
    penalty saw earlier, and top-p/top-k/min-p cuts: equal to the position-by-position reference
    that applies the processors the way ``generate`` does; differentiable, and finite where a
    token lies outside the kept set."""
    from ddai.trainer.episode.rollout import HFSampler
    from ddai.trainer.modeling import load_policy

    _, _, tiny = world
    model, tok = load_policy(str(tiny))
    model.eval()
    config = SamplingConfig(
        temperature=0.8, top_k=30, top_p=0.9, min_p=0.02, repetition_penalty=1.3
    )
    contexts = [
        tok.encode(t, add_special_tokens=False)
        for t in ["<think>revenue chart</think>", "2021 2021 2021 2021 2021 2021"]
    ]
    sampler = HFSampler(
        model,
        tok,
        temperature=0.8,
        top_k=30,
        top_p=0.9,
        min_p=0.02,
        repetition_penalty=1.3,
        stop_ids=[-1],
    )
    torch.manual_seed(0)
    outs = sampler.sample(contexts, [10, 10])
    seqs = [c + ids for c, (ids, _) in zip(contexts, outs, strict=True)]
    width = max(map(len, seqs))
    T = 10
    ids = torch.full((2, width), tok.pad_token_id)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s)
    pads = [width - len(s) for s in seqs]
    att = (torch.arange(width)[None, :] >= torch.tensor(pads)[:, None]).long()
    logits = model(input_ids=ids, attention_mask=att).logits[:, -T - 1 : -1]
    logits = logits.detach().requires_grad_(True)
    got, ent = teacher_forced_logprobs(logits, ids, pads, config, entropy=True)
    for i, (ctx, (drawn, lps)) in enumerate(zip(contexts, outs, strict=True)):
        ref = recompute_logprobs(model, ctx, drawn, config)
        torch.testing.assert_close(got[i].detach(), ref, atol=1e-5, rtol=0)
        torch.testing.assert_close(got[i].detach(), torch.tensor(lps), atol=1e-5, rtol=0)
    # Entropy of the processed distribution: at most log(top_k), the kept set's size.
    assert (ent <= torch.log(torch.tensor(30.0)) + 1e-5).all() and (ent > 0).all()
    got.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert logits.grad.abs().sum() > 0
    # A token outside the nucleus: the floor, not -inf (masked sums stay finite).
    least = logits[0].argmin(-1)  # [T]
    cut = ids.clone()
    cut[0, -T:] = least
    low, _ = teacher_forced_logprobs(logits.detach(), cut, pads, config)
    assert torch.equal(low[0], torch.full((T,), LOGP_FLOOR))


def _grpo_cfg(world, name, **over):
    from ddai.trainer.grpo.train import GRPORunConfig

    root, data, tiny = world
    fields = dict(
        **run_fields(tiny, data, root / name, root / "logs", name),
        n_agent=2,
        batch_size=2,
        max_steps=2,
        learning_rate=1e-3,
        **QUIET,
        temperature=0.9,
        repetition_penalty=1.2,
        # two mini-batches per generation: TRL computes the old log-probs at generation time
        overrides={"top_p": 0.9, "steps_per_generation": 2},
        episode=EpisodeConfig(
            max_turns=2, max_turn_tokens=12, max_completion_tokens=64, obs_max_tokens=8
        ),
        rewards=RewardOverrides(reward="judge-only"),
    )
    fields.update(over)
    return GRPORunConfig(**fields)


def _backends():

    return toy_backends()


def test_loss_old_logprobs_equal_the_sampled_distribution(world, monkeypatch):
    """Repetition penalty 1.2 and top-p 0.9: the loss's old log-probs (TRL computes them at
    generation time, before the first of the two mini-batches) and the loss pass's own log-probs
    of the first mini-batch equal the log-probs the sampler recorded while drawing, on every
    policy token, within 1e-5."""
    from ddai.trainer.grpo import train as grpo_train
    from ddai.trainer.trl_compat import grpo_trainer_class

    seen: list[dict] = []

    def recording_class():
        base = grpo_trainer_class()

        class Recording(base):
            def _compute_loss(self, model, inputs):
                self.ddai_loss_inputs = inputs
                return super()._compute_loss(model, inputs)

            def _get_per_token_logps_and_entropies(self, model, *a, **kw):
                out = super()._get_per_token_logps_and_entropies(model, *a, **kw)
                inputs = getattr(self, "ddai_loss_inputs", None)
                if kw.get("compute_entropy") and inputs is not None:  # the loss pass
                    seen.append(
                        {
                            "step": int(self.state.global_step),
                            "logps": out[0].detach().clone(),
                            "old": inputs["old_per_token_logps"],
                            "sampled": inputs["sampling_per_token_logps"],
                            "mask": (inputs["completion_mask"] * inputs["tool_mask"]).bool(),
                        }
                    )
                    self.ddai_loss_inputs = None
                return out

        return Recording

    monkeypatch.setattr(grpo_train, "grpo_trainer_class", recording_class)
    result = grpo_train.run_grpo(_grpo_cfg(world, "grpo_onpolicy"), _backends())
    assert result.steps == 2 and len(seen) == 2
    first = seen[0]
    assert first["step"] == 0 and first["old"] is not None and first["sampled"] is not None
    mask = first["mask"]
    assert mask.sum() > 10
    for m in seen:
        old_gap = (m["old"] - m["sampled"])[m["mask"]].abs().max().item()
        assert old_gap < 1e-5, f"old log-probs are {old_gap:.3g} nats off the sampled ones"
    gap = (first["logps"] - first["sampled"])[mask].abs().max().item()
    assert gap < 1e-5, f"the loss's log-probs are {gap:.3g} nats off the sampled ones"
    # After one optimizer step at lr 1e-3 the second mini-batch's log-probs have moved.
    assert (seen[1]["logps"] - seen[1]["old"])[seen[1]["mask"]].abs().max() > 1e-4


def test_old_and_reference_passes_of_a_temperature_only_run_score_the_policy_tokens(
    world, monkeypatch
):
    """Temperature only, two mini-batches per generation and a KL term: TRL's old and reference
    passes (``policy_logps`` over the rollouts' policy tokens) give the sampled log-probs on every
    policy token within 1e-5 and 0 elsewhere, and their LM head projects the policy tokens only."""
    import trl.trainer.utils as trl_utils

    from ddai.trainer.grpo import train as grpo_train
    from ddai.trainer.trl_compat import grpo_trainer_class

    head_rows: list[int] = []
    original = trl_utils._ChunkedLogProbFunction.apply

    class Counted:
        @staticmethod
        def apply(hidden, *a):
            head_rows.append(hidden.shape[0])
            return original(hidden, *a)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Counted)
    seen: list[dict] = []

    def recording_class():
        class Recording(grpo_trainer_class()):
            def _generate_and_score_completions(self, inputs):
                head_rows.clear()
                out = super()._generate_and_score_completions(inputs)
                mask = (out["completion_mask"] * out["tool_mask"]).bool()
                seen.append({**out, "mask": mask, "head_rows": sum(head_rows)})
                return out

        return Recording

    monkeypatch.setattr(grpo_train, "grpo_trainer_class", recording_class)
    cfg = _grpo_cfg(
        world,
        "grpo_scoring_keep",
        repetition_penalty=1.0,
        beta=0.04,
        overrides={"steps_per_generation": 2},
    )
    grpo_train.run_grpo(cfg, _backends())
    assert seen
    for out in seen:
        mask = out["mask"]
        assert out["head_rows"] == 2 * int(mask.sum())  # old + reference, policy tokens only
        assert mask.sum() < out["completion_mask"].sum()  # the batch carries observations
        for name in ("old_per_token_logps", "ref_per_token_logps"):
            got = out[name]
            gap = (got - out["sampling_per_token_logps"])[mask].abs().max().item()
            assert gap < 1e-5, f"{name} is {gap:.3g} nats off the sampled log-probs"
            assert got[~mask].abs().max() == 0


def test_generation_kwargs_are_refused_naming_the_knob(world):
    from ddai.trainer.grpo.config import grpo_args

    cfg = _grpo_cfg(world, "grpo_gk", overrides={"generation_kwargs": {"typical_p": 0.5}})
    with pytest.raises(TrainConfigError, match="generation_kwargs"):
        grpo_args(cfg)


def test_ppo_and_collect_episodes_sample_with_the_temperature_only(world):
    """PPO's old log-probs divide the logits by the temperature (``ppo.train.token_logprobs``):
    its episodes must sample from that distribution and nothing else."""
    from ddai.trainer.episode.episodes import Backends, Episodes
    from ddai.trainer.modeling import load_tokenizer
    from ddai.trainer.ppo.config import PPORunConfig

    root, data, tiny = world
    cfg = PPORunConfig(
        model=str(tiny),
        data=data / "dataset.parquet",
        corpus=data / "pages.parquet",
        output_dir=root / "ppo",
        temperature=0.7,
        rewards=RewardOverrides(reward="ddai-phase1"),
    )
    from ddai.pipelines.backends import get_backend

    backends = Backends(search=get_backend("search", "local", corpus=toy.corpus(), cache=False))
    eps = Episodes(cfg, load_tokenizer(str(tiny)), toy.corpus(), backends)
    sc = eps.rollout.sampling_config
    assert sc.temperature_only and sc.temperature == 0.7
    assert not PROCESSED.temperature_only
