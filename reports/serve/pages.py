"""Page images from a corpus for the explorer, without loading the corpus as Python objects.

``Corpus.load`` turns every page and every line into Python objects: 17 s for the 111,078 pages
of the synthetic world at ``--size large``, paid by the first page image a reader asked for.
``CorpusPages`` keeps the corpus as the Arrow table it is read as (0.4 s for the same file), with a
page-id → row index, read in a background thread as the app starts (off the request path; a
request before it is done waits for it, never loads it twice), and builds a ``Page`` for one row
when its image is asked for. The last 256 drawings are kept.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ddai.pipelines.pages.corpus import Corpus, page_id


class CorpusPages:
    """``find(page_id)``: the page's image file when the corpus names one that exists, else the
    page drawn from its text as PNG bytes; None when the corpus lacks the page."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        self.path = path / "pages.parquet" if path.is_dir() else path
        self._ready = threading.Event()
        self._started = threading.Lock()
        self._thread: threading.Thread | None = None
        self._table: pa.Table | None = None
        self._rows: dict[str, int] = {}
        self._error: BaseException | None = None
        self.find = lru_cache(maxsize=256)(self._find)

    def start(self) -> None:
        """Read the index in a background thread (once)."""
        with self._started:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._load, name="ddai-serve-corpus", daemon=True
                )
                self._thread.start()

    def _load(self) -> None:
        try:
            table = pq.read_table(self.path)
            if "page_id" in table.column_names:
                ids = table.column("page_id").to_pylist()
            else:  # a corpus of doc_id + page only: the ids Corpus would give them
                docs, nums = table.column("doc_id").to_pylist(), table.column("page").to_pylist()
                ids = [page_id(d, int(n)) for d, n in zip(docs, nums, strict=True)]
            self._rows = {str(pid): i for i, pid in enumerate(ids)}
            self._table = table
        except BaseException as e:  # shown to the request that waits for it
            self._error = e
        finally:
            self._ready.set()

    def wait(self) -> None:
        """Block until the index is read; re-raise its error, if any."""
        self.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"--corpus {self.path} could not be read: {self._error}")

    @property
    def loaded(self) -> bool:
        return self._ready.is_set() and self._error is None

    def _find(self, pid: str) -> Path | bytes | None:
        from ddai.pipelines.pages.page_images import draw_page

        self.wait()
        row = self._rows.get(pid)
        if row is None or self._table is None:
            return None
        record = self._table.slice(row, 1).to_pylist()[0]
        corpus = Corpus.from_records([record], root=self.path.parent)
        image = corpus.image_file(pid)
        if image is not None and image.is_file():
            return image
        return draw_page(corpus.page(pid))
