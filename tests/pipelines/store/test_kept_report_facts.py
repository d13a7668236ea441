"""The report's facts kept per part and parameter set: the same table as computed from the log."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from ddai.pipelines.store import kept_report_facts, query, store_read, turn_facts
from ddai.reports import ReportConfig, build_report
from ddai.reports.context import ReportContext, bind

sys.path.insert(0, str(Path(__file__).parents[2] / "reports"))
from report_world import multi_part_store

# non-default thresholds and max_turns: the derived columns must follow them
_ODD = {"success_threshold": 0.5, "judge_high": 0.6, "ndcg_low": 0.4, "max_turns": 3}


def _table(con: duckdb.DuckDBPyConnection) -> tuple[list, list]:
    """``report_facts``' columns with their types, and its rows in order."""
    cur = con.execute("SELECT * FROM report_facts")
    return [(d[0], str(d[1])) for d in cur.description], cur.fetchall()


def _both(logs: Path, cfg: ReportConfig) -> tuple[tuple, tuple, list[str]]:
    """The table computed from the log and the one read from the kept files."""
    turn_facts.ensure(logs)
    with store_read.snapshot(logs) as snap:
        kept = kept_report_facts.kept(snap, cfg.sql_params())
        assert kept is not None
        con = query.connect(logs, kept_facts=True, snap=snap)
        sql = query.sql_text("report_facts")
        con.execute(sql, bind(sql, cfg.sql_params()))
        computed = _table(con)
        kept_report_facts.read(con, kept, wide=False)
        # the macros come with the kept table (the browser's and the explorer's filters call them)
        con.execute("SELECT report_tags(discrepancy, false, 0, false, 1, false) FROM report_facts")
        return computed, _table(con), kept


def test_kept_table_is_the_computed_one_column_type_and_row_order(tmp_path):
    logs = multi_part_store(tmp_path)
    for kw in ({}, _ODD):
        cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", **kw)
        computed, read, kept = _both(logs, cfg)
        assert len(kept) == 3
        assert read == computed
        assert len(computed[1]) == 12 * 5 * 2 + 4 * 5
        # rows that differ from one another, so rows out of order would not compare equal
        assert len({r[0] for r in computed[1]}) == 2 and len(set(computed[1])) == len(computed[1])
    # the odd thresholds changed the derived columns (else they would not be tested)
    a = _both(logs, ReportConfig(logs=logs, out=tmp_path / "r.html"))[0]
    b = _both(logs, ReportConfig(logs=logs, out=tmp_path / "r.html", **_ODD))[0]
    assert a[1] != b[1]


def test_a_changed_parameter_gets_its_own_files(tmp_path):
    logs = multi_part_store(tmp_path)
    for kw in ({}, _ODD, {"max_turns": 3}, {}):
        with store_read.snapshot(logs) as snap:
            kept_report_facts.kept(
                snap, ReportConfig(logs=logs, out=tmp_path / "r.html", **kw).sql_params()
            )
    names = sorted(p.name for p in kept_report_facts.cache_dir().iterdir())
    assert len(names) == 3 * 3 and not [n for n in names if n.startswith(".")]


def test_a_second_report_reads_the_kept_facts_and_does_not_run_their_query(tmp_path, monkeypatch):
    logs = multi_part_store(tmp_path)
    ran: list[str] = []
    execute = ReportContext.execute

    def spy(self, name, **extra):
        ran.append(name)
        return execute(self, name, **extra)

    monkeypatch.setattr(ReportContext, "execute", spy)
    first = build_report(ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False))
    assert len(list(kept_report_facts.cache_dir().iterdir())) == 3
    ran.clear()
    computed: list[Path] = []
    monkeypatch.setattr(kept_report_facts, "_compute", lambda part, *a: computed.append(part))
    again = build_report(ReportConfig(logs=logs, out=tmp_path / "r2.html", progress=False))
    assert "report_facts" not in ran and "report_prompts" in ran
    assert computed == []
    assert again["stats"] == first["stats"]


def test_a_corrupt_or_truncated_file_is_computed_again(tmp_path):
    logs = multi_part_store(tmp_path)
    cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", **_ODD)
    computed, _, kept = _both(logs, cfg)
    Path(kept[0]).write_bytes(b"not parquet")
    # another part's rows in the file (a foreign file): the row count disagrees with the manifest
    Path(kept[2]).write_bytes(Path(kept[1]).read_bytes())
    again, read, kept2 = _both(logs, cfg)
    assert kept2 == kept and read == computed == again


def test_an_unreadable_kept_file_falls_back_to_computing(tmp_path):
    logs = multi_part_store(tmp_path)
    cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False)
    con = query.connect(logs, kept_facts=True)
    ctx = ReportContext.open(cfg, con, kept=[str(tmp_path / "missing.parquet")])
    assert ctx.rollouts == 12 * 5 * 2 + 4 * 5
