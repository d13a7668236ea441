"""The learnable task: the right first query is the topic the question asks about (a different word
per question), held-out questions share no topic pair with train ones, and no fixed first query
scores near a policy that picks one of the question's two topics at random."""

from __future__ import annotations

import json

import pytest

from ddai.pipelines.records import metrics
from ddai.trainer import learn_task


@pytest.fixture(scope="module")
def search():
    return learn_task.backends().search.index


def _pair(row):
    return tuple(row["id"].split("_", 1)[1].split("_"))


def test_heldout_questions_share_no_topic_pair_with_train_ones():
    rows = {s: learn_task.dataset_rows(s) for s in learn_task.SPLITS}
    assert (len(rows["train"]), len(rows["heldout"])) == (84, 48)
    unordered = {s: {frozenset(_pair(r)) for r in rows[s]} for s in rows}
    assert not unordered["train"] & unordered["heldout"]
    questions = {s: {r["extra_info"]["question"] for r in rows[s]} for s in rows}
    assert not questions["train"] & questions["heldout"]
    # Every topic is asked about and ruled out in both splits: no topic is held-out-only.
    for s in rows:
        assert {a for a, _ in map(_pair, rows[s])} == set(learn_task.TOPICS), s
        assert {b for _, b in map(_pair, rows[s])} == set(learn_task.TOPICS), s
    # The SFT start learns from train questions only.
    sft_questions = {json.loads(r["messages"])[1]["content"] for r in learn_task.sft_rows()}
    assert sft_questions == questions["train"]


def test_the_right_first_query_is_the_asked_topic_and_depends_on_the_question(search):
    rights = set()
    for split in learn_task.SPLITS:
        for row in learn_task.dataset_rows(split):
            asked, distractor = _pair(row)
            question = row["extra_info"]["question"]
            assert asked in question and distractor in question
            golden = [f"{row['file_name'].removesuffix('.pdf')}_{p}" for p in row["reference_page"]]
            right = [p for p, _ in search.search(asked, learn_task.SEARCH_K)]
            wrong = [p for p, _ in search.search(distractor, learn_task.SEARCH_K)]
            assert metrics.ndcg(right, golden) == 1.0, (question, right, golden)
            assert metrics.ndcg(wrong, golden) == 0.0, (question, wrong, golden)
            rights.add(right[0])
    assert len(rights) == len(learn_task.TOPICS)  # one right page per topic, none shared


def test_a_fixed_first_query_scores_far_below_picking_one_of_the_two_topics():
    fixed = learn_task.fixed_query_rewards("heldout")
    held = learn_task.dataset_rows("heldout")
    # Exact: a topic's query is right on the held-out questions asking about it (1.0), else 0.1.
    for topic in learn_task.TOPICS:
        n = sum(_pair(r)[0] == topic for r in held)
        assert fixed[topic] == pytest.approx((n * 1.0 + (len(held) - n) * 0.1) / len(held))
    # Words of the template find some page; at best one topic's.
    assert max(fixed.values()) == max(fixed[t] for t in learn_task.TOPICS)
    # Picking the asked topic or the distractor at random scores 0.55: every fixed query is far
    # below, so a policy can only beat a start that picks at random by reading the question.
    assert max(fixed.values()) < 0.25 < 0.55
    with pytest.raises(ValueError, match="unknown split"):
        learn_task.fixed_query_rewards("test")


def test_sft_rows_pair_right_and_distractor_with_the_same_thinks():
    rows = learn_task.sft_rows()
    train = learn_task.dataset_rows("train")
    assert len(rows) == 2 * len(train)
    for row, right, wrong in zip(train, rows[::2], rows[1::2], strict=True):
        asked, distractor = _pair(row)
        r, w = json.loads(right["messages"]), json.loads(wrong["messages"])
        assert r[2]["content"] == f"{learn_task.THINK_SEARCH}<search> {asked}</search>"
        assert w[2]["content"] == f"{learn_task.THINK_SEARCH}<search> {distractor}</search>"
        assert r[4] == w[4] == {"role": "assistant", "content": learn_task.THINK_DONE}
        assert r[:2] == w[:2] == row["prompt"]  # the same system prompt and question


def test_the_query_copies_the_questions_own_token():
    """The start's query is the very token the question writes (a leading space included), so
    copying it is an identity map; without the space it would be another token."""
    from ddai.trainer.tiny import FIXTURE_TEXT, train_tokenizer

    rows = learn_task.sft_rows()
    tok = train_tokenizer([FIXTURE_TEXT, *(r["messages"] for r in rows)])
    for topic in learn_task.TOPICS:
        question = tok.tokenize(learn_task.QUESTION.format(topic=topic, distractor="x"))
        query = tok.tokenize(learn_task.SEARCH.format(query=topic))
        assert len(query) == 3 and query[1] in question, (topic, query, question)
        assert tok.tokenize(f"<search>{topic}</search>")[1] not in question


def test_arms_share_the_rollout_batch_and_differ_in_optimizer(tmp_path):
    cfgs = {
        arm: learn_task.grpo_config("m", tmp_path, arm=arm, generations=5)
        for arm in learn_task.ARMS
    }
    assert cfgs["control"].learning_rate == 0.0 and cfgs["grpo"].learning_rate > 0
    assert cfgs["grpo"].batch_size == 32 and cfgs["grpo"].max_steps == 5
    assert all(c.data == tmp_path / "task" / "train.parquet" for c in cfgs.values())
    # gspo-ddai: two optimizer steps of 16 per rollout batch of 32.
    assert cfgs["gspo-ddai"].batch_size == 16 and cfgs["gspo-ddai"].max_steps == 10
    assert cfgs["gspo-ddai"].preset == "gspo-ddai"
    assert all(c.overrides == {"lr_scheduler_type": "constant"} for c in cfgs.values())
    with pytest.raises(ValueError, match="unknown arm"):
        learn_task.grpo_config("m", tmp_path, arm="ppo", generations=1)
    ev = learn_task.collect_config("m", tmp_path, run_id="ev", n_agent=2)
    assert ev.data == tmp_path / "task" / "heldout.parquet" and ev.batch_size == 96
    assert ev.episode == cfgs["grpo"].episode and ev.rewards == cfgs["grpo"].rewards


def test_every_page_is_observed_whole_as_the_sft_start_saw_it():
    from ddai.trainer.tiny import FIXTURE_TEXT, train_tokenizer

    tok = train_tokenizer([FIXTURE_TEXT, *(r["messages"] for r in learn_task.sft_rows())])
    c = learn_task.corpus()
    for topic in learn_task.TOPICS:
        page = learn_task.page_id(topic)
        n = len(tok(f"[page {page}]\n{c.text(page)}").input_ids)
        assert n <= learn_task.EPISODE.obs_max_tokens, (page, n)
