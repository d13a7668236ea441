"""The local GT verifier: checks a reference answer against its reference page's text.

``check`` decides, in order:

1. A numeric reference is compared with the numbers on the page lines that best match the
   question (``textmatch.rank_lines``; several when they tie, e.g. one entity on two slides): one
   of them, or the difference of two of them (SlideVQA's "by how much did X change" answers) →
   ``ok``; other numbers there → ``wrong`` (the page contradicts the reference, even when it
   prints the reference on another line). When no line matches the question, the reference is
   ``ok`` if the page prints it, else ``uncertain``.
2. A text reference is ``ok`` when its words occur on the page, or when a window of the page's
   words is within ANLS ``fuzzy`` of it (OCR noise, small spelling differences); else ``uncertain``.

Flagged = ``wrong`` or ``uncertain``, as in the funnel's review sheet.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from ddai.pipelines.backends import textmatch as tm
from ddai.pipelines.backends.base import Verdict, VerifyRequest, VerifyResult
from ddai.pipelines.backends.local import LocalBackend
from ddai.pipelines.records import metrics

DEFAULT_FUZZY = 0.8


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)


def _difference(target: float, values: list[float]) -> tuple[float, float] | None:
    """Two of ``values`` whose difference is ``±target``."""
    for a, b in itertools.permutations(values, 2):
        if tm.same_number(abs(b - a), abs(target)):
            return a, b
    return None


def _check_number(
    target: float, question: str, reference: str, lines: list[str]
) -> tuple[Verdict, str]:
    ranked = tm.rank_lines(question, lines, numeric=True)
    top = [
        r.line.strip() for r in ranked if ranked[0].score > 0 and r.score >= ranked[0].score - 1e-9
    ]
    if top:
        values = [v for line in top for v in tm.line_values(line, question)]
        if any(tm.same_number(target, v) for v in values):
            return "ok", f"the line answering the question reads {top[0]!r}"
        pair = _difference(target, values)
        if pair is not None:
            return (
                "ok",
                f"the reference is the difference of {pair[1]:g} and {pair[0]:g} on {top!r}",
            )
        return (
            "wrong",
            f"the page gives {_fmt(values)} on {'; '.join(top)!r}, the reference says {reference!r}",
        )
    printed = [
        ln.strip()
        for ln in lines
        if any(tm.same_number(target, v) for v in tm.line_values(ln, question))
    ]
    if printed:
        return "ok", f"the page prints {reference!r} on {printed[0]!r}"
    return "uncertain", f"no line of the page matches the question, and none prints {reference!r}"


def _fuzzy_hit(reference: str, lines: list[str], threshold: float) -> tuple[str, float] | None:
    ref = " ".join(tm.words(reference))
    n = len(ref.split())
    best: tuple[str, float] | None = None
    for line in lines:
        ws = tm.words(line)
        for i in range(max(len(ws) - n + 1, 1)):
            window = " ".join(ws[i : i + n])
            s = metrics.anls(window, [ref])
            if s >= threshold and (best is None or s > best[1]):
                best = (window, s)
    return best


NO_TEXT = "the reference page has no text"
"""The local verifier's reason when it was shown no page text: it could only answer uncertain."""


def check(
    question: str, reference: str, page_text: str, *, fuzzy: float = DEFAULT_FUZZY
) -> tuple[Verdict, str]:
    """The verdict on one ground truth and the reason, in one sentence (pure)."""
    lines = [ln for ln in (page_text or "").splitlines() if ln.strip()]
    if not lines:
        return "uncertain", NO_TEXT
    if not (reference or "").strip():
        return "uncertain", "the reference answer is empty"
    ref_numbers = tm.numbers(reference)
    if ref_numbers:
        return _check_number(ref_numbers[0], question, reference, lines)
    if tm.contains_phrase(page_text, reference):
        return "ok", f"the page contains {reference!r}"
    hit = _fuzzy_hit(reference, lines, fuzzy)
    if hit is not None:
        return "ok", f"the page has {hit[0]!r}, close to {reference!r} (ANLS {hit[1]:.2f})"
    return "uncertain", f"the page does not mention {reference!r}"


class LocalVerifier(LocalBackend):
    """Options: ``fuzzy`` (ANLS threshold for a text match, default 0.8)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fuzzy = float(self.spec.options.get("fuzzy", DEFAULT_FUZZY))

    async def verify(self, reqs: Sequence[VerifyRequest]) -> list[VerifyResult]:
        out = []
        for r in reqs:
            verdict, reason = check(r.question, r.reference, r.page_text, fuzzy=self.fuzzy)
            out.append(VerifyResult(verdict=verdict, reason=reason))
        self._count(len(out))
        return out
