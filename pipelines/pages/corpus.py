"""The page-text corpus: every document page as text lines with layout boxes.

Stored as ``pages.parquet`` (one row per page):

| column | type | meaning |
| --- | --- | --- |
| ``page_id`` | string | ``{doc}_{page}``, DDAI's page basename (``17_3``) |
| ``doc_id`` | string | the document id |
| ``page`` | int32 | 1-based page number |
| ``text`` | string | the lines' texts joined by ``\\n`` |
| ``lines`` | list<struct<text, bbox: list<double>>> | each line with its box ``[x1, y1, x2, y2]`` in page pixels |
| ``width``, ``height`` | int32 | page size in pixels |
| ``image`` | string, optional | the page image's file, relative to the parquet's folder (image corpora, ``ddai corpus build``) |

``Corpus.crop`` answers a ``<bbox>`` action with the text of the lines the box touches, which is
what a search environment or a simulator shows in place of an image crop. ``Corpus.image_file``
is the page's real image when the corpus holds one (a text-only corpus has none and keeps working).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ddai.pipelines.records.deps import pa, pq
from ddai.pipelines.store import io


@functools.cache
def pages_schema(with_images: bool = False) -> pa.Schema:
    """A corpus file's schema; the ``image`` column only when some page has an image, so text
    corpora keep their exact shape. (Built on first use: importing this module loads no pyarrow.)"""
    line = pa.struct([("text", pa.string()), ("bbox", pa.list_(pa.float64()))])
    schema = pa.schema(
        [
            ("page_id", pa.string()),
            ("doc_id", pa.string()),
            ("page", pa.int32()),
            ("text", pa.string()),
            ("lines", pa.list_(line)),
            ("width", pa.int32()),
            ("height", pa.int32()),
        ]
    )
    return schema.append(pa.field("image", pa.string())) if with_images else schema


IMAGE_DIR = "corpus/img"
# Page size assumed for text-only records (a 4:3 slide).
DEFAULT_SIZE = (1024, 768)

Box = tuple[float, float, float, float]


def page_id(doc_id: str | int, page: int) -> str:
    """DDAI's page basename: ``{doc}_{page}``."""
    return f"{doc_id}_{page}"


def intersects(a: Box, b: Box) -> bool:
    """Whether two ``[x1, y1, x2, y2]`` boxes overlap with positive area (touching edges do not)."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


class Line(NamedTuple):
    """One text line of a page and its box ``(x1, y1, x2, y2)`` in page pixels."""

    text: str
    bbox: Box


@dataclass(frozen=True)
class Page:
    page_id: str
    doc_id: str
    page: int
    lines: tuple[Line, ...]
    width: int
    height: int
    image: str | None = None
    """The page image's file as stored (relative paths are relative to the corpus file)."""

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def to_record(self) -> dict[str, Any]:
        return {
            "page_id": self.page_id,
            "doc_id": self.doc_id,
            "page": self.page,
            "text": self.text,
            "lines": [{"text": ln.text, "bbox": [float(v) for v in ln.bbox]} for ln in self.lines],
            "width": self.width,
            "height": self.height,
            "image": self.image,
        }


def _page_from_record(rec: Mapping[str, Any]) -> Page:
    doc = str(rec["doc_id"])
    num = int(rec["page"])
    pid = str(rec.get("page_id") or page_id(doc, num))
    width = int(rec.get("width") or DEFAULT_SIZE[0])
    height = int(rec.get("height") or DEFAULT_SIZE[1])
    raw_lines = rec.get("lines")
    if raw_lines is None:
        # A text-only record: one full-width band per text line, so crop still works.
        texts = str(rec.get("text") or "").split("\n")
        band = height / max(len(texts), 1)
        raw_lines = [
            {"text": t, "bbox": [0.0, i * band, float(width), (i + 1) * band]}
            for i, t in enumerate(texts)
        ]
    lines = []
    for ln in raw_lines:
        box = ln["bbox"]
        if box is None or len(box) != 4:
            raise ValueError(f"page {pid}: a line's bbox must be [x1, y1, x2, y2], got {box!r}")
        x1, y1, x2, y2 = (float(v) for v in box)
        lines.append(Line(str(ln["text"]), (x1, y1, x2, y2)))
    image = rec.get("image")
    return Page(pid, doc, num, tuple(lines), width, height, str(image) if image else None)


