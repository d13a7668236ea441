"""Page images on every episode path, as ``train grpo`` has them: ``ddai collect
--observation image`` rolls out a tiny Qwen2-VL over page images, and ``ddai train ppo`` over an
image corpus, and both send the gathered page (and crop) images to an OpenAI-compatible generator
(a fake server on 127.0.0.1 that counts them); ``ddai train ppo --observation image`` trains the
tiny Qwen2-VL itself, as ``train grpo --observation image`` does. A generator that cannot read an image-only corpus
(the local text one) is refused by the preflight with the fix.

The policies' turns are scripted (search, crop, complete), as in ``test_trainer_vlm_grpo``."""

from __future__ import annotations

import json

import pytest
from cli_schemas import check
from support.backends import backend_toml
from support.fakes import RecordingServer
from support.fakes_search import FakeSearchServer
from support.page_images import render_page_images, toy_image_corpus
from support.tiny_vlm import build_tiny_vlm
from support.toy_world import run_args
from test_trainer_vlm_grpo import TURNS, Scripted, _decode
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.store import read_rollouts
from ddai.trainer import toy
from ddai.trainer.episode import episodes
from ddai.trainer.tiny import TinySpec, build_tiny

runner = CliRunner()


@pytest.fixture(scope="module")
def image_world(tmp_path_factory):
    """The toy set with its pages drawn as JPEGs and an image corpus over them (with the text)."""
    root = tmp_path_factory.mktemp("pages")
    return root, *toy_image_corpus(root)


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setattr(
        episodes.SearchRollout, "_sampler", lambda self, trainer, model: Scripted(self.tok)
    )


def generator_toml(tmp_path, server) -> None:
    backend_toml(tmp_path, "vlmgen", server.openai_base_url, model="fake-vlm", cache=False)


def assert_page_and_crop(bodies, root) -> None:
    page_bytes = (root / "img" / "1_1.jpg").read_bytes()  # the revenue page
    for body in bodies:
        parts = body["messages"][-1]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert len(urls) == 2 and _decode(urls[0]) == page_bytes
        assert _decode(urls[1]) != page_bytes  # the crop


COMMON = [
    "--reward", "judge-only", "--generator", "vlmgen", "--judge", "local",
    "--n-agent", "2", "--batch-size", "2", "--max-turns", "4", "--max-turn-tokens", "24",
    "--max-completion-tokens", "256",
]  # fmt: skip


def run_over_pages(tmp_path, monkeypatch, words, model, data, corpus, run_id):
    """``ddai WORDS`` on 2 prompts of the image world, its generator ``vlmgen`` on a recording fake
    server (up to 2 images a request); the result and the server."""
    args = [
        "--model", str(model), "--data", str(data / "dataset.parquet"), "--corpus", str(corpus),
        "--logs", str(tmp_path / "logs"), "--run-id", run_id, "--limit", "2",
        "--generator-max-images", "2", *COMMON, "--json",
    ]  # fmt: skip
    with RecordingServer() as server:
        monkeypatch.chdir(tmp_path)
        generator_toml(tmp_path, server)
        return runner.invoke(app, [*words, *args]), server


@pytest.mark.slow
def test_collect_with_image_observations_sends_the_pages_to_the_vlm_generator(
    image_world, scripted, tmp_path, monkeypatch
):
    root, data, corpus = image_world
    model = build_tiny_vlm(tmp_path / "vlm", max_pixels=28 * 28 * 4)
    words = ["collect", "--observation", "image"]
    res, server = run_over_pages(tmp_path, monkeypatch, words, model, data, corpus, "vlm")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    check("collect", out)
    assert out["rollouts_logged"] == 4 and out["preflight"].startswith("passed")
    # the preflight's and the run's episodes: each generator request carries the page and crop
    assert len(server.bodies) >= 2 and server.images == 2 * len(server.bodies)
    assert_page_and_crop(server.bodies, root)
    rows = read_rollouts(tmp_path / "logs", ["vlm"]).to_pylist()
    assert all(r["response"] == "\n".join(TURNS) for r in rows)


@pytest.mark.slow
def test_ppo_over_an_image_corpus_sends_the_pages_to_the_vlm_generator(
    image_world, scripted, tmp_path, monkeypatch
):
    root, data, corpus = image_world
    tiny = build_tiny(
        tmp_path / "tiny",
        texts=[r["messages"] for r in toy.sft_rows()] + TURNS,
        spec=TinySpec(hidden_size=32),
    )
    out = str(tmp_path / "out")
    words = ["train", "ppo", "--out", out, "--max-steps", "1", "--ppo-epochs", "1"]
    res, server = run_over_pages(tmp_path, monkeypatch, words, tiny, data, corpus, "ppo_img")
    assert res.exit_code == 0, res.output
    assert len(server.bodies) >= 2 and server.images == 2 * len(server.bodies)
    assert_page_and_crop(server.bodies, root)


