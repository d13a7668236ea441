"""``ddai curate bucket``: split a dataset into curriculum buckets by a per-prompt score.

B (mastered) ``score > mastered``, A (edge of competence) ``floor <= score <= mastered``, 0
(unsolvable for now) ``score < floor`` (seed 000, 9.1.1). The score is the aggregate of a metric
over a run's rollouts (default: mean NDCG, format failures counting 0) or a column of a score
table, joined to the dataset on ``id``. Each bucket is written in the dataset's own shape with the
score added to ``extra_info``, sorted by score descending, ties in dataset order.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ddai.pipelines import objstore
from ddai.pipelines.funnel import dataset as ds
from ddai.pipelines.funnel import scores, step
from ddai.pipelines.lazy import lazy_module

np = lazy_module("numpy")
pa = lazy_module("pyarrow")

STEP = "curate.bucket"
BUCKETS = ("b", "a", "0")
LABELS = {"b": "bucket B", "a": "bucket A", "0": "bucket 0"}


def file_name(bucket: str) -> str:
    """DDAI's file names: ``curriculum_bucket_{b,a,0}.parquet``."""
    return f"curriculum_bucket_{bucket}.parquet"


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


@dataclass(frozen=True)
class BucketConfig:
    """Flags of ``ddai curate bucket``. Exactly one score source: ``runs`` (with ``logs``) or
    ``scores`` (a table with ``id`` and ``score_col``; default: its one numeric column)."""

    dataset: Path
    out: Path
    logs: Path | None = None
    runs: tuple[str, ...] = ()
    scores: Path | None = None
    score_col: str | None = None
    metric: str = "ndcg"
    agg: str = "mean"
    mastered: float = 0.7
    floor: float = 0.1
    force: bool = False

    def __post_init__(self) -> None:
        if bool(self.runs) == bool(self.scores):
            raise ValueError(
                "give one score source: --logs DIR --run RUN (aggregate a run's rollouts) or "
                "--scores FILE --score-col COL (a table of per-prompt scores)"
            )
        if self.runs and self.logs is None:
            raise ValueError("--run needs the log store (--logs DIR)")
        scores.check_metric(self.metric, self.agg)
        for name in ("mastered", "floor"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                raise ValueError(f"--{name} must be within [0, 1], got {v}")
        if self.floor > self.mastered:
            raise ValueError(f"--floor ({self.floor}) must not exceed --mastered ({self.mastered})")

    @property
    def column(self) -> str:
        """The ``extra_info`` field that carries the score."""
        return self.score_col or f"{self.metric}_{self.agg}"

    def outputs(self) -> dict[str, Path]:
        return {b: self.out / file_name(b) for b in BUCKETS}

    def inputs(self) -> list[Path]:
        dataset = step.require(self.dataset, "dataset")
        if self.scores is not None:
            return [dataset, step.require(self.scores, "score table")]
        return [dataset, *scores.partitions(self.logs, self.runs)]

    def params(self) -> dict[str, Any]:
        src = {"scores": "table"} if self.scores else {"scores": "log", "runs": list(self.runs)}
        return {
            **src,
            "metric": None if self.scores else self.metric,
            "agg": None if self.scores else self.agg,
            "score_col": self.column,
            "mastered": self.mastered,
            "floor": self.floor,
        }


def run_bucket(cfg: BucketConfig) -> step.StepResult:
    if cfg.scores is not None and not cfg.score_col:
        cfg = replace(cfg, score_col=scores.score_column(cfg.scores))
    inputs = cfg.inputs()
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
    # The dataset is read in a thread while DuckDB scores the log (both release the GIL).
    with ThreadPoolExecutor(max_workers=1) as pool:
        reading = pool.submit(ds.read_dataset, cfg.dataset)
        if cfg.scores is not None:
            score_of = scores.read_score_table(cfg.scores, cfg.column)
        else:
            score_of = scores.log_scores(
                cfg.logs,
                cfg.runs,
                cfg.metric,
                cfg.agg,
                needed_by="`ddai curate bucket --run`",
                or_else="pass a per-prompt score table instead of --run "
                "(`--scores FILE --score-col COLUMN`)",
            )
        raw = reading.result()
    table, dups = ds.first_occurrences(raw)
    # ids are unique (first occurrences) and so are the score table's uids
    values, matched = scores.match(table[ds.ID], score_of)
    if table.num_rows and np.isnan(values).all():
        # three empty buckets would look like a finished step: the scores name other prompts
        raise ValueError(_no_match(cfg, table[ds.ID], score_of))
    parts = split(values, mastered=cfg.mastered, floor=cfg.floor)
    unscored = table[ds.ID].filter(pa.array(np.isnan(values))).to_pylist()
    unknown = len(score_of) - matched

    summary = {
        "dataset": objstore.display(inputs[0]),
        "score": cfg.column,
        **{LABELS[b]: len(parts[b]) for b in BUCKETS},
        "no score": len(unscored),
        "duplicate ids": len(dups),
        "scored ids not in the dataset": unknown,
        "rule": f"B > {cfg.mastered:g} >= A >= {cfg.floor:g} > 0",
    }
    # One gather of the three buckets back to back (pyarrow's take pays a fixed cost per call
    # on nested columns), then a zero-copy slice per bucket.
    order = np.concatenate([parts[b] for b in BUCKETS])
    scored = ds.with_extra_field(
        table.take(pa.array(order, pa.int64())), cfg.column, pa.array(values[order], pa.float64())
    )
    starts = np.cumsum([0] + [len(parts[b]) for b in BUCKETS])
    base = begun.record()
    members = []
    for i, b in enumerate(BUCKETS):
        out = scored.slice(starts[i], starts[i + 1] - starts[i])
        record = step.record_for(
            base,
            rows_in=raw.num_rows,
            rows_out=out.num_rows,
            dropped={
                **{LABELS[o]: len(parts[o]) for o in BUCKETS if o != b},
                "no score": len(unscored),
                "duplicate id": len(dups),
            },
            notes={
                "bucket": b,
                "score column": cfg.column,
                "contributions": {objstore.display(inputs[0]): out.num_rows},
                "unscored_ids": unscored,
                "duplicate_ids": dups,
                step.SUMMARY_KEY: summary,
            },
        )
        members.append(step.table_output(outputs[b], out, record))
    step.commit(members)  # B, A and 0 with their manifests, visible together
    return step.StepResult(STEP, outputs, summary)


def _no_match(cfg: BucketConfig, ids: pa.ChunkedArray, score_of: pa.Table) -> str:
    src = (
        f"the score table {objstore.display(cfg.scores)} (column {cfg.column})"
        if cfg.scores is not None
        else f"the {cfg.metric} of run(s) {', '.join(cfg.runs)}"
    )
    return scores.no_overlap(objstore.display(cfg.dataset), ids, src, score_of["uid"])
