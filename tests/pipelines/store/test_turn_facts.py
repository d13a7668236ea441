"""Each part's turn facts computed once and kept: the same rows as from the turns, in order."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from ddai.pipelines import store
from ddai.pipelines.store import query, store_read, turn_facts
from ddai.reports import ReportConfig, build_report
from ddai.reports.context import bind

sys.path.insert(0, str(Path(__file__).parents[2] / "reports"))
from report_world import multi_part_store


def _inline(con) -> None:
    """``turn_facts`` computed from the turns on ``con`` (the view file), cache or not."""
    con.execute(query.sql_text("turn_facts").replace("OR REPLACE VIEW", "OR REPLACE TEMP VIEW"))


def _facts(logs: Path, *, inline: bool) -> list[dict]:
    con = query.connect(logs, kept_facts=True)
    if inline:
        _inline(con)
    sql = query.sql_text("report_facts")
    params = ReportConfig(logs=logs, out=logs / "x.html").sql_params()
    con.execute(sql, bind(sql, params))
    cur = con.execute("SELECT * FROM report_facts")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def test_kept_facts_are_the_facts_from_the_turns_row_by_row(tmp_path):
    logs = multi_part_store(tmp_path)
    with store_read.snapshot(logs) as snap:
        parts = snap.all_files()
        assert len(parts) == 3 and turn_facts.cached(snap) is None
    assert turn_facts.ensure(logs) == 3
    assert turn_facts.ensure(logs) == 0  # kept: nothing computed again
    with store_read.snapshot(logs) as snap:
        kept = turn_facts.cached(snap)
    assert kept is not None and len(kept) == 3
    assert sorted(p.name for p in turn_facts.cache_dir().iterdir()) == sorted(
        Path(k).name for k in kept
    )
    from_turns = _facts(logs, inline=True)
    assert len(from_turns) == 12 * 5 * 2 + 4 * 5
    # the facts read from the cache: the same rows, the same order
    assert _facts(logs, inline=False) == from_turns
    # the kept files are what a report reads: a kept value shows (here planted), the turns' not
    con = duckdb.connect()
    planted = str(Path(kept[0]).with_suffix(".planted"))
    con.execute(
        f"COPY (SELECT * REPLACE (99 AS n_bbox) FROM read_parquet('{kept[0]}')) TO '{planted}' "
        "(FORMAT parquet)"
    )
    Path(planted).replace(kept[0])
    assert {r["n_bbox"] for r in _facts(logs, inline=False)} >= {99}
    assert 99 not in {r["n_bbox"] for r in from_turns}
    # rows that differ from each other (a facts file out of line would not compare equal)
    assert len({r["stratum"] for r in from_turns}) > 3
    assert len({r["first_golden_rank"] for r in from_turns}) > 2


def test_a_rewritten_run_gets_its_new_parts_facts(tmp_path):
    logs = multi_part_store(tmp_path)
    turn_facts.ensure(logs, ["run1"])
    with store_read.snapshot(logs, ["run1"]) as snap:
        old = turn_facts.cached(snap)
    rows = store.read_rollouts(logs, ["run1"]).to_pylist()
    rows[0]["retrieved_pages"] = rows[0]["reference_pages"]  # now its first page is golden
    store.write_run(logs, "run1", rows[:7])
    with store_read.snapshot(logs, ["run1"]) as snap:
        assert turn_facts.cached(snap) is None  # a new part: its facts are not kept yet
    assert turn_facts.ensure(logs, ["run1"]) == 1
    with store_read.snapshot(logs, ["run1"]) as snap:
        assert turn_facts.cached(snap) != old
    facts = _facts(logs, inline=False)
    assert facts == _facts(logs, inline=True)
    assert sum(1 for r in facts if r["run_id"] == "run1") == 7


def test_the_report_keeps_the_facts_and_reads_them(tmp_path):
    logs = multi_part_store(tmp_path)
    out = build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    with store_read.snapshot(logs) as snap:
        assert turn_facts.cached(snap) is not None
    again = build_report(ReportConfig(logs=logs, out=tmp_path / "r2.html", progress=False))
    assert again["stats"] == out["stats"]
