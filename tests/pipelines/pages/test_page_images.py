"""Page images drawn from the text corpus: the corpus's page size, each line's text in its box."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image
from support.page_images import render_page_images

from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.pages.page_images import draw_page

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def test_render_pages_writes_one_png_per_page_at_the_corpus_size(tmp_path):
    corpus = Corpus.load(FIXTURES / "pages.parquet")
    first = corpus.pages()[:3]
    assert len(render_page_images(corpus, tmp_path, pages=first)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{p}.png" for p in first)
    for pid in first:
        with Image.open(tmp_path / f"{pid}.png") as im:
            assert im.size == corpus.size(pid)


def test_ink_lies_inside_the_line_boxes_only():
    corpus = Corpus.from_records(
        [
            {
                "page_id": "1_1",
                "doc_id": "1",
                "page": 1,
                "width": 300,
                "height": 200,
                "lines": [
                    {"text": "Title", "bbox": [10, 10, 200, 40]},
                    {"text": "East 12", "bbox": [20, 100, 200, 130]},
                ],
            }
        ]
    )
    with Image.open(io.BytesIO(draw_page(corpus.page("1_1")))) as im:
        gray = im.convert("L")
        # the second line's box has dark text; the band between the lines has none
        assert gray.crop((20, 100, 200, 130)).getextrema()[0] < 100
        assert gray.crop((20, 50, 200, 90)).getextrema() == (255, 255)
