"""The loss pass scores only the policy tokens (``trl_compat.policy_logps``): per-token log-probs,
entropies and gradients equal TRL's own pass (its fused head over every completion position) at
the policy tokens, 0 at the observation tokens, and the LM head projects only the policy tokens,
float32 and bf16 on the CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")


def _model(dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = Qwen2ForCausalLM(cfg).to(dtype)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model


def _batch():
    """3 rows: prompts left-padded (length 5), completions right-padded (K = 12); ``keep`` is
    the policy tokens (observation runs and padding excluded)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 97, (3, 17), generator=g)
    att = torch.ones(3, 17, dtype=torch.long)
    att[0, :2] = 0  # prompt padding
    att[2, -3:] = 0  # completion padding
    keep = torch.ones(3, 12, dtype=torch.bool)
    keep[:, 3:7] = False  # an observation after the first turn
    keep[1, 9:] = False  # a second one
    keep = keep & att[:, -12:].bool()
    return ids, att, keep


def _trainer():
    from accelerate import Accelerator

    return SimpleNamespace(accelerator=Accelerator(cpu=True))


def _head_rows(monkeypatch) -> list[int]:
    """The rows of every call of TRL's chunked LM head from now on, in call order."""
    import trl.trainer.utils as trl_utils

    rows: list[int] = []
    original = trl_utils._ChunkedLogProbFunction.apply
    counted = SimpleNamespace(apply=lambda h, *a: rows.append(h.shape[0]) or original(h, *a))
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", counted)
    return rows


def _tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({f"t{i}": i for i in range(97)}, "t0")),
        pad_token="t0",
        eos_token="t1",
    )


def _grpo_trainer(cls, tmp_path, model, **extra):
    """``cls`` (TRL's ``GRPOTrainer`` or ddai's) over ``model``: one group of 3, no generation."""
    from datasets import Dataset
    from support.trl_loss import grpo_args

    args = grpo_args(str(tmp_path))
    args.per_device_train_batch_size = args.num_generations = 3
    return cls(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a"]}),
        processing_class=_tokenizer(),
        **extra,
    )


def _scoring_rollout():
    """A text rollout as ``_generate_and_score_completions`` reads it after generating."""
    rollout = _TextRollout()
    rollout.vision_fields = None
    rollout.store = SimpleNamespace(group_rewards=lambda keys: {}, pop=lambda key: None)
    return rollout


def _both(dtype):
    from trl import GRPOTrainer

    from ddai.trainer.trl_compat import policy_logps

    model = _model(dtype)
    ids, att, keep = _batch()
    trainer = _trainer()
    weights = torch.linspace(0.5, 1.5, 12).expand(3, 12) * keep  # a loss over the policy tokens
    out = {}
    for name in ("trl", "policy"):
        model.zero_grad()
        if name == "trl":
            logps, ent, _ = GRPOTrainer._get_per_token_logps_and_entropies(
                trainer, model, ids, att, 12, compute_entropy=True
            )
        else:
            logps, ent, _ = policy_logps(
                trainer, model, ids, att, 12, keep, 2, entropy=True, aux_loss=False
            )
        (logps.float() * weights).sum().backward()
        grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters()}
        out[name] = (logps.detach().float(), ent.detach().float(), grads)
    return out, keep


# Gradients: bf16 sums the hidden states' gradient in another order (1-2 bf16 ulps).
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_policy_logps_equal_trls_at_policy_tokens_and_zero_elsewhere(dtype, tol):
    out, keep = _both(dtype)
    (lt, et, gt), (lp, ep, gp) = out["trl"], out["policy"]
    assert keep.sum() == 18 and (~keep).sum() == 18
    torch.testing.assert_close(lp[keep], lt[keep], atol=1e-6, rtol=0)
    torch.testing.assert_close(ep[keep], et[keep], atol=1e-6, rtol=0)
    assert lp[~keep].abs().max() == 0 and ep[~keep].abs().max() == 0
    observations = ~keep
    observations[2, -3:] = False  # padding: 0 in TRL's pass too
    assert lt[observations].abs().min() > 0  # TRL's pass scores the observations
    for name, g in gt.items():
        scale = max(g.abs().max().item(), 1.0)
        torch.testing.assert_close(gp[name], g, atol=tol * scale, rtol=0, msg=name)


