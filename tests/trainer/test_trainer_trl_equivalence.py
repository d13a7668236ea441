"""``gspo_loss`` equals the loss TRL's GRPOTrainer computes on the same fixed batch.

TRL side: the real ``GRPOTrainer._compute_loss`` with ``importance_sampling_level="sequence"``,
``loss_type="grpo"``, ``beta=0``, given fixed prompt/completion ids, an ``env_mask`` (TRL's
``tool_mask``) with observation spans, advantages and old log-probs. ddai side: log-probs from a
plain forward pass of the same model, then ``ddai.trainer.losses.gspo_loss``. Values and every
parameter's gradient must agree.
"""

from __future__ import annotations

import pytest
from support.lazy import heavy, torch, transformers

from ddai.trainer.tiny import build_tiny

datasets = heavy("datasets")
trl = heavy("trl")
losses = heavy("ddai.trainer.losses")


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    path = build_tiny(tmp_path_factory.mktemp("tiny") / "m")
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("out")),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        importance_sampling_level="sequence",
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        report_to=[],
    )
    t = trl.GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": ["a", "b"]}),
        processing_class=tok,
    )
    t.current_gradient_accumulation_steps = 1
    t.model.train()
    return t


def _batch(vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    B, P, C = 4, 5, 9
    prompt_ids = torch.randint(3, vocab, (B, P), generator=g)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    prompt_mask[1, :2] = 0  # left padding
    completion_ids = torch.randint(3, vocab, (B, C), generator=g)
    completion_mask = torch.ones(B, C, dtype=torch.long)
    completion_mask[2, 6:] = 0  # right padding
    env_mask = torch.ones(B, C, dtype=torch.long)
    env_mask[0, 2:5] = 0  # an observation span inside the completion
    env_mask[3, 1:3] = 0
    env_mask[3, 5:7] = 0
    advantages = torch.tensor([1.3, -0.7, 0.4, -1.1])
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "tool_mask": env_mask,
        "advantages": advantages,
        "num_items_in_batch": (completion_mask * env_mask).sum(),
    }


def _logps(model, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    C = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=att).logits[:, -C - 1 : -1].float()
    return (
        torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    )


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("eps", [(0.2, 0.28), (3e-4, 4e-4)])
def test_gspo_loss_equals_trl_grpo_trainer_loss(trainer, eps):
    trainer.epsilon_low, trainer.epsilon_high = eps
    model = trainer.model
    inputs = _batch(model.config.vocab_size, seed=0)
    with torch.no_grad():
        current = _logps(model, inputs)
    # Old log-probs off by ±0.15 per token: some sequences land inside the clip range, some outside.
    noise = torch.randn(current.shape, generator=torch.Generator().manual_seed(1)) * 0.15
    inputs["old_per_token_logps"] = current + noise

    model.zero_grad()
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = _grads(model)

    model.zero_grad()
    mask = inputs["completion_mask"] * inputs["tool_mask"]
    ours, _ = losses.gspo_loss(
        _logps(model, inputs),
        inputs["old_per_token_logps"],
        inputs["advantages"],
        mask,
        eps_low=eps[0],
        eps_high=eps[1],
    )
    ours.backward()
    our_grads = _grads(model)

    torch.testing.assert_close(ours.detach(), trl_loss.detach(), atol=1e-6, rtol=1e-5)
    assert our_grads.keys() == trl_grads.keys() and our_grads
    for name, g in trl_grads.items():
        torch.testing.assert_close(our_grads[name], g, atol=1e-6, rtol=1e-4, msg=name)
    if eps[0] > 0.1:  # with the wide range at least one sequence is unclipped: real gradients
        assert any(g.abs().max() > 0 for g in trl_grads.values())
