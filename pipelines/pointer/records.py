"""Pointer generation records: the raw per-query JSONL (seed 002 §2.1) and its flattened rows
(§2.2), plus the de-duplication rule shared by every generator.

Raw record, one line per query::

    {"query_id": ..., "meta": {"image_id", "question", "split", ...},
     "candidate_pool": {"candidate_ids": [...], "size": K},
     "pointer_candidates": [{"pointer": [i, j], "gen_method": "beam" | "sample" | "random",
        "beam_rank", "beam_score", "logprob_score", "temperature", "vqa_pred_answer",
        "vqa_correct", "vqa_acc_score", "eval_failed", "eval_error", "gen_logprob"}, ...]}

``logprob_score`` is log π_old(pointer) under the generating model at temperature 1 (every
method, so RL has its old log-probabilities); ``gen_logprob`` is the log-probability under the
sampler that actually drew it (the tempered policy for samples, uniform for random pairs, null
for beams, which are not sampled). ``vqa_correct`` is always present; it is null only with
``eval_failed`` true and a reason in ``eval_error``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ddai.pipelines.pointer import one_of
from ddai.pipelines.records.deps import pl

GEN_METHODS = ("beam", "sample", "random")
PRIORITY = {"beam": 3, "sample": 2, "random": 1}
META_KEYS = ("image_id", "question", "split")


@dataclass
class PointerCandidate:
    """One pointer sequence and what became of it (field order as in seed 002 §2.1)."""

    pointer: list[int]
    gen_method: str
    beam_rank: int | None = None
    beam_score: float | None = None
    logprob_score: float | None = None
    temperature: float | None = None
    vqa_pred_answer: str | None = None
    vqa_correct: int | None = None
    vqa_acc_score: float | None = None
    eval_failed: bool = False
    eval_error: str | None = None
    gen_logprob: float | None = None

    def __post_init__(self) -> None:
        one_of(self.gen_method, GEN_METHODS, "gen_method")
        if len(self.pointer) != 2 or self.pointer[0] == self.pointer[1]:
            raise ValueError(f"a pointer is two distinct indices, got {self.pointer}")

    @property
    def key(self) -> tuple[int, int]:
        """The unordered pair: (i, j) and (j, i) select the same demonstrations."""
        a, b = self.pointer
        return (a, b) if a < b else (b, a)


def dedupe_candidates(cands: Iterable[PointerCandidate]) -> list[PointerCandidate]:
    """One candidate per unordered pair, priority beam > sample > random.

    A pair keeps the slot of its first occurrence; a later candidate of higher priority replaces
    it there; among equal priority the first one stays.
    """
    kept: dict[tuple[int, int], PointerCandidate] = {}
    for c in cands:
        old = kept.get(c.key)
        if old is None or PRIORITY[c.gen_method] > PRIORITY[old.gen_method]:
            kept[c.key] = c
    return list(kept.values())


def query_record(
    query: dict[str, Any], pool_ids: list[str], candidates: list[PointerCandidate]
) -> dict[str, Any]:
    """The raw record of one query (seed 002 §2.1)."""
    return {
        "query_id": query["query_id"],
        "meta": {k: query.get(k) for k in META_KEYS},
        "candidate_pool": {"candidate_ids": list(pool_ids), "size": len(pool_ids)},
        "pointer_candidates": [asdict(c) for c in candidates],
    }


FLAT_SCHEMA = {
    "query_id": pl.String,
    "pointer": pl.List(pl.Int32),
    "gen_method": pl.String,
    "beam_rank": pl.Int32,
    "beam_score": pl.Float64,
    "logprob_score": pl.Float64,
    "temperature": pl.Float64,
    "vqa_pred_answer": pl.String,
    "vqa_correct": pl.Int8,
    "vqa_acc_score": pl.Float64,
    "eval_failed": pl.Boolean,
    "eval_error": pl.String,
    "gen_logprob": pl.Float64,
    "split": pl.String,
    "pool_size": pl.Int32,
}


NO_CORRECT = "no vqa_correct"
"""``eval_error`` of a candidate that has neither ``eval_failed`` nor the mandatory ``vqa_correct``."""


def flatten(records: Iterable[dict[str, Any]]) -> pl.DataFrame:
    """One row per pointer candidate (seed 002 §2.2, before rewards), in record order.

    ``eval_failed`` and ``eval_error`` are ddai's additions to the seed's §2.1 record: where a
    candidate lacks them (a record written to the seed's schema) it was evaluated if it has the
    mandatory ``vqa_correct``, and is a failed evaluation (``eval_error`` ``NO_CORRECT``)
    otherwise, so it is counted where failures are rather than read as neither.
    """
    rows = []
    for r in records:
        split = (r.get("meta") or {}).get("split")
        size = (r.get("candidate_pool") or {}).get("size")
        for c in r.get("pointer_candidates", []):
            rows.append(
                {
                    **{k: c.get(k) for k in FLAT_SCHEMA},
                    "query_id": r["query_id"],
                    "split": split,
                    "pool_size": size,
                }
            )
    if not rows:
        return pl.DataFrame(schema=FLAT_SCHEMA)
    missing = pl.col("eval_failed").is_null() & pl.col("vqa_correct").is_null()
    return pl.DataFrame(rows, schema=FLAT_SCHEMA).with_columns(
        pl.when(missing)
        .then(pl.lit(NO_CORRECT))
        .otherwise(pl.col("eval_error"))
        .alias("eval_error"),
        pl.col("eval_failed").fill_null(pl.col("vqa_correct").is_null()),
    )
