"""Images for multimodal calls: file paths or ``data:`` URLs, as bytes, data URLs or fingerprints.

A prompt places its images with ``IMAGE_SLOT`` markers: ``interleave`` splits the text at them and
puts the request's images there in order (an in-context prompt shows each demonstration's image
before its text, seed 002); images beyond the slots follow the text, as for a prompt without any.
"""

from __future__ import annotations

import base64
import hashlib
import io
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

IMAGE_SLOT = "<|image|>"
"""Where a prompt shows one of its images; never sent as text."""

Part = tuple[Literal["text", "image"], str]


@dataclass(frozen=True)
class Image:
    mime: str
    data: bytes

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


def load(ref: str) -> Image:
    """Read a path or a ``data:<mime>;base64,...`` URL."""
    if ref.startswith("data:"):
        head, _, payload = ref.partition(",")
        if ";base64" not in head or not payload:
            raise ValueError(
                f"image data URL must be base64 (data:<mime>;base64,...), got {ref[:40]!r}"
            )
        return Image(
            head[5:].split(";", 1)[0] or "application/octet-stream", base64.b64decode(payload)
        )
    p = Path(ref)
    if not p.is_file():
        raise FileNotFoundError(f"image {ref!r} does not exist; pass a readable file or a data URL")
    mime = mimetypes.guess_type(p.name)[0] or "application/octet-stream"
    return Image(mime, p.read_bytes())


def pil_data_url(image: Any, fmt: str = "PNG") -> str:
    """A PIL image (e.g. a page crop that exists only in memory) as a ``data:`` URL."""
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return Image(f"image/{fmt.lower()}", buf.getvalue()).data_url()


def fingerprint(ref: str) -> str:
    """sha256 of the image's bytes: the same picture under another path hits the same cache row."""
    return hashlib.sha256(load(ref).data).hexdigest()


def interleave(text: str, images: list[str]) -> list[Part]:
    """``text`` split at ``IMAGE_SLOT`` with the images in order: ``[("text", t), ("image", ref),
    ...]``; empty text pieces are left out, images beyond the slots come after the text.

    More slots than images is a bad request (``ValueError``), never a silent text-only prompt."""
    pieces = text.split(IMAGE_SLOT)
    n_slots = len(pieces) - 1
    if n_slots > len(images):
        raise ValueError(
            f"the prompt has {n_slots} image slots but the request carries {len(images)} images; "
            "give every demonstration and the query their image paths"
        )
    parts: list[Part] = []
    for i, piece in enumerate(pieces):
        if i:
            parts.append(("image", images[i - 1]))
        if piece.strip():
            parts.append(("text", piece.strip("\n") if n_slots else piece))
    parts += [("image", ref) for ref in images[n_slots:]]
    return parts
