"""The local vetter: DDAI's two criteria sets approximated by text heuristics, no model.

It needs no key and no network, and says what it is: every reason starts with ``local
heuristics``, and it never judges ``evidence_mismatch`` (it sees no page) or semantic drift beyond
word overlap with the question. Rules, per query: ``code`` when it looks like code, a URL or a
stack trace; ``gibberish`` when it holds a replacement or control character, three or more
scripts, or fewer than half letters/digits among its visible characters; ``drift`` when it shares
no word of three or more characters with the question; else ``ok``. Per trajectory (the rollout
set): ``query_collapse`` when a query is gibberish or code, ``repetitive_actions`` when one query
is sent three times or two adjacent queries are the same twice, ``gibberish`` when a think is,
``format_violation`` when the counters report a grammar fault or no final search_complete.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from ddai.pipelines.backends.base import VetRequest, VetResult
from ddai.pipelines.backends.local import LocalBackend

LOCAL_NOTE = "local heuristics"
_CODE_RE = re.compile(
    r"://|Traceback|\bdef\s+\w+\(|\bimport\s+\w+|\b(?:SELECT|FROM)\b.*\b(?:WHERE|FROM)\b|[{};]\s*$"
    r"|%[0-9A-Fa-f]{2}.*%[0-9A-Fa-f]{2}|</?\w+>"
)
_WORD_RE = re.compile(r"\w{3,}")


def _script(ch: str) -> str | None:
    """The script of a letter (LATIN, HANGUL, CJK, CYRILLIC, ...); None for anything else."""
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else None


def text_label(text: str) -> str:
    """``code``, ``gibberish`` or ``ok`` for a query or think text (drift is not judged here)."""
    if _CODE_RE.search(text):
        return "code"
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return "gibberish"
    if "\ufffd" in text or any(unicodedata.category(c) == "Cc" for c in visible):
        return "gibberish"
    if len({s for s in map(_script, visible) if s}) >= 3:
        return "gibberish"
    if sum(c.isalnum() for c in visible) < len(visible) / 2:
        return "gibberish"
    return "ok"


def query_label(query: str, question: str) -> str:
    """One of ``QUERY_LABELS`` for a query of ``question``."""
    label = text_label(query)
    if label != "ok":
        return label
    asked = {w.casefold() for w in _WORD_RE.findall(question)}
    said = {w.casefold() for w in _WORD_RE.findall(query)}
    return "drift" if asked and said and not (asked & said) else "ok"


def vet_one(req: VetRequest) -> VetResult:
    """The local verdict on one request (pure)."""
    labels = tuple(query_label(q, req.question) for q in req.queries)
    if req.criteria == "queries":
        bad = sorted({lb for lb in labels if lb in ("gibberish", "code")})
        why = f"{LOCAL_NOTE}: " + (f"{', '.join(bad)} query" if bad else "no corrupted query")
        return VetResult(keep=not bad, labels=labels, reason=why)
    counters = dict(req.counters)
    failed: list[str] = []
    if any(lb in ("gibberish", "code") for lb in labels):
        failed.append("query_collapse")
    norm = [" ".join(q.split()).casefold() for q in req.queries]
    adjacent = sum(a == b for a, b in itertools.pairwise(norm))
    if adjacent >= 2 or (norm and max(Counter(norm).values()) >= 3):
        failed.append("repetitive_actions")
    if any(text_label(t) == "gibberish" for t in req.thinks):
        failed.append("gibberish")
    if counters.get("grammar_faults", 0) or not counters.get("has_search_complete", 1):
        failed.append("format_violation")
    why = f"{LOCAL_NOTE}: " + (", ".join(failed) if failed else "no severe problem found")
    return VetResult(keep=not failed, criteria=tuple(failed), reason=why)


class LocalVetter(LocalBackend):
    async def vet(self, reqs: Sequence[VetRequest]) -> list[VetResult]:
        self._count(len(reqs))
        return [vet_one(r) for r in reqs]
