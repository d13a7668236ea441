"""The crop padding (``EpisodeConfig.crop_pad``): DDAI's evaluation widens every ``<bbox>`` by 28
of the pixels the model saw on each side before scaling it to the page (its training does not);
``ddai eval`` does the same by default, ``--crop-pad`` sets it, and the run says which it used."""

from __future__ import annotations

import json

import pytest
from cli_schemas import check
from PIL import Image
from support.fake_vllm import FakeVLLMServer
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.store import read_rollouts, run_manifest
from ddai.trainer import toy
from ddai.trainer.episode.collect_config import CollectConfig, EvalConfig
from ddai.trainer.episode.config import EpisodeConfig
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.episodes import env_config
from ddai.trainer.episode.vision import ResizedPixels, crop_image, pad_box
from ddai.trainer.modeling import load_tokenizer
from ddai.trainer.tiny import TinySpec, build_tiny

runner = CliRunner()
RED, WHITE = (255, 0, 0), (255, 255, 255)
# a 560x280 page seen by the model as 280x140: one model pixel is two page pixels
HALF = ResizedPixels(factor=28, min_pixels=56 * 56, max_pixels=280 * 140)
# images handed to the processor as they are (no DDAI resize), so HALF is the whole convention
RAW = {"obs_image_max_pixels": 0, "obs_image_min_pixels": 0}


def _page(path):
    """White 560x280 page with a red block at page pixels [280, 0, 560, 140]."""
    im = Image.new("RGB", (560, 280), WHITE)
    im.paste(RED, (280, 0, 560, 140))
    im.save(path)
    return path


