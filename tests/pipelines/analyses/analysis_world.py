"""A hand-planted log store for the round analyses; every expected value is worked out here.

Run ``r`` (judge-only reward; reference page ``{n}_1`` for prompt ``p{n}``), 4 rollouts per prompt
at step 1 unless noted. "gold" = the reference page retrieved.

| uid | rollouts (judge, gold, answer)                         | mean | expected class (reason)            |
| p1  | 4 × (0, no, "x")                                       | 0    | search_failure (no golden)          |
| p2  | (0,gold,"a") (0,gold,"b") (0,gold,"c") (0,no,"d")      | 0    | generator_bottleneck (3 > 1)        |
| p3  | 4 × (0, gold, "42 ") + p3 is not flagged               | 0    | wrong_gt (agreed 4 on "42")         |
| p4  | 4 × (0, gold, "Unknown")                               | 0    | generator_bottleneck (refusals)     |
| p5  | 4 × (0, no, "z"), review flag "uncertain"              | 0    | wrong_gt (review_uncertain)         |
| p6  | (1,gold) (1,gold) (1,gold) (0,no,"q")                  | 0.75 | not low: class NULL                 |
| p7  | (1,gold) (0,no) (0,no) (0,gold,"w")                    | 0.25 | search_failure (2 without > 1 with) |

Latency (extra.latency_s) on p1's rollouts: 1, 2, 3, 4 s; p2's: none; p2/3 logs error "Judge
timed out" and no reward or judge score (its judge is None: a timeout). Every other rollout has
reward = judge. p8 is at step 2 with 2 rollouts, both reward 1 (a constant group, always_full).

So run r: 30 rollouts; 29 rewarded; latency on 4 (p50 2.5, max 4); 1 timeout.
Zero-variance groups at step 1: p1 (0), p3 (0), p4 (0), p5 (0), plus step 2 p8 (1). p2 has
judge 0,0,0 and one missing: scores 0,0,0 → constant 0 too. p6 and p7 vary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.pipelines import store

RUN = "r"


def _row(uid: str, idx: int, judge: float | None, gold: bool, answer: str, **kw: Any) -> dict:
    n = uid[1:]
    extra = kw.pop("extra", {})
    return {
        "uid": uid,
        "rollout_idx": idx,
        "step": kw.pop("step", 1),
        "question": f"question {uid}",
        "reference_answer": "41",
        "reference_pages": [f"{n}_1"],
        "retrieved_pages": [f"{n}_1"] if gold else [f"{n}_2", "99_1"],
        "answer": answer,
        "judge_score": judge,
        "ndcg": 1.0 if gold else 0.0,
        "format_ok": True,
        "reward": kw.pop("reward", judge),
        "extra": extra,
    }


def rows() -> list[dict]:
    out = []
    out += [_row("p1", i, 0.0, False, "x", extra={"latency_s": float(i + 1)}) for i in range(4)]
    out += [
        _row("p2", 0, 0.0, True, "a"),
        _row("p2", 1, 0.0, True, "b"),
        _row("p2", 2, 0.0, True, "c"),
        _row("p2", 3, None, False, "d", extra={"error": "Judge timed out after 90 s"}),
    ]
    out += [_row("p3", i, 0.0, True, "42 " if i % 2 else "42.") for i in range(4)]
    out += [_row("p4", i, 0.0, True, "Unknown") for i in range(4)]
    out += [_row("p5", i, 0.0, False, "z") for i in range(4)]
    out += [_row("p6", i, 1.0, True, "41") for i in range(3)] + [_row("p6", 3, 0.0, False, "q")]
    out += [
        _row("p7", 0, 1.0, True, "41"),
        _row("p7", 1, 0.0, False, "v"),
        _row("p7", 2, 0.0, False, "u"),
        _row("p7", 3, 0.0, True, "w"),
    ]
    out += [_row("p8", i, 1.0, True, "41", step=2) for i in range(2)]
    return out


def planted_store(root: Path) -> tuple[Path, Path]:
    """(log store, review CSV flagging p5 uncertain and p6 ok)."""
    logs = root / "logs"
    store.write_run(logs, RUN, rows())
    flags = root / "review.csv"
    flags.write_text("uid,verdict,reason\np5,uncertain,page unreadable\np6,ok,\n")
    return logs, flags