def test_the_lm_head_projects_only_the_policy_tokens(monkeypatch):
    """TRL's chunked head sees ``keep.sum()`` rows on the CPU under ``policy_logps`` (every
    position of the sequence in TRL's own CPU pass), and TRL's own choice is back afterwards."""
    import trl.trainer.utils as trl_utils
    from trl import GRPOTrainer

    from ddai.trainer.trl_compat import policy_logps

    rows = _head_rows(monkeypatch)
    use_triton = trl_utils._use_triton
    model = _model(torch.float32)
    ids, att, keep = _batch()
    trainer = _trainer()
    GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, att, 12)
    policy_logps(trainer, model, ids, att, 12, keep, 3, entropy=False, aux_loss=False)
    assert rows == [3 * 16, int(keep.sum())]
    assert trl_utils._use_triton is use_triton


class _TextRollout:
    """What ``DdaiGRPOTrainer`` asks its rollout in the loss: a text policy sampled at a
    temperature only."""

    vision = None
    sampling_config = SimpleNamespace(temperature_only=True)

    def __call__(self, prompts, trainer):  # never called: the loss is driven by hand
        raise AssertionError("no generation in this test")


def test_ddai_trainers_loss_gradients_equal_trls_and_skip_the_observations(tmp_path, monkeypatch):
    """``DdaiGRPOTrainer._compute_loss`` over a batch with observation tokens: the same loss and
    gradients as TRL's ``GRPOTrainer`` on the same model and batch (float32), with the LM head
    run over the policy tokens only."""
    from trl import GRPOTrainer

    from ddai.trainer.trl_compat import grpo_trainer_class

    model = _model(torch.float32)
    ids, att, keep = _batch()
    inputs = {
        "prompt_ids": ids[:, :5],
        "prompt_mask": att[:, :5],
        "completion_ids": ids[:, 5:],
        "completion_mask": att[:, 5:],
        "tool_mask": keep.long() | (att[:, 5:] == 0).long(),  # TRL pads it with 1
        "advantages": torch.tensor([1.0, -0.5, -0.5]),
    }
    out = {}
    rows = _head_rows(monkeypatch)
    for name, cls, extra in (
        ("trl", GRPOTrainer, {}),
        ("ddai", grpo_trainer_class(), {"ddai_rollout": _TextRollout(), "ddai_log": None}),
    ):
        trainer = _grpo_trainer(cls, tmp_path, model, **extra)
        trainer.current_gradient_accumulation_steps = 1
        model.train()
        model.zero_grad()
        loss = trainer._compute_loss(model, dict(inputs))
        loss.backward()
        out[name] = (loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    assert rows == [3 * 16, int(keep.sum())]
    torch.testing.assert_close(out["ddai"][0], out["trl"][0], atol=1e-6, rtol=0)
    for name, g in out["trl"][1].items():
        torch.testing.assert_close(out["ddai"][1][name], g, atol=1e-6, rtol=0, msg=name)
    assert any(g.abs().max() > 0 for g in out["trl"][1].values())


def test_old_and_reference_logps_are_zero_off_the_policy_tokens(tmp_path, monkeypatch):
    """The old and reference log-probs TRL computes while scoring a batch come back 0 off the
    policy tokens (as the loss pass's are: a ratio ``exp(new - old)`` there stays 1, never an
    overflow times a zero mask), and unchanged on them."""
    from trl import GRPOTrainer

    from ddai.trainer.trl_compat import grpo_trainer_class

    _, att, keep = _batch()
    tool = keep.long() | (att[:, 5:] == 0).long()
    old = -torch.rand(3, 12) * 90 - 1  # exp(0 - old) overflows float32 at -89 and below
    scored = {
        "completion_mask": att[:, 5:],
        "tool_mask": tool,
        "old_per_token_logps": old.clone(),
        "ref_per_token_logps": old.clone() - 1,
        "advantages": torch.zeros(3),
    }
    monkeypatch.setattr(
        GRPOTrainer, "_generate_and_score_completions", lambda self, inputs: dict(scored)
    )
    trainer = _grpo_trainer(
        grpo_trainer_class(),
        tmp_path,
        _model(torch.float32),
        ddai_rollout=_scoring_rollout(),
        ddai_log=None,
    )
    out = trainer._generate_and_score_completions([{"episode_key": k} for k in "abc"])
    kept = keep & att[:, 5:].bool()
    for name, want in (("old_per_token_logps", old), ("ref_per_token_logps", old - 1)):
        assert torch.equal(out[name][kept], want[kept])
        assert out[name][~kept].abs().max() == 0


def test_old_and_reference_passes_project_only_the_policy_tokens(tmp_path, monkeypatch):
    """While TRL scores the batch it generated (its old and reference log-prob passes), the LM
    head sees the rollouts' policy tokens only (their ``env_mask``): log-probs equal TRL's own
    pass there, 0 elsewhere; once the batch is scored the masks are gone, so a later pass over
    other rows is TRL's own again."""
    from trl import GRPOTrainer

    from ddai.trainer.trl_compat import grpo_trainer_class

    model = _model(torch.float32)
    ids, att, keep = _batch()
    lengths = att[:, 5:].sum(-1).tolist()  # each completion's own length (row 2: 9)
    env_masks = [keep[i, :n].long().tolist() for i, n in enumerate(lengths)]
    rows = _head_rows(monkeypatch)
    rollout = _scoring_rollout()
    scored = {}

    def generate_and_score(self, inputs):
        rollout.env_masks = env_masks  # what the rollout leaves when TRL calls it
        with torch.no_grad():
            scored["old"] = self._get_per_token_logps_and_entropies(model, ids, att, 12, 2)[0]
        return {"completion_mask": att[:, 5:], "advantages": torch.zeros(3)}

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", generate_and_score)
    trainer = _grpo_trainer(
        grpo_trainer_class(), tmp_path, model, ddai_rollout=rollout, ddai_log=None
    )
    trainer._generate_and_score_completions([{"episode_key": k} for k in "abc"])
    assert rollout.env_masks is None
    assert rows == [int(keep[:2].sum()), int(keep[2:].sum())]  # TRL's chunks of 2 rows
    with torch.no_grad():
        trl_logps = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, att, 12, 2)
        after = trainer._get_per_token_logps_and_entropies(model, ids, att, 12, 2)[0]
    assert rows[2:] == [2 * 16, 16, 2 * 16, 16]  # without masks: every position, as TRL does
    assert torch.equal(scored["old"][keep], trl_logps[0][keep])
    assert scored["old"][~keep].abs().max() == 0
    assert torch.equal(after, trl_logps[0])


def test_scoring_keep_refuses_what_is_not_the_scored_batch():
    """``scoring_keep`` gives no mask (TRL scores every completion token) when the rollout kept
    none, or its masks do not fit the rows being scored."""
    from ddai.trainer.trl_compat import scoring_keep

    ids = torch.zeros(2, 9, dtype=torch.long)
    assert scoring_keep(SimpleNamespace(env_masks=None), ids, 4) is None
    assert scoring_keep(SimpleNamespace(env_masks=[[1, 0]]), ids, 4) is None  # 1 mask, 2 rows
    assert scoring_keep(SimpleNamespace(env_masks=[[1] * 5, [1]]), ids, 4) is None  # too long
    keep = scoring_keep(SimpleNamespace(env_masks=[[1, 0, 1], [0, 1]]), ids, 4)
    assert keep.tolist() == [[True, False, True, False], [False, True, False, False]]
