"""Image observations for VLM policies, through the model's processor.

In ``observation="image"`` mode a search shows the page *image* (``Corpus.image_path`` names it,
resolved under ``--image-root``) and a ``<bbox>`` shows a crop of it. The observation is rendered
by the processor's own chat template as a user message ``[{"type": "image", ...}, {"type": "text",
...}]`` and tokenized by the processor, which expands each image into its placeholder tokens; the
ids (placeholders included) carry ``env_mask`` 0 and the processor's image tensors travel with the
rollout into the loss forward pass (``DdaiGRPOTrainer``).

Built and tested against Qwen2-VL's processor with its PIL image processor on CPU; a real VLM
checkpoint's processor (fast image and video processors) needs torchvision beside torch, i.e. a
lent GPU machine. Kept small on purpose: one image family (``pixel_values`` + ``image_grid_thw``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_OBS_MARK = "\x00OBS\x00"
_ANS_MARK = "\x00ANS\x00"


@dataclass(frozen=True)
class ImageObservation:
    """One environment span tokenized by the processor."""

    ids: list[int]
    """Token ids of the span, image placeholder tokens included."""
    pixel_values: Any
    """``[patches, channels * temporal_patch * patch * patch]`` float tensor (None: no image)."""
    image_grid_thw: Any
    """``[n_images, 3]`` long tensor of (t, h, w) patch grids (None: no image)."""


def observation_content(text: str, images: Sequence[Any]) -> list[dict[str, Any]]:
    """The processor chat content of an observation: its images first, then its text."""
    return [*({"type": "image", "image": im} for im in images), {"type": "text", "text": text}]


def page_image_path(image_root: str | Path, corpus_path: str) -> Path:
    """Where a page image lies: ``Corpus.image_path``'s file name under ``image_root``."""
    return Path(image_root) / Path(corpus_path).name


@dataclass(frozen=True)
class ResizedPixels:
    """Qwen2.5-VL's box convention: absolute pixels on the smart-resized image (module doc)."""

    factor: int = 28
    """``patch_size * merge_size``: both resized sides are multiples of it."""
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280

    @classmethod
    def from_image_processor(cls, image_processor: Any) -> ResizedPixels:
        """The convention of a Qwen2-VL-family image processor (its resize bounds)."""
        size = image_processor.size
        get = size.get if isinstance(size, dict) else lambda k: getattr(size, k, None)
        lo = getattr(image_processor, "min_pixels", None) or get("shortest_edge")
        hi = getattr(image_processor, "max_pixels", None) or get("longest_edge")
        factor = int(image_processor.patch_size) * int(image_processor.merge_size)
        return cls(factor=factor, min_pixels=int(lo), max_pixels=int(hi))

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """``(width, height)`` of a ``width x height`` image as the model sees it."""
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        h, w = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        return w, h

    def to_page(self, bbox: Sequence[float], width: int, height: int) -> list[float]:
        """A box in resized-image pixels as a box in the ``width x height`` page's pixels."""
        rw, rh = self.resized(width, height)
        x1, y1, x2, y2 = (float(v) for v in bbox)
        # page size times box over resized size, DDAI's order: the ratio first loses the last
        # bit (574 * (2000 / 1148) = 999.99..., cast to 999 where DDAI's int() gives 1000)
        return [width * x1 / rw, height * y1 / rh, width * x2 / rw, height * y2 / rh]


DDAI_MAX_PIXELS = 512 * 28 * 28
"""DDAI's upper bound on the pixels of an image it shows the policy (401408)."""
DDAI_MIN_PIXELS = 256 * 28 * 28
"""DDAI's lower bound on the pixels of an image it shows the policy (200704)."""


