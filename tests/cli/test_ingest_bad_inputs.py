"""Issue 33's last bad inputs, through ``ddai ingest``: nothing passes silently.

A key given twice, an integer past float64's precision, a value of the wrong JSON type, an empty
file among others, leading garbage, a directory: each is quarantined, flagged with what it was, or
refused with a message naming it, and the columnar and per-row readers store the same
(``support.columnar.same_store``).
"""

from __future__ import annotations

import json

from cli_schemas import check
from support.columnar import same_store
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.store import quarantine

runner = CliRunner()


def _flash(i: int, **kw) -> dict:
    return {
        "uid": f"train_{i // 4}",
        "local_idx": i % 4,
        "sample_idx": i,
        "query": "Which year?",
        "generated_answer": "2017",
        "reference_answer": "2017",
        "retrieved_basenames": ["11_7"],
        "reference_basenames": ["11_7"],
        "judge_score": 1.0,
        "ndcg": 1.0,
        "final_score": 1.0,
        "pid": 7,
        **kw,
    }


def _ingest(logs, *srcs, extra=()) -> tuple[int, dict | str]:
    res = runner.invoke(app, ["ingest", *map(str, srcs), "--logs", str(logs), "--json", *extra])
    return res.exit_code, (json.loads(res.output) if res.exit_code == 0 else res.output)


def _quarantine(logs, run: str) -> list[dict]:
    text = quarantine.read(logs, run).decode("utf-8")  # every committed entry of the run
    return [json.loads(line) for line in text.splitlines()]


def _rows(logs, run: str) -> list[dict]:
    rows = store.read_rollouts(logs, [run]).to_pylist()
    return sorted(rows, key=lambda r: (r["uid"], r["rollout_idx"]))


