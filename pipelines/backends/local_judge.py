"""The local judge: answer vs ground truth by a string metric, no model.

Options (``[backends.NAME]`` with ``kind = "local-judge"``):

- ``metric``: ``em`` (normalized exact match, the default), ``f1`` (token F1), ``anls``,
  ``contains`` (the normalized reference occurs as whole tokens inside the answer), or ``max`` (the
  best of em, f1 and anls);
- ``threshold``: when set, the score is 1 if the metric reaches it, else 0 (a binary judge from a
  graded metric).

Normalization (``metrics.normalize_answer``) ignores case, punctuation, articles and number
formatting (``1,000`` = ``1000``, ``3.50`` = ``3.5``), so those variants score 1 under ``em``.
Quotes, brackets and sentence punctuation around a word are dropped first (``tidy``), so a
number keeps its decimal point in ``"6.0"`` or ``13.2!``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ddai.pipelines.backends.base import JudgeRequest, JudgeResult
from ddai.pipelines.backends.config import ConfigError
from ddai.pipelines.backends.local import LocalBackend
from ddai.pipelines.records import metrics

_LEAD = "\"'([{<“‘«"
_TRAIL = "\"'.,;:!?)]}>”’»"


def tidy(text: str | None) -> str:
    """Strip quotes, brackets and sentence punctuation around each word (``"6.0"`` → ``6.0``)."""
    return " ".join(t for t in (w.lstrip(_LEAD).rstrip(_TRAIL) for w in (text or "").split()) if t)


def contains(pred: str | None, answers: list[str]) -> float:
    """1 when some normalized answer's tokens appear contiguously in the normalized prediction."""
    p = metrics.normalize_answer(pred).split()
    for a in answers:
        t = metrics.normalize_answer(a).split()
        if t and any(p[i : i + len(t)] == t for i in range(len(p) - len(t) + 1)):
            return 1.0
    return 0.0


def best(pred: str | None, answers: list[str]) -> float:
    return max(
        metrics.exact_match(pred, answers),
        metrics.token_f1(pred, answers),
        metrics.anls(pred or "", answers),
    )


METRICS: dict[str, Callable[[str | None, list[str]], float]] = {
    "em": metrics.exact_match,
    "f1": metrics.token_f1,
    "anls": lambda p, a: metrics.anls(p or "", a),
    "contains": contains,
    "max": best,
}


def score(
    answer: str | None, reference: str, metric: str = "em", threshold: float | None = None
) -> float:
    """The local judge's score for one answer (pure; ``LocalJudge`` maps it over a batch)."""
    value = METRICS[metric](tidy(answer), [tidy(reference)])
    if threshold is not None:
        return 1.0 if value >= threshold else 0.0
    return value


class LocalJudge(LocalBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metric = str(self.spec.options.get("metric", "em"))
        if self.metric not in METRICS:
            raise ConfigError(
                f"[backends.{self.name}] metric {self.metric!r} is unknown; use one of: {', '.join(METRICS)}"
            )
        raw = self.spec.options.get("threshold")
        self.threshold = float(raw) if raw is not None else None

    async def judge(self, reqs: Sequence[JudgeRequest]) -> list[JudgeResult]:
        out = []
        for r in reqs:
            s = score(r.answer, r.reference, self.metric, self.threshold)
            out.append(JudgeResult(score=s, reason=f"{self.metric}={s:.3f}"))
        self._count(len(out))
        return out
