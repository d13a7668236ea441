"""``ddai curate verify-gt`` on an image corpus: a remote verifier (an OpenAI-compatible fake
server on 127.0.0.1) receives each prompt's reference page image beside its text."""

from __future__ import annotations

import base64
import csv

from support.backends import backend_toml
from support.fakes import RecordingServer
from support.funnel_data import write_dataset
from support.page_images import build_image_corpus, render_page_images
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.pages.corpus import Corpus

runner = CliRunner()


def test_verifier_sees_the_reference_page_images(tmp_path, monkeypatch):
    text = Corpus.from_records(
        [
            {"doc_id": d, "page": p, "text": f"deck {d} page {p}: answer {d}"}
            for d in ("1", "2")
            for p in (1, 2)
        ]
    )
    text.save(tmp_path / "text.parquet")
    render_page_images(text, tmp_path / "img")
    corpus = tmp_path / "pages.parquet"
    res = build_image_corpus(tmp_path / "img", corpus, tmp_path / "text.parquet")
    assert res.exit_code == 0, res.output
    dataset = write_dataset(tmp_path / "ds.parquet", ["train_1", "train_2"])
    with RecordingServer() as server:
        monkeypatch.chdir(tmp_path)
        backend_toml(tmp_path, "vlm", server.openai_base_url, model="fake-vlm")
        res = runner.invoke(
            app,
            [
                "curate",
                "verify-gt",
                "--dataset",
                str(dataset),
                "--corpus",
                str(corpus),
                "--verifier",
                "vlm",
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert res.exit_code == 0, res.output
    assert len(server.bodies) == 2 and server.images == 2
    seen = {}
    for body in server.bodies:
        parts = body["messages"][-1]["content"]
        doc = parts[0]["text"].split("deck ")[1].split("?")[0]
        [url] = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        seen[doc] = base64.b64decode(url.split(",", 1)[1])
        assert f"deck {doc} page 2: answer {doc}" in parts[0]["text"]  # the text still goes
    # Reference page 2 of each deck, as the files the corpus names.
    assert seen == {d: (tmp_path / "img" / f"{d}_2.png").read_bytes() for d in ("1", "2")}
    with open(tmp_path / "out" / "review.csv", newline="", encoding="utf-8") as fh:
        assert {r["proposed_verdict"] for r in csv.DictReader(fh)} <= {"ok", "wrong", "uncertain"}
