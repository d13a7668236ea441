"""Score a failure attribution against a synthetic world's truth table (``truth.json``).

The world plants a failure cause per run and prompt (``runs.<run>.failure_causes``: wrong ground
truth, retrieval, generator; ``ddai.pipelines.fixtures.truth.failure_cause``) from the prompts'
latent parameters, which the logs never show. Per class, over the runs both cover:

- precision: of the prompts attributed to the class that have a planted cause, the share whose
  planted cause is that class (prompts without a planted cause have no right answer to count);
- recall: of the prompts planted with the cause, the share attributed to the class.
"""

from __future__ import annotations

from typing import Any

from ddai.pipelines.records.deps import pl

# view class → the truth table's cause
CAUSE_OF = {
    "wrong_gt": "wrong_gt",
    "search_failure": "retrieval",
    "generator_bottleneck": "generator",
}


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def score(df: pl.DataFrame, truth: dict[str, Any]) -> dict[str, Any]:
    """Per class: tp, attributed (with a planted cause), planted, precision, recall; per run too."""
    runs = [r for r in df["run_id"].unique(maintain_order=True).to_list() if r in truth["runs"]]
    if not runs:
        raise ValueError(
            "the truth table covers none of the attributed runs "
            f"({', '.join(df['run_id'].unique().to_list())}); pass the world's truth.json"
        )
    totals = {c: {"tp": 0, "attributed": 0, "planted": 0} for c in CAUSE_OF}
    unplanted = 0
    per_run: dict[str, Any] = {}
    for run in runs:
        causes = truth["runs"][run].get("failure_causes")
        if causes is None:
            raise ValueError(
                f"truth table has no failure_causes for run {run}: regenerate the world with "
                "`ddai fixtures make` (generator version 2 or later)"
            )
        cause = {u: c for c, uids in causes.items() for u in uids}
        got = dict(
            df.filter((pl.col("run_id") == run) & pl.col("class").is_not_null())
            .select("uid", "class")
            .iter_rows()
        )
        unplanted += sum(1 for u in got if u not in cause)
        run_counts = {}
        for cls, c in CAUSE_OF.items():
            attributed = [u for u, k in got.items() if k == cls and u in cause]
            planted = causes.get(c, [])
            tp = sum(1 for u in attributed if cause[u] == c)
            run_counts[cls] = {"tp": tp, "attributed": len(attributed), "planted": len(planted)}
            for k, v in run_counts[cls].items():
                totals[cls][k] += v
        per_run[run] = run_counts
    classes = {
        cls: {
            **t,
            "precision": _ratio(t["tp"], t["attributed"]),
            "recall": _ratio(t["tp"], t["planted"]),
        }
        for cls, t in totals.items()
    }
    return {"runs": runs, "classes": classes, "per_run": per_run, "unplanted_attributed": unplanted}
