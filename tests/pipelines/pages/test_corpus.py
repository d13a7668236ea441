"""The page-text corpus: records, Parquet round trip, crops by bounding box."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from ddai.pipelines.pages.corpus import Corpus, intersects, pages_schema

# One 100×100 page: "a" top left, "b" below it, "c" right of "b" with a gap at x 50..60.
LINES = [
    {"text": "a", "bbox": [0, 0, 50, 10]},
    {"text": "b", "bbox": [0, 20, 50, 30]},
    {"text": "c", "bbox": [60, 20, 90, 30]},
]


@pytest.fixture
def corpus() -> Corpus:
    return Corpus.from_records(
        [
            {"doc_id": "7", "page": 1, "width": 100, "height": 100, "lines": LINES},
            {"doc_id": "7", "page": 2, "width": 100, "height": 100, "lines": LINES[:1]},
            {"doc_id": "9", "page": 1, "width": 100, "height": 100, "lines": []},
        ]
    )


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        ([0, 5, 10, 25], "a\nb"),  # overlaps a (y 5..10) and b (y 20..25); c starts at x 60
        ([0, 0, 100, 100], "a\nb\nc"),  # the whole page, in line order
        ([55, 0, 58, 100], ""),  # the gap between b (x ≤ 50) and c (x ≥ 60)
        ([50, 0, 60, 100], ""),  # touching edges have no area in common
        ([61, 29, 62, 31], "c"),  # a sliver of c's bottom edge
        ([0, 95, 100, 100], ""),  # below every line
    ],
)
def test_crop_returns_the_lines_the_box_touches(corpus, box, expected):
    assert corpus.crop("7_1", box) == expected


def test_crop_rejects_a_box_without_four_numbers(corpus):
    with pytest.raises(ValueError, match="four numbers"):
        corpus.crop("7_1", [0, 0, 10])


def test_intersects_is_symmetric_and_strict():
    a, b = (0.0, 0.0, 10.0, 10.0), (5.0, 5.0, 15.0, 15.0)
    assert intersects(a, b) and intersects(b, a)
    assert not intersects(a, (10.0, 0.0, 20.0, 10.0))


def test_lookups(corpus):
    assert corpus.pages() == ["7_1", "7_2", "9_1"]
    assert len(corpus) == 3
    assert "7_2" in corpus and "8_1" not in corpus
    assert corpus.text("7_1") == "a\nb\nc"
    assert corpus.text("9_1") == ""
    assert corpus.doc("7_2") == "7"
    assert corpus.doc_pages("7") == ["7_1", "7_2"]
    assert corpus.docs() == ["7", "9"]
    assert corpus.image_path("7_2") == "corpus/img/7_2.jpg"
    with pytest.raises(KeyError, match="8_1"):
        corpus.text("8_1")


def test_parquet_round_trip_keeps_the_contract_schema(corpus, tmp_path):
    corpus.save(tmp_path / "pages.parquet")
    table = pq.read_table(tmp_path / "pages.parquet")
    assert table.schema.remove_metadata().equals(pages_schema())
    row = table.slice(0, 1).to_pylist()[0]
    assert row["page_id"] == "7_1" and row["page"] == 1 and row["text"] == "a\nb\nc"
    assert row["lines"][2] == {"text": "c", "bbox": [60.0, 20.0, 90.0, 30.0]}
    again = Corpus.load(tmp_path)  # a folder holding pages.parquet works too
    assert again.pages() == corpus.pages()
    assert again.crop("7_1", [0, 5, 10, 25]) == "a\nb"


def test_text_only_records_get_one_full_width_band_per_line(tmp_path):
    # 3 lines on a 300-high page: bands of 100 px, y 0..100, 100..200, 200..300.
    c = Corpus.from_records(
        [{"doc_id": "1", "page": 4, "text": "x\ny\nz", "width": 40, "height": 300}]
    )
    assert c.pages() == ["1_4"]
    assert c.crop("1_4", [0, 150, 40, 160]) == "y"
    assert c.crop("1_4", [0, 90, 40, 210]) == "x\ny\nz"


def test_bad_input_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match="duplicate page_id"):
        Corpus.from_records([{"doc_id": "1", "page": 1, "text": "a"}] * 2)
    with pytest.raises(ValueError, match="bbox"):
        Corpus.from_records([{"doc_id": "1", "page": 1, "lines": [{"text": "a", "bbox": [1, 2]}]}])
    with pytest.raises(FileNotFoundError, match="ddai fixtures make"):
        Corpus.load(tmp_path / "nowhere.parquet")


def test_a_corpus_file_without_pages_is_refused_naming_it(tmp_path):
    """An empty ``pages.parquet`` (every search over it would come back empty) is refused where it
    is read, naming the file and how to build one."""
    path = tmp_path / "pages.parquet"
    pq.write_table(pages_schema(False).empty_table(), path)
    with pytest.raises(ValueError, match=r"pages\.parquet: the corpus holds no pages"):
        Corpus.load(tmp_path)
