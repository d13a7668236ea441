"""``--rank ddai``: DDAI's finalize order (``finalize_success_only_sft_dataset.py``), one prompt
per tie-break, the same order from the in-memory selection and from the DuckDB scan."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ddai.pipelines import store
from ddai.pipelines.distill import fetch
from ddai.pipelines.distill.select import SelectConfig, select, turn_stats
from ddai.pipelines.records.schema import normalize_rollout, to_table

DONE = "<think>done</think>\n<search_complete>true</search_complete>"


def search(q: str = "q", think: str = "look") -> str:
    return f"<think>{think}</think>\n<search>{q}</search>"


BOX = "<think>crop</think>\n<bbox>[1, 2, 30, 40]</bbox>"


def roll(uid: str, i: int, judge: float, turns: list[str], ndcg: float, reward: float) -> dict:
    return normalize_rollout(
        {
            "run_id": "r",
            "step": 0,
            "uid": uid,
            "rollout_idx": i,
            "response": "".join(turns) + DONE,
            "judge_score": judge,
            "ndcg": ndcg,
            "reward": reward,
        }
    )


# Per prompt, successes listed so that the reward order (reward desc) is the reverse of DDAI's:
# each prompt isolates one level of DDAI's key, the levels above it tied.
CASES = {
    # NDCG desc first, whatever the reward, searches or length
    "ndcg": [([search()], 0.5, 1.0), ([search(), search(), BOX], 1.0, 0.9)],
    # same NDCG: fewer searches first
    "searches": [([search(), search()], 0.5, 1.0), ([search()], 0.5, 0.9)],
    # same NDCG and searches: fewer boxes first (DDAI's own regex never matched a box)
    "bboxes": [([search(), BOX], 0.5, 1.0), ([search()], 0.5, 0.9)],
    # same NDCG, searches and boxes: shorter assistant text first
    "length": [([search("a longer query")], 0.5, 1.0), ([search("q")], 0.5, 0.9)],
    # all tied: log order (DDAI's stable sort), though rollout 1 has the higher reward
    "log order": [([search("ab")], 0.5, 0.8), ([search("cd")], 0.5, 0.9)],
}


def world() -> list[dict]:
    rows = []
    for uid, wins in CASES.items():
        for i, (turns, ndcg, reward) in enumerate(wins):
            rows.append(roll(uid, i, 1.0, turns, ndcg, reward))
        rows += [roll(uid, len(wins) + i, 0.0, [], 0.0, 0.0) for i in range(2)]
    return rows


EXPECTED = {"ndcg": [1, 0], "searches": [1, 0], "bboxes": [1, 0], "length": [1, 0]}
EXPECTED["log order"] = [0, 1]


def order(table: pa.Table, rows: list[int]) -> dict[str, list[int]]:
    t = table.take(rows)
    out: dict[str, list[int]] = {}
    for u, i in zip(t["uid"].to_pylist(), t["rollout_idx"].to_pylist(), strict=True):
        out.setdefault(u, []).append(i)
    return out


def test_each_ddai_tie_break_in_memory():
    t = to_table(world())
    cfg = SelectConfig(rate_max=0.5, top_k=4, rank="ddai")
    assert order(t, select(t, cfg).rows) == EXPECTED
    # the reward order is the reverse of DDAI's in every case
    got = order(t, select(t, SelectConfig(rate_max=0.5, top_k=4, rank="reward")).rows)
    assert got == {u: e[::-1] for u, e in EXPECTED.items()}


def test_top_k_keeps_ddai_best(tmp_path):
    t = to_table(world())
    got = order(t, select(t, SelectConfig(rate_max=0.5, top_k=1, rank="ddai")).rows)
    assert got == {u: e[:1] for u, e in EXPECTED.items()}


def test_the_scan_ranks_as_the_table_does(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "r", world())
    files = [str(f) for f in store.parquet_files(logs, ["r"])]
    keys = fetch.selection_columns(files, stats=True)
    for k in (1, 4):
        cfg = SelectConfig(rate_max=0.5, top_k=k, rank="ddai")
        sel, _, _ = fetch.scan_select(files, cfg)
        assert sel.rows == select(keys, cfg).rows
        assert order(keys, sel.rows) == {u: e[:k] for u, e in EXPECTED.items()}


def test_turn_stats_count_the_text_as_the_messages_hold_it():
    from ddai.pipelines.records.tags import parse_turns

    rows = world()
    stats = turn_stats(pa.chunked_array([to_table(rows)["turns"]]).combine_chunks())
    for r, n_search, n_bbox, length in zip(
        rows, *stats.to_dict(as_series=False).values(), strict=True
    ):
        turns = parse_turns(r["response"])
        assert n_search == sum(t.action == "search" for t in turns)
        assert n_bbox == sum(t.action == "bbox" for t in turns)
        assert length == sum(len(t.body()) for t in turns)


def test_unknown_rank_is_refused():
    with pytest.raises(ValueError, match="--rank"):
        SelectConfig(rank="best")
