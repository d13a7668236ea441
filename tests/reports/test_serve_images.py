"""Page images for the explorer: looked up by page id only, cropped in image pixels."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from support.page_images import render_page_images

from ddai.pipelines.pages.corpus import Corpus
from ddai.reports.serve.images import crop_png, find_image, parse_bbox

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("img")
    corpus = Corpus.load(FIXTURES / "pages.parquet")
    first = corpus.pages()[:2]
    assert len(render_page_images(corpus, out, pages=first)) == 2
    return out, corpus, first


def test_a_line_box_crop_holds_ink_and_an_empty_box_none(pages):
    out, corpus, first = pages
    page = corpus.page(first[0])
    x1, y1, x2, y2 = page.lines[1].bbox
    with Image.open(io.BytesIO(crop_png(out / f"{first[0]}.png", (x1, y1, x2, y2)))) as im:
        assert im.size == (round(x2) - int(x1), round(y2) - int(y1))
        assert im.convert("L").getextrema()[0] < 128  # dark text pixels in the line's box
    w, h = page.width, page.height
    with Image.open(
        io.BytesIO(crop_png(out / f"{first[0]}.png", (w - 60, h / 2, w + 500, h / 2 + 10)))
    ) as im:
        assert im.size == (60, 10)  # clamped to the page
    blank = (w - 100, h - 100, w - 20, h - 40)  # the bottom-right corner holds no line
    with Image.open(io.BytesIO(crop_png(out / f"{first[0]}.png", blank))) as im:
        assert im.convert("L").getextrema() == (255, 255)


def test_find_image_takes_page_ids_only(pages):
    out, _, first = pages
    assert find_image(out, first[0]) == out / f"{first[0]}.png"
    assert find_image(out, "99_99") is None
    (out.parent / "outside.png").write_bytes(b"x")
    for bad in ("../outside", "..", "a/b", "/etc/passwd", ".hidden", ""):
        assert find_image(out, bad) is None


def test_parse_bbox():
    assert parse_bbox("[1, 2.5, 30, 40]") == (1.0, 2.5, 30.0, 40.0)
    assert parse_bbox("1,2,3,4") == (1.0, 2.0, 3.0, 4.0)
    for bad in ("1,2,3", "a,b,c,d", "5,5,1,1", "0,0,inf,inf", "0,0,nan,5", "-inf,0,1,1"):
        with pytest.raises(ValueError, match="bbox"):
            parse_bbox(bad)


def test_a_box_off_the_page_is_an_error(pages):
    out, _, first = pages
    with pytest.raises(ValueError, match="outside the 1024x768 image"):
        crop_png(out / f"{first[0]}.png", (5000, 5000, 6000, 6000))
