"""The explorer's questions as pure functions over a DuckDB connection holding ``explorer``.

Each takes the connection and plain values and returns plain Python (lists of dicts), so the
app only routes and renders. Values are always bound; identifiers come from fixed lists.
"""

from __future__ import annotations

from typing import Any

from ddai.pipelines.records.deps import duckdb
from ddai.pipelines.store import query
from ddai.reports.serve.filters import TABLE_COLUMNS, RolloutFilter
from ddai.trainer.grpo.advantage import group_advantages

KEY = ("run_id", "uid", "step", "rollout_idx")


def _dicts(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    rel = con.sql(sql, params=params or None)
    return rel.to_arrow_table().to_pylist()


def page_sql(view: RolloutFilter) -> tuple[str, dict[str, Any]]:
    """The SQL of one page of the rollout table and its parameters (the benchmark reruns it)."""
    where, params = view.where()
    cols = ", ".join(f"e.{c}" for c in TABLE_COLUMNS)
    sql = (
        f"SELECT {cols} FROM explorer AS e WHERE {where} ORDER BY {view.order_by()} "
        "LIMIT $limit OFFSET $offset"
    )
    return sql, {**params, "limit": view.size, "offset": (view.page - 1) * view.size}


def page(con: duckdb.DuckDBPyConnection, view: RolloutFilter) -> list[dict[str, Any]]:
    """The rows of ``view``'s page, in its order."""
    sql, params = page_sql(view)
    return _dicts(con, sql, params)


def count(con: duckdb.DuckDBPyConnection, view: RolloutFilter) -> int:
    """How many rollouts ``view`` matches (all pages)."""
    where, params = view.where()
    sql = f"SELECT count(*) FROM explorer AS e WHERE {where}"
    return int(con.execute(sql, params or None).fetchall()[0][0])


def keys(con: duckdb.DuckDBPyConnection, view: RolloutFilter) -> duckdb.DuckDBPyRelation:
    """Every rollout ``view`` matches as (run_id, uid, step, rollout_idx), in its order (export)."""
    where, params = view.where()
    cols = ", ".join(f"e.{c}" for c in KEY)
    return con.sql(
        f"SELECT {cols} FROM explorer AS e WHERE {where} ORDER BY {view.order_by()}",
        params=params or None,
    )


NEIGHBOURS_SQL = """
SELECT pos, total, prev, next FROM (
    SELECT e.run_id, e.uid, e.step, e.rollout_idx,
        row_number() OVER w AS pos,
        count(*) OVER () AS total,
        lag(struct_pack(run_id := e.run_id, uid := e.uid, step := e.step, idx := e.rollout_idx))
            OVER w AS prev,
        lead(struct_pack(run_id := e.run_id, uid := e.uid, step := e.step, idx := e.rollout_idx))
            OVER w AS next
    FROM explorer AS e WHERE {where}
    WINDOW w AS (ORDER BY {order})
)
WHERE run_id = $k_run AND uid = $k_uid AND rollout_idx = $k_idx AND step IS NOT DISTINCT FROM $k_step
"""


def neighbours(
    con: duckdb.DuckDBPyConnection,
    view: RolloutFilter,
    run: str,
    uid: str,
    step: int | None,
    idx: int,
) -> dict[str, Any] | None:
    """Where rollout (run, uid, step, idx) stands in ``view``'s order: ``{"pos": 1-based,
    "total", "prev", "next"}`` (prev / next as ``{run_id, uid, step, idx}`` or None at an end);
    None when ``view`` does not match that rollout."""
    where, params = view.where()
    sql = NEIGHBOURS_SQL.format(where=where, order=view.order_by())
    key = {"k_run": run, "k_uid": uid, "k_step": step, "k_idx": idx}
    rows = _dicts(con, sql, {**params, **key})
    return rows[0] if rows else None


def steps_of(con: duckdb.DuckDBPyConnection, run: str, uid: str, idx: int) -> list[int | None]:
    """The steps at which run ``run`` holds rollout ``idx`` of prompt ``uid`` (a key without its
    step, as a SQL result may give it)."""
    return [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT step FROM explorer WHERE run_id = $run AND uid = $uid "
            "AND rollout_idx = $idx ORDER BY 1 NULLS FIRST",
            {"run": run, "uid": uid, "idx": idx},
        ).fetchall()
    ]


def runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.sql("SELECT DISTINCT run_id FROM explorer ORDER BY 1").fetchall()]


def tags(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every class tag present, most frequent first."""
    return [
        r[0]
        for r in con.sql(
            "SELECT t FROM (SELECT unnest(tags) AS t FROM explorer) GROUP BY t ORDER BY count(*) DESC, t"
        ).fetchall()
    ]


GROUP_SQL = """
SELECT
    r.run_id, r.step, r.uid, r.rollout_idx, e.outcome, e.tags, r.judge_score, r.ndcg, r.reward,
    e.score,
    r.advantage, r.num_turns, r.terminated, r.answer, r.retrieved_pages, r.reference_pages,
    list_transform(r.turns, lambda t: struct_pack(action := t.action, arg := t.arg)) AS actions
FROM rollouts AS r
JOIN explorer AS e
    ON e.run_id = r.run_id AND e.uid = r.uid AND e.rollout_idx = r.rollout_idx
    AND e.step IS NOT DISTINCT FROM r.step
WHERE r.uid = $uid AND (len($runs) = 0 OR list_contains($runs, r.run_id))
ORDER BY r.run_id, r.step NULLS FIRST, r.rollout_idx
"""

PROMPT_SQL = """
SELECT question, reference_answer, reference_pages, file_name
FROM rollouts WHERE uid = $uid AND question IS NOT NULL LIMIT 1
"""


def group(
    con: duckdb.DuckDBPyConnection, uid: str, runs: list[str] | None = None
) -> dict[str, Any]:
    """All rollouts of prompt ``uid`` (in ``runs``, or every run), split into GRPO groups.

    Returns ``{"prompt": {question, reference_answer, reference_pages, file_name} or None,
    "groups": [{run_id, step, n, mean_reward, std_reward, zero_variance, rollouts: [...]}]}``,
    groups in (run, step) order and rollouts by ``rollout_idx``; each rollout also carries
    ``advantage_z``, its GRPO advantage recomputed from the group's rewards as TRL computes it
    (``ddai.trainer.grpo.advantage``; logs often lack one).
    """
    rows = _dicts(con, GROUP_SQL, {"uid": uid, "runs": list(runs or [])})
    prompt = _dicts(con, PROMPT_SQL, {"uid": uid})
    groups: list[dict[str, Any]] = []
    for row in rows:
        if not groups or (groups[-1]["run_id"], groups[-1]["step"]) != (row["run_id"], row["step"]):
            groups.append({"run_id": row["run_id"], "step": row["step"], "rollouts": []})
        groups[-1]["rollouts"].append(row)
    for g in groups:
        rewards = [r["reward"] for r in g["rollouts"] if r["reward"] is not None]
        g["n"] = len(g["rollouts"])
        g["mean_reward"] = sum(rewards) / len(rewards) if rewards else None
        g["std_reward"] = (
            (sum((x - g["mean_reward"]) ** 2 for x in rewards) / len(rewards)) ** 0.5
            if rewards
            else None
        )
        # as the sections' count and the group filter: scored by reward, else judge
        scores = [r["score"] for r in g["rollouts"] if r["score"] is not None]
        g["zero_variance"] = len(scores) > 1 and min(scores) == max(scores)
        zs = group_advantages([r["reward"] for r in g["rollouts"]])
        for r, z in zip(g["rollouts"], zs, strict=True):
            r["advantage_z"] = z
    return {"prompt": prompt[0] if prompt else None, "groups": groups}


ROLLOUT_SQL = """
SELECT r.*, e.outcome, e.tags
FROM rollouts AS r
JOIN explorer AS e
    ON e.run_id = r.run_id AND e.uid = r.uid AND e.rollout_idx = r.rollout_idx
    AND e.step IS NOT DISTINCT FROM r.step
WHERE r.run_id = $run AND r.uid = $uid AND r.rollout_idx = $idx
    AND r.step IS NOT DISTINCT FROM $step
"""


def rollout(
    con: duckdb.DuckDBPyConnection, run: str, uid: str, step: int | None, idx: int
) -> dict[str, Any] | None:
    """One rollout with every stored column plus its outcome and class tags; None if absent."""
    rows = _dicts(con, ROLLOUT_SQL, {"run": run, "uid": uid, "step": step, "idx": idx})
    return rows[0] if rows else None


def sections(con: duckdb.DuckDBPyConnection, *, top: int = 25) -> dict[str, Any]:
    """The report's counts per run, live: each a number of rollouts that a filter reproduces.

    ``outcomes`` / ``tags`` / ``terminated``: ``{run: {value: n}}``; ``groups``: per run the
    GRPO groups, zero-variance and mixed ones, and the rollouts in each; ``suspects``: the
    prompts with most hallucination suspects (run, uid, n); ``suspect_basis``: the judged
    rollouts and those of them with reference pages (no suspect can be counted without
    both, so an empty ``suspects`` says which case it is); ``totals``: per run rollouts,
    prompts, success rate (over judged rollouts, None without one) and judge / NDCG / reward
    means; ``grid`` and ``bands``: the report's
    judge-vs-NDCG cells and score bands (``judge_ndcg_grid``, ``score_bands``).
    """

    def nested(sql: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for run, value, n in con.sql(sql).fetchall():
            out.setdefault(run, {})[value] = int(n)
        return out

    totals = _dicts(
        con,
        """SELECT run_id, count(*) AS rollouts, count(DISTINCT uid) AS prompts,
               -- over judged rollouts, as the report and `runs`: NULL (shown "—") when none is
               avg(success::INT) FILTER (WHERE judge_score IS NOT NULL) AS success_rate,
               avg(judge_score) AS judge, avg(ndcg) AS ndcg,
               avg(reward) AS reward
           FROM explorer GROUP BY run_id ORDER BY run_id""",
        {},
    )
    groups = _dicts(
        con,
        # the report's groups (report_zero_variance): two or more rollouts scored by reward,
        # else judge; BIGINT sums so the page prints them with separators
        """SELECT run_id, count(*) AS groups,
               count(*) FILTER (WHERE lo = hi) AS zero_variance,
               coalesce(sum(n) FILTER (WHERE lo = hi), 0)::BIGINT AS zero_variance_rollouts,
               count(*) FILTER (WHERE lo < hi) AS mixed,
               coalesce(sum(n) FILTER (WHERE lo < hi), 0)::BIGINT AS mixed_rollouts
           FROM (SELECT run_id, step, uid, count(*) AS n, min(score) AS lo, max(score) AS hi
                 FROM explorer GROUP BY ALL HAVING count(score) >= 2)
           GROUP BY run_id ORDER BY run_id""",
        {},
    )
    suspects = _dicts(
        con,
        """SELECT run_id, uid, count(*) AS n FROM explorer WHERE hallucination_suspect
           GROUP BY ALL ORDER BY n DESC, run_id, uid LIMIT $top""",
        {"top": top},
    )
    # report_hallucination_runs' judged and judged_with_reference, over every run
    [suspect_basis] = _dicts(
        con,
        """SELECT count(judge_score) AS judged,
               count(judge_score) FILTER (WHERE has_reference) AS judged_with_reference
           FROM explorer""",
        {},
    )
    return {
        "totals": totals,
        "grid": judge_ndcg_grid(con),
        "bands": score_bands(con),
        "outcomes": nested(
            "SELECT run_id, outcome, count(*) FROM explorer GROUP BY ALL ORDER BY ALL"
        ),
        "tags": nested(
            "SELECT run_id, t, count(*) FROM (SELECT run_id, unnest(tags) AS t FROM explorer) "
            "GROUP BY ALL ORDER BY ALL"
        ),
        "terminated": nested(
            "SELECT run_id, coalesce(terminated, 'unknown'), count(*) FROM explorer "
            "GROUP BY ALL ORDER BY ALL"
        ),
        "groups": groups,
        "suspects": suspects,
        "suspect_basis": suspect_basis,
    }


def _judge_bins(levels: int) -> int:
    """The report's choice (section judge vs NDCG): a judge with at most ``MAX_LEVELS`` distinct
    scores is shown by its levels (0 bins), else in ``BINS`` equal bins."""
    from ddai.reports.sections.judge_ndcg import BINS, MAX_LEVELS

    return 0 if levels <= MAX_LEVELS else BINS


def judge_ndcg_grid(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The report's judge-vs-NDCG heatmap as counts that link to their rollouts.

    Returns ``{"levels": [judge_level], "labels": [row label], "bands": [NDCG band label],
    "cells": {run: {(judge_level, ndcg_band): n}}}``: rows are the judge's own levels, or every
    bin when binned; a cell's rollouts are the filter ``judge_level=…&ndcg_band=…``."""
    from ddai.reports.sections.judge_ndcg import NDCG_BANDS, _judge_labels

    n_levels = con.sql(
        "SELECT count(DISTINCT round(judge_score, 6)) FROM explorer WHERE judge_level IS NOT NULL"
    ).fetchall()[0][0]
    bins = _judge_bins(int(n_levels))
    cells: dict[str, dict[tuple[float, int], int]] = {}
    for run, level, band, n in con.sql(
        "SELECT run_id, judge_level, ndcg_band, count(*) FROM explorer "
        "WHERE judge_level IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ).fetchall():
        cells.setdefault(run, {})[(float(level), int(band))] = int(n)
    if bins:
        levels = [i / bins for i in range(bins)]
    else:
        levels = sorted({lv for by in cells.values() for lv, _ in by})
    return {
        "levels": levels,
        "labels": _judge_labels(levels, bins),
        "bands": list(NDCG_BANDS),
        "cells": cells,
    }


def score_bands(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The report's score bands (prompts by mean score) with the rollouts of their prompts.

    Returns ``{"bands": [label], "cells": {run: {band_idx: {"prompts": n, "rollouts": n}}}}``;
    a band's rollouts are the filter ``score_band=…``."""
    from ddai.reports.sections.outcomes import BANDS

    cells: dict[str, dict[int, dict[str, int]]] = {}
    for run, band, prompts, rollouts in con.sql(
        "SELECT run_id, score_band, count(DISTINCT uid), count(*) FROM explorer "
        "WHERE score_band IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ).fetchall():
        cells.setdefault(run, {})[int(band)] = {"prompts": int(prompts), "rollouts": int(rollouts)}
    return {"bands": list(BANDS), "cells": cells}


def compare(
    con: duckdb.DuckDBPyConnection, run_a: str, run_b: str, *, top: int = 25
) -> dict[str, list[dict[str, Any]]]:
    """Prompts of both runs whose success rate rose (``better``) or fell (``worse``) from A to B,
    largest change first (the report's ``report_compare_prompts``), ``top`` of each."""
    sql = query.sql_text("report_compare_prompts")
    rows = _dicts(con, sql, {"run_a": run_a, "run_b": run_b})
    better = sorted(
        (r for r in rows if (r["success_delta"] or 0) > 0),
        key=lambda r: (-r["success_delta"], r["uid"]),
    )
    worse = sorted(
        (r for r in rows if (r["success_delta"] or 0) < 0),
        key=lambda r: (r["success_delta"], r["uid"]),
    )
    return {"better": better[:top], "worse": worse[:top], "shared": len(rows)}


def open_explorer(
    con: duckdb.DuckDBPyConnection, params: dict[str, Any], *, wide: bool = False
) -> None:
    """Build ``explorer`` (the report's per-rollout facts plus table columns) and
    ``report_prompts`` on ``con``, from the report's own SQL; ``wide``: as database-wide tables
    every cursor of ``con`` reads (``query.connect(wide=True)``), not TEMP ones."""
    from ddai.reports.context import bind

    for name in ("report_facts", "report_prompts", "serve_explorer"):
        sql = query.sql_text(name)
        if wide:
            sql = query.database_wide(sql)
        if name == "serve_explorer":
            levels = con.sql(query.sql_text("report_judge_levels")).fetchall()[0][0]
            params = {**params, "judge_bins": _judge_bins(int(levels))}
        con.execute(sql, bind(sql, params))
    # explorer holds every column of report_facts; one copy in memory is enough
    con.execute("DROP TABLE report_facts")
