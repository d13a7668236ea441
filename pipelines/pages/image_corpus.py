"""``ddai corpus build``: a page corpus from a folder of page images (DDAI's search corpus).

One row per image file (``.jpg``, ``.jpeg``, ``.png``, ``.webp``; the folder itself, not its
subfolders), in the ``pages.parquet`` shape of ``ddai.pipelines.pages.corpus`` plus the ``image`` column:

- ``page_id``: the file name without its extension, DDAI's ``reference_basenames``
  (``./search_engine/corpus/img/17_3.jpg`` → ``17_3``);
- ``doc_id`` / ``page``: split at the last ``_`` when what follows is a number (``17`` / 3);
  otherwise the whole name is the document and the page is 1;
- ``width`` / ``height``: the image's size in pixels (read from its header, not decoded);
- ``image``: the file, relative to the output's folder (the corpus and its images move
  together);
- ``text`` / ``lines``: from ``--text-from`` when given (a file with ``page_id`` and ``text``
  columns: Parquet, JSONL or CSV; a text corpus's ``pages.parquet`` also brings its line boxes,
  rescaled to the image's pixels), else empty. A text file that names none of the images (or
  holds no rows) is refused: a corpus without text would look finished.

Rows are ordered by document (numeric ids numerically) then page. The output is written
atomically with its manifest (inputs hashed, counts of pages with and without text).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.records.lazy import lazy_module

# the readers and writers load when a corpus is built: `ddai corpus build --help` reads the config
csv_cells = lazy_module("ddai.pipelines.records.csv_cells")
io = lazy_module("ddai.pipelines.store.io")
manifest = lazy_module("ddai.pipelines.store.manifest")
corpus_mod = lazy_module("ddai.pipelines.pages.corpus")

STEP = "corpus.build"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
_PAGE = re.compile(r"^(?P<doc>.+)_(?P<page>\d+)$")


@dataclass(frozen=True)
class CorpusBuildConfig:
    """What ``ddai corpus build`` reads and writes (``run``)."""

    images_dir: Path
    """Folder of page images named ``<doc>_<page>.jpg|png|webp`` (DDAI's corpus images); the file
    name without extension is the page id."""
    out: Path
    """The pages.parquet to write (atomically)."""
    text_from: Path | None = None
    """Page text: a .parquet/.jsonl/.csv file with page_id and text columns (a text corpus's
    pages.parquet also brings its line boxes, rescaled to the images)."""


class CorpusBuildError(ValueError):
    """Bad input to ``ddai corpus build`` (the message names the input and the fix)."""


@dataclass(frozen=True)
class BuildResult:
    out: str
    pages: int
    documents: int
    with_text: int
    text_rows_unmatched: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def split_page_id(page_id: str) -> tuple[str, int]:
    """``(doc_id, page)`` of a page basename: ``17_3`` → ``("17", 3)``; ``cover`` → ``("cover", 1)``."""
    m = _PAGE.match(page_id)
    if m is None:
        return page_id, 1
    return m.group("doc"), int(m.group("page"))


def _order(doc: str, page: int) -> tuple[Any, ...]:
    return (0, int(doc), "", page) if doc.isdigit() else (1, 0, doc, page)


def image_files(folder: Path) -> list[Path]:
    """The folder's page images; an error when there are none or two share a page id."""
    if not folder.is_dir():
        raise CorpusBuildError(f"IMAGES_DIR {folder}: not a folder; pass the folder of page images")
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        nested = next(
            (p for p in sorted(folder.rglob("*")) if p.suffix.lower() in IMAGE_SUFFIXES), None
        )
        hint = (
            f"; its subfolders hold some (e.g. {nested.relative_to(folder)}): pass the folder "
            "that holds the images themselves (subfolders are not read)"
            if nested is not None
            else ""
        )
        raise CorpusBuildError(
            f"IMAGES_DIR {folder}: no page images ({', '.join(IMAGE_SUFFIXES)}) in it{hint}"
        )
    seen: dict[str, Path] = {}
    for p in files:
        if p.stem in seen:
            raise CorpusBuildError(
                f"{seen[p.stem].name} and {p.name} are both page {p.stem!r}; keep one of them"
            )
        seen[p.stem] = p
    return sorted(files, key=lambda p: _order(*split_page_id(p.stem)))


def read_text_table(path: Path) -> dict[str, dict[str, Any]]:
    """``page_id`` → its row (``text``, and ``lines``/``width``/``height`` when present)."""
    import polars as pl

    readers = {".parquet": pl.read_parquet, ".jsonl": pl.read_ndjson, ".csv": pl.read_csv}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise CorpusBuildError(
            f"--text-from {path}: use a .parquet, .jsonl or .csv file with page_id and text columns"
        )
    if not path.is_file():
        raise CorpusBuildError(f"--text-from {path}: no such file")
    try:
        frame = reader(path)
        if path.suffix.lower() == ".csv":  # ddai's own CSVs escape text like "- item": undone
            frame = csv_cells.unescape_frame(frame)
    except Exception as e:  # polars raises several error types for unreadable input
        raise CorpusBuildError(f"--text-from {path}: cannot read it ({e})") from e
    missing = [c for c in ("page_id", "text") if c not in frame.columns]
    if missing:
        raise CorpusBuildError(
            f"--text-from {path}: missing column(s) {', '.join(missing)}; it needs page_id and text"
        )
    return {str(r["page_id"]): r for r in frame.to_dicts()}


def _lines(row: dict[str, Any], size: tuple[int, int]) -> list[dict[str, Any]] | None:
    """The text row's line boxes rescaled from its page size to the image's, if it has any."""
    lines = row.get("lines")
    if not lines:
        return None
    sx = size[0] / float(row.get("width") or size[0])
    sy = size[1] / float(row.get("height") or size[1])
    scale = (sx, sy, sx, sy)
    return [
        {"text": ln["text"], "bbox": [ln["bbox"][i] * scale[i] for i in range(4)]} for ln in lines
    ]


def _stored_path(image: Path, out_dir: Path) -> str:
    try:
        return os.path.relpath(image.resolve(), out_dir.resolve())
    except ValueError:  # another drive: no relative path exists
        return str(image.resolve())


def page_records(
    folder: Path, out_dir: Path, texts: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One ``pages.parquet`` record per image of ``folder`` (see the module docstring)."""
    from PIL import Image, UnidentifiedImageError

    records = []
    for path in image_files(folder):
        try:
            with Image.open(path) as im:
                size = im.size
        except (UnidentifiedImageError, OSError) as e:
            raise CorpusBuildError(f"{path}: not a readable image ({e}); remove or fix it") from e
        doc, page = split_page_id(path.stem)
        rec: dict[str, Any] = {
            "page_id": path.stem,
            "doc_id": doc,
            "page": page,
            "width": size[0],
            "height": size[1],
            "image": _stored_path(path, out_dir),
            "lines": [],
        }
        row = (texts or {}).get(path.stem)
        if row is not None:
            lines = _lines(row, size)
            if lines is None:
                rec.pop("lines")  # text only: one band per line (``Corpus``)
                rec["text"] = str(row.get("text") or "")
            else:
                rec["lines"] = lines
        records.append(rec)
    return records


def _check_text_matched(path: Path, texts: dict[str, dict[str, Any]], pages: list[str]) -> None:
    """Refuse a ``--text-from`` file that gives no image its text: the corpus would be written
    without text and local search would find nothing, with exit 0."""
    if set(texts) & set(pages):
        return
    if not texts:
        raise CorpusBuildError(
            f"--text-from {path}: it holds no rows (a header alone), so no page would get text; "
            "pass the file with the pages' text, or leave --text-from out for an image-only corpus"
        )
    raise CorpusBuildError(
        f"--text-from {path}: none of its {len(texts):,} page_id values names an image of the "
        f"folder (its first: {sorted(texts)[0]!r}; the images': {', '.join(pages[:3])}); a "
        "page_id is the image's file name without its extension (17_3.jpg → 17_3): fix the ids "
        "or pass the text of these images"
    )


def build(
    images_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    text_from: str | os.PathLike[str] | None = None,
) -> BuildResult:
    """Write ``out`` (``pages.parquet``) from the images of ``images_dir``; see the module doc."""
    folder, out_path = Path(images_dir), Path(out)
    texts = read_text_table(Path(text_from)) if text_from is not None else None
    records = page_records(folder, out_path.parent, texts)
    corpus = corpus_mod.Corpus.from_records(records, root=out_path.parent)
    if texts is not None:
        _check_text_matched(Path(str(text_from)), texts, corpus.pages())
    inputs: list[str | os.PathLike[str]] = [folder, *([text_from] if text_from else [])]
    record = manifest.start(STEP, {"text_from": str(text_from) if text_from else None}, inputs)
    with_text = sum(1 for p in corpus if p.text.strip())
    matched = len(set(texts or {}) & set(corpus.pages()))
    record.rows_in, record.rows_out = len(records), len(corpus)
    result = BuildResult(
        out=str(out_path),
        pages=len(corpus),
        documents=len(corpus.docs()),
        with_text=with_text,
        text_rows_unmatched=len(texts or {}) - matched,
    )
    record.notes = {"summary": result.to_dict()}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    io.write_parquet(out_path, corpus.to_table())
    manifest.write(out_path, record)
    return result


def run(cfg: CorpusBuildConfig) -> BuildResult:
    """``build`` with the settings of ``ddai corpus build``."""
    return build(cfg.images_dir, cfg.out, text_from=cfg.text_from)
