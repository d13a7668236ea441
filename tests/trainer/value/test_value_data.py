"""Value-head data: rollouts rebuilt token-exactly as the policy saw them (observations and forced
completions masked), pairs capped per prompt, difficulty-bin weights, the prompt split."""

from __future__ import annotations

import itertools

import pytest
from support.lazy import heavy

from ddai.pipelines.records import tags
from ddai.trainer.modeling import load_tokenizer
from ddai.trainer.tiny import TinySpec, build_tiny

value_data = heavy("ddai.trainer.value.data")

SYSTEM = "You are a search agent."
T1 = {
    "idx": 0,
    "think": "find it",
    "action": "search",
    "arg": "revenue 2021",
    "sep": "\n",
    "observation": "[page 1_1]\nRevenue 2021: 30",
}
T2 = {
    "idx": 1,
    "think": "crop",
    "action": "bbox",
    "arg": "[0, 0, 10, 10]",
    "sep": "",
    "observation": "[crop]\n30",
}
T3 = {
    "idx": 2,
    "think": "done",
    "action": "search_complete",
    "arg": "true",
    "sep": "\n",
    "observation": None,
}
FORCED = {
    "idx": 3,
    "think": "Maximum turn limit reached. Trigger search_complete.",
    "action": "search_complete",
    "arg": "true",
    "sep": "",
    "forced": True,
}


def row(turns, uid="u1", idx=0, judge=1.0, fmt=True, **kw):
    return {
        "run_id": "r",
        "uid": uid,
        "rollout_idx": idx,
        "question": "Which year?",
        "turns": turns,
        "judge_score": judge,
        "format_ok": fmt,
        "reward": 0.7,
        **kw,
    }


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(
        str(build_tiny(tmp_path_factory.mktemp("vd") / "tiny", spec=TinySpec(hidden_size=32)))
    )


