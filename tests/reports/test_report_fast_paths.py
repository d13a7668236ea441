"""The report's shortcuts at scale give the numbers the plain definitions give.

Each shortcut (a top-N aggregate for the browser's sample, one pass for both reward-latency
grains, the value queries skipped when no turn is valued, a named query run once per build) is
checked against the definition it replaces, on seeded stores.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from ddai.pipelines.analyses.flags import load_flags
from ddai.pipelines.store import query, write_run
from ddai.reports import ReportConfig
from ddai.reports.context import ReportContext, bind
from ddai.reports.sections import reward_latency, value_curves

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "pipelines" / "analyses"))
from analysis_world import planted_store as analysis_store
from report_world import random_store

# The browser's sample as first written: a row_number per stratum and a dense_rank per class
# over every rollout (two windows, each a full sort), then the round-robin order; the stratum is
# the first of the full tag list, not report_facts' stratum column.
WINDOW_SAMPLE = """
WITH ranked AS (
    SELECT
        run_id, step, uid, rollout_idx, outcome,
        report_tags(discrepancy, hallucination_suspect, n_invalid, forced, n_search, duplicate_query)
            AS tags,
        row_number() OVER (
            PARTITION BY run_id, outcome, coalesce(tags[1], '')
            ORDER BY hash(uid, rollout_idx, step, $seed)
        ) AS stratum_rank,
        dense_rank() OVER (
            PARTITION BY run_id, outcome ORDER BY hash(coalesce(tags[1], ''), $seed)
        ) AS class_rank,
        hash(run_id, uid, rollout_idx, step, $seed) AS h
    FROM report_facts
)
SELECT run_id, step, uid, rollout_idx, outcome, tags
FROM ranked ORDER BY stratum_rank, class_rank, h LIMIT $browse_max
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("fast-paths")
    return random_store(root, seed=11, runs=3, prompts=40, n=6)  # 720 rollouts


def _ctx(logs: Path, tmp: Path, **kw) -> tuple[ReportContext, object]:
    cfg = ReportConfig(logs=logs, out=tmp / "r.html", progress=False, **kw)
    con = query.connect(logs)
    return ReportContext.open(cfg, con), con


@pytest.mark.parametrize("browse_max", [1, 5, 37, 200, 1000])
@pytest.mark.parametrize("seed", [0, 3])
def test_browser_sample_is_the_window_definitions(world, tmp_path, browse_max, seed):
    ctx, con = _ctx(world, tmp_path, browse_max=browse_max, seed=seed)
    try:
        keys = ["run_id", "step", "uid", "rollout_idx", "outcome", "tags"]
        got = ctx.frame("report_browser_sample").select(keys)
        params = {**ctx.params}
        want = pl.from_arrow(query.run_sql(con, WINDOW_SAMPLE, bind(WINDOW_SAMPLE, params))).sort(
            ["run_id", "uid", "step", "rollout_idx"], nulls_last=False
        )
        assert got.height == min(browse_max, 720)
        assert got.to_dicts() == want.to_dicts()
        # more than one stratum, so the round-robin order is exercised
        assert got.select("run_id", "outcome").n_unique() > 1 or browse_max == 1
    finally:
        con.close()


def test_stratum_is_the_first_tag(world, tmp_path):
    """report_facts keeps each rollout's first tag, not the list: the same tag report_tags puts
    first, NULL where the list is empty."""
    _, con = _ctx(world, tmp_path)
    try:
        rows = con.sql(
            "SELECT stratum, report_tags(discrepancy, hallucination_suspect, n_invalid, forced, "
            "n_search, duplicate_query) AS tags FROM report_facts"
        ).fetchall()
        assert len(rows) == 720
        assert all(stratum == (tags[0] if tags else None) for stratum, tags in rows)
        firsts = {stratum for stratum, _ in rows}
        assert None in firsts and len(firsts - {None}) >= 3, firsts
        # every combination of the six inputs (the store holds few of several tags at once)
        combos = con.sql(
            "SELECT report_stratum(d, s, i, f, n, q), report_tags(d, s, i, f, n, q) "
            "FROM (VALUES (NULL), ('no_reference_doc')) AS a(d), (VALUES (false), (true)) AS b(s), "
            "(VALUES (0), (2)) AS c(i), (VALUES (false), (true)) AS e(f), "
            "(VALUES (0), (3)) AS g(n), (VALUES (false), (true)) AS h(q)"
        ).fetchall()
        assert len(combos) == 64
        assert all(stratum == (tags[0] if tags else None) for stratum, tags in combos)
        assert {len(tags) for _, tags in combos} == set(range(7))
    finally:
        con.close()


