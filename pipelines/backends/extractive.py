"""The local generator: answers by extracting from the evidence pages' text, no model.

``extract`` finds the page line that best matches the question (``textmatch.rank_lines``) and
answers with the value printed on it: the first number the question does not already print
(``1,894``, ``42%``), or for who/which/where questions and lines without one, the line's words
that are not the question's. Page texts come with the request or from the backend's corpus.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ddai.pipelines.backends import textmatch as tm
from ddai.pipelines.backends.base import GenerateRequest, GenerateResult
from ddai.pipelines.backends.local import LocalBackend

NO_ANSWER = "Cannot determine from the provided pages."
_TEXT_QUESTION = re.compile(r"^\s*(which|who|whom|where)\b", re.IGNORECASE)


def _number_answer(question: str, lines: list[str]) -> str | None:
    ranked = tm.rank_lines(question, lines, numeric=True)
    if not ranked or ranked[0].score <= 0:
        return None
    asked = set(tm.number_tokens(question))
    return next(tok for tok in tm.number_tokens(ranked[0].line) if tok not in asked)


def _text_answer(question: str, lines: list[str]) -> str | None:
    ranked = tm.rank_lines(question, lines, numeric=False)
    if not ranked or ranked[0].score <= 0:
        return None
    asked = set(tm.words(question))
    # Keep the line's own spelling: drop the words the question already has and a label's colon,
    # then function words left at either end ("Prepared by: Acme" → "Acme").
    kept = [w for w in ranked[0].line.replace(":", " ").split() if not set(tm.words(w)) <= asked]
    while kept and set(tm.words(kept[0])) <= tm.STOPWORDS:
        kept.pop(0)
    while kept and set(tm.words(kept[-1])) <= tm.STOPWORDS:
        kept.pop()
    return " ".join(kept) or None


def extract(question: str, page_texts: Sequence[str]) -> str:
    """The extractive answer to ``question`` from ``page_texts`` (pure)."""
    lines = [ln for text in page_texts for ln in text.splitlines() if ln.strip()]
    order = (
        (_text_answer, _number_answer)
        if _TEXT_QUESTION.match(question)
        else (_number_answer, _text_answer)
    )
    for find in order:
        answer = find(question, lines)
        if answer:
            return answer
    return NO_ANSWER


class ExtractiveGenerator(LocalBackend):
    reads_images = False
    """It answers from page text alone (the training preflight refuses it over pages without
    text: ``ddai.trainer.episode.preflight_steps.check_pages_readable``)."""

    async def generate(self, reqs: Sequence[GenerateRequest]) -> list[GenerateResult]:
        corpus = self.context.corpus
        out = []
        missing = 0
        for r in reqs:
            if r.page_texts is not None:
                texts = list(r.page_texts)
            elif corpus is not None:
                texts = [corpus.text(p) for p in r.pages if p in corpus]
            else:
                out.append(
                    GenerateResult(
                        answer=None, error="no-text: give page_texts or build with a corpus"
                    )
                )
                missing += 1
                continue
            out.append(GenerateResult(answer=extract(r.question, texts)))
        self._count(len(out), {"no-text": missing} if missing else None)
        return out
