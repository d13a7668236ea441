"""Images shown to a VLM policy are resized as DDAI resizes them (vrag_agent/generation.py:
``process_image(image, 512*28*28, 256*28*28)`` on every searched page and every ``<bbox>`` crop)
before the processor sees them, and a ``<bbox>`` is in the pixels of that resized page."""

from __future__ import annotations

import base64
import dataclasses
import io

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from ddai.cli.flags import with_groups
from ddai.cli.options import EPISODE_GROUPS
from ddai.pipelines.pages.corpus import Corpus
from ddai.trainer.episode.config import EpisodeConfig
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.episodes import env_config
from ddai.trainer.episode.vision import ResizedPixels, ShownImage, shown_size

DDAI = (512 * 28 * 28, 256 * 28 * 28)  # 401408, 200704


def test_shown_size_by_hand():
    # tiny crop 40x28 = 1120 px < 200704: scale sqrt(200704 / 1120) = 13.3866, sides cast down:
    # 40 * 13.3866 = 535.5 -> 535, 28 * 13.3866 = 374.8 -> 374 (aspect kept, no multiple of 28)
    assert shown_size(40, 28, *DDAI) == (535, 374)
    # huge page 2000x1500 = 3e6 px > 401408: scale sqrt(401408 / 3e6) = 0.36579:
    # 731.6 -> 731, 548.7 -> 548 (400588 px, above the min: no second scaling)
    assert shown_size(2000, 1500, *DDAI) == (731, 548)
    # odd aspect 3000x50 = 150000 px < min: scale sqrt(200704 / 150000) = 1.15673:
    # 3470.2 -> 3470, 57.8 -> 57
    assert shown_size(3000, 50, *DDAI) == (3470, 57)
    # within the bounds: as it is
    assert shown_size(600, 500, *DDAI) == (600, 500)
    # a bound of 0 is no bound
    assert shown_size(2000, 1500, 0, 0) == (2000, 1500)
    assert shown_size(40, 28, DDAI[0], 0) == (40, 28)
    assert shown_size(2000, 1500, 0, DDAI[1]) == (2000, 1500)
    assert ShownImage() == ShownImage(*DDAI) and not ShownImage(0, 0).active
    with pytest.raises(ValueError, match="0x5"):
        shown_size(0, 5, *DDAI)


class _One:
    def search(self, query, k=5, doc=None):
        return [("1_1", 1.0)]


