"""Conversations with page images for VLM SFT (TRL's vision-language SFT path).

DDAI's ``train1`` observations are user messages ``[{"image": path}]`` (or typed blocks
``{"type": "image", "image": path}``), or strings such as ``[System Error: …]``. For a model with a
processor they stay images: every message becomes typed blocks, each image an ``{"type":
"image"}`` placeholder, and the row's ``images`` column lists the files in order, resolved as the
path's file name under ``--image-root`` (DDAI's paths point into its own machine's
``search_engine/corpus/img``). TRL's ``DataCollatorForVisionLanguageModeling`` fills the
placeholders, the processor expands each into its image tokens, and assistant-only loss masks
every user turn, image tokens included.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class MissingImage(ValueError):
    """A conversation names an image that is not under the image root."""


@dataclass(frozen=True)
class ImageConversation:
    """One SFT row for a VLM: typed-block messages and the image files they show, in order."""

    messages: list[dict[str, Any]]
    images: list[str]

    def to_row(self) -> dict[str, Any]:
        return {"messages": self.messages, "images": self.images}


def _blocks(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str | dict):
        return [content]
    return list(content)


def image_conversation(messages: Any, image_root: str | Path | None) -> ImageConversation:
    """Typed-block messages and image paths from a ``messages`` list or its JSON text.

    Raises ``MissingImage`` when an image is not a file under ``image_root``, ``ValueError`` /
    ``KeyError`` on unreadable messages.
    """
    if isinstance(messages, str):
        messages = json.loads(messages)
    out: list[dict[str, Any]] = []
    images: list[str] = []
    for m in messages:
        blocks: list[dict[str, Any]] = []
        for b in _blocks(m.get("content")):
            if isinstance(b, str):
                blocks.append({"type": "text", "text": b})
                continue
            if not isinstance(b, dict):
                blocks.append({"type": "text", "text": str(b)})
                continue
            # Typed blocks read back from Parquet carry every key (``text: None`` on an image).
            src = b.get("image") or b.get("path")
            if b.get("type") == "image" or (b.get("type") is None and src):
                if image_root is None:
                    raise MissingImage(f"image {src!r} but no --image-root")
                path = Path(image_root) / Path(str(src)).name
                if not path.is_file():
                    raise MissingImage(f"image {src!r}: {path} not found")
                images.append(str(path))
                blocks.append({"type": "image", "text": None})
            elif b.get("text") is not None:
                blocks.append({"type": "text", "text": str(b["text"])})
            else:
                blocks.append({"type": "text", "text": json.dumps(b, ensure_ascii=False)})
        out.append({"role": str(m["role"]), "content": blocks})
    return ImageConversation(out, images)


def vision_dataset(convs: list[ImageConversation]) -> Any:
    """A ``datasets.Dataset`` with ``messages`` and ``images`` (decoded lazily from the files)."""
    from datasets import Dataset, Image, List

    ds = Dataset.from_list([c.to_row() for c in convs])
    return ds.cast_column("images", List(Image()))
