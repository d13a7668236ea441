"""Images for multimodal calls: file paths or ``data:`` URLs, as bytes, data URLs or fingerprints."""

from __future__ import annotations

import base64
import hashlib
import io
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
