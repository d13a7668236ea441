"""``ddai curate focus``: the next round's prompts, from the last round's rollouts.

Round 1: the prompts of bucket A whose mean ``reward`` in the run is at or under ``hard_max``
("hard A"), in bucket A's order, then all of the verified bucket 0. Round N+1: the prompts of round
N whose mean ``reward`` in round N's run is at or under ``score_max``, minus the prompts a person
flagged (``wrong`` or ``uncertain``), in round N's order. Either way the result is de-duplicated by
``id`` (first occurrence kept) and prompts missing from the run are counted, listed and left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.funnel import native, scores, step
from ddai.pipelines.funnel.focus_config import FocusConfig
from ddai.pipelines.records import decisions as dec
from ddai.pipelines.store import manifest, objstore


@dataclass(frozen=True)
class Selection:
    """Which rows of the first input a focus rule keeps, and why each other row was left out
    (``_keys``' first-file rows): ``dropped``: reason → count, in the order ``missing from
    run``, ``above <threshold>``, then each ``flagged <verdict>`` as first met; ``ids``: reason →
    ids in row order, for every reason but ``above`` (its ids are in no summary or manifest; at
    1M rollouts they were most of the rows fetched)."""

    kept: int
    dropped: dict[str, int]
    ids: dict[str, list[str]]


def keys(
    con: Any,
    files: Sequence[str],
    threshold: float,
    *,
    flagged: dict[str, str] | None = None,
) -> Selection:
    """The temp table ``_keys`` of every row of ``files`` (``_f``: the file's index, ``_pos``,
    ``id``, ``_first``: its id's first row in its file) and, for the first file's first rows,
    ``reason``: ``keep`` when the score (``scores.SCORES`` on ``con``) is at or under
    ``threshold`` and nobody flagged the prompt (``flagged``: id → ``wrong`` or ``uncertain``),
    else the first reason that applies: ``missing from run``, ``above``, ``flagged <verdict>``."""
    con.execute("CREATE OR REPLACE TEMP TABLE _flags (id VARCHAR, verdict VARCHAR)")
    if flagged:
        con.executemany("INSERT INTO _flags VALUES (?, ?)", list(flagged.items()))
    snapped = native.snap("s.score", scores.BOUNDARY_DECIMALS)
    # One scan of every file's ids (``file_index``: its place in the list). An id's first row per
    # file comes from a hash aggregate of the ids met more than once: a window numbering every
    # row cost 0.03 CPU s at 1M rollouts, about a tenth of the command's own work.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _keys AS
        WITH d AS (
            SELECT CAST(file_index AS INTEGER) AS _f, file_row_number AS _pos,
                CAST(id AS VARCHAR) AS id
            FROM read_parquet({native.file_list(len(files))}, union_by_name = true,
                file_row_number = true)
        ), dup AS (
            SELECT _f, id, min(_pos) AS _p FROM d GROUP BY _f, id HAVING count(*) > 1
        )
        SELECT d._f, d._pos, d.id, dup._p IS NULL OR d._pos = dup._p AS _first,
            CASE WHEN d._f > 0 OR d._pos <> coalesce(dup._p, d._pos) THEN NULL
                WHEN s.score IS NULL THEN 'missing from run'
                WHEN {snapped} > $threshold THEN 'above'
                WHEN fl.verdict IS NOT NULL THEN 'flagged ' || fl.verdict
                ELSE 'keep' END AS reason
        FROM d
        LEFT JOIN dup ON dup._f = d._f AND dup.id IS NOT DISTINCT FROM d.id
        LEFT JOIN {scores.SCORES} s ON s.uid = d.id
        LEFT JOIN _flags fl ON fl.id = d.id""",
        {"threshold": threshold, **native.file_params(files)},
    )
    counts = dict(
        con.execute(
            "SELECT reason, count(*) FROM _keys WHERE _f = 0 AND reason IS NOT NULL GROUP BY 1"
        ).fetchall()
    )
    ids: dict[str, list[str]] = {"missing from run": []}  # first, then flags in row order
    for uid, reason in con.execute(
        "SELECT id, reason FROM _keys WHERE _f = 0 AND reason NOT IN ('keep', 'above') "
        "ORDER BY _pos"
    ).fetchall():
        ids.setdefault(reason, []).append(uid)
    ids = {k: v for k, v in ids.items() if v}
    above = {f"above {threshold:g}": counts["above"]} if counts.get("above") else {}
    dropped = {**{k: len(v) for k, v in ids.items() if k == "missing from run"}, **above}
    dropped.update({k: len(v) for k, v in ids.items() if k != "missing from run"})
    return Selection(counts.get("keep", 0), dropped, ids)


def _inputs(cfg: FocusConfig) -> list[Path]:
    """The step's input files (each checked to exist), then the runs' log partitions."""
    if cfg.round1:
        files = [(cfg.bucket_a, "bucket A"), (cfg.bucket_0, "bucket 0")]
    else:
        files = [(cfg.prev, "previous round"), *((d, "decisions") for d in cfg.decisions)]
    return [step.require(f, what) for f, what in files] + scores.partitions(cfg.logs, cfg.runs)


def run_focus(cfg: FocusConfig) -> step.StepResult:
    inputs = _inputs(cfg)
    out = step.resolve(cfg.out)
    with step.started(cfg.step, cfg.params(), inputs, force=cfg.force, outputs=[out]) as begun:
        if begun.skip:
            return step.skipped(cfg.step, {"focus": out})
        with contextlib.ExitStack() as stack:
            con, _ = scores.log_scores_table(
                cfg.logs, cfg.runs, "reward", "mean", needed_by="`ddai curate focus`"
            )
            stack.callback(con.close)
            paths = [cfg.bucket_a, cfg.bucket_0] if cfg.round1 else [cfg.prev]
            files = [native.local_copy(p, stack) for p in paths]
            for p, f in zip(paths, files, strict=True):
                native.columns(con, f, objstore.display(p))  # readable, with an id column
            if cfg.round1:
                sel = keys(con, files, cfg.hard_max)
                record, summary = _round1(cfg, inputs, con, sel, begun.record)
            else:
                sheets = [objstore.display(d) for d in cfg.decisions]
                decided = dec.read_decisions(sheets, objstore.any_read_text)
                flags = {u: d.verdict for u, d in dec.flagged(decided).items()}
                sel = keys(con, files, cfg.score_max, flagged=flags)
                record, summary = _next_round(cfg, inputs, con, sel, begun.record)
            _require_scored(con, sel, objstore.display(inputs[0]), cfg)
            write = _writer(con, files)
            # the file and its manifest at once
            manifest.commit_set([manifest.Member(out, write, record)])
    return step.StepResult(cfg.step, {"focus": out}, summary)


def _writer(con: Any, files: list[str]) -> Callable[[Path], None]:
    """The kept rows (``_take``) of ``files``, in file then row order, in the first file's shape
    (struct fields a later file adds are unified by name, as pyarrow's permissive concatenation
    did)."""
    params = native.file_params(files)
    union = f"{native.file_list(len(files))}, union_by_name = true"
    cols = native.columns(con, files[0], files[0])
    if len(files) > 1:
        rel = con.sql(f"SELECT * FROM read_parquet({union}) LIMIT 0", params=params)
        cols = list(zip(rel.columns, rel.types, strict=True))
    select = native.select_list(cols, src="d", extra_field=None, value="")
    # the outer join keeps the columns nullable (native.py); rows match by file index and place
    query = (
        f"SELECT {select} FROM _take t LEFT JOIN read_parquet({union}, file_row_number = true) d "
        "ON d.file_index = t._f AND d.file_row_number = t._pos ORDER BY t._f, t._pos"
    )
    meta = native.kv_metadata(con, files[0])  # the first input's, as concatenating kept it
    return lambda tmp: native.write_rows(con, query, params, tmp, meta)


def _round1(
    cfg: FocusConfig,
    inputs: list[Path],
    con: Any,
    sel: Selection,
    base_of: Callable[[], manifest.StepRecord],
) -> tuple[manifest.StepRecord, dict[str, Any]]:
    # hard A in A's order, then bucket 0's first rows whose id hard A does not already hold
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _take AS SELECT _f, _pos FROM _keys k
        WHERE (k._f = 0 AND k.reason = 'keep') OR (k._f = 1 AND k._first AND NOT EXISTS (
            SELECT 1 FROM _keys h WHERE h._f = 0 AND h.reason = 'keep' AND h.id = k.id))"""
    )
    rows_in, merged = con.execute(
        "SELECT (SELECT count(*) FROM _keys), (SELECT count(*) FROM _take)"
    ).fetchall()[0]
    dups_a = native.ids(con, "_f = 0 AND NOT _first")
    dups_0 = native.ids(con, "_f = 1 AND NOT _first")
    dups_merged = native.ids(
        con,
        "_f = 1 AND _first AND NOT EXISTS (SELECT 1 FROM _take t WHERE t._f = 1 AND t._pos = k._pos)",
    )
    dups = dups_a + dups_0 + dups_merged
    n_zero = merged - sel.kept
    missing = sel.ids.get("missing from run", [])
    summary = {
        "hard A": sel.kept,
        "bucket 0": n_zero,
        "round 1": merged,
        # fixed keys, the threshold a value: a key built from it changed with every --hard-max
        "hard max": cfg.hard_max,
        "bucket A above hard max": sel.dropped.get(f"above {cfg.hard_max:g}", 0),
        "bucket A missing from run": len(missing),
        "duplicate ids": len(dups),
    }
    record = step.record_for(
        base_of(),
        rows_in=rows_in,
        rows_out=merged,
        dropped={
            **{f"bucket A {r}": n for r, n in sel.dropped.items()},
            "duplicate id": len(dups),
        },
        notes={
            "contributions": {
                objstore.display(inputs[0]): sel.kept,
                objstore.display(inputs[1]): n_zero,
            },
            "missing_ids": missing,
            "duplicate_ids": dups,
            step.SUMMARY_KEY: summary,
        },
    )
    return record, summary


def _next_round(
    cfg: FocusConfig,
    inputs: list[Path],
    con: Any,
    sel: Selection,
    base_of: Callable[[], manifest.StepRecord],
) -> tuple[manifest.StepRecord, dict[str, Any]]:
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _take AS SELECT _f, _pos FROM _keys WHERE reason = 'keep'"
    )
    rows_in, n_prev = con.execute(
        "SELECT count(*), count(*) FILTER (_first) FROM _keys"
    ).fetchall()[0]
    dups = native.ids(con, "NOT _first")
    dropped = dict(sel.dropped)
    flagged_n = sum(v for r, v in dropped.items() if r.startswith("flagged"))
    missing = sel.ids.get("missing from run", [])
    summary = {
        "previous round": n_prev,
        "score max": cfg.score_max,
        "at or under score max": sel.kept + flagged_n,
        "flagged": flagged_n,
        "next round": sel.kept,
        "missing from run": len(missing),
        "duplicate ids": len(dups),
    }
    record = step.record_for(
        base_of(),
        rows_in=rows_in,
        rows_out=sel.kept,
        dropped={**dropped, "duplicate id": len(dups)},
        notes={
            "contributions": {objstore.display(inputs[0]): sel.kept},
            "missing_ids": missing,
            "flagged_ids": {r: v for r, v in sel.ids.items() if r.startswith("flagged")},
            "duplicate_ids": dups,
            step.SUMMARY_KEY: summary,
        },
    )
    return record, summary


def _require_scored(con: Any, sel: Selection, what: str, cfg: FocusConfig) -> None:
    """Every prompt missing from the run means the run scored another prompt set."""
    (n_first,) = con.execute("SELECT count(*) FROM _keys WHERE _f = 0 AND _first").fetchall()[0]
    if n_first and sel.dropped.get("missing from run", 0) == n_first:
        src = f"the mean reward of run(s) {', '.join(cfg.runs)}"
        ours = "SELECT id FROM _keys WHERE _f = 0 AND _first ORDER BY _pos"
        raise ValueError(scores.no_overlap_in(con, what, n_first, ours, src))
