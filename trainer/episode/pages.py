"""A run's page images and the policy that reads them, for every room that plays episodes
(``ddai train grpo``, ``ppo`` and ``collect``), from its ``PageSettings``
(``--observation``/``--image-root``/``--generator-max-images``).

``page_images`` finds each page's image (an image corpus's own, else ``{page_id}.jpg`` under
``--image-root``): with it the environment records the pages and crops an episode gathered
(``Episode.images``) and the streaming scorer sends them to a multimodal generator, whatever the
policy reads. ``observation_policy`` loads the policy for the run's observation kind: a text
causal LM, or with ``--observation image`` a VLM with its processor's observation format and box
convention.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.vision import ResizedPixels, VisionObservationFormat, page_image_path


def page_images(cfg: Any, corpus: Any) -> Any:
    """``image_of(page_id)`` for the run's page images, or None when it has none: the corpus's own
    image (an image corpus), else ``{page_id}.jpg`` under ``cfg.image_root`` (a search service may
    return pages the corpus lacks). ``cfg``: a run config with ``PageSettings`` and ``corpus``."""
    root = Path(cfg.image_root) if cfg.image_root is not None else None
    if root is not None and not root.is_dir():
        root = None
    if not corpus.has_images and root is None:
        return None

    def image_of(pid: str) -> Path:
        own = corpus.image_file(pid) if pid in corpus else None
        if own is not None:
            return own
        if root is not None:
            return page_image_path(root, f"{pid}.jpg")
        raise KeyError(f"page {pid!r} has no image in --corpus {cfg.corpus}; add --image-root DIR")

    return image_of


def observation_policy(
    cfg: Any, image_of: Any, *, model: str | None = None
) -> tuple[Any, Any, VisionObservationFormat | None, ResizedPixels | None]:
    """``(model, tokenizer, vision, box_convention)`` for ``cfg.observation``: a text policy
    (``vision`` and ``box_convention`` None), or a VLM whose processor renders the page images
    (``--observation image``, which needs ``image_of``; real checkpoints' processors need
    torchvision). ``model``: load this instead of ``cfg.model`` (a checkpoint to resume from)."""
    from ddai.trainer.modeling import load_policy, load_vision_model

    name = model or cfg.model
    if cfg.observation == "text":
        policy, tok = load_policy(name, dtype=cfg.dtype)
        return policy, tok, None, None
    if cfg.observation != "image":
        raise TrainConfigError(f"--observation {cfg.observation!r}: use text or image")
    if image_of is None:
        raise TrainConfigError(
            f"--image-root {cfg.image_root}: not a folder; point it at the page images, or "
            "build an image corpus with `ddai corpus build` (image observations need them)"
        )
    policy, processor = load_vision_model(name, dtype=cfg.dtype)
    vision = VisionObservationFormat.from_processor(processor)
    boxes = ResizedPixels.from_image_processor(processor.image_processor)
    return policy, processor.tokenizer, vision, boxes
