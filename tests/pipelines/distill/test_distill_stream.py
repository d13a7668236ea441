"""``ddai distill`` as a stream: the same file and report as the whole-selection computation
(``support.distill_reference``), batch sizes that cannot change the output, the identity rewriter
skipped with its calls still counted, and every dropped selected rollout in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.distill_reference import read_report, reference
from support.turns import turn_row

from ddai.pipelines import store
from ddai.pipelines.backends.identity import IdentityRewriter
from ddai.pipelines.distill import DistillConfig, run_distill, stream
from ddai.pipelines.distill.rebuild import UNAVAILABLE, UNRENDERABLE

RUN = "gspo_focus_20250101_120000_abcdef12"


def _turn(idx, think, action, arg, obs=None):
    return turn_row(idx, action, arg, think=think, observation=obs)


def _rows() -> list[dict]:
    """Two prompts with rare successes: clean ones, one whose invalid turn has no response to
    cut it from (its log says the format passed; the rebuild drops it), one repeating a query, one with a system error."""
    ok = [_turn(0, "look", "search", "q", "img/1.jpg"), _turn(1, "done", "search_complete", "true")]
    bad = [_turn(0, "look", "invalid", None), _turn(1, "done", "search_complete", "true")]
    rep = [
        _turn(0, "a", "search", "same", "img/1.jpg"),
        _turn(1, "b", "search", "same ", "x"),
        _turn(2, "c", "search_complete", "true"),
    ]
    err = [
        {**_turn(0, "a", "search", "z"), "error": "Search did not return an image."},
        _turn(1, "c", "search_complete", "true"),
    ]
    rows = []
    for p, (uid, wins) in enumerate([("train_1", [ok, bad]), ("train_2", [rep, err, ok])]):
        for i in range(8):
            turns = wins[i] if i < len(wins) else ok
            rows.append(
                {
                    "step": 1,
                    "uid": uid,
                    "rollout_idx": i,
                    "sample_idx": 10 * p + i,
                    "question": f"q {uid}?",
                    "response": None,
                    "turns": turns,
                    "judge_score": 1.0 if i < len(wins) else 0.0,
                    "ndcg": 1.0 - i / 10,
                    "reward": 1.0 if i < len(wins) else 0.0,
                    "format_ok": True,
                }
            )
    return rows


def stored(tmp_path: Path, rows: list[dict]) -> Path:
    """``rows`` stored as run ``RUN`` in ``tmp_path / "logs"`` (returned)."""
    logs = tmp_path / "logs"
    store.write_run(logs, RUN, rows)
    return logs


@pytest.fixture
def logs(tmp_path) -> Path:
    return stored(tmp_path, _rows())


def cfg(logs: Path, out: Path, **kw) -> DistillConfig:
    return DistillConfig(logs=logs, runs=[RUN], out=out, progress=False, rewrite="none", **kw)


def _same_as_reference(c: DistillConfig) -> dict:
    s = run_distill(c)
    table, lines = reference(c)
    got = pq.read_table(c.out)
    assert got.equals(table) and got.schema.metadata == table.schema.metadata
    # the post-pass's lines, in the same order, plus one line per rollout the rebuild dropped
    report = read_report(c.out)
    assert [x for x in report if json.loads(x)["rule"] != UNRENDERABLE] == lines
    return s


@pytest.mark.parametrize("fmt", ["train1", "messages"])
@pytest.mark.parametrize("drops", [{}, {"drop_repeated_queries": True, "drop_system_errors": True}])
def test_stream_writes_what_the_whole_selection_gives(logs, tmp_path, fmt, drops, monkeypatch):
    # batches of one rollout, spill buckets of two slots, row groups of one sample: the order
    # and names still match
    monkeypatch.setattr(stream, "FETCH_ROWS", 1)
    monkeypatch.setattr(stream, "WRITE_ROWS", 1)
    monkeypatch.setattr(stream, "BUCKET_ROWS", 2)
    out = tmp_path / "sft.parquet"
    s = _same_as_reference(cfg(logs, out, fmt=fmt, top_k=8, **drops))
    assert pq.ParquetFile(out).metadata.num_row_groups == s["samples written"] > 1


def test_every_dropped_selected_rollout_is_in_the_report(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    s = run_distill(cfg(logs, out, top_k=8, drop_repeated_queries=True, drop_system_errors=True))
    assert s["dropped"][UNRENDERABLE] == 1
    assert s["dropped"]["repeated-query"] == 1 and s["dropped"]["system-error"] == 1
    report = [json.loads(x) for x in read_report(out)]
    drops = {r["uid"]: r for r in report if r["action"] == "drop"}
    assert s["selected rollouts"] == s["samples written"] + len(drops) == 5
    bad = drops["train_1__s1__abcdef12"]
    assert bad["rule"] == UNRENDERABLE and "rollout_idx 1" in bad["detail"]
    assert drops["train_2__s10__abcdef12"]["rule"] == "repeated-query"
    assert drops["train_2__s11__abcdef12"]["rule"] == "system-error"
    written = set(pq.read_table(out)["uid"].to_pylist())
    assert not written & set(drops)
    # every key of `dropped` is an identifier, never prose
    assert all(" " not in k for k in s["dropped"])


def test_identity_rewriter_is_skipped_and_its_calls_counted(logs, tmp_path, monkeypatch):
    async def never(self, reqs):
        raise AssertionError("the identity rewriter's answer is known: it is never called")

    monkeypatch.setattr(IdentityRewriter, "rewrite", never)
    out = tmp_path / "sft.parquet"
    s = run_distill(
        DistillConfig(logs=logs, runs=[RUN], out=out, progress=False, rewriter="identity", top_k=8)
    )
    plain = tmp_path / "plain.parquet"
    run_distill(cfg(logs, plain, top_k=8))
    assert pq.read_table(out).equals(pq.read_table(plain))
    assert s["trajectories returned unchanged"] == s["samples written"] == 4
    man = json.loads(Path(f"{out}.manifest.json").read_text())
    (usage,) = man["backend_calls"].values()
    assert usage["calls"] == 4  # one request per kept trajectory, as the call would have made


def test_stream_matches_on_the_synthetic_world(tmp_path):
    from ddai.pipelines.fixtures.make import make_world
    from ddai.pipelines.ingest import IngestConfig, ingest

    make_world(tmp_path / "world", seed=0, size="small")
    src = tmp_path / "world" / "logs" / "focused_r1.jsonl"
    ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    c = DistillConfig(
        logs=tmp_path / "logs",
        runs=["focused_r1"],
        out=tmp_path / "o.parquet",
        progress=False,
        rewrite="none",
    )
    s = _same_as_reference(c)
    assert s["samples written"] > 0
    assert UNAVAILABLE  # rebuild's marker for a lost observation stays what it was


def test_keys_repeating_across_steps_are_named_as_before(tmp_path, monkeypatch):
    """The same prompts logged at two steps: their keys repeat, so every uid takes ``__t{step}``,
    found over every spill bucket (two slots each here)."""
    monkeypatch.setattr(stream, "BUCKET_ROWS", 2)
    logs = tmp_path / "logs"
    store.write_run(logs, RUN, _rows() + [{**r, "step": 2} for r in _rows()])
    c = cfg(logs, tmp_path / "o.parquet", top_k=8)
    _same_as_reference(c)
    uids = pq.read_table(c.out)["uid"].to_pylist()
    assert len(uids) == 8 and all(u.endswith(("__t1", "__t2")) for u in uids)