def _coded(path, size=(2000, 1500)):
    """A page whose red and green channels say where each pixel is (in steps of 8 pixels)."""
    w, h = size
    im = Image.new("RGB", size)
    im.putdata([(x // 8, y // 8, 0) for y in range(h) for x in range(w)])
    im.save(path)
    return path


def _env(tmp_path, episode: EpisodeConfig):
    page = _coded(tmp_path / "1_1.png")
    corpus = Corpus.from_records(
        [{"doc_id": "1", "page": 1, "lines": [], "width": 2000, "height": 1500, "image": str(page)}]
    )
    # the processor's convention: unused while DDAI's resize is on (the box is in its pixels)
    conv = ResizedPixels(factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    cfg = env_config(episode, "image")
    return SearchEnv(_One(), corpus, cfg, image_of=corpus.image_file, box_convention=conv)


def _decode(url):
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def test_the_environment_hands_the_processor_ddais_sizes(tmp_path):
    env = _env(tmp_path, EpisodeConfig(max_turns=6))
    ep = env.reset("q")
    page = env.step(ep, "<think>a</think><search>x</search>").images[0]
    assert page.size == (731, 548) and page.mode == "RGB"
    # the left half of the 731x548 page as shown: x 365 of 731 is page x 365 * 2000 / 731 =
    # 998.6 -> 998, y 274 of 548 is 750: a 998x750 crop (748500 px > max), shown as
    # sqrt(401408 / 748500) = 0.73232 -> 730x549
    half = env.step(ep, "<think>b</think><bbox>[0, 0, 365, 274]</bbox>").images[0]
    assert half.size == (730, 549)
    # a small box: [10, 10, 30, 24] -> page [27.4, 27.4, 82.1, 65.7] -> [27, 27, 82, 65],
    # 55x38 = 2090 px < min, scaled by sqrt(200704 / 2090) = 9.7995 -> 538x372
    small = env.step(ep, "<think>c</think><bbox>[10, 10, 30, 24]</bbox>").images[0]
    assert small.size == (538, 372)
    r, g, _ = small.getpixel((0, 0))  # its top-left corner is page pixel (27, 27): block (3, 3)
    assert (r, g) == (3, 3)
    # the generator's copies of the crops are the resized ones too (DDAI saves those)
    assert [_decode(u).size for u in ep.images[1:]] == [(730, 549), (538, 372)]
    assert ep.images[0] == str(tmp_path / "1_1.png")  # the page itself: its file, as DDAI's


def test_zero_leaves_the_images_to_the_processor(tmp_path):
    env = _env(tmp_path, EpisodeConfig(max_turns=6, obs_image_max_pixels=0, obs_image_min_pixels=0))
    ep = env.reset("q")
    page = env.step(ep, "<think>a</think><search>x</search>").images[0]
    assert page == tmp_path / "1_1.png"  # the file as it is
    # the processor's convention: 2000x1500 is smart-resized to 1148x840, so [0, 0, 574, 420]
    # is page [0, 0, 2000 * 574 / 1148, 1500 * 420 / 840] = [0, 0, 1000, 750], handed over as cut
    crop = env.step(ep, "<think>b</think><bbox>[0, 0, 574, 420]</bbox>").images[0]
    assert crop.size == (1000, 750)


def test_the_processor_sees_fewer_image_tokens_than_without_the_resize(tmp_path):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    page = Image.open(_coded(tmp_path / "p.png"))
    # DDAI's 731x548 becomes 728x560 (multiples of 28): 26 x 20 merged tokens = 520
    shown = processor(images=[ShownImage().apply(page)], return_tensors="pt")
    assert shown["image_grid_thw"].tolist() == [[1, 40, 52]]
    # the raw 2000x1500 page under the processor's own bound: 1148x840, 41 x 30 = 1230 tokens
    raw = processor(images=[page.convert("RGB")], return_tensors="pt")
    assert raw["image_grid_thw"].tolist() == [[1, 60, 82]]


def test_the_flags_reach_the_episode_and_the_environment():
    seen = []

    @with_groups(EPISODE_GROUPS)
    def show(*, rewards, episode, backends) -> None:
        seen.append(episode)

    cli = typer.Typer()
    cli.command()(show)
    res = CliRunner().invoke(cli, ["--obs-image-max-pixels", "1000", "--obs-image-min-pixels", "0"])
    assert res.exit_code == 0, res.output
    (flags,) = seen
    episode = EpisodeConfig(**flags)  # as the episode commands build it (options.nested_configs)
    assert (episode.obs_image_max_pixels, episode.obs_image_min_pixels) == (1000, 0)
    cfg = env_config(episode, "image")
    assert (cfg.obs_image_max_pixels, cfg.obs_image_min_pixels) == (1000, 0)
    assert dataclasses.asdict(EpisodeConfig())["obs_image_max_pixels"] == DDAI[0]
    assert (EnvConfig().obs_image_max_pixels, EnvConfig().obs_image_min_pixels) == DDAI


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"obs_image_max_pixels": -1}, "--obs-image-max-pixels -1: use 0"),
        ({"obs_image_min_pixels": -2}, "--obs-image-min-pixels -2: use 0"),
        ({"obs_image_max_pixels": 100, "obs_image_min_pixels": 200}, "is below"),
    ],
)
def test_bad_bounds_are_refused_naming_the_flag(given, message):
    with pytest.raises(ValueError, match=message):
        EnvConfig(**given)