def _write(path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_flash_line_with_judge_score_twice_is_quarantined_with_both_values(tmp_path):
    src = tmp_path / "round0_flash_rm_detail.jsonl"
    lines = [json.dumps(_flash(i)) for i in range(8)]
    # the key again at the end: json keeps the last (0.123) and the 1.0 was lost silently
    lines[3] = lines[3][:-1] + ', "judge_score": 0.123}'
    _write(src, lines)
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert (s["rows_in"], s["rollouts_out"]) == (8, 7)
    assert s["quarantined_by_reason"] == {"duplicate JSON key": 1}
    (q,) = _quarantine(tmp_path / "logs", "round0")
    assert (q["line"], q["reason"]) == (4, "duplicate JSON key")
    assert q["detail"].startswith('"judge_score" given 2 times: 1.0, 0.123')
    assert q["raw"].rstrip("\n") == lines[3]  # both values kept as written
    rows = _rows(tmp_path / "logs", "round0")
    assert [r["judge_score"] for r in rows] == [1.0] * 7  # no 0.123 stored anywhere
    assert (rows[3]["uid"], rows[3]["rollout_idx"]) == ("train_1", 0)  # line 4 is not stored


def test_duplicate_keys_at_any_depth_and_both_paths_agree(tmp_path):
    src = tmp_path / "round0_flash_rm_detail.jsonl"
    lines = [json.dumps(_flash(i)) for i in range(6)]
    lines[1] = lines[1].replace('"pid": 7', '"pid": 7, "pid": 8')  # an unknown key twice
    lines[2] = lines[2].replace('"pid": 7', '"meta": {"a": 1, "a": 2}')  # nested
    lines[4] = lines[4].replace('"query"', '"note": "say \\"x\\": 1", "query"')  # no repeat
    _write(src, lines)
    got = same_store(tmp_path, src)
    assert [(e["line"], e["reason"]) for e in got.quarantine] == [
        (2, "duplicate JSON key"),
        (3, "duplicate JSON key"),
    ]
    assert '"pid" given 2 times: 7, 8' in got.quarantine[0]["detail"]
    assert '"a" given 2 times: 1, 2' in got.quarantine[1]["detail"]
    assert len(got.rows) == 4  # the escaped quote-colon inside a string is no key


def test_an_integer_past_float_precision_is_flagged_or_kept_exact(tmp_path):
    src = tmp_path / "round0_flash_rm_detail.jsonl"
    big = 2**70 + 1
    lines = [json.dumps(_flash(i)) for i in range(4)]
    lines[1] = json.dumps(_flash(1, final_score=big))  # a score column (reward): float64
    lines[2] = json.dumps(_flash(2, counter=big))  # an unknown field: extra
    _write(src, lines)
    got = same_store(tmp_path, src)
    rows = {r["rollout_idx"]: r for r in got.rows}
    assert rows[1]["flags"] == ["inexact_number"]
    assert rows[1]["extra"]["inexact"] == {"reward": str(big)}
    assert rows[2]["extra"]["counter"] == big and rows[2]["flags"] is None  # exact, not 1.18e21
    assert got.result.flagged == {"inexact_number": 1}


def test_a_flash_ndcg_out_of_its_range_is_quarantined_with_field_and_value(tmp_path):
    # DESIGN.md bounds judge_score and ndcg to 0..1: an NDCG of 7.5 would lift its prompt's mean
    # (the funnel's bucket) and a judge score of 2 pass any success threshold
    src = tmp_path / "round0_flash_rm_detail.jsonl"
    lines = [json.dumps(_flash(i)) for i in range(8)]
    lines[2] = json.dumps(_flash(2, ndcg=7.5))
    lines[5] = json.dumps(_flash(5, judge_score=2, ndcg=-0.1))
    _write(src, lines)
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert (s["rows_in"], s["rollouts_out"], s["quarantined"]) == (8, 6, 2)
    assert s["quarantined_by_reason"] == {"score out of range": 2}
    assert [
        (q["line"], q["reason"], q["detail"]) for q in _quarantine(tmp_path / "logs", "round0")
    ] == [
        (3, "score out of range", "ndcg = 7.5 is outside 0..1"),
        (6, "score out of range", "judge_score = 2.0 is outside 0..1; ndcg = -0.1 is outside 0..1"),
    ]
    rows = _rows(tmp_path / "logs", "round0")
    assert {r["ndcg"] for r in rows} == {r["judge_score"] for r in rows} == {1.0}
    assert {r["sample_idx"] for r in rows} == {0, 1, 3, 4, 6, 7}


def test_each_coercion_is_flagged_with_the_value_given(tmp_path):
    src = tmp_path / "native.jsonl"
    base = {"run_id": "r", "rollout_idx": 0, "reward": 1.0}
    rows = [
        {**base, "uid": 123, "response": 5, "terminated": 7, "num_turns": "3"},
        {**base, "uid": "u1", "judge_score": "0.5", "turns": [{"think": 1, "forced": "yes"}]},
        {**base, "uid": "u2", "num_turns": 3.0, "judge_score": 1},  # the same numbers: no flag
    ]
    _write(src, [json.dumps(r) for r in rows])
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert s["flagged_by_reason"] == {"coerced_type": 2}
    got = {r["uid"]: r for r in _rows(tmp_path / "logs", "r")}
    first = got["123"]
    assert (first["response"], first["terminated"], first["num_turns"]) == ("5", "error", 3)
    assert first["flags"] == ["coerced_type"]
    assert json.loads(first["extra"])["coerced"] == {
        "uid": {"source": 123, "stored": "123"},
        "response": {"source": 5, "stored": "5"},
        "terminated": {"source": 7, "stored": "error"},
        "num_turns": {"source": "3", "stored": 3},
    }
    second = json.loads(got["u1"]["extra"])["coerced"]
    assert second == {
        "judge_score": {"source": "0.5", "stored": 0.5},
        "turns[0].think": {"source": 1, "stored": "1"},
        "turns[0].forced": {"source": "yes", "stored": True},
    }
    assert got["u2"]["flags"] is None and "coerced" not in json.loads(got["u2"]["extra"])


def test_an_empty_file_among_others_is_skipped_with_a_note(tmp_path):
    good = tmp_path / "round0_flash_rm_detail.jsonl"
    _write(good, [json.dumps(_flash(i)) for i in range(4)])
    empty = tmp_path / "round1_flash_rm_detail.jsonl"
    empty.write_text("")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n \n")
    code, s = _ingest(tmp_path / "logs", good, empty, blank)
    assert code == 0, s
    assert s["rollouts_out"] == 4 and s["runs"] == {"round0": 4}
    assert s["formats"] == {
        str(good): "ddai-flash",
        str(empty): "empty (skipped)",
        str(blank): "empty (skipped)",
    }
    assert s["notes"][str(empty)].startswith("skipped: an empty file")
    code, out = _ingest(tmp_path / "logs2", empty)  # alone: nothing to ingest, said so
    assert code == 2 and "empty (no line to read); nothing to ingest" in out


def test_blank_lines_are_skipped_and_counted_in_the_notes(tmp_path):
    """A 42-line file with 2 blank lines read 40 rows and said nothing of the other 2."""
    src = tmp_path / "round0_flash_rm_detail.jsonl"
    lines = [json.dumps(_flash(i)) for i in range(40)]
    _write(src, [*lines[:10], "", *lines[10:30], "   ", *lines[30:]])
    assert len(src.read_text().splitlines()) == 42
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    check("ingest", s)
    assert (s["rows_in"], s["rollouts_out"], s["quarantined"]) == (40, 40, 0)
    assert s["notes"][str(src)]["blank_lines_skipped"] == 2
    res = runner.invoke(app, ["ingest", str(src), "--logs", str(tmp_path / "logs2")])
    assert res.exit_code == 0 and "blank lines skipped" in res.output, res.output


def test_format_sniffing_reads_past_leading_garbage(tmp_path):
    src = tmp_path / "round0_flash_rm_detail.jsonl"
    garbage = [f"Traceback line {i}: not JSON" for i in range(69)] + ["42", "[1, 2]"]
    _write(src, garbage + [json.dumps(_flash(i)) for i in range(929)])
    code, s = _ingest(tmp_path / "logs", src)
    assert code == 0, s
    assert s["formats"] == {str(src): "ddai-flash"}
    assert (s["rows_in"], s["rollouts_out"], s["quarantined"]) == (1000, 929, 71)
    assert s["quarantined_by_reason"] == {"malformed JSON": 69, "wrong type": 2}


def test_a_directory_is_refused_as_a_directory(tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    code, out = _ingest(tmp_path / "logs", folder)
    assert code == 2
    assert "a directory; ingest reads files" in out and "not found" not in out


def test_a_key_twice_inside_extra_of_ddai_jsonl_is_quarantined_on_both_paths(tmp_path):
    """DuckDB hands ``extra`` to the columnar path as written (both values in the text); the batch
    is declined there, so the per-row path quarantines the line as it does everywhere else."""
    src = tmp_path / "native.jsonl"
    rows = [
        {"run_id": "r", "uid": f"u{i}", "rollout_idx": 0, "reward": 1.0, "extra": {"k": i}}
        for i in range(4)
    ]
    lines = [json.dumps(r) for r in rows]
    lines[2] = lines[2].replace('"extra": {"k": 2}', '"extra": {"k": 2, "deep": {"a": 1, "a": 2}}')
    _write(src, lines)
    got = same_store(tmp_path, src)
    assert [(e["line"], e["reason"]) for e in got.quarantine] == [(3, "duplicate JSON key")]
    assert '"a" given 2 times: 1, 2' in got.quarantine[0]["detail"]
    assert len(got.rows) == 3


def test_a_truncated_parquet_file_is_named_as_one_not_as_an_unknown_format(tmp_path):
    """A Parquet file cut short (a copy interrupted) has no footer: telling the user to pick
    --input-format sends them the wrong way; the message says it is damaged Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    whole, cut = tmp_path / "whole.parquet", tmp_path / "rollouts.parquet"
    pq.write_table(pa.table({"run_id": ["r"], "uid": ["u"], "rollout_idx": [0]}), whole)
    cut.write_bytes(whole.read_bytes()[:-20])
    code, out = _ingest(tmp_path / "logs", cut)
    assert code == 2
    assert f"{cut}: a Parquet file that cannot be read (truncated or corrupt:" in out
    assert "not recognised" not in out and "--input-format" not in out
    assert not (tmp_path / "logs").exists() or store.list_runs(tmp_path / "logs") == []


def test_a_parquet_file_with_no_row_is_an_empty_file_like_an_empty_jsonl(tmp_path):
    """A Parquet export of nothing (the log's columns, zero rows) among other sources was listed
    as read with no word of it; alone it exited 1 as a failure. It is an empty input: skipped
    with a note among others, refused with exit 2 alone."""
    import pyarrow.parquet as pq

    from ddai.pipelines.records.schema import ROLLOUT_SCHEMA

    good = tmp_path / "round0_flash_rm_detail.jsonl"
    _write(good, [json.dumps(_flash(i)) for i in range(4)])
    none = tmp_path / "export.parquet"
    pq.write_table(ROLLOUT_SCHEMA.empty_table(), none)
    code, s = _ingest(tmp_path / "logs", good, none)
    assert code == 0, s
    assert s["rollouts_out"] == 4 and s["runs"] == {"round0": 4}
    assert s["formats"][str(none)] == "empty (skipped)"
    assert (
        s["notes"][str(none)]
        == "skipped: a Parquet file with no row; the other sources were ingested"
    )
    code, out = _ingest(tmp_path / "logs2", none)  # alone: nothing to ingest, said so
    assert code == 2 and f"{none}: empty (no row to read); nothing to ingest" in out
