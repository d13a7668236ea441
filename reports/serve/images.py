"""Page images for the transcript: found under ``--image-root`` by page id, cropped for ``<bbox>``."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

from PIL import Image

EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp")
# DDAI page ids are ``{doc}_{page}``; anything with a slash or a dot-dot never names a file here
PAGE_ID = re.compile(r"^[A-Za-z0-9][\w\-]{0,200}$")
MEDIA = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}


def find_image(root: Path, page_id: str) -> Path | None:
    """``root/{page_id}.{png,jpg,jpeg,webp}`` if one exists; None for a malformed id or no file."""
    if not PAGE_ID.match(page_id):
        return None
    for ext in EXTENSIONS:
        path = root / f"{page_id}{ext}"
        if path.is_file():
            return path
    return None


def parse_bbox(text: str) -> tuple[float, float, float, float]:
    """``"x1,y1,x2,y2"`` (brackets and spaces allowed) → a box with x1 < x2 and y1 < y2."""
    parts = [p for p in re.split(r"[,\s]+", text.strip().strip("[]")) if p]
    if len(parts) != 4:
        raise ValueError(f"bbox={text!r}: give four numbers x1,y1,x2,y2")
    try:
        x1, y1, x2, y2 = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"bbox={text!r}: give four numbers x1,y1,x2,y2") from None
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)):
        raise ValueError(f"bbox={text!r}: give four finite numbers x1,y1,x2,y2 (no inf or nan)")
    if not (x1 < x2 and y1 < y2):
        raise ValueError(f"bbox={text!r}: needs x1 < x2 and y1 < y2")
    return x1, y1, x2, y2


def crop_png(src: Path | bytes, bbox: tuple[float, float, float, float]) -> bytes:
    """The box of the image at ``src`` (a path or image bytes; pixels, clamped to the image) as
    PNG bytes."""
    with Image.open(io.BytesIO(src) if isinstance(src, bytes) else src) as im:
        w, h = im.size
        x1, y1 = max(0, int(bbox[0])), max(0, int(bbox[1]))
        x2, y2 = min(w, round(bbox[2])), min(h, round(bbox[3]))
        if x2 <= x1 or y2 <= y1:
            raise ValueError(f"bbox {list(bbox)} lies outside the {w}x{h} image")
        buf = io.BytesIO()
        im.crop((x1, y1, x2, y2)).save(buf, format="PNG")
        return buf.getvalue()