@pytest.mark.slow
def test_ppo_with_image_observations_trains_a_vlm_and_sends_the_pages(
    image_world, scripted, tmp_path, monkeypatch
):
    """``train ppo --observation image``: a tiny Qwen2-VL policy and a critic on its trunk for 2
    steps, then a third resumed from the checkpoint; the generator is sent the page and crop of
    every episode, the policy changes, and the output folder holds the processor to load the VLM
    again."""
    from ddai.trainer.modeling import load_vision_model

    root, data, corpus = image_world
    model = build_tiny_vlm(tmp_path / "vlm", max_pixels=28 * 28 * 4)
    args = [
        "train", "ppo", "--model", str(model), "--data", str(data / "dataset.parquet"),
        "--corpus", str(corpus), "--out", str(tmp_path / "out"), "--limit", "2",
        "--logs", str(tmp_path / "logs"), "--run-id", "ppo_vlm", "--observation", "image",
        "--ppo-epochs", "1", "--experience-micro-batch", "1", "--critic-unfreeze", "1",
        "--generator-max-images", "2", "--no-progress", *COMMON, "--json",
    ]  # fmt: skip
    with RecordingServer() as server:
        monkeypatch.chdir(tmp_path)
        generator_toml(tmp_path, server)
        res = runner.invoke(app, [*args, "--max-steps", "2"])
        assert res.exit_code == 0, res.output
        # the checkpoint holds the VLM, its processor and the critic on its trunk: a third step
        resumed = runner.invoke(app, [*args, "--max-steps", "3", "--resume", "--skip-preflight"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["resumed_from"] == 2
    out = json.loads(res.stdout)
    check("train-ppo", out)
    assert out["steps"] == 2 and out["rollouts_logged"] == 4
    assert out["preflight"].startswith("passed") and out["changed_parameters"] > 0
    assert out["value_loss_first"] is not None
    # the preflight's episodes and both steps': each generator request carries the page and crop
    assert len(server.bodies) >= 4 and server.images == 2 * len(server.bodies)
    assert_page_and_crop(server.bodies, root)
    rows = read_rollouts(tmp_path / "logs", ["ppo_vlm"]).to_pylist()
    assert sorted(r["step"] for r in rows) == [1, 1, 2, 2, 3, 3]
    trained, processor = load_vision_model(str(tmp_path / "out"))
    assert type(trained).__name__ == "Qwen2VLForConditionalGeneration"
    assert processor.image_processor is not None
    assert (tmp_path / "out" / "critic" / "value_config.json").is_file()


def test_collect_refuses_image_observations_through_a_server(tmp_path):
    from ddai.trainer.common import TrainConfigError
    from ddai.trainer.episode.collect import CollectConfig

    cfg = CollectConfig(model="m", data="d", corpus="c", generate_via="pol", observation="image")
    with pytest.raises(TrainConfigError, match="server is sent token ids"):
        cfg.check()


@pytest.fixture(scope="module")
def image_only(tmp_path_factory):
    """The toy set's pages as JPEGs and an image-only corpus over them (no page text)."""
    root = tmp_path_factory.mktemp("image-only")
    data = toy.write_toy(root / "toy")
    render_page_images(Corpus.load(data / "pages.parquet"), root / "img", ext="jpg")
    corpus = root / "pages.parquet"
    res = runner.invoke(app, ["corpus", "build", str(root / "img"), "--out", str(corpus)])
    assert res.exit_code == 0, res.output
    assert not any(Corpus.load(corpus).text(p) for p in Corpus.load(corpus).pages())
    return root, data, corpus


def test_collect_preflight_refuses_the_text_generator_on_an_image_only_corpus(
    image_only, tmp_path, monkeypatch
):
    _, data, corpus = image_only
    with FakeSearchServer(pages=toy.corpus().pages(), top_k=3) as srv:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "ddai.toml").write_text(
            f'[backends.svc]\nkind = "search-http"\nurl = "{srv.ddai_url}"\n', encoding="utf-8"
        )
        res = runner.invoke(
            app,
            [
                "collect",
                *run_args(tmp_path / "no-model", data / "dataset.parquet", corpus),
                "--search",
                "svc",
                "--logs",
                str(tmp_path / "logs"),
            ],
            env={"COLUMNS": "400"},
        )
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "[pages]" in text and "has text (page images)" in text
    # the policy shown text, and the local generator that reads text only: each with its fix
    assert "--observation text" in text and "pass --observation image with a VLM --model" in text
    assert "the generator `local` reads page text only" in text
    assert "pass --generator NAME naming a multimodal backend" in text
    assert "--text-from" in text
    assert not (tmp_path / "logs").exists()


def test_pages_check_accepts_a_multimodal_generator_and_refuses_one_sent_no_images(image_only):
    from ddai.trainer.episode.preflight import PreflightReport
    from ddai.trainer.episode.preflight_steps import check_pages_readable
    from ddai.trainer.episode.tasks import load_tasks

    _, data, corpus_path = image_only
    corpus = Corpus.load(corpus_path)
    tasks = load_tasks(data / "dataset.parquet", None)

    class VLM:
        name = "vlm"

    def findings(max_images: int) -> list[str]:
        report = PreflightReport()
        check_pages_readable(
            report, tasks, corpus, "c", observation="image", generator=VLM(),
            max_images=max_images, has_images=True,
        )  # fmt: skip
        assert report.checks["pages"]["with_text"] == 0
        assert report.checks["pages"]["pages"] == len({p for t in tasks for p in t.reference_pages})
        return [f.line() for f in report.errors]

    assert findings(2) == []
    (only,) = findings(0)
    assert "--generator-max-images is 0" in only and "`vlm`" in only
    # a corpus with text passes whatever reads it
    report = PreflightReport()
    check_pages_readable(
        report, tasks, toy.corpus(), "t", observation="text", generator=VLM(), max_images=0,
        has_images=False,
    )  # fmt: skip
    assert report.errors == [] and report.checks["pages"]["with_text"] > 0
