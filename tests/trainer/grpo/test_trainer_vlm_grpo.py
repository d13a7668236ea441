"""The image path end to end: ``ddai corpus build`` over generated page images, then ``ddai train
grpo --observation image`` on a tiny Qwen2-VL for 2 steps, with an OpenAI-compatible generator (a
fake server on 127.0.0.1) that receives the page and crop the episode gathered as image parts.

The policy's turns are scripted (search, crop, complete): a randomly initialised tiny model rarely
writes a valid tag, and the point here is what the environment, the trainer and the generator do
with a search and a crop. Everything else (CLI, corpus, processor, TRL's step, the SDK) is real.
"""

from __future__ import annotations

import base64
import io
import json

import pytest
from cli_schemas import check
from PIL import Image
from support.backends import backend_toml
from support.fakes import RecordingServer
from support.page_images import render_page_images, toy_image_corpus
from support.tiny_vlm import build_tiny_vlm
from support.toy_world import run_args
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.pages.corpus import Corpus
from ddai.trainer import toy
from ddai.trainer.episode.rollout import Sampler
from ddai.trainer.grpo import train as grpo

runner = CliRunner()
TURNS = [
    "<think>find the revenue page</think>\n<search>revenue year</search>",
    # In the model's pixels: an 800x600 page is seen as 56x28 (4 * 28 * 28 pixels at most), so
    # this box is the page's left half, [0, 0, 400, 600].
    "<think>crop the left half</think>\n<bbox>[0, 0, 28, 28]</bbox>",
    "<think>done</think>\n<search_complete>true</search_complete>",
]


class Scripted(Sampler):
    """Plays ``TURNS`` in order for every live context (one episode = three turns)."""

    def __init__(self, tok):
        self.tok = tok
        self.turn = 0

    def sample(self, contexts, caps, images=None):
        text = TURNS[self.turn % len(TURNS)]
        self.turn += 1
        ids = [*self.tok.encode(text, add_special_tokens=False), self.tok.eos_token_id]
        return [(ids, [-1.0] * len(ids)) for _ in contexts]


def _decode(url: str) -> bytes:
    head, _, payload = url.partition(",")
    assert head.startswith("data:image/") and head.endswith(";base64")
    return base64.b64decode(payload)


@pytest.fixture
def scripted(monkeypatch):
    """The policy plays ``TURNS``."""
    monkeypatch.setattr(
        grpo.SearchRollout, "_sampler", lambda self, trainer, model: Scripted(self.tok)
    )


def train_vlm(tmp_path, monkeypatch, ext: str, *flags: str):
    """``ddai train grpo --observation image`` on a tiny Qwen2-VL over the toy pages drawn as
    ``ext`` images, with the judge-only reward and the recording server as generator (backend
    ``vlmgen``); 2 episodes a step of at most 3 turns; ``flags`` add the rest. ``(result,
    server)``."""
    data, corpus = toy_image_corpus(tmp_path, ext=ext)
    model = build_tiny_vlm(tmp_path / "vlm", max_pixels=28 * 28 * 4)
    with RecordingServer() as server:
        monkeypatch.chdir(tmp_path)
        backend_toml(tmp_path, "vlmgen", server.openai_base_url, model="fake-vlm", cache=False)
        res = runner.invoke(
            app,
            [
                "train", "grpo", "--model", str(model), "--data", str(data / "dataset.parquet"),
                "--corpus", str(corpus), "--out", str(tmp_path / "out"),
                "--logs", str(tmp_path / "logs"), "--observation", "image",
                "--reward", "judge-only", "--generator", "vlmgen",
                "--n-agent", "2", "--batch-size", "2", "--max-turns", "4",
                "--max-turn-tokens", "24", "--report-to", "none", *flags,
            ],
        )  # fmt: skip
    return res, server


@pytest.mark.slow
def test_image_corpus_then_vlm_grpo_sends_the_gathered_images(tmp_path, monkeypatch, scripted):
    res, server = train_vlm(
        tmp_path, monkeypatch, "jpg",
        "--run-id", "vlm", "--judge", "local", "--generator-max-images", "2", "--max-steps", "2",
        "--max-completion-tokens", "256", "--save-steps", "10", "--json",
        # the box in the processor's pixels (TURNS): no DDAI resize of the shown page first
        "--obs-image-max-pixels", "0", "--obs-image-min-pixels", "0",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    # after TRL's live progress: the summary's own brace opens a line (nested ones are indented)
    out = json.loads(res.stdout[res.stdout.rfind("\n{\n") + 1 :])
    check("train-grpo", out)  # docs/schemas/train-grpo.json
    assert out["steps"] == 2 and out["rollouts_logged"] == 4
    # At least one generator request per step (a group's two identical episodes share one; the
    # preflight's sampled episodes add theirs), each carrying the page, then the crop.
    assert len(server.bodies) >= 2
    page_bytes = (tmp_path / "img" / "1_1.jpg").read_bytes()
    for body in server.bodies:
        parts = body["messages"][-1]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert len(urls) == 2
        assert _decode(urls[0]) == page_bytes  # the revenue page, as a file
        crop = Image.open(io.BytesIO(_decode(urls[1])))
        assert crop.size == (400, 600)  # the page's left half
        assert "Revenue by year" in parts[0]["text"]  # the evidence text is still sent


@pytest.mark.slow
def test_generator_max_images_zero_sends_text_only(tmp_path, monkeypatch, scripted):
    res, server = train_vlm(
        tmp_path, monkeypatch, "png", "--generator-max-images", "0", "--max-steps", "1"
    )
    assert res.exit_code == 0, res.output
    assert server.bodies and server.images == 0
    assert all(isinstance(b["messages"][-1]["content"], str) for b in server.bodies)


def test_local_search_over_an_image_corpus_without_text_exits_2(tmp_path):
    data = toy.write_toy(tmp_path / "toy")
    render_page_images(Corpus.load(data / "pages.parquet"), tmp_path / "img", ext="png")
    corpus = tmp_path / "pages.parquet"
    assert (
        runner.invoke(
            app, ["corpus", "build", str(tmp_path / "img"), "--out", str(corpus)]
        ).exit_code
        == 0
    )
    res = runner.invoke(
        app,
        [
            "train",
            "grpo",
            *run_args(tmp_path / "no-model", data / "dataset.parquet", corpus),
            "--out",
            str(tmp_path / "out"),
            "--observation",
            "image",
            "--reward",
            "ddai-phase1",
        ],
        env={"COLUMNS": "300"},
    )
    assert res.exit_code == 2
    assert "no page text to index" in res.output and "--text-from" in res.output
