"""State masking, proven: ``env_mask`` is 0 exactly on observation tokens (token-exact against the
chat template's own assistant mask), policy tokens are the sampled ids with their log-probs, and in
TRL's real loss a perturbation of the observation tokens' log-probs changes no gradient.

A TRL contract test (with ``test_trl_compat.py`` and ``test_trainer_vision.py``): it runs TRL's own
loss through ``ddai.trainer.trl_compat``'s fence, so a TRL upgrade that breaks masking fails here."""

from __future__ import annotations

import pytest
from support.lazy import torch
from support.trl_loss import grpo_args, loss_grads, loss_inputs, mask_segments

from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.records import tags
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.rollout import (
    HFSampler,
    RolloutConfig,
    Sampler,
    run_rollouts,
    token_truncator,
)
from ddai.trainer.episode.tasks import Task
from ddai.trainer.modeling import load_policy
from ddai.trainer.tiny import build_tiny

TURNS = [
    "<think>find the chart</think>\n<search>revenue year</search>",
    "<think>crop the row</think>\n<bbox>[0, 100, 800, 190]</bbox>",
    "not a turn at all",
]


class Scripted(Sampler):
    """Plays fixed turn texts (each closed by eos, except ``open_turns``) for every context."""

    def __init__(self, tok, texts, open_turns=()):
        self.tok, self.texts, self.open = tok, texts, set(open_turns)
        self.n = {}

    def sample(self, contexts, caps):
        out = []
        for j in range(len(contexts)):
            k = self.n.get(j, 0)
            self.n[j] = k + 1
            ids = self.tok.encode(self.texts[k % len(self.texts)], add_special_tokens=False)
            if k not in self.open:
                ids = [*ids, self.tok.eos_token_id]
            out.append((ids, [-0.25] * len(ids)))
        return out


class TopSearch:
    name = "top"

    def search(self, query, k=5, doc=None):
        return [("1_1", 1.0), ("1_2", 0.5)]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    model, tok = load_policy(str(build_tiny(tmp_path_factory.mktemp("tiny") / "m")))
    return model, tok


@pytest.fixture
def world():
    lines = [
        {"text": t, "bbox": [0, 100 * i, 800, 100 * i + 90]}
        for i, t in enumerate(["Revenue", "2021 30"])
    ]
    corpus = Corpus.from_records(
        [
            {"doc_id": "1", "page": 1, "lines": lines, "width": 800, "height": 600},
            {"doc_id": "1", "page": 2, "lines": lines[:1], "width": 800, "height": 600},
        ]
    )
    task = Task(
        uid="train_1",
        messages=({"role": "system", "content": "S"}, {"role": "user", "content": "Which year?"}),
        question="Which year?",
        reference_answer="2021",
        reference_pages=("1_1",),
    )
    return corpus, task


