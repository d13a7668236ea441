"""``make_experience``'s passes in micro-batches: the old and reference log-probs and the values
equal one pass over the whole padded batch with full-vocabulary float32 logits (within 1e-6),
for every micro-batch size (an uneven last one included), while the LM head only ever sees a
micro-batch's completion positions."""

from __future__ import annotations

import copy

import pytest
from support.lazy import heavy, torch

from ddai.trainer.tiny import TinySpec, build_tiny

train = heavy("ddai.trainer.ppo.train")
rlmath = heavy("ddai.trainer.rlmath")
data = heavy("ddai.trainer.value.data")
value_model = heavy("ddai.trainer.value.model")
vlm_inputs = heavy("ddai.trainer.vlm_inputs")

TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("ppo_exp")
    tiny = build_tiny(root / "tiny", texts=["a b c d e f g h"], spec=TinySpec(hidden_size=32))
    policy = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    ref = copy.deepcopy(policy)
    with torch.no_grad():  # a reference that differs from the policy: a KL to measure
        g = torch.Generator().manual_seed(0)
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    critic, _ = value_model.new_value_model(str(tiny), head_type="linear", unfreeze=0, seed=0)
    return policy, ref, critic.eval(), policy.config.vocab_size


def _batch(vocab: int):
    """5 rollouts of different prompt and completion lengths (left- and right-padding), with
    observation tokens (mask 0) inside."""
    g = torch.Generator().manual_seed(1)

    def ids(n):
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    prompts = [ids(n) for n in (3, 6, 4, 6, 2)]
    completions = [ids(n) for n in (7, 2, 9, 5, 4)]
    masks = [[1, 1, 0, 0, 1, 1, 1], [1, 1], [1, 0, 1, 1, 1, 0, 0, 1, 1], [1] * 5, [1, 0, 0, 1]]
    return data.pad_batch(prompts, completions, masks, pad_id=0)


def one_shot_logprobs(model, batch) -> torch.Tensor:
    """The reference computation: one forward over the whole batch, every position's logits in
    float32, a full log-softmax, the completion tokens gathered."""
    P = batch.prompt_len
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=vlm_inputs.text_positions(batch.attention_mask),
        use_cache=False,
    )
    logits = out.logits[:, P - 1 : -1].float() / TEMPERATURE
    return torch.log_softmax(logits, -1).gather(-1, batch.input_ids[:, P:, None]).squeeze(-1)


def _cfg(**kw) -> train.PPORunConfig:
    base = dict(model="m", data="d", corpus="c", output_dir="o", temperature=TEMPERATURE)
    return train.PPORunConfig(**{**base, "kl_mode": "loss", **kw})


@pytest.mark.parametrize("micro", [1, 2, 3, 5, 8])
def test_micro_batched_passes_equal_one_pass_over_the_batch(models, micro):
    policy, ref, critic, vocab = models
    batch = _batch(vocab)
    B, T = batch.mask.shape
    with torch.no_grad():
        want_old = one_shot_logprobs(policy, batch) * batch.mask
        want_ref = one_shot_logprobs(ref, batch) * batch.mask
        want_values = (
            critic.completion_values(
                batch.input_ids, batch.attention_mask, batch.prompt_len
            ).float()
            * batch.mask
        )

    seen: list[tuple[int, ...]] = []
    hooks = [
        m.lm_head.register_forward_hook(lambda mod, args, out: seen.append(tuple(out.shape)))
        for m in (policy, ref)
    ]
    try:
        scores = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0])
        exp = train.make_experience(
            policy, ref, critic, batch, scores, _cfg(experience_micro_batch=micro)
        )
    finally:
        for h in hooks:
            h.remove()

    torch.testing.assert_close(exp.old_logp, want_old, atol=1e-6, rtol=0)
    torch.testing.assert_close(exp.ref_logp, want_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(exp.old_values, want_values, atol=1e-6, rtol=0)
    assert not torch.equal(want_old, want_ref)  # two models, two answers
    # The LM head ran on micro-batches (the last one shorter when micro does not divide B) and
    # on the completion positions only (T + 1: the last prompt position and all but the last
    # token), never on the prompt's.
    rows = [len(c) for c in torch.arange(B).split(micro)]
    assert seen == [(r, T + 1, vocab) for r in rows for _ in (policy, ref)]


def test_micro_batches_leave_the_advantages_unchanged(models):
    policy, ref, critic, vocab = models
    batch = _batch(vocab)
    scores = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0])
    whole = train.make_experience(
        policy, ref, critic, batch, scores, _cfg(experience_micro_batch=5)
    )
    parts = train.make_experience(
        policy, ref, critic, batch, scores, _cfg(experience_micro_batch=2)
    )
    for name in ("advantages", "returns", "kl"):
        torch.testing.assert_close(getattr(parts, name), getattr(whole, name), atol=1e-6, rtol=0)


def test_the_lora_reference_passes_keep_only_completion_logits(models, tmp_path):
    """Through peft (and its adapter-disabled view, the LoRA run's reference) the model still
    takes ``logits_to_keep``."""
    from peft import get_peft_model

    from ddai.trainer.modeling import AdapterDisabled, lora_config

    policy, _, critic, vocab = models
    peft_model = get_peft_model(
        copy.deepcopy(policy), lora_config(r=2, alpha=4, dropout=0.0, target="all-linear")
    )
    batch = _batch(vocab)
    seen: list[tuple[int, ...]] = []
    hook = peft_model.get_base_model().lm_head.register_forward_hook(
        lambda mod, args, out: seen.append(tuple(out.shape))
    )
    try:
        exp = train.make_experience(
            peft_model, AdapterDisabled(peft_model), critic, batch, torch.zeros(5),
            _cfg(experience_micro_batch=3),
        )  # fmt: skip
    finally:
        hook.remove()
    T = batch.mask.shape[1]
    assert seen == [(3, T + 1, vocab)] * 2 + [(2, T + 1, vocab)] * 2
    with torch.no_grad():
        want = one_shot_logprobs(policy, batch) * batch.mask  # LoRA's B starts at 0
    torch.testing.assert_close(exp.ref_logp, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_chunked_log_softmax_equals_the_full_one(dtype_name):
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(2)
    logits = (torch.randn(3, 5, 50, generator=g) * 4).to(dtype)
    ids = torch.randint(0, 50, (3, 5), generator=g)
    want = torch.log_softmax(logits.float() / 0.9, -1).gather(-1, ids[..., None]).squeeze(-1)
    for chunk in (1, 4, 7, 15, 100):
        got = rlmath.selected_logprobs(logits, ids, 0.9, chunk=chunk)
        assert got.dtype == torch.float32
        # log-probs near −16 here: one float32 ulp (1.2e-7 relative) is 1.9e-6
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1.2e-7)