def _coded(path):
    """A 560x280 page whose every pixel says where it is (``_at``)."""
    im = Image.new("RGB", (560, 280))
    im.putdata(
        [(x % 256, y % 256, x // 256 + 4 * (y // 256)) for y in range(280) for x in range(560)]
    )
    im.save(path)
    return path


def _at(pixel):
    r, g, b = pixel
    return r + 256 * (b % 4), g + 256 * (b // 4)


def _bounds(crop):
    """``(x1, y1, x2, y2)`` of a crop of a ``_coded`` page, read from its corner pixels."""
    x1, y1 = _at(crop.getpixel((0, 0)))
    x2, y2 = _at(crop.getpixel((crop.width - 1, crop.height - 1)))
    return (x1, y1, x2 + 1, y2 + 1)


def test_pad_box_by_hand():
    assert pad_box([10, 20, 30, 40], 28) == [-18, -8, 58, 68]
    box = [1, 2, 3, 4]
    assert pad_box(box, 0) is box  # 0: the box as written


def test_padding_is_in_the_models_pixels_before_the_scaling_and_clamped(tmp_path):
    page = _page(tmp_path / "p.png")
    # without padding: model [140, 0, 280, 70] is page [280, 0, 560, 140], the red block
    plain = crop_image(page, pad_box([140, 0, 280, 70], 0), HALF)
    assert plain.size == (280, 140) and plain.getcolors() == [(280 * 140, RED)]
    # 28 model pixels: [112, -28, 308, 98] -> page [224, -56, 616, 196] -> clamped
    # [224, 0, 560, 196] (56 page pixels each side, as DDAI: widened before its scaling)
    coded = _coded(tmp_path / "c.png")
    assert _bounds(crop_image(coded, [140, 0, 280, 70], HALF)) == (280, 0, 560, 140)
    wide = crop_image(coded, pad_box([140, 0, 280, 70], 28), HALF)
    assert _bounds(wide) == (224, 0, 560, 196) and wide.size == (336, 196)
    # page pixels (no convention): 28 page pixels each side, clamped nowhere
    mid = crop_image(coded, pad_box([100, 100, 110, 110], 28))
    assert _bounds(mid) == (72, 72, 138, 138)
    # a box at the bottom-left corner is clamped on two sides
    assert _bounds(crop_image(coded, pad_box([0, 270, 20, 280], 28))) == (0, 242, 48, 280)


class _One:
    def search(self, query, k=5, doc=None):
        return [("1_1", 1.0)]


def _corpus(page):
    return Corpus.from_records(
        [
            {
                "doc_id": "1",
                "page": 1,
                "lines": [
                    {"text": "title", "bbox": [0, 0, 560, 90]},
                    {"text": "body", "bbox": [0, 100, 560, 190]},
                ],
                "width": 560,
                "height": 280,
                "image": str(page),
            }
        ]
    )


@pytest.mark.parametrize(("pad", "size"), [(0, (280, 140)), (28, (336, 196))])
def test_the_environment_crops_with_the_episodes_padding(tmp_path, pad, size):
    page = _page(tmp_path / "1_1.png")
    corpus = _corpus(page)
    cfg = env_config(EpisodeConfig(max_turns=4, crop_pad=pad, **RAW), "image")
    assert cfg.crop_pad == pad
    env = SearchEnv(_One(), corpus, cfg, image_of=corpus.image_file, box_convention=HALF)
    ep = env.reset("q")
    env.step(ep, "<think>a</think><search>x</search>")
    res = env.step(ep, "<think>b</think><bbox>[140, 0, 280, 70]</bbox>")
    assert res.images[0].size == size


def test_a_text_crop_takes_the_padded_box_too(tmp_path):
    corpus = _corpus(_page(tmp_path / "1_1.png"))
    seen = {}
    for pad in (0, 28):
        env = SearchEnv(_One(), corpus, EnvConfig(max_turns=4, crop_pad=pad))
        ep = env.reset("q")
        env.step(ep, "<think>a</think><search>x</search>")
        # the gap between the two lines: nothing as written, both lines widened by 28
        seen[pad] = env.step(ep, "<think>b</think><bbox>[0, 92, 560, 98]</bbox>").observation
    assert seen[0].startswith("[System Error: BBox crop failed")
    assert seen[28].splitlines()[1:] == ["title", "body"]


def test_eval_pads_by_default_training_and_collect_do_not(tmp_path):
    paths = {"data": tmp_path, "corpus": tmp_path, "model": "m"}
    assert EvalConfig(**paths).episode.crop_pad == 28
    assert CollectConfig(**paths).episode.crop_pad == 0
    assert EpisodeConfig().crop_pad == 0 and EnvConfig().crop_pad == 0
    with pytest.raises(ValueError, match="--crop-pad -1: use 0 or more"):
        EnvConfig(crop_pad=-1)


SEARCH = "<think>look it up</think>\n<search>revenue</search>"
BBOX = "<think>zoom in</think>\n<bbox>[0, 92, 800, 98]</bbox>"
DONE = "<think>found it</think>\n<search_complete>true</search_complete>"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("crop")
    data = toy.write_toy(root / "toy")
    texts = [r["messages"] for r in toy.sft_rows()] + [SEARCH, BBOX, DONE]
    tiny = build_tiny(root / "tiny", texts=texts, spec=TinySpec(hidden_size=32))
    return root, data, tiny, load_tokenizer(str(tiny))


def _responder(tok):
    """Search, then a box in the gap between the toy page's first two lines, then complete."""
    turns = [tok.encode(t, add_special_tokens=False) for t in (SEARCH, BBOX, DONE)]

    def respond(prompt: list[int]) -> list[int]:
        n = len(turns[0])
        said = sum(prompt[i : i + n] == turns[0] for i in range(len(prompt)))
        m = len(turns[1])
        said += sum(prompt[i : i + m] == turns[1] for i in range(len(prompt)))
        return [*turns[min(said, 2)], tok.eos_token_id]

    return respond


@pytest.mark.parametrize("flag", [[], ["--crop-pad", "0"]], ids=["default", "zero"])
def test_ddai_eval_crops_as_ddais_evaluation_unless_told(world, tmp_path, monkeypatch, flag):
    _, data, tiny, tok = world
    logs = tmp_path / "logs"
    with FakeVLLMServer(_responder(tok), model="served", decode=tok.decode) as server:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "ddai.toml").write_text(
            f'[backends.pol]\nkind = "openai"\nmodel = "served"\nbase_url = "{server.url}/v1"\n',
            encoding="utf-8",
        )
        args = ["eval", "--model", str(tiny), "--data", str(data / "dataset.parquet"),
                "--corpus", str(data / "pages.parquet"), "--logs", str(logs), "--run-id", "ev",
                "--generate-via", "pol", "--reward", "ddai-phase1", "--limit", "1",
                "--max-turns", "4", "--max-turn-tokens", "40", "--max-completion-tokens", "900",
                "--obs-max-tokens", "200", "--skip-preflight", "--json", *flag]  # fmt: skip
        res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    pad = 0 if flag else 28
    summary = json.loads(res.stdout)
    check("eval", summary)  # docs/schemas/eval.json
    assert summary["crop_pad"] == pad
    assert run_manifest(logs, "ev")["crop_pad"] == pad
    (row,) = read_rollouts(logs, ["ev"]).to_pylist()
    turns = json.loads(row["turns"]) if isinstance(row["turns"], str) else row["turns"]
    (crop,) = [t for t in turns if t["action"] == "bbox"]
    assert row["retrieved_pages"] == ["1_1"]
    if pad:  # [0, 92, 800, 98] widened to [-28, 64, 828, 126]: the first two lines
        assert crop["observation"].splitlines()[1:] == ["Revenue by year", "2019 revenue 10"]
    else:  # as written it touches no line
        assert crop["observation"].startswith("[System Error: BBox crop failed")


def test_eval_refuses_a_negative_padding(world, tmp_path):
    _, data, tiny, _ = world
    args = ["eval", "--model", str(tiny), "--data", str(data / "dataset.parquet"), "--corpus",
            str(data / "pages.parquet"), "--logs", str(tmp_path / "logs"), "--crop-pad", "-3"]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "--crop-pad -3: use 0 or more pixels" in res.output


def test_scaled_edges_are_truncated_as_ddais(tmp_path):
    # DDAI casts every scaled edge with int() (its _process_bbox_single): a 100x50 page is seen
    # as 112x56, so model [0, 0, 57, 29] is page [0, 0, 50.89, 25.89], cropped to [0, 0, 50, 25]
    im = Image.new("RGB", (100, 50))
    im.putdata([(x, y, 0) for y in range(50) for x in range(100)])
    im.save(tmp_path / "p.png")
    conv = ResizedPixels(factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    assert conv.resized(100, 50) == (112, 56)
    crop = crop_image(tmp_path / "p.png", [0, 0, 57, 29], conv)
    assert crop.size == (50, 25)
    assert crop.getpixel((49, 24)) == (49, 24, 0)
