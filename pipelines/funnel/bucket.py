"""``ddai curate bucket``: split a dataset into curriculum buckets by a per-prompt score.

B (mastered) ``score > mastered``, A (edge of competence) ``floor <= score <= mastered``, 0
(unsolvable for now) ``score < floor`` (seed 000, 9.1.1). The score is the aggregate of a metric
over a run's rollouts (default: mean NDCG, format failures counting 0) or a column of a score
table, joined to the dataset on ``id``. Each bucket is written in the dataset's own shape with the
score added to ``extra_info``, sorted by score descending, ties in dataset order.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddai.pipelines.funnel import native, scores, step
from ddai.pipelines.funnel.bucket_config import BucketConfig
from ddai.pipelines.funnel.configs import BUCKETS
from ddai.pipelines.records.deps import np
from ddai.pipelines.store import manifest, objstore

STEP = "curate.bucket"
LABELS = {"b": "bucket B", "a": "bucket A", "0": "bucket 0"}


def split(values: np.ndarray, *, mastered: float, floor: float) -> dict[str, np.ndarray]:
    """Row indices of each bucket, each sorted by score descending with ties in row order.

    ``values``: float64 ``[N]``, NaN where a row has no score (it lands in no bucket).
    Returns ``{"b": idx, "a": idx, "0": idx}`` of int64 index arrays.
    """
    s = scores.snap(np.asarray(values, dtype=np.float64))
    has = ~np.isnan(s)
    masks = {
        "b": has & (s > mastered),
        "a": has & (s >= floor) & (s <= mastered),
        "0": has & (s < floor),
    }
    out = {}
    for name, mask in masks.items():
        idx = np.flatnonzero(mask)
        out[name] = idx[np.argsort(-s[idx], kind="stable")]  # stable: ties keep row order
    return out


def _inputs(cfg: BucketConfig) -> list[Path]:
    """The step's input files (each checked to exist), then the runs' log partitions."""
    dataset = step.require(cfg.dataset, "dataset")
    if cfg.scores is not None:
        return [dataset, step.require(cfg.scores, "score table")]
    return [dataset, *scores.partitions(cfg.logs, cfg.runs)]


def run_bucket(cfg: BucketConfig) -> step.StepResult:
    if cfg.scores is not None and not cfg.score_col:
        cfg = replace(cfg, score_col=scores.score_column(cfg.scores))
    inputs = _inputs(cfg)
    outputs = {b: step.resolve(p) for b, p in cfg.outputs().items()}
    with step.started(
        STEP, cfg.params(), inputs, force=cfg.force, outputs=list(outputs.values())
    ) as begun:
        if begun.skip:
            return step.skipped(STEP, outputs)
        return _bucket(cfg, inputs, outputs, begun)


def _bucket(
    cfg: BucketConfig, inputs: list[Path], outputs: dict[str, Path], begun: step.Begun
) -> step.StepResult:
    with contextlib.ExitStack() as stack:
        if cfg.scores is not None:
            import duckdb

            con = stack.enter_context(duckdb.connect())
            con.execute("SET enable_progress_bar = false")
            # a score table is read by its own readers (CSV escapes, JSON lines, conflicts)
            con.register("_score_file", scores.read_score_table(cfg.scores, cfg.column))
            n_scores = native.score_table(con, scores.SCORES, "FROM _score_file")
        else:
            con, n_scores = scores.log_scores_table(
                cfg.logs,
                cfg.runs,
                cfg.metric,
                cfg.agg,
                needed_by="`ddai curate bucket --run`",
                or_else="pass a per-prompt score table instead of --run "
                "(`--scores FILE --score-col COLUMN`)",
            )
            stack.callback(con.close)
        file = native.local_copy(cfg.dataset, stack)
        return _bucket_in(con, file, n_scores, cfg, inputs, outputs, begun)


def _bucket_in(
    con: Any,
    file: str,
    n_scores: int,
    cfg: BucketConfig,
    inputs: list[Path],
    outputs: dict[str, Path],
    begun: step.Begun,
) -> step.StepResult:
    """The step on ``con`` (holding ``scores.SCORES``) over the local dataset ``file``."""
    shown = objstore.display(cfg.dataset)
    cols = native.columns(con, file, shown)
    snapped = native.snap("s.score", scores.BOUNDARY_DECIMALS)
    # One row per dataset row: its place, id, whether it is its id's first row, score, bucket.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _keys AS
        SELECT d._pos, d.id, d._first, s.score, {snapped} AS _snap,
            CASE WHEN NOT d._first OR s.score IS NULL THEN NULL
                 WHEN {snapped} > $mastered THEN 'b'
                 WHEN {snapped} >= $floor THEN 'a'
                 ELSE '0' END AS bucket
        FROM (
            SELECT file_row_number AS _pos, CAST(id AS VARCHAR) AS id,
                row_number() OVER (PARTITION BY CAST(id AS VARCHAR) ORDER BY file_row_number) = 1
                    AS _first
            FROM read_parquet($file, file_row_number = true)
        ) d LEFT JOIN {scores.SCORES} s ON s.uid = d.id""",
        {"file": file, "mastered": cfg.mastered, "floor": cfg.floor},
    )
    rows_in, n_first, n_b, n_a, n_0, matched = con.execute(
        """SELECT count(*), count(*) FILTER (_first), count(*) FILTER (bucket = 'b'),
            count(*) FILTER (bucket = 'a'), count(*) FILTER (bucket = '0'),
            count(*) FILTER (_first AND score IS NOT NULL) FROM _keys"""
    ).fetchall()[0]
    if n_first and not matched:
        # three empty buckets would look like a finished step: the scores name other prompts
        raise ValueError(_no_match(cfg, con, n_first))
    counts = {"b": n_b, "a": n_a, "0": n_0}
    unscored = native.ids(con, "_first AND score IS NULL")
    dups = native.ids(con, "NOT _first")
    summary = {
        "dataset": objstore.display(inputs[0]),
        "score": cfg.column,
        **{LABELS[b]: counts[b] for b in BUCKETS},
        "no score": len(unscored),
        "duplicate ids": len(dups),
        "scored ids not in the dataset": n_scores - matched,
        "rule": f"B > {cfg.mastered:g} >= A >= {cfg.floor:g} > 0",
    }
    meta = native.kv_metadata(con, file, cfg.column)
    select = native.select_list(cols, src="d", extra_field=cfg.column, value="k.score")
    base = begun.record()
    members = []
    for b in BUCKETS:
        record = step.record_for(
            base,
            rows_in=rows_in,
            rows_out=counts[b],
            dropped={
                **{LABELS[o]: counts[o] for o in BUCKETS if o != b},
                "no score": len(unscored),
                "duplicate id": len(dups),
            },
            notes={
                "bucket": b,
                "score column": cfg.column,
                "contributions": {objstore.display(inputs[0]): counts[b]},
                "unscored_ids": unscored,
                "duplicate_ids": dups,
                step.SUMMARY_KEY: summary,
            },
        )
        # the bucket's rows by score descending, ties in dataset order; the outer join keeps
        # the columns nullable (native.py)
        query = (
            f"SELECT {select} FROM (FROM _keys WHERE bucket = '{b}') k "
            "LEFT JOIN read_parquet($file, file_row_number = true) d "
            "ON d.file_row_number = k._pos ORDER BY k._snap DESC, k._pos"
        )
        members.append(
            manifest.Member(
                outputs[b],
                lambda tmp, q=query: native.write_rows(con, q, {"file": file}, tmp, meta),
                record,
            )
        )
    manifest.commit_set(members)  # B, A and 0 with their manifests, visible together
    return step.StepResult(STEP, outputs, summary)


def _no_match(cfg: BucketConfig, con: Any, n_ids: int) -> str:
    src = (
        f"the score table {objstore.display(cfg.scores)} (column {cfg.column})"
        if cfg.scores is not None
        else f"the {cfg.metric} of run(s) {', '.join(cfg.runs)}"
    )
    ours = "SELECT id FROM _keys WHERE _first ORDER BY _pos"
    return scores.no_overlap_in(con, objstore.display(cfg.dataset), n_ids, ours, src)
