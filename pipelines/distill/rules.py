"""The think-only rewrite's safety rules (seed 000, 7.2; DESIGN.md; ddai-formats README).

A rewritten think is rolled back to its original when it

- holds think-tag text (``<think>`` / ``</think>``): it would split or merge turns;
- holds action-tag text (``ACTION_TAG_TEXT_RE`` of the tag grammar: ``<``, optional ``/``,
  optional spaces, ``search``, ``bbox``, ``search_complete`` or ``answer``, any case);
- adds an observation claim the original lacked (``ClaimRules``).

DDAI's rewrite-time copies of these regexes were double-escaped inside raw strings
(``r"\\\\b..."``), so they looked for a literal backslash and never matched; these are tested
with cases that must and must not match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# Rule keys: what manifests count and reports name.
OUTSIDE_THINK_CHANGED = "outside-think-changed"
STRUCTURE_CHANGED = "structure-changed"
THINK_TAG_IN_REWRITE = "think-tag-in-rewrite"
ACTION_TAG_IN_REWRITE = "action-tag-in-rewrite"
NEW_OBSERVATION_CLAIM = "new-observation-claim"
ACTION_TAG_IN_ORIGINAL = "action-tag-in-original"

THINK_TAG_TEXT_RE = re.compile(r"<\s*/?\s*think\b", re.IGNORECASE)

# One pattern per claim, so a rewrite that adds "I can see" to a think that already said
# "in the image" is still caught. The Korean rule: 이미지/사진 + 에서/에, later 보이/보인다/확인
# (DOTALL: a claim split over lines is still a claim).
DEFAULT_CLAIM_PATTERNS: tuple[str, ...] = (
    r"(?i)\bthe image shows\b",
    r"(?i)\bin the image\b",
    r"(?i)\bvisible in the image\b",
    r"(?i)\bi can see\b",
    r"(?i)\bit clearly shows\b",
    r"(?s)(?:이미지|사진)(?:에서|에).*(?:보이|보인다|확인)",
)


@dataclass(frozen=True)
class ClaimRules:
    """Observation-claim patterns (regular expressions; flags inline, e.g. ``(?i)``)."""

    patterns: tuple[str, ...] = DEFAULT_CLAIM_PATTERNS
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = []
        for p in self.patterns:
            try:
                compiled.append(re.compile(p))
            except re.error as e:
                raise ValueError(
                    f"observation-claim pattern {p!r} is not a valid regex: {e}"
                ) from e
        object.__setattr__(self, "_compiled", tuple(compiled))

    @classmethod
    def of(cls, patterns: Sequence[str] | None) -> ClaimRules:
        return cls(tuple(patterns)) if patterns else cls()

    def claims(self, text: str) -> list[str]:
        """The patterns that match ``text``."""
        return [p.pattern for p in self._compiled if p.search(text)]

    def added(self, original: str, rewritten: str) -> list[str]:
        """Patterns that match the rewrite but not the original: claims the rewrite introduced."""
        before = set(self.claims(original))
        return [p for p in self.claims(rewritten) if p not in before]


def think_violation(original: str, rewritten: str, claims: ClaimRules) -> str | None:
    """The first rule a rewritten think breaks (None when it may replace ``original``)."""
    if rewritten == original:
        return None
    # here, not at import: ``ClaimRules`` is read by ``ddai distill --help`` (the tag grammar is not)
    from ddai.pipelines.records.tags import ACTION_TAG_TEXT_RE

    if THINK_TAG_TEXT_RE.search(rewritten):
        return THINK_TAG_IN_REWRITE
    if ACTION_TAG_TEXT_RE.search(rewritten):
        return ACTION_TAG_IN_REWRITE
    if claims.added(original, rewritten):
        return NEW_OBSERVATION_CLAIM
    return None