def shown_size(width: int, height: int, max_pixels: int, min_pixels: int) -> tuple[int, int]:
    """``(width, height)`` of a ``width x height`` image as DDAI shows it to the policy.

    DDAI resizes every page image a search shows and every ``<bbox>`` crop before its processor
    sees them (vrag_agent/generation.py, ``process_image`` with 512*28*28 and 256*28*28 on both
    paths): an image of more than ``max_pixels`` pixels is scaled by the square root of
    ``max_pixels`` over its area, the aspect kept; then one of fewer than ``min_pixels`` (a small
    crop) is scaled up by the square root of ``min_pixels`` over its (current) area. Each scaled
    side is cast down to a whole pixel; nothing is rounded to a multiple of 28 here (the
    processor's smart resize does that after). A bound of 0 is no bound. A side never falls
    below 1 pixel (DDAI would fail on such a sliver; no page gets there).
    """
    w, h = int(width), int(height)
    if w < 1 or h < 1:
        raise ValueError(f"image of {w}x{h} pixels: nothing to show")
    if max_pixels and w * h > max_pixels:
        scale = math.sqrt(max_pixels / (w * h))
        w, h = max(1, int(w * scale)), max(1, int(h * scale))
    if min_pixels and w * h < min_pixels:
        scale = math.sqrt(min_pixels / (w * h))
        w, h = max(1, int(w * scale)), max(1, int(h * scale))
    return w, h


@dataclass(frozen=True)
class ShownImage:
    """The resize of every image shown to the policy (``shown_size``), DDAI's bounds by default;
    both 0: images go to the processor as they are (its own smart resize only)."""

    max_pixels: int = DDAI_MAX_PIXELS
    min_pixels: int = DDAI_MIN_PIXELS

    @property
    def active(self) -> bool:
        return bool(self.max_pixels or self.min_pixels)

    def size(self, width: int, height: int) -> tuple[int, int]:
        """``(width, height)`` of a ``width x height`` image as shown."""
        return shown_size(width, height, self.max_pixels, self.min_pixels)

    def apply(self, image: Any) -> Any:
        """``image`` (a path or PIL image) as shown: resized to ``size`` (Pillow's default
        filter, as DDAI's ``Image.resize`` call), then RGB. Not resized when inactive."""
        im = open_image(image)
        if self.active:
            size = self.size(im.width, im.height)
            if size != im.size:
                im = im.resize(size)
        return im.convert("RGB")

    def to_page(self, bbox: Sequence[float], width: int, height: int) -> list[float]:
        """A box in the shown image's pixels as a box in the ``width x height`` page's pixels:
        DDAI scales a ``<bbox>`` by the page's size over the shown image's size."""
        sw, sh = self.size(width, height)
        x1, y1, x2, y2 = (float(v) for v in bbox)
        # page size times box over shown size, in DDAI's order (exact where the ratio is not)
        return [width * x1 / sw, height * y1 / sh, width * x2 / sw, height * y2 / sh]


def open_image(image: Any) -> Any:
    """A PIL image from a path or a PIL image (not copied)."""
    from PIL import Image

    return image if isinstance(image, Image.Image) else Image.open(image)


def pad_box(bbox: Sequence[float], pad: int) -> Sequence[float]:
    """``[x1, y1, x2, y2]`` widened by ``pad`` on each side, in the box's own pixels (``bbox``
    itself when ``pad`` is 0). DDAI's evaluation widens every box by 28 of the pixels the model
    saw before scaling it to the page (vrag_agent/generation.py, ``_process_bbox_single``, its
    ``is_validation`` branch; its training crops the box as written); the crop clamps the
    widened box to the page (``crop_image``)."""
    if not pad:
        return bbox
    x1, y1, x2, y2 = (float(v) for v in bbox)
    return [x1 - pad, y1 - pad, x2 + pad, y2 + pad]


def crop_image(
    image: Any, bbox: Sequence[float], convention: ResizedPixels | None = None
) -> Any | None:
    """The ``[x1, y1, x2, y2]`` box of ``image`` (a path or PIL image), clamped to the page;
    None when the clamped box is empty. ``convention``: the box is in the model's resized-image
    pixels (else in the page's own pixels). Every edge is cast with ``int()`` after the scaling,
    as DDAI's crop does (vrag_agent/generation.py, ``_process_bbox_single``)."""
    page = open_image(image)
    if convention is not None:
        bbox = convention.to_page(bbox, page.width, page.height)
    x1, y1, x2, y2 = (int(float(v)) for v in bbox)
    box = (max(0, x1), max(0, y1), min(page.width, x2), min(page.height, y2))
    if box[2] <= box[0] or box[3] <= box[1]:
        return None
    return page.convert("RGB").crop(box)


