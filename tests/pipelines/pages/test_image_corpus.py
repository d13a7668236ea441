"""``ddai corpus build``: an image corpus from a folder of generated page images."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from cli_schemas import check
from PIL import Image
from support.page_images import build_image_corpus, render_page_images
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.pages.image_corpus import split_page_id
from ddai.pipelines.store import manifest

runner = CliRunner()


def _text_corpus() -> Corpus:
    rows = []
    for doc, page, line in [("10", 2, "Sales 2020: 42"), ("9", 1, "Cover"), ("10", 1, "Intro")]:
        rows.append(
            {
                "doc_id": doc,
                "page": page,
                "lines": [{"text": line, "bbox": [10, 10, 150, 40]}],
                "width": 200,
                "height": 100,
            }
        )
    return Corpus.from_records(rows)


@pytest.fixture
def images(tmp_path):
    text = _text_corpus()
    text.save(tmp_path / "text" / "pages.parquet")
    render_page_images(text, tmp_path / "img", ext="jpg")
    Image.new("RGB", (64, 32), "white").save(tmp_path / "img" / "deck-cover.png")
    (tmp_path / "img" / "notes.txt").write_text("not an image")
    return tmp_path


def test_split_page_id():
    assert split_page_id("17_3") == ("17", 3)
    assert split_page_id("my_deck_12") == ("my_deck", 12)
    assert split_page_id("cover") == ("cover", 1)


def test_build_over_generated_page_images(images):
    out = images / "corpus" / "pages.parquet"
    res = runner.invoke(app, ["corpus", "build", str(images / "img"), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    check("corpus-build", summary)  # docs/schemas/corpus-build.json
    assert summary["pages"] == 4 and summary["documents"] == 3 and summary["with_text"] == 0
    corpus = Corpus.load(out)
    # Numeric documents numerically (9 before 10), then pages; named documents after.
    assert corpus.pages() == ["9_1", "10_1", "10_2", "deck-cover"]
    page = corpus.page("10_2")
    assert (page.doc_id, page.page, page.width, page.height) == ("10", 2, 200, 100)
    assert corpus.page("deck-cover").width == 64
    # Stored relative to the corpus file, resolved back to the image itself.
    assert page.image == "../img/10_2.jpg"
    assert corpus.image_file("10_2").read_bytes() == (images / "img" / "10_2.jpg").read_bytes()
    assert corpus.has_images and corpus.text("10_2") == ""
    rec = manifest.read(out)
    assert rec["step"] == "corpus.build" and rec["rows"]["out"] == 4


def test_text_from_a_text_corpus_rescales_its_boxes(images, tmp_path):
    # The image of 10_2 is drawn at twice the text corpus's page size.
    big = Image.open(images / "img" / "10_2.jpg").resize((400, 200))
    big.save(images / "img" / "10_2.jpg")
    out = tmp_path / "pages.parquet"
    res = build_image_corpus(images / "img", out, images / "text" / "pages.parquet", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["with_text"] == 3
    corpus = Corpus.load(out)
    assert corpus.text("10_2") == "Sales 2020: 42"
    assert corpus.page("10_2").lines[0].bbox == (20.0, 20.0, 300.0, 80.0)
    assert corpus.page("9_1").lines[0].bbox == (10.0, 10.0, 150.0, 40.0)
    assert corpus.crop("10_2", [0, 0, 30, 30]) == "Sales 2020: 42"


def test_text_from_jsonl_text_only(images, tmp_path):
    texts = tmp_path / "texts.jsonl"
    texts.write_text(
        json.dumps({"page_id": "9_1", "text": "Cover\nsecond line"})
        + "\n"
        + json.dumps({"page_id": "77_1", "text": "no such image"})
        + "\n"
    )
    out = tmp_path / "pages.parquet"
    res = build_image_corpus(images / "img", out, texts, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    corpus = Corpus.load(out)
    assert corpus.text("9_1") == "Cover\nsecond line"
    # Text without boxes: one full-width band per line over the image's height.
    assert corpus.page("9_1").lines[1].bbox == (0.0, 50.0, 200.0, 100.0)
    assert "text_rows_unmatched" in res.output


def test_text_corpora_keep_their_shape(tmp_path):
    _text_corpus().save(tmp_path / "pages.parquet")
    assert "image" not in pq.read_schema(tmp_path / "pages.parquet").names
    corpus = Corpus.load(tmp_path / "pages.parquet")
    assert not corpus.has_images and corpus.image_file("9_1") is None


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "no page images"),
        (
            lambda d: [Image.new("RGB", (8, 8)).save(d / n) for n in ("1_1.png", "1_1.jpg")],
            "keep one of them",
        ),
        (lambda d: (d / "1_1.png").write_bytes(b"not a png"), "not a readable image"),
        (
            lambda d: [(d / "img").mkdir(), Image.new("RGB", (8, 8)).save(d / "img" / "1_1.png")],
            "its subfolders hold some (e.g. img/1_1.png)",
        ),
    ],
)
def test_bad_folders_exit_2(tmp_path, setup, message):
    folder = tmp_path / "img"
    folder.mkdir()
    setup(folder)
    res = runner.invoke(
        app,
        ["corpus", "build", str(folder), "--out", str(tmp_path / "p.parquet")],
        env={"COLUMNS": "300"},
    )
    assert res.exit_code == 2
    assert message in res.output
    assert not (tmp_path / "p.parquet").exists()


def test_bad_text_file_exits_2(images, tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("id,body\n1,x\n")
    res = build_image_corpus(images / "img", tmp_path / "p.parquet", bad, env={"COLUMNS": "300"})
    assert res.exit_code == 2 and "page_id and text" in res.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("page_id,text\n", "holds no rows"),
        ("page_id,text\n77_1,other deck\n88_2,also not here\n", "none of its 2 page_id values"),
    ],
)
def test_text_that_names_no_image_exits_2_and_writes_nothing(images, tmp_path, text, message):
    # Before: a corpus with no text at all, exit 0 (local BM25 search then finds nothing).
    texts = tmp_path / "t.csv"
    texts.write_text(text)
    out = tmp_path / "p.parquet"
    res = build_image_corpus(images / "img", out, texts, env={"COLUMNS": "400"})
    assert res.exit_code == 2, res.output
    assert message in res.output and str(texts) in res.output
    assert not out.exists() and not manifest.manifest_path(out).exists()
