"""Text heuristics the local generator and GT verifier share: which page line answers a question,
and the values (numbers) printed on it.

A line's relevance is the IDF-weighted overlap of its words with the question's content words,
IDF taken over the lines given: a word on every line of a slide says little, the entity named once
says a lot. Only *value lines* compete: lines that print a number the question does not already
contain (``numeric``), or else words it does not contain.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from ddai.pipelines.records import metrics

# Question words that never identify a line (compared after normalization, so no apostrophes).
STOPWORDS = frozenset(
    {
        *("a", "an", "the", "of", "in", "on", "at", "to", "for", "by", "from", "and", "or"),
        *("is", "was", "were", "are", "be", "been", "did", "does", "do", "than", "that", "this"),
        *("these", "those", "as", "with", "its", "it", "s", "what", "which", "who", "whom"),
        *("whose", "when", "where", "how", "much", "many", "shown", "show", "report", "reported"),
        *("according", "deck", "slide", "page"),
    }
)
_NUM = re.compile(r"(?<![\w.])[-+−]?\d(?:[\d,]*\d)?(?:\.\d+)?%?")


_POSSESSIVE = re.compile(r"['’]s\b")


def words(text: str) -> list[str]:
    """Normalized tokens (``metrics.normalize_answer``, possessive ``'s`` dropped), numbers canonical."""
    return metrics.normalize_answer(_POSSESSIVE.sub("", text)).split()


def content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in STOPWORDS}


def numbers(text: str) -> list[float]:
    """Every number printed in ``text``, as floats (``1,894`` → 1894, ``42%`` → 42, ``−3.5`` → -3.5)."""
    out = []
    for m in _NUM.finditer(text):
        tok = m.group(0).replace(",", "").rstrip("%").replace("−", "-")
        try:
            out.append(float(tok))
        except ValueError:
            continue
    return out


def number_tokens(text: str) -> list[str]:
    """The numbers as printed (``1,894``, ``42%``)."""
    return [m.group(0).replace("−", "-") for m in _NUM.finditer(text)]


def same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def contains_phrase(haystack: str, needle: str) -> bool:
    """Whether the normalized words of ``needle`` occur contiguously in ``haystack``'s."""
    h, n = words(haystack), words(needle)
    return bool(n) and any(h[i : i + len(n)] == n for i in range(len(h) - len(n) + 1))


@dataclass(frozen=True)
class Ranked:
    line: str
    score: float


def rank_lines(question: str, lines: list[str], *, numeric: bool) -> list[Ranked]:
    """Value lines by relevance to ``question``, best first (ties keep page order)."""
    q_words = content_words(question)
    line_words = [content_words(line) for line in lines]
    df = Counter(w for ws in line_words for w in ws)
    n = max(len(lines), 1)
    ranked = []
    for line, ws in zip(lines, line_words, strict=True):
        has_value = bool(line_values(line, question)) if numeric else bool(ws - q_words)
        if not has_value:
            continue
        score = sum(math.log(1.0 + n / df[w]) for w in ws & q_words)
        ranked.append(Ranked(line, score))
    ranked.sort(key=lambda r: -r.score)
    return ranked


def line_values(line: str, question: str) -> list[float]:
    """The numbers on ``line`` that the question does not itself print (e.g. not its year).

    Compared as printed, so a value ``2,012`` still counts on a line of a question about 2012.
    """
    asked = set(number_tokens(question))
    out = []
    for tok in number_tokens(line):
        if tok in asked:
            continue
        out.extend(numbers(tok))
    return out