def _load(image: Any) -> Any:
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    with Image.open(image) as im:
        return im.convert("RGB")


@dataclass(frozen=True)
class VisionObservationFormat:
    """How an observation (text and images) is wrapped between two assistant turns, rendered by
    the processor's chat template, and tokenized by the processor."""

    processor: Any
    close: str
    """Ends an assistant turn that stopped without its end-of-turn token."""

    @classmethod
    def from_processor(cls, processor: Any) -> VisionObservationFormat:
        eos = processor.tokenizer.eos_token or ""
        tail = cls._tail(processor, "")
        if not eos or not tail.startswith(eos):
            raise ValueError(
                "the processor's chat template does not end an assistant turn with the eos token "
                f"({eos!r}); set the tokenizer's eos_token to the end-of-turn token"
            )
        return cls(processor=processor, close=eos)

    @property
    def image_token_id(self) -> int:
        return int(self.processor.image_token_id)

    @staticmethod
    def _tail(processor: Any, text: str, n_images: int = 0) -> str:
        msgs = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": _ANS_MARK},
            {"role": "user", "content": observation_content(text, [_OBS_MARK] * n_images)},
        ]
        rendered = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return rendered.split(_ANS_MARK, 1)[1]

    def render(self, observation: str, n_images: int, *, closed: bool) -> str:
        """The text of the span: ``close`` (unless ``closed``), the user turn with one image
        placeholder per image (before expansion), and the next assistant header."""
        tail = self._tail(self.processor, observation, n_images)
        return tail[len(self.close) :] if closed else tail

    def prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """Token ids of the processor-templated prompt with the assistant header appended."""
        text = self.processor.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=True
        )
        return self.encode(text, []).ids

    def encode(self, text: str, images: Sequence[Any]) -> ImageObservation:
        """Tokenize ``text`` (placeholders for ``images`` in order) with the processor."""
        loaded = [_load(im) for im in images]
        out = self.processor(text=[text], images=loaded or None, return_tensors="pt")
        ids = out["input_ids"][0].tolist()
        if not loaded:
            return ImageObservation(ids, None, None)
        return ImageObservation(ids, out["pixel_values"], out["image_grid_thw"])


def vision_batch(
    pixel_values: Sequence[Any], image_grid_thw: Sequence[Any]
) -> dict[str, Any] | None:
    """One batch's image fields in TRL's layout from per-rollout lists of tensors.

    ``pixel_values[i]`` is ``[patches_i, D]`` (rollout ``i``'s images, concatenated in order) or
    None; the result holds ``pixel_values`` ``[sum patches, D]``, ``image_grid_thw``
    ``[n_images, 3]`` and ``num_images`` (images per rollout); None when no rollout saw an image.
    """
    import torch

    num = [0 if g is None else int(g.shape[0]) for g in image_grid_thw]
    if not any(num):
        return None
    return {
        "pixel_values": torch.cat([p for p in pixel_values if p is not None]),
        "image_grid_thw": torch.cat([g for g in image_grid_thw if g is not None]),
        "num_images": num,
    }


def slice_vision(fields: dict[str, Any], start: int, end: int) -> dict[str, Any] | None:
    """Rows ``start:end`` of a ``vision_batch`` (None when they hold no image)."""
    num = fields["num_images"]
    first, last = sum(num[:start]), sum(num[:end])
    if first == last:
        return None
    grid = fields["image_grid_thw"]
    rows = grid.prod(-1)
    row0, row1 = int(rows[:first].sum()), int(rows[:last].sum())
    return {
        "pixel_values": fields["pixel_values"][row0:row1],
        "image_grid_thw": grid[first:last],
        "num_images": list(num[start:end]),
    }


def on_device(fields: dict[str, Any], device: Any) -> dict[str, Any]:
    """``fields`` with every tensor moved to ``device`` (counts and other values kept)."""
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in fields.items()}
