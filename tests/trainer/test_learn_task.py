"""The learnable task: the right queries find the golden page first, the distractor never does,
and the SFT start's two trajectories per question differ only in the query."""

from __future__ import annotations

import json

import pytest

from ddai.pipelines import metrics
from ddai.trainer import learn_task, toy


@pytest.fixture(scope="module")
def search():
    return toy.local_backends(toy.corpus()).search.index


def test_right_query_finds_the_golden_page_first_and_the_distractor_never(search):
    for d, (row, query) in enumerate(
        zip(toy.dataset_rows(), learn_task.RIGHT_QUERIES, strict=True), start=1
    ):
        golden = [f"{d}_{p}" for p in row["reference_page"]]
        right = [p for p, _ in search.search(query, learn_task.SEARCH_K)]
        wrong = [p for p, _ in search.search(learn_task.DISTRACTOR, learn_task.SEARCH_K)]
        assert metrics.ndcg(right, golden) == 1.0, (query, right, golden)
        assert wrong == [learn_task.DISTRACTOR_PAGE] and metrics.ndcg(wrong, golden) == 0.0
        # The right query is words of the question.
        assert all(w in row["extra_info"]["question"].lower() for w in query.split())


def test_sft_rows_pair_right_and_distractor_with_the_same_thinks():
    rows = learn_task.sft_rows()
    assert len(rows) == 2 * len(learn_task.RIGHT_QUERIES)
    for right, wrong in zip(rows[::2], rows[1::2], strict=True):
        r, w = json.loads(right["messages"]), json.loads(wrong["messages"])
        first_r, first_w = r[2]["content"], w[2]["content"]
        assert first_r.startswith(learn_task.THINK_SEARCH) and first_w.startswith(
            learn_task.THINK_SEARCH
        )
        assert first_w.endswith(f"<search>{learn_task.DISTRACTOR}</search>")
        assert r[4] == w[4] == {"role": "assistant", "content": learn_task.THINK_DONE}
        assert r[:2] == w[:2]  # the same system prompt and question


def test_arms_share_the_rollout_batch_and_differ_in_optimizer(tmp_path):
    cfgs = {
        arm: learn_task.grpo_config("m", tmp_path, arm=arm, generations=5)
        for arm in learn_task.ARMS
    }
    assert cfgs["control"].learning_rate == 0.0 and cfgs["grpo"].learning_rate > 0
    assert cfgs["grpo"].batch_size == 32 and cfgs["grpo"].max_steps == 5
    # gspo-ddai: two optimizer steps of 16 per rollout batch of 32.
    assert cfgs["gspo-ddai"].batch_size == 16 and cfgs["gspo-ddai"].max_steps == 10
    assert cfgs["gspo-ddai"].preset == "gspo-ddai"
    with pytest.raises(ValueError, match="unknown arm"):
        learn_task.grpo_config("m", tmp_path, arm="ppo", generations=1)