def test_rollout_is_token_exact_with_the_chat_template(tok):
    data = value_data.tokenize_rollouts([row([T1, T2, T3])], tok, system_prompt=SYSTEM)
    r = data.rollouts[0]
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Which year?"},
        {"role": "assistant", "content": "<think>find it</think>\n<search>revenue 2021</search>"},
        {"role": "user", "content": T1["observation"]},
        {"role": "assistant", "content": "<think>crop</think><bbox>[0, 0, 10, 10]</bbox>"},
        {"role": "user", "content": T2["observation"]},
        {
            "role": "assistant",
            "content": "<think>done</think>\n<search_complete>true</search_complete>",
        },
    ]
    want = tok.apply_chat_template(
        msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, assistant = list(want["input_ids"]), list(want["assistant_masks"])
    got = r.prompt_ids + r.completion_ids
    # The template ends the last assistant turn with "<|im_end|>\n"; the rollout stops at <|im_end|>.
    assert got == ids[: len(got)] and tok.decode(ids[len(got) :]) == "\n"
    assert [0] * len(r.prompt_ids) + r.mask == assistant[: len(got)]
    # Turn starts point at each turn's first policy token.
    firsts = [tok.decode(r.completion_ids[s : s + 1]) for s in r.turn_starts]
    assert firsts == ["<think>"] * 3 and r.success and r.target == 1.0


def test_forced_completion_is_environment_text_without_a_value_position(tok):
    r = value_data.tokenize_rollouts(
        [row([T1, FORCED], judge=0.0)], tok, system_prompt=SYSTEM
    ).rollouts[0]
    assert r.turn_starts[1] is None and r.turn_starts[0] == 0
    tail = [i for i, m in zip(r.completion_ids, r.mask, strict=True) if m == 0]
    assert tok.decode(tail).endswith(tags.FORCED_COMPLETION + "<|im_end|>")
    assert not r.success and r.target == 0.0


def test_invalid_turn_text_comes_from_the_raw_response():
    bad = {"idx": 0, "think": None, "action": "invalid", "arg": None, "error": "two thinks"}
    raw = "<think>a</think><think>b</think>\n<search>x</search><|im_end|>"
    resp = raw + "<think>done</think>\n<search_complete>true</search_complete>"
    assert value_data.turn_texts([bad, T3], resp) == [
        "<think>a</think><think>b</think>\n<search>x</search>",
        "<think>done</think>\n<search_complete>true</search_complete>",
    ]
    assert value_data.turn_texts([bad, T3], None)[0] == ""  # nothing else is known about it


def test_max_length_cuts_later_turns_and_drops_are_counted(tok):
    full = value_data.tokenize_rollouts([row([T1, T2, T3])], tok, system_prompt=SYSTEM).rollouts[0]
    cut_at = len(full.prompt_ids) + full.turn_starts[1] + 2
    data = value_data.tokenize_rollouts(
        [row([T1, T2, T3]), row([], idx=1), row([T1], idx=2, question="x " * 400)],
        tok,
        system_prompt=SYSTEM,
        max_length=cut_at,
    )
    (r,) = data.rollouts
    assert len(r.prompt_ids) + len(r.completion_ids) == cut_at
    assert r.turn_starts == [full.turn_starts[0], full.turn_starts[1], None]
    assert data.dropped == {value_data.NO_TURNS: 1, value_data.PROMPT_TOO_LONG: 1}


def test_reward_target_and_dataset_prompts(tok):
    prompts = {"u1": [{"role": "user", "content": "exact prompt"}]}
    r = value_data.tokenize_rollouts(
        [row([T3], judge=0.0)], tok, prompts=prompts, target="reward"
    ).rollouts[0]
    assert r.target == 0.7 and not r.success
    assert "exact prompt" in tok.decode(r.prompt_ids) and SYSTEM not in tok.decode(r.prompt_ids)
    with pytest.raises(ValueError, match="known: success, reward"):
        value_data.tokenize_rollouts([row([T3])], tok, target="ndcg")


def test_a_rollout_whose_uid_is_not_in_the_prompt_set_is_dropped_and_counted(tok):
    # it was tokenized with the bundled system prompt instead, which the policy never saw, and
    # nothing said so
    prompts = {"u1": [{"role": "user", "content": "exact prompt"}]}
    data = value_data.tokenize_rollouts(
        [row([T3]), row([T3], uid="u2", idx=1)], tok, prompts=prompts, system_prompt=SYSTEM
    )
    assert [r.uid for r in data.rollouts] == ["u1"]
    assert data.dropped == {value_data.NOT_IN_DATA: 1}
    without = value_data.tokenize_rollouts([row([T3], uid="u2")], tok, system_prompt=SYSTEM)
    assert len(without.rollouts) == 1 and not without.dropped  # no --data: the question rebuilds


def test_collate_left_pads_prompts_and_right_pads_completions():
    class R:
        def __init__(self, p, c, m):
            self.prompt_ids, self.completion_ids, self.mask = p, c, m

    b = value_data.collate([R([1, 2, 3], [4, 5], [1, 0]), R([6], [7, 8, 9], [1, 1, 1])], pad_id=0)
    assert b.prompt_len == 3
    assert b.input_ids.tolist() == [[1, 2, 3, 4, 5, 0], [0, 0, 6, 7, 8, 9]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert b.mask.tolist() == [[1, 0, 0], [1, 1, 1]]


def test_max_pairs_per_problem_caps_a_prompt_with_many_rollouts():
    uids = ["big"] * 32 + ["small"] * 5
    success = [True] * 16 + [False] * 16 + [True, True, False, False, False]
    pairs = value_data.make_pairs(uids, success, max_pairs_per_problem=25, seed=0)
    big = [p for p in pairs if uids[p[0]] == "big"]
    small = [p for p in pairs if uids[p[0]] == "small"]
    assert len(big) == 25 and len(set(big)) == 25  # 16 × 16 = 256 possible, capped, no repeats
    assert len(small) == 6  # 2 × 3 < cap: all of them
    assert all(success[p] and not success[n] and uids[p] == uids[n] for p, n in pairs)
    assert (
        value_data.make_pairs(uids, success, max_pairs_per_problem=25, seed=0) == pairs
    )  # deterministic
    assert value_data.make_pairs(uids, success, max_pairs_per_problem=25, seed=1) != pairs
    # A prompt's pairs do not depend on the other prompts.
    assert [(p - 32, n - 32) for p, n in small] == value_data.make_pairs(
        uids[32:], success[32:], max_pairs_per_problem=25
    )
    with pytest.raises(ValueError, match="max-pairs-per-problem"):
        value_data.make_pairs(uids, success, max_pairs_per_problem=0)


def test_difficulty_bin_weights_hand_computed():
    # bins [0, 0.25), [0.25, 0.75), [0.75, 1]: pairs with rates 0.1, 0.1 | 0.5 | 0.9
    w = value_data.bin_weights([0.1, 0.1, 0.5, 0.9], [0.25, 0.75], [0.4, 0.3, 0.3])
    assert w == pytest.approx([0.2, 0.2, 0.3, 0.3])
    # An empty bin's share goes to the others in proportion: 0.4/0.7 and 0.3/0.7.
    assert value_data.bin_weights([0.1, 0.5], [0.25, 0.75], [0.4, 0.3, 0.3]) == pytest.approx(
        [4 / 7, 3 / 7]
    )
    with pytest.raises(ValueError, match="one weight per bin"):
        value_data.bin_weights([0.1], [0.5], [1.0])
    with pytest.raises(ValueError, match="increase strictly"):
        value_data.bin_weights([0.1], [0.6, 0.4], [1, 1, 1])
    with pytest.raises(ValueError, match="zero weight"):
        value_data.bin_weights([0.1], [0.5], [0.0, 1.0])


def test_split_is_by_prompt_stratified_and_stable():
    uids = [f"p{i}" for i in range(20) for _ in range(3)]
    strata = {f"p{i}": i < 10 for i in range(20)}
    held = value_data.split_prompts(uids, 0.2, seed=0, strata=strata)
    assert len(held) == 4 and len([u for u in held if strata[u]]) == 2
    assert value_data.split_prompts(list(reversed(uids)), 0.2, seed=0, strata=strata) == held
    assert value_data.split_prompts(uids, 0.0) == set()
    assert value_data.success_rates(["a", "a", "b"], [True, False, False]) == {"a": 0.5, "b": 0.0}
    with pytest.raises(ValueError, match="val-fraction"):
        value_data.split_prompts(uids, 1.0)


def test_every_pair_combination_is_reachable_when_uncapped():
    uids = ["u"] * 5
    success = [True, False, True, False, False]
    pairs = value_data.make_pairs(uids, success, max_pairs_per_problem=100)
    assert sorted(pairs) == sorted(itertools.product([0, 2], [1, 3, 4]))