def test_env_mask_is_exactly_the_chat_templates_assistant_mask(policy, world):
    _, tok = policy
    corpus, task = world
    env = SearchEnv(TopSearch(), corpus, EnvConfig(max_turns=4), truncate=token_truncator(tok, 12))
    (traj,) = run_rollouts(
        [(task, 0, 0)], sampler=Scripted(tok, TURNS), tokenizer=tok, env=env, config=RolloutConfig()
    )
    # Rebuild the conversation as messages and render it with the chat template: the ids must be
    # identical (no re-tokenisation drift) and the template's assistant mask (its generation
    # markers) must equal env_mask on every completion token, except the forced completion, which
    # the environment wrote (mask 0).
    msgs = [dict(m) for m in task.messages]
    for t in traj.episode.turns:
        msgs.append({"role": "assistant", "content": t.raw})
        if t.observation is not None:
            msgs.append({"role": "user", "content": t.observation})
    rendered = tok.apply_chat_template(
        msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, amask = rendered["input_ids"], rendered["assistant_masks"]
    full = traj.prompt_ids + traj.completion_ids
    assert (
        ids[-1] == tok.encode("\n", add_special_tokens=False)[0]
    )  # the template's closing newline
    assert full == ids[:-1]
    P = len(traj.prompt_ids)
    forced_ids = [*tok.encode(tags.FORCED_COMPLETION, add_special_tokens=False), tok.eos_token_id]
    expected = list(amask[P:-1])
    expected[-len(forced_ids) :] = [0] * len(forced_ids)
    assert traj.env_mask == expected

    segs = mask_segments(traj.completion_ids, traj.env_mask)
    policy_spans = [s for m, s in segs if m == 1]
    scripted = [[*tok.encode(t, add_special_tokens=False), tok.eos_token_id] for t in TURNS]
    assert policy_spans == scripted  # exactly the sampled ids, nothing else
    assert [lp for lp, m in zip(traj.logprobs, traj.env_mask, strict=True) if m == 0] == [
        0.0
    ] * traj.env_mask.count(0)
    assert traj.episode.terminated == "max_turns"
    assert not traj.episode.format_ok  # the third turn was invalid


def test_unclosed_turn_gets_its_end_token_from_the_environment(policy, world):
    _, tok = policy
    corpus, task = world
    env = SearchEnv(TopSearch(), corpus, EnvConfig(max_turns=4))
    texts = [TURNS[0], "<think>done</think>\n<search_complete>true</search_complete>"]
    (traj,) = run_rollouts(
        [(task, 0, 0)],
        sampler=Scripted(tok, texts, open_turns={0}),
        tokenizer=tok,
        env=env,
        config=RolloutConfig(),
    )
    segs = mask_segments(traj.completion_ids, traj.env_mask)
    assert segs[0] == (1, tok.encode(TURNS[0], add_special_tokens=False))
    assert segs[1][0] == 0 and segs[1][1][0] == tok.eos_token_id  # closed by the environment
    assert segs[-1][0] == 1 and traj.completion_ids[-1] == tok.eos_token_id
    assert traj.episode.terminated == "complete"


def test_sampled_logprobs_match_a_teacher_forced_forward(policy, world):
    model, tok = policy
    corpus, task = world
    torch.manual_seed(0)
    env = SearchEnv(TopSearch(), corpus, EnvConfig(max_turns=2), truncate=token_truncator(tok, 8))
    sampler = HFSampler(model, tok, temperature=1.0)
    trajs = run_rollouts(
        [(task, 0, 0), (task, 0, 1), (task, 1, 0)],
        sampler=sampler,
        tokenizer=tok,
        env=env,
        config=RolloutConfig(max_turn_tokens=12, max_completion_tokens=80, obs_max_tokens=8),
    )
    for traj in trajs:
        assert len(traj.completion_ids) == len(traj.env_mask) == len(traj.logprobs)
        assert sum(traj.env_mask) > 0
        ids = torch.tensor([traj.prompt_ids + traj.completion_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(traj.prompt_ids) - 1 : -1]
        ref = torch.log_softmax(logits.float(), -1).gather(
            -1, torch.tensor(traj.completion_ids)[:, None]
        )[:, 0]
        on = torch.tensor(traj.env_mask, dtype=torch.bool)
        torch.testing.assert_close(torch.tensor(traj.logprobs)[on], ref[on], atol=2e-4, rtol=0)


@pytest.mark.slow
def test_observation_logprobs_carry_no_gradient_in_trl_loss(policy, world, tmp_path):
    from datasets import Dataset
    from trl import GRPOTrainer

    model, tok = policy
    corpus, task = world
    env = SearchEnv(TopSearch(), corpus, EnvConfig(max_turns=4))
    trajs = run_rollouts(
        [(task, 0, 0), (task, 0, 1)],
        sampler=Scripted(tok, TURNS),
        tokenizer=tok,
        env=env,
        config=RolloutConfig(),
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=grpo_args(str(tmp_path)),
        train_dataset=Dataset.from_dict({"prompt": ["a"]}),
        processing_class=tok,
    )
    trainer.current_gradient_accumulation_steps = 1
    model.train()
    inputs = loss_inputs(trajs, tok.pad_token_id)
    obs = (inputs["completion_mask"] * (1 - inputs["tool_mask"])).float()
    pol = (inputs["completion_mask"] * inputs["tool_mask"]).float()
    assert obs.sum() > 0
    base = loss_grads(trainer, model, inputs, None)
    on_obs = loss_grads(trainer, model, inputs, obs)
    on_policy = loss_grads(trainer, model, inputs, pol)
    assert base.keys() == on_obs.keys()
    for name in base:
        torch.testing.assert_close(on_obs[name], base[name], atol=0, rtol=0, msg=name)
    # The same perturbation on policy tokens does change the gradient: the check can fail.
    assert any(not torch.equal(on_policy[n], base[n]) for n in base)


def test_a_rollout_never_outgrows_its_completion_budget(policy, world):
    _, tok = policy
    corpus, task = world
    env = SearchEnv(TopSearch(), corpus, EnvConfig(max_turns=5), truncate=token_truncator(tok, 64))
    turn = len(tok.encode(TURNS[0], add_special_tokens=False)) + 1
    budget = turn + 6  # the first observation (tens of tokens) cannot fit
    (traj,) = run_rollouts(
        [(task, 0, 0)],
        sampler=Scripted(tok, TURNS[:1]),
        tokenizer=tok,
        env=env,
        config=RolloutConfig(max_turn_tokens=64, max_completion_tokens=budget, obs_max_tokens=64),
    )
    assert len(traj.completion_ids) == len(traj.env_mask) == len(traj.logprobs) == budget
    assert traj.env_mask == [1] * turn + [0] * 6  # the policy turn whole, the observation cut
    assert traj.out_of_budget and traj.episode.terminated == "max_turns"
