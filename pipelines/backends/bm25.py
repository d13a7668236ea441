"""The local search: BM25 (``bm25s``) over the page-text corpus.

``search(query, k, doc=None)`` ranks every page, or with ``doc`` only that document's pages (a
search restricted to the question's deck, as DDAI's per-document retrieval does). Scores are
bm25s's; ties keep corpus order, so a ranking is a function of the corpus and the query alone.
Options: ``k1``, ``b`` (BM25 parameters, bm25s's defaults otherwise), ``stopwords`` (``en`` by
default; ``none`` to keep every word).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import bm25s

from ddai.pipelines.backends.config import ConfigError
from ddai.pipelines.backends.local import LocalBackend
from ddai.pipelines.records.deps import np


class BM25Index:
    """A BM25 index over ``(page_id, doc_id, text)`` triples."""

    def __init__(
        self,
        page_ids: Sequence[str],
        doc_ids: Sequence[str],
        texts: Sequence[str],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        stopwords: str | None = "en",
    ) -> None:
        if not page_ids:
            raise ValueError("cannot index an empty corpus")
        self.page_ids = list(page_ids)
        self._stopwords = stopwords
        self._retriever = bm25s.BM25(k1=k1, b=b)
        tokens = bm25s.tokenize(list(texts), stopwords=stopwords, show_progress=False)
        self._retriever.index(tokens, show_progress=False)
        self._doc_rows: dict[str, np.ndarray] = {}
        rows: dict[str, list[int]] = {}
        for i, d in enumerate(doc_ids):
            rows.setdefault(str(d), []).append(i)
        self._doc_rows = {d: np.asarray(r, dtype=np.int64) for d, r in rows.items()}

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every page for ``query``, ``float32 [n_pages]``."""
        toks = bm25s.tokenize(
            [query], stopwords=self._stopwords, return_ids=False, show_progress=False
        )[0]
        known = [t for t in toks if t in self._retriever.vocab_dict]
        if not known:
            return np.zeros(len(self.page_ids), dtype=np.float32)
        return np.asarray(self._retriever.get_scores(known), dtype=np.float32)

    def search(self, query: str, k: int = 5, doc: str | None = None) -> list[tuple[str, float]]:
        scores = self.scores(query)
        if doc is None:
            rows = np.arange(len(self.page_ids))
        else:
            rows = self._doc_rows.get(str(doc), np.zeros(0, dtype=np.int64))
        sub = scores[rows]
        # Stable sort on the negated score: equal scores keep corpus order.
        order = np.argsort(-sub, kind="stable")[: max(k, 0)]
        return [(self.page_ids[int(rows[i])], float(sub[i])) for i in order]


class BM25Search(LocalBackend):
    """The ``bm25`` search backend; needs ``corpus=`` (a ``Corpus`` or a ``pages.parquet`` path)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        corpus = self.context.corpus
        if corpus is None:
            raise ConfigError(
                f"search backend {self.name!r} needs a page corpus: pass corpus=<pages.parquet or Corpus>"
            )
        stop = self.spec.options.get("stopwords", "en")
        pages = list(corpus)
        if pages and not any(p.text.strip() for p in pages):
            raise ConfigError(
                f"search backend {self.name!r} (BM25) has no page text to index: build the image "
                "corpus with `ddai corpus build --text-from FILE`, or name a search service"
            )
        self.index = BM25Index(
            [p.page_id for p in pages],
            [p.doc_id for p in pages],
            [p.text for p in pages],
            k1=float(self.spec.options.get("k1", 1.5)),
            b=float(self.spec.options.get("b", 0.75)),
            stopwords=None if stop in (None, "none") else str(stop),
        )

    def search(self, query: str, k: int = 5, doc: str | None = None) -> list[tuple[str, float]]:
        self._count(1)
        return self.index.search(query, k, doc)
