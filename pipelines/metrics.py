"""Pure retrieval and answer metrics: DDAI's NDCG, ANLS, exact match, token F1, VQAv2 accuracy.

No IO here; every function is deterministic and safe on empty input.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter


def dedupe(items: list[str] | None) -> list[str]:
    """Distinct items in first-seen order."""
    seen: set[str] = set()
    out: list[str] = []
    for x in items or []:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def ndcg(retrieved: list[str], golden: list[str]) -> float:
    """DDAI's NDCG: binary relevance over the distinct retrieved pages in first-seen order.

    DCG = Σ_i (2^rel_i − 1) / log2(i + 1) over retrieved positions i = 1…R; the ideal list has as
    many 1s as there are golden pages, padded with 0s to R and never truncated, so a single correct
    page out of two golden ones scores ``1 / (1 + 1/log2 3) ≈ 0.613``. 0 with no golden or no
    retrieved page.
    """
    gold = set(golden or [])
    ret = dedupe(retrieved)
    if not gold or not ret:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, page in enumerate(ret) if page in gold)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(len(gold)))
    return dcg / ideal if ideal > 0 else 0.0


def first_golden_rank(retrieved: list[str], golden: list[str]) -> int | None:
    """1-based rank of the first golden page among the distinct retrieved pages, else None."""
    gold = set(golden or [])
    for i, page in enumerate(dedupe(retrieved)):
        if page in gold:
            return i + 1
    return None


def doc_of(page: str) -> str:
    """Document id of a page basename ``{doc}_{page}``."""
    return page.rsplit("_", 1)[0] if "_" in page else page


# ---------------------------------------------------------------- answer normalization

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?[\d,]*\.?\d+%?$")


def _canonical_number(tok: str) -> str:
    t = tok.replace(",", "")
    pct = t.endswith("%")
    t = t.rstrip("%")
    try:
        v = float(t)
    except ValueError:
        return tok
    s = f"{v:.10g}"
    return s + ("%" if pct else "")


def normalize_answer(s: str | None) -> str:
    """Lowercase, strip accents' compatibility forms, punctuation, articles and extra spaces;
    numbers are canonicalised (``1,000`` → ``1000``, ``3.50`` → ``3.5``)."""
    if not s:
        return ""
    s = unicodedata.normalize("NFKC", s).lower().strip()
    toks = []
    for tok in s.split():
        if _NUMBER.match(tok.strip(".")):
            toks.append(_canonical_number(tok.strip(".")))
        else:
            toks.append("".join(ch for ch in tok if ch not in _PUNCT))
    s = " ".join(t for t in toks if t)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(pred: str | None, answers: list[str]) -> float:
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(a) for a in answers if a is not None))


def token_f1(pred: str | None, answers: list[str]) -> float:
    """Max over answers of SQuAD-style token F1 on normalized text."""
    ptoks = normalize_answer(pred).split()
    best = 0.0
    for a in answers:
        atoks = normalize_answer(a).split()
        if not ptoks or not atoks:
            best = max(best, float(ptoks == atoks))
            continue
        common = Counter(ptoks) & Counter(atoks)
        same = sum(common.values())
        if same == 0:
            continue
        prec, rec = same / len(ptoks), same / len(atoks)
        best = max(best, 2 * prec * rec / (prec + rec))
    return best


def levenshtein(a: str, b: str) -> int:
    if a == b:
        return 0
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(pred: str, answers: list[str], tau: float = 0.5) -> float:
    """Average Normalized Levenshtein Similarity for one prediction (Biten et al., 2019).

    For each answer: NL = lev(p, a) / max(|p|, |a|) on lowercased, whitespace-stripped text;
    score = 1 − NL if NL < tau else 0; the max over answers.
    """
    p = " ".join((pred or "").lower().split())
    best = 0.0
    for a in answers:
        g = " ".join((a or "").lower().split())
        if not p and not g:
            return 1.0
        nl = levenshtein(p, g) / max(len(p), len(g))
        best = max(best, 1.0 - nl if nl < tau else 0.0)
    return best
