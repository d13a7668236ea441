"""``ddai curate focus``: the next round's prompts, from the last round's rollouts.

Round 1: the prompts of bucket A whose mean ``reward`` in the run is at or under ``hard_max``
("hard A"), in bucket A's order, then all of the verified bucket 0. Round N+1: the prompts of round
N whose mean ``reward`` in round N's run is at or under ``score_max``, minus the prompts a person
flagged (``wrong`` or ``uncertain``), in round N's order. Either way the result is de-duplicated by
``id`` (first occurrence kept) and prompts missing from the run are counted, listed and left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines import manifest, objstore
from ddai.pipelines.funnel import dataset as ds
from ddai.pipelines.funnel import decisions as dec
from ddai.pipelines.funnel import scores, step
from ddai.pipelines.lazy import lazy_module

np = lazy_module("numpy")
pa = lazy_module("pyarrow")
pc = lazy_module("pyarrow.compute")

STEP_ROUND1 = "curate.focus.round1"
STEP_NEXT = "curate.focus.next"


@dataclass(frozen=True)
class Selection:
    """Which rows of a dataset a focus rule keeps, and why each other row was left out.

    ``keep``: row indices in output order; ``dropped``: reason → ids (in row order).
    """

    keep: list[int]
    dropped: dict[str, list[str]]


def select_at_most(
    ids: pa.Array | pa.ChunkedArray,
    score: pa.Table,
    threshold: float,
    *,
    flagged: dict[str, str] | None = None,
) -> Selection:
    """Rows whose score is at or under ``threshold`` and that nobody flagged, in row order.

    ``score``: a score table (``uid``, ``score``); ``flagged``: id → verdict (``wrong`` or
    ``uncertain``) of the prompts a person excluded. Each other row gets the first reason that
    applies: ``missing from run``, ``above <threshold>``, ``flagged <verdict>``.
    """
    vals = scores.align(ids, score)  # [N], NaN: no rollouts
    missing = np.isnan(vals)
    above = ~missing & ~scores.at_most(np.nan_to_num(vals), threshold)
    verdict = np.array([""] * len(vals), dtype=object)
    if flagged:
        hit = pc.is_in(ids, value_set=pa.array(list(flagged), pa.string()))
        for i in np.flatnonzero(hit.to_numpy(zero_copy_only=False)):
            verdict[i] = flagged[ids[int(i)].as_py()]
    is_flagged = ~missing & ~above & (verdict != "")
    dropped: dict[str, list[str]] = {}
    for reason, mask in (("missing from run", missing), (f"above {threshold:g}", above)):
        if mask.any():
            dropped[reason] = ids.filter(pa.array(mask)).to_pylist()
    for i in np.flatnonzero(is_flagged):
        dropped.setdefault(f"flagged {verdict[i]}", []).append(ids[int(i)].as_py())
    keep = np.flatnonzero(~(missing | above | is_flagged))
    return Selection(keep.tolist(), dropped)


@dataclass(frozen=True)
class FocusConfig:
    """Flags of ``ddai curate focus``: round 1 (``bucket_a`` and ``bucket_0``) or round N+1
    (``prev``), each scored by the mean ``reward`` of ``runs`` in ``logs``."""

    out: Path
    logs: Path
    runs: tuple[str, ...]
    bucket_a: Path | None = None
    bucket_0: Path | None = None
    hard_max: float = 0.2
    prev: Path | None = None
    score_max: float = 0.3
    decisions: tuple[Path, ...] = ()
    force: bool = False

    def __post_init__(self) -> None:
        round1 = self.bucket_a is not None or self.bucket_0 is not None
        if round1 == (self.prev is not None):
            raise ValueError(
                "choose one: round 1 (--bucket-a FILE --bucket-0 FILE) or round N+1 (--prev FILE)"
            )
        if round1 and (self.bucket_a is None or self.bucket_0 is None):
            raise ValueError("round 1 needs both --bucket-a FILE and --bucket-0 FILE")
        if round1 and self.decisions:
            raise ValueError(
                "--decisions applies to round N+1; verify bucket 0 with `ddai curate verify-gt` "
                "and pass its *_filtered.parquet as --bucket-0"
            )
        if not self.runs:
            raise ValueError("name the run that scored these prompts with --run RUN")
        for name in ("hard_max", "score_max"):
            v = getattr(self, name)
            if not math.isfinite(v):
                raise ValueError(f"--{name.replace('_', '-')} must be a number, got {v}")

    @property
    def round1(self) -> bool:
        return self.prev is None

    @property
    def step(self) -> str:
        return STEP_ROUND1 if self.round1 else STEP_NEXT

    def inputs(self) -> list[Path]:
        if self.round1:
            files = [(self.bucket_a, "bucket A"), (self.bucket_0, "bucket 0")]
        else:
            files = [(self.prev, "previous round"), *((d, "decisions") for d in self.decisions)]
        return [step.require(f, what) for f, what in files] + scores.partitions(
            self.logs, self.runs
        )

    def params(self) -> dict[str, Any]:
        common = {"runs": list(self.runs), "score": "reward_mean"}
        if self.round1:
            return {**common, "hard_max": self.hard_max}
        return {**common, "score_max": self.score_max}


def run_focus(cfg: FocusConfig) -> step.StepResult:
    inputs = cfg.inputs()
    out = step.resolve(cfg.out)
    with step.started(cfg.step, cfg.params(), inputs, force=cfg.force, outputs=[out]) as begun:
        if begun.skip:
            return step.skipped(cfg.step, {"focus": out})
        # The datasets are read in a thread while DuckDB scores the run (both release the GIL).
        files = [cfg.bucket_a, cfg.bucket_0] if cfg.round1 else [cfg.prev]
        with ThreadPoolExecutor(max_workers=1) as pool:
            reading = pool.submit(lambda: [ds.read_dataset(f) for f in files])
            score_of = scores.log_scores(
                cfg.logs, cfg.runs, "reward", "mean", needed_by="`ddai curate focus`"
            )
            raws = reading.result()
        if cfg.round1:
            table, record, summary = _round1(cfg, inputs, score_of, raws, begun.record)
        else:
            table, record, summary = _next_round(cfg, inputs, score_of, raws[0], begun.record)
    step.commit([step.table_output(out, table, record)])  # the file and its manifest at once
    return step.StepResult(cfg.step, {"focus": out}, summary)


def _round1(
    cfg: FocusConfig,
    inputs: list[Path],
    score_of: pa.Table,
    raws: list[pa.Table],
    base_of: Callable[[], manifest.StepRecord],
) -> tuple[pa.Table, manifest.StepRecord, dict[str, Any]]:
    raw_a, raw_0 = raws
    a, dups_a = ds.first_occurrences(raw_a)
    zero, dups_0 = ds.first_occurrences(raw_0)
    sel = select_at_most(a[ds.ID], score_of, cfg.hard_max)
    _require_scored(a, sel, objstore.display(inputs[0]), cfg, score_of)
    hard = a.take(pa.array(sel.keep, pa.int64()))
    merged, dups_merged = ds.first_occurrences(ds.concat([hard, zero]))
    dups = dups_a + dups_0 + dups_merged
    n_zero = merged.num_rows - hard.num_rows
    missing = sel.dropped.get("missing from run", [])
    summary = {
        "hard A": hard.num_rows,
        "bucket 0": n_zero,
        "round 1": merged.num_rows,
        # fixed keys, the threshold a value: a key built from it changed with every --hard-max
        "hard max": cfg.hard_max,
        "bucket A above hard max": len(sel.dropped.get(f"above {cfg.hard_max:g}", [])),
        "bucket A missing from run": len(missing),
        "duplicate ids": len(dups),
    }
    record = step.record_for(
        base_of(),
        rows_in=raw_a.num_rows + raw_0.num_rows,
        rows_out=merged.num_rows,
        dropped={
            **{f"bucket A {r}": len(v) for r, v in sel.dropped.items()},
            "duplicate id": len(dups),
        },
        notes={
            "contributions": {str(inputs[0]): hard.num_rows, str(inputs[1]): n_zero},
            "missing_ids": missing,
            "duplicate_ids": dups,
            step.SUMMARY_KEY: summary,
        },
    )
    return merged, record, summary


def _next_round(
    cfg: FocusConfig,
    inputs: list[Path],
    score_of: pa.Table,
    raw: pa.Table,
    base_of: Callable[[], manifest.StepRecord],
) -> tuple[pa.Table, manifest.StepRecord, dict[str, Any]]:
    prev, dups = ds.first_occurrences(raw)
    flags = {u: d.verdict for u, d in dec.flagged(dec.read_decisions(cfg.decisions)).items()}
    sel = select_at_most(prev[ds.ID], score_of, cfg.score_max, flagged=flags)
    _require_scored(prev, sel, objstore.display(inputs[0]), cfg, score_of)
    table = prev.take(pa.array(sel.keep, pa.int64()))
    dropped = {r: len(v) for r, v in sel.dropped.items()}
    flagged_n = sum(v for r, v in dropped.items() if r.startswith("flagged"))
    missing = sel.dropped.get("missing from run", [])
    summary = {
        "previous round": prev.num_rows,
        "score max": cfg.score_max,
        "at or under score max": table.num_rows + flagged_n,
        "flagged": flagged_n,
        "next round": table.num_rows,
        "missing from run": len(missing),
        "duplicate ids": len(dups),
    }
    record = step.record_for(
        base_of(),
        rows_in=raw.num_rows,
        rows_out=table.num_rows,
        dropped={**dropped, "duplicate id": len(dups)},
        notes={
            "contributions": {str(inputs[0]): table.num_rows},
            "missing_ids": missing,
            "flagged_ids": {r: v for r, v in sel.dropped.items() if r.startswith("flagged")},
            "duplicate_ids": dups,
            step.SUMMARY_KEY: summary,
        },
    )
    return table, record, summary


def _require_scored(
    table: pa.Table, sel: Selection, what: str, cfg: FocusConfig, score_of: pa.Table
) -> None:
    """Every prompt missing from the run means the run scored another prompt set."""
    if table.num_rows and len(sel.dropped.get("missing from run", [])) == table.num_rows:
        src = f"the mean reward of run(s) {', '.join(cfg.runs)}"
        raise ValueError(scores.no_overlap(what, table[ds.ID], src, score_of["uid"]))
