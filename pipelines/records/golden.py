"""Golden-page coverage: which of a dataset's golden pages a corpus actually holds.

A prompt whose golden pages are not in the corpus can never be found by search (NDCG stays 0)
and gives a verifier no page to read, so training or verifying on it spends calls blind. Used by
the training preflight (``ddai.trainer.episode.preflight``) and ``ddai curate verify-gt``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

EXAMPLES = 10
"""Missing page ids named in a message."""


@dataclass
class Coverage:
    """How a dataset's golden pages fall in a corpus."""

    prompts: int = 0
    """Prompts that name golden pages."""
    prompts_without_golden: int = 0
    """Prompts that name none (nothing to check)."""
    prompts_missing: list[str] = field(default_factory=list)
    """Prompt ids with at least one golden page the corpus lacks, in dataset order."""
    pages: int = 0
    """Distinct golden pages."""
    missing_pages: list[str] = field(default_factory=list)
    """Distinct golden pages the corpus lacks, first-seen order."""

    @property
    def ok(self) -> bool:
        return not self.missing_pages

    def describe(self, corpus_name: str) -> str:
        """One sentence naming what is missing (empty when nothing is)."""
        if self.ok:
            return ""
        shown = ", ".join(self.missing_pages[:EXAMPLES])
        more = len(self.missing_pages) - EXAMPLES
        return (
            f"{len(self.prompts_missing)} of {self.prompts} prompts have golden pages missing "
            f"from the corpus {corpus_name} ({len(self.missing_pages)} of {self.pages} distinct "
            f"golden pages missing: {shown}{f', … {more} more' if more > 0 else ''})"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "prompts": self.prompts,
            "prompts_without_golden": self.prompts_without_golden,
            "prompts_missing": len(self.prompts_missing),
            "pages": self.pages,
            "missing_pages": len(self.missing_pages),
            "missing_examples": self.missing_pages[:EXAMPLES],
        }


def coverage(
    prompts: Iterable[tuple[str, Sequence[str]]], has_page: Callable[[str], bool]
) -> Coverage:
    """Check ``(prompt id, golden page ids)`` pairs against ``has_page`` (e.g. ``page in corpus``)."""
    out = Coverage()
    seen: set[str] = set()
    missing: set[str] = set()
    for uid, pages in prompts:
        if not pages:
            out.prompts_without_golden += 1
            continue
        out.prompts += 1
        lacks = False
        for p in pages:
            if p not in seen:
                seen.add(p)
                if not has_page(p):
                    missing.add(p)
                    out.missing_pages.append(p)
            lacks = lacks or p in missing
        if lacks:
            out.prompts_missing.append(uid)
    out.pages = len(seen)
    return out