class Corpus:
    """Pages by ``page_id``, in the order given (documents, then page number, when generated)."""

    def __init__(self, pages: Iterable[Page], *, root: str | os.PathLike[str] | None = None):
        self.root = Path(root) if root is not None else None
        """The folder relative image paths are resolved against (the corpus file's)."""
        self._pages: dict[str, Page] = {}
        self._by_doc: dict[str, list[str]] = {}
        for p in pages:
            if p.page_id in self._pages:
                raise ValueError(f"duplicate page_id {p.page_id!r} in the corpus")
            self._pages[p.page_id] = p
            self._by_doc.setdefault(p.doc_id, []).append(p.page_id)

    # ------------------------------------------------------------------ construction and IO
    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], *, root: str | os.PathLike[str] | None = None
    ) -> Corpus:
        """Build from dicts with the ``pages.parquet`` columns (``text`` alone also works)."""
        return cls((_page_from_record(r) for r in records), root=root)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Corpus:
        """Read ``pages.parquet`` (or a folder holding it)."""
        p = Path(path)
        if p.is_dir():
            p = p / "pages.parquet"
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no corpus here; make one with `ddai fixtures make OUT`")
        table = pq.read_table(p)
        if not table.num_rows:  # every search over it would come back empty
            raise ValueError(
                f"{p}: the corpus holds no pages; build it with `ddai corpus build` (page images) "
                "or `ddai fixtures make OUT`"
            )
        return cls.from_records(table.to_pylist(), root=p.parent)

    def to_table(self) -> pa.Table:
        schema = pages_schema(self.has_images)
        rows = [p.to_record() for p in self._pages.values()]
        return pa.Table.from_pylist(rows, schema=schema)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``pages.parquet`` atomically."""
        io.write_parquet(path, self.to_table())

    # ------------------------------------------------------------------ lookups
    def pages(self) -> list[str]:
        """All page ids, in corpus order."""
        return list(self._pages)

    def page(self, page_id: str) -> Page:
        try:
            return self._pages[page_id]
        except KeyError:
            raise KeyError(f"page {page_id!r} is not in the corpus ({len(self)} pages)") from None

    def text(self, page_id: str) -> str:
        return self.page(page_id).text

    def doc(self, page_id: str) -> str:
        return self.page(page_id).doc_id

    def doc_pages(self, doc_id: str) -> list[str]:
        """The page ids of one document, in page order."""
        return list(self._by_doc.get(doc_id, ()))

    def docs(self) -> list[str]:
        """All document ids, in corpus order."""
        return list(self._by_doc)

    def size(self, page_id: str) -> tuple[int, int]:
        """``(width, height)`` in pixels."""
        p = self.page(page_id)
        return p.width, p.height

    def crop(self, page_id: str, bbox: Iterable[float]) -> str:
        """Text of the lines whose boxes intersect ``bbox`` (``[x1, y1, x2, y2]``), joined by ``\\n``.

        Empty string when no line intersects.
        """
        vals = [float(v) for v in bbox]
        if len(vals) != 4:
            raise ValueError(f"bbox must have four numbers [x1, y1, x2, y2], got {vals}")
        box: Box = (vals[0], vals[1], vals[2], vals[3])
        hits = [ln.text for ln in self.page(page_id).lines if intersects(ln.bbox, box)]
        return "\n".join(hits)

    def image_path(self, page_id: str) -> str:
        """A stable pseudo image path for DDAI-shaped observations (``corpus/img/{page_id}.jpg``)."""
        self.page(page_id)
        return f"{IMAGE_DIR}/{page_id}.jpg"

    @property
    def has_images(self) -> bool:
        """Whether any page has a real image file (an image corpus)."""
        return any(p.image for p in self._pages.values())

    def image_file(self, page_id: str) -> Path | None:
        """The page's image file (relative paths resolved against ``root``), or None."""
        stored = self.page(page_id).image
        if not stored:
            return None
        path = Path(stored)
        return path if path.is_absolute() or self.root is None else self.root / path

    def __contains__(self, page_id: object) -> bool:
        return page_id in self._pages

    def __len__(self) -> int:
        return len(self._pages)

    def __iter__(self) -> Iterator[Page]:
        return iter(self._pages.values())
