"""ddai's own JSONL read in columns: the same rollouts and quarantine as the per-row path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from support.columnar import NOT_ROWS, json_line, kinds, odd_line_falls_back, same_store

from ddai.pipelines.adapters import line_batches, native
from ddai.pipelines.adapters.base import ReaderContext, RowBatch, SourceRecord

TEMPLATE = json.loads((FIXTURES / "logs" / "curriculum.jsonl").open().readline())


def _line(i: int, **over) -> str:
    row = {**TEMPLATE, "uid": f"train_{i // 4}", "rollout_idx": i % 4, "sample_idx": i}
    row["extra"] = {**TEMPLATE["extra"], "n": i, "gone": None, "f": 1e-05}
    return json_line(row, **over)


# Lines the per-row path quarantines, converts or reads otherwise; each falls back with its batch.
ODD = [
    '{"run_id": "r", "uid": "x", "rollout_idx": 1, "question": "half an emoji \\ud83d"}',
    '{"run_id": "r", "uid": "deep", "rollout_idx": 0, "extra": ' + "[" * 3000 + "]" * 3000 + "}",
    '{"run_id": "r", "uid": "nan", "rollout_idx": 0, "reward": NaN}',
    '{"run_id": "r", "uid": "typed", "rollout_idx": "3", "reward": "0.5"}',  # per-row: kept
    '{"run_id": "r", "uid": "float", "rollout_idx": 2.0, "step": 1}',  # per-row: 2, kept
    '{"run_id": "r", "uid": "bad", "rollout_idx": "x"}',
    '{"run_id": "r", "uid": "neg", "rollout_idx": -1}',
    '{"run_id": "r", "uid": "big", "rollout_idx": 3000000000}',
    '{"run_id": "r", "rollout_idx": 2}',
    '{"uid": "norun", "rollout_idx": 2}',
    '{"run_id": "r", "uid": "", "rollout_idx": 2}',
    '{"run_id": "r", "uid": 7, "rollout_idx": 2}',  # per-row: "7"
    '{"run_id": "r", "uid": "tab", "rollout_idx": 0, "question": "a\tb"}',
    *NOT_ROWS,
    '{"run_id": "r", "uid": "a", "rollout_idx": 0}{"run_id": "r", "uid": "b", "rollout_idx": 0}',
    '{"run_id": "r", "uid": "pages", "rollout_idx": 0, "reference_pages": ["1_2", 3]}',
    '{"run_id": "r", "uid": "nullpage", "rollout_idx": 0, "reference_pages": ["1_2", null]}',
    '{"run_id": "r", "uid": "unknown", "rollout_idx": 0, "meta": {"a": 1}}',  # → extra
    '{"run_id": "r", "uid": "parts", "rollout_idx": 0, "reward_parts": {"a": 1, "b": null}}',
    '{"run_id": "r", "uid": "xl", "rollout_idx": 0, "extra": [1]}',  # per-row: dropped
    '{"run_id": "r", "uid": "xn", "rollout_idx": 0, "extra": "nope"}',  # per-row: wrapped
    '{"run_id": "r", "uid": "xx", "rollout_idx": 0, "extra": {"a": 1}, "extra": {"b": 2}}',
    '{"run_id": "r", "uid": "twice", "rollout_idx": 0, "rollout_idx": 1}',  # Python keeps last
    '{"run_id": "r", "uid": "huge", "rollout_idx": 0, "reward": 1e400}',
    '{"run_id": "r", "uid": "flags", "rollout_idx": 0, "flags": ["b", "a", "b"]}',
    '{"run_id": "r", "uid": "term", "rollout_idx": 0, "terminated": "timeout"}',
    '{"run_id": "r", "uid": "t1", "rollout_idx": 0, "turns": [{"action": "search"}]}',
    '{"run_id": "r", "uid": "t2", "rollout_idx": 0, "turns": [{"idx": 0, "action": "jump"}]}',
    '{"run_id": "r", "uid": "t3", "rollout_idx": 0, "turns": ["search"]}',
    '{"run_id": "r", "uid": "t4", "rollout_idx": 0, "turns": [null]}',
    '{"run_id": "r", "uid": "fmt", "rollout_idx": 0, "format_ok": 1}',
    '{"run_id": "r", "uid": "resp", "rollout_idx": 0, "response": "<search>q</search>"}',
    '{"run_id": "bad id/x", "uid": "rid", "rollout_idx": 0}',
    '{"run_id": "r", "uid": "range", "rollout_idx": 0, "ndcg": 7.5}',  # out of 0..1: quarantined
    '{"run_id": "r", "uid": "judge", "rollout_idx": 0, "judge_score": 1.5}',
]


def _same(tmp_path: Path, src: Path, **kw):
    got = same_store(tmp_path, src, **kw)
    return got.result, got.rows, got.quarantine


def _kinds(src: Path, run_id: str | None = None) -> list[type]:
    return kinds(native.read, src, run_id=run_id)


@pytest.mark.parametrize("name", ["curriculum", "focused_r1", "focused_r2", "phase1"])
def test_fixture_logs_read_in_columns_as_per_row(tmp_path, name):
    src = FIXTURES / "logs" / f"{name}.jsonl"
    res, rows, q = _same(tmp_path, src)
    assert set(_kinds(src)) == {RowBatch}  # nothing fell back to rows
    assert q == [] and len(rows) == res.rows_in == len(src.read_text().splitlines())


def test_all_fixtures_at_once_with_a_run_id(tmp_path):
    src = tmp_path / "all.jsonl"
    src.write_bytes(b"".join(p.read_bytes() for p in sorted((FIXTURES / "logs").glob("*.jsonl"))))
    assert set(_kinds(src, "given")) == {RowBatch}
    _, rows, _ = _same(tmp_path, src, run_id="given")
    assert {r["run_id"] for r in rows} == {"given"}
    assert {r["extra"]["source_run_id"] for r in rows} >= {"curriculum", "phase1"}


def test_mapping_in_columns(tmp_path):
    src = tmp_path / "a.jsonl"
    lines = [_line(i) for i in range(6)]
    lines[1] = _line(1, extra=..., num_turns=..., terminated=..., format_ok=...)
    lines[2] = _line(2, extra=None, turns=[], num_turns=None, terminated=None, format_ok=None)
    src.write_text("\n".join(lines) + "\n")
    assert set(_kinds(src)) == {RowBatch}
    _, rows, _ = _same(tmp_path, src)
    r0, r1, r2 = rows[0], rows[1], rows[2]
    assert (r0["run_id"], r0["uid"], r0["rollout_idx"], r0["step"]) == (
        "curriculum",
        "train_0",
        0,
        1,
    )
    assert r0["extra"]["gone"] is None and r0["extra"]["f"] == 1e-05 and r0["extra"]["n"] == 0
    assert r1["extra"] == {} and r1["num_turns"] == 2  # derived from the turns
    assert (r1["terminated"], r1["format_ok"]) == ("complete", True)
    assert r2["turns"] == [] and r2["num_turns"] == 0 and r2["terminated"] == "invalid"
    assert r2["format_ok"] is None and r0["flags"] is None


@pytest.mark.parametrize("odd", range(len(ODD)))
def test_an_odd_line_falls_back_with_its_batch_only(tmp_path, monkeypatch, odd):
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 8192)
    good = [_line(i) for i in range(40)]
    got = odd_line_falls_back(tmp_path, native.read, tmp_path / "a.jsonl", good, ODD[odd])
    assert got.result.rows_in == len(got.rows) + len(got.quarantine)


def test_a_score_out_of_range_is_quarantined_and_the_rest_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 8192)
    good = [_line(i) for i in range(40)]
    odd = _line(99, judge_score=-0.5)
    got = odd_line_falls_back(tmp_path, native.read, tmp_path / "a.jsonl", good, odd)
    assert [(e["line"], e["reason"], e["detail"]) for e in got.quarantine] == [
        (21, "score out of range", "judge_score = -0.5 is outside 0..1")
    ]
    assert len(got.rows) == 40 and {r["judge_score"] for r in got.rows} == {0.0}
    s = got.result.summary()
    assert (s["rows in"], s["rollouts out"], s["quarantined by reason"]) == (
        41,
        40,
        {"score out of range": 1},
    )


def test_duplicates_across_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 4096)  # a line or two per batch
    src = tmp_path / "a.jsonl"
    a, b = _line(1), _line(1, reward=0.9)  # the same key: once repeated, once different
    src.write_text("\n".join([_line(0), a, _line(2), a, b, a]) + "\n")
    assert set(_kinds(src)) == {RowBatch}
    res, rows, q = _same(tmp_path, src)
    assert [(e["line"], e["reason"]) for e in q] == [
        (4, "duplicate rollout"),
        (6, "duplicate rollout"),
    ]
    assert q[0]["raw"] == a + "\n"
    assert [r["flags"] for r in rows] == [None, None, ["duplicate_key"], None]
    assert res.flagged == {"duplicate_key": 1}


def test_unterminated_last_line_and_runs_split(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text(_line(0) + "\n" + _line(1, run_id="other") + "\n" + _line(2)[:-5])
    assert _kinds(src) == [RowBatch, RowBatch, SourceRecord]  # the unterminated line by rows
    _, rows, q = _same(tmp_path, src)
    assert sorted(r["run_id"] for r in rows) == ["curriculum", "other"]
    assert [(e["line"], e["reason"]) for e in q] == [(3, "truncated last line")]
    src.write_text(_line(0) + "\n" + _line(1, run_id="other") + "\n")
    got = list(native.read(src, ReaderContext(columnar=True)))
    assert sorted((b.run_id, b.lines) for b in got) == [("curriculum", [1]), ("other", [2])]


def test_extra_as_text_in_columns(tmp_path):
    src = tmp_path / "a.jsonl"
    lines = [
        _line(0, extra='{"a": 1, "b": [null]}'),  # JSON text of an object: read as the object
        _line(1, extra=""),
        _line(2, extra={"a": {"b": None}, "big": 2**40}),
    ]
    src.write_text("\n".join(lines) + "\n")
    assert _kinds(src) == [RowBatch]
    _, rows, _ = _same(tmp_path, src)
    assert [r["extra"] for r in rows] == [
        {"a": 1, "b": [None]},
        {},
        {"a": {"b": None}, "big": 2**40},
    ]


def test_an_integer_past_float_precision_is_read_by_rows_and_kept_exact(tmp_path):
    # Arrow's reader would round 2**70 + 1 to a double; the batch goes row by row instead, where
    # extra keeps it exact and a score column flags it with its exact text (``reward``: an
    # unbounded score; a ``judge_score`` that large is out of its range, quarantined)
    src = tmp_path / "a.jsonl"
    src.write_text(_line(0, extra={"big": 2**70 + 1}) + "\n" + _line(1, reward=2**70 + 1) + "\n")
    assert RowBatch not in _kinds(src)
    _, rows, _ = _same(tmp_path, src)
    assert rows[0]["extra"]["big"] == 2**70 + 1 and rows[0]["flags"] is None
    assert rows[1]["extra"]["inexact"] == {"reward": str(2**70 + 1)}
    assert rows[1]["flags"] == ["inexact_number"]


def test_run_id_over_the_rows_own_keeps_extra_nulls(tmp_path):
    src = tmp_path / "a.jsonl"
    turn = {**TEMPLATE["turns"][0], "unknown": [1]}  # a turn's unknown key: ignored both ways
    src.write_text("\n".join([_line(0), _line(1, run_id="given", turns=[turn])]) + "\n")
    assert _kinds(src, "given") == [RowBatch]
    _, rows, _ = _same(tmp_path, src, run_id="given")
    own = TEMPLATE["extra"]["source_run_id"]  # the row's run is the one given: extra kept as is
    assert [r["extra"]["source_run_id"] for r in rows] == ["curriculum", own]
    assert rows[0]["extra"]["gone"] is None and "gone" in rows[0]["extra"]
