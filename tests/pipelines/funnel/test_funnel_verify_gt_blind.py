"""``ddai curate verify-gt`` with the local verifier over an image-only corpus: the verifier reads
only text, so every proposal is a guess; the summary counts them (``verifier blind``), says what
it means, and a warning goes to stderr. A verifier that reads the page images is not blind."""

from __future__ import annotations

import json

from cli_schemas import check
from support.fakes import FakeModelServer
from support.funnel_data import write_dataset
from support.page_images import render_page_images
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.pages.corpus import Corpus

runner = CliRunner()


def image_corpus(tmp_path):
    """Page images of decks 1 and 2 (two pages each), indexed without any page text."""
    text = Corpus.from_records(
        [{"doc_id": d, "page": p, "text": f"deck {d} page {p}"} for d in ("1", "2") for p in (1, 2)]
    )
    render_page_images(text, tmp_path / "img")
    corpus = tmp_path / "pages.parquet"
    res = runner.invoke(app, ["corpus", "build", str(tmp_path / "img"), "--out", str(corpus)])
    assert res.exit_code == 0, res.output
    assert all(not Corpus.load(corpus).text(p).strip() for p in ("1_1", "2_1"))
    return corpus


def verify(tmp_path, corpus, verifier, out):
    dataset = write_dataset(tmp_path / "ds.parquet", ["train_1", "train_2"])
    args = ["curate", "verify-gt", "--dataset", str(dataset), "--corpus", str(corpus)]
    return runner.invoke(app, [*args, "--verifier", verifier, "--out", str(out), "--json"])


def test_the_local_verifier_over_an_image_corpus_is_counted_blind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = verify(tmp_path, image_corpus(tmp_path), "local", tmp_path / "out")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    check("curate-verify-gt", s)  # docs/schemas/curate-verify-gt.json
    assert s["verifier_calls"] == 2 and s["proposals"] == {"uncertain": 2}
    assert s["verifier_blind"] == 2
    assert "2 of 2 prompts went to the verifier with no page it could read" in s["verifier_note"]
    assert "warning: 2 of 2 prompts" in res.stderr and "--verifier NAME" in res.stderr


def test_a_verifier_that_reads_the_images_is_not_blind(tmp_path, monkeypatch):
    corpus = image_corpus(tmp_path)
    with FakeModelServer() as server:
        (tmp_path / "ddai.toml").write_text(
            f'[backends.vlm]\nkind = "openai"\nmodel = "fake-vlm"\n'
            f'base_url = "{server.openai_base_url}"\n',
            encoding="utf-8",
        )
        monkeypatch.chdir(tmp_path)
        res = verify(tmp_path, corpus, "vlm", tmp_path / "out")
        assert server.images == 2
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["verifier_calls"] == 2 and "verifier_blind" not in s and "warning" not in res.stderr