def test_latency_grains_from_one_pass_are_the_views(tmp_path):
    logs, _flags = analysis_store(tmp_path)
    ctx, con = _ctx(logs, tmp_path)
    try:
        stats = reward_latency.build(ctx).stats
        runs = query.run_named(con, "analysis_latency_runs").to_pylist()
        assert runs, "the planted store logs rewards"
        for row in runs:
            got = {k: v for k, v in stats["runs"][row["run_id"]].items() if k in row}
            assert got == row
            # the per-run percentiles pool every rollout of the run (not the per-step rows)
            assert list(stats["runs"][row["run_id"]])[: len(row)] == list(row)
        steps = query.run_sql(con, "SELECT * FROM reward_latency WHERE step IS NOT NULL")
        assert stats["steps"] == steps.to_pylist()
    finally:
        con.close()


def _valued_store(logs: Path) -> None:
    def rollout(idx: int, values: list[float | None]) -> dict:
        turns = [
            {"idx": i, "think": "t", "action": "search", "arg": "q", "sep": "\n", "value": v}
            for i, v in enumerate(values)
        ]
        return {"uid": "u1", "rollout_idx": idx, "step": 1, "judge_score": 1.0, "turns": turns}

    write_run(logs, "scored", [rollout(0, [0.2, None, 0.5]), rollout(1, [None])])
    write_run(logs, "plain", [rollout(0, [None, None])])


def test_valued_turns_counted_with_the_facts(tmp_path):
    logs = tmp_path / "logs"
    _valued_store(logs)
    ctx, con = _ctx(logs, tmp_path)
    try:
        # 2 valued turns, all in run `scored`; the value section's own count agrees
        assert ctx.valued_turns == 2
        assert value_curves.build(ctx).stats["turns_valued"] == 2
    finally:
        con.close()


def test_no_valued_turn_skips_the_value_queries(world, tmp_path):
    ctx, con = _ctx(world, tmp_path)
    try:
        assert ctx.valued_turns == 0
        # what the value queries would have found: nothing
        assert ctx.frame("report_value_by_action", likely=0.5).height == 0
        ctx._frames.clear()
        stats = value_curves.build(ctx).stats
        assert stats == {"turns_valued": 0, "runs_without_values": ["run0", "run1", "run2"]}
        assert not any(k[0].startswith("report_value") for k in ctx._frames)
    finally:
        con.close()


def test_a_named_query_runs_once_per_build(world, tmp_path):
    ctx, con = _ctx(world, tmp_path)
    try:
        first = ctx.frame("report_overview")
        assert ctx.frame("report_overview") is first
        assert ctx.frame("report_compare_prompts", run_a="run0", run_b="run1") is not ctx.frame(
            "report_compare_prompts", run_a="run0", run_b="run2"
        )
        assert first["rollouts"].to_list() == [240, 240, 240, 720]
    finally:
        con.close()


def test_no_flag_files_empty_the_review_flags(tmp_path):
    logs, flags = analysis_store(tmp_path)
    con = query.connect(logs)
    try:
        assert load_flags(con, [flags]) > 0
        assert load_flags(con, []) == 0
        assert con.execute("SELECT count(*) FROM review_flags").fetchone() == (0,)
    finally:
        con.close()


def test_report_command_imports_no_pyarrow(world, tmp_path):
    """`ddai report` hands DuckDB's results to polars through the Arrow C stream: neither
    pyarrow nor numpy (about 0.4 s of the command's start) is imported."""
    import json
    import subprocess

    out = tmp_path / "r.html"
    code = (
        "import json, sys\n"
        f"sys.argv = ['ddai', 'report', '--logs', {str(world)!r}, '--out', {str(out)!r}, "
        "'--no-progress']\n"
        "from ddai.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code or 0\nelse:\n    rc = 0\n"
        "print('\\nMODULES ' + json.dumps([rc, sorted(sys.modules)]))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next(x for x in p.stdout.splitlines() if x.startswith("MODULES ")), p.stderr
    rc, mods = json.loads(line[0][len("MODULES ") :])
    assert rc == 0 and out.stat().st_size > 0
    assert [m for m in ("pyarrow", "numpy", "pandas") if m in mods] == []


def test_report_command_with_flags_runs_without_pandas(world, tmp_path):
    """`ddai report --flags FILE` as a command (``main``: the store's commands run without
    pandas): the report is written, exit 0, and pandas is never imported (the section threads'
    preload of it must not ask for a module the command has made absent)."""
    import json
    import subprocess

    flags = tmp_path / "flags.csv"
    flags.write_text("uid,verdict,reason\ntrain_1,wrong,x\n", encoding="utf-8")
    out = tmp_path / "r.html"
    code = (
        "import json, sys\n"
        f"sys.argv = ['ddai', 'report', '--logs', {str(world)!r}, '--flags', {str(flags)!r}, "
        f"'--out', {str(out)!r}, '--no-progress']\n"
        "from ddai.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code or 0\nelse:\n    rc = 0\n"
        "print('\\nMODULES ' + json.dumps([rc, sorted(sys.modules)]))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next((x for x in p.stdout.splitlines() if x.startswith("MODULES ")), None)
    assert line is not None, p.stderr
    rc, mods = json.loads(line[len("MODULES ") :])
    assert rc == 0 and out.stat().st_size > 0, p.stderr
    assert "pandas" not in mods
