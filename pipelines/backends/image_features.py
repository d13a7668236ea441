"""Image features for the local embedders: a small colour thumbnail, no model and no key.

A picture is decoded with Pillow, converted to RGB, shrunk to ``SIDE × SIDE`` with box averaging,
flattened (``IMAGE_DIM`` numbers), centred on its own mean and L2-normalized: pictures of similar
colour and layout get similar vectors. ``join`` puts an item's text vector and the mean of its
images' vectors side by side, weighted so the result is unit-norm: ``[√(1−w)·text, √w·image]``
(an item without images gets zeros in the image half). It is the local stand-in for a multimodal
encoder; a remote one (``kind = "openai"`` on a vLLM embedding server) sees the pixels.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from ddai.pipelines.backends import media
from ddai.pipelines.records.deps import np

SIDE = 8
IMAGE_DIM = 3 * SIDE * SIDE
DEFAULT_IMAGE_WEIGHT = 0.5


def image_vector(ref: str) -> np.ndarray:
    """``float32 [IMAGE_DIM]``, unit-norm (zero for a uniform grey picture, which has no colour
    or layout to compare)."""
    try:
        from PIL import Image
    except ImportError as e:  # pillow comes with the `embed` extra
        raise ImportError(
            "image embeddings need pillow: pip install 'ddai[embed]' (or pip install pillow)"
        ) from e
    data = media.load(ref).data  # a missing file: FileNotFoundError naming it
    try:
        with Image.open(io.BytesIO(data)) as img:
            small = img.convert("RGB").resize((SIDE, SIDE), Image.Resampling.BOX)
            v = np.asarray(small, dtype=np.float32).reshape(-1) / 255.0
    except (OSError, ValueError) as e:
        raise ValueError(
            f"image {ref!r} is not a picture Pillow can read ({e}); fix or drop its row"
        ) from e
    v -= v.mean()
    n = float(np.linalg.norm(v))
    # A uniform picture centres to rounding noise: call it zero rather than blow the noise up.
    return v / n if n > 1e-4 else np.zeros_like(v)


def join(
    text_vecs: np.ndarray, images: Sequence[Sequence[str]], weight: float = DEFAULT_IMAGE_WEIGHT
) -> np.ndarray:
    """``[N, D + IMAGE_DIM]`` from text vectors ``[N, D]`` (unit rows) and each item's images."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"image_weight must be in [0, 1], got {weight}")
    img = np.zeros((len(images), IMAGE_DIM), dtype=np.float32)
    for row, refs in enumerate(images):
        if refs:
            mean = np.mean([image_vector(r) for r in refs], axis=0)
            n = float(np.linalg.norm(mean))
            img[row] = mean / n if n > 0 else mean
    text = np.asarray(text_vecs, dtype=np.float32).reshape(len(images), -1)
    return np.concatenate([np.sqrt(1.0 - weight) * text, np.sqrt(weight) * img], axis=1)
