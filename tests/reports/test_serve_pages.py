"""Page images of a corpus read as an Arrow table with a page-id index, off the request path."""

from __future__ import annotations

import io

from PIL import Image

from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.pages.page_images import draw_page
from ddai.reports.serve.pages import CorpusPages


def _corpus(tmp_path) -> Corpus:
    Image.new("RGB", (64, 48), "red").save(tmp_path / "9_1.png")
    records = [
        {"doc_id": "4", "page": 2, "text": "alpha\nbeta", "width": 400, "height": 300},
        {"doc_id": "9", "page": 1, "text": "gamma", "width": 64, "height": 48, "image": "9_1.png"},
    ]
    corpus = Corpus.from_records(records, root=tmp_path)
    corpus.save(tmp_path / "pages.parquet")
    return corpus


def test_pages_come_from_the_index_as_the_corpus_would_give_them(tmp_path):
    corpus = _corpus(tmp_path)
    pages = CorpusPages(tmp_path)  # the folder, as --corpus takes it
    assert not pages.loaded
    pages.start()
    pages.wait()
    assert pages.loaded
    # a text page is drawn exactly as from the loaded corpus; an image page is its file
    assert pages.find("4_2") == draw_page(corpus.page("4_2"))
    with Image.open(io.BytesIO(pages.find("4_2"))) as im:
        assert im.size == (400, 300)
    assert pages.find("9_1") == tmp_path / "9_1.png"
    assert pages.find("4_9") is None


def test_a_request_before_the_index_is_read_waits_for_it(tmp_path):
    _corpus(tmp_path)
    pages = CorpusPages(tmp_path / "pages.parquet")
    # never started: the first lookup starts the read and waits for it
    assert pages.find("9_1") == tmp_path / "9_1.png"


def test_an_unreadable_corpus_says_so(tmp_path):
    bad = tmp_path / "pages.parquet"
    bad.write_text("not parquet")
    pages = CorpusPages(bad)
    try:
        pages.find("4_2")
    except RuntimeError as e:
        assert "--corpus" in str(e) and "could not be read" in str(e)
    else:
        raise AssertionError("no error for an unreadable corpus")
