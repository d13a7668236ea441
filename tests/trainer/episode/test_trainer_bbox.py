"""The ``<bbox>`` convention (Qwen2.5-VL: absolute pixels on the smart-resized image) on hand-made
images, and the images an episode gathers for the generator."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from ddai.pipelines.pages.corpus import Corpus
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.rewards import StreamingScorer, cap_images
from ddai.trainer.episode.vision import ResizedPixels, crop_image

RED, BLUE, WHITE = (255, 0, 0), (0, 0, 255), (255, 255, 255)


def _quarters(path, size=(560, 280)):
    """White page, top-right quarter red, bottom-left quarter blue."""
    w, h = size
    im = Image.new("RGB", size, WHITE)
    im.paste(RED, (w // 2, 0, w, h // 2))
    im.paste(BLUE, (0, h // 2, w // 2, h))
    im.save(path)
    return path


def test_resized_size_by_hand():
    # 560x280 = 156800 px over max 39200: beta = 2 exactly, sides 280 and 140 (multiples of 28).
    conv = ResizedPixels(factor=28, min_pixels=56 * 56, max_pixels=280 * 140)
    assert conv.resized(560, 280) == (280, 140)
    # 100x50 rounds up to 112x56 (within bounds): boxes scale by 100/112 and 50/56.
    assert conv.resized(100, 50) == (112, 56)
    assert conv.to_page([56, 0, 112, 28], 100, 50) == pytest.approx([50, 0, 100, 25])


def test_box_scaled_in_ddais_order():
    # DDAI: int(page_width * x / resized_width); 574 * (2000 / 1148) would be 999.99... -> 999
    conv = ResizedPixels(factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    assert conv.resized(2000, 1500) == (1148, 840)
    assert conv.to_page([574, 0, 1148, 840], 2000, 1500) == [1000.0, 0.0, 2000.0, 1500.0]


def test_crop_in_model_pixels_is_the_pages_quarter(tmp_path):
    page = _quarters(tmp_path / "p.png")
    conv = ResizedPixels(factor=28, min_pixels=56 * 56, max_pixels=280 * 140)
    crop = crop_image(page, [140, 0, 280, 70], conv)  # top-right quarter of the 280x140 view
    assert crop.size == (280, 140)
    assert crop.getcolors() == [(280 * 140, RED)]
    blue = crop_image(page, [0, 70, 140, 140], conv)
    assert blue.size == (280, 140) and blue.getcolors() == [(280 * 140, BLUE)]
    # Without the convention the same numbers are page pixels: white, left of the red quarter.
    raw = crop_image(page, [140, 0, 280, 70])
    assert raw.size == (140, 70) and raw.getcolors() == [(140 * 70, WHITE)]


def test_convention_from_the_image_processor():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    processor = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=3136)
    conv = ResizedPixels.from_image_processor(processor)
    assert conv == ResizedPixels(factor=28, min_pixels=3136, max_pixels=3136)
    # An 800x600 page is seen as 56x28.
    assert conv.resized(800, 600) == (56, 28)


class _Top:
    def search(self, query, k=5, doc=None):
        return [("1_1", 1.0)]


def _env(tmp_path, observation):
    page = _quarters(tmp_path / "1_1.png")
    corpus = Corpus.from_records(
        [
            {
                "doc_id": "1",
                "page": 1,
                "lines": [
                    {"text": "top right", "bbox": [300, 10, 550, 120]},
                    {"text": "bottom left", "bbox": [10, 150, 250, 270]},
                ],
                "width": 560,
                "height": 280,
                "image": str(page),
            }
        ]
    )
    conv = ResizedPixels(factor=28, min_pixels=56 * 56, max_pixels=280 * 140)
    return SearchEnv(
        _Top(),
        corpus,
        # the processor's resize only (no DDAI resize): ``conv`` is the whole convention
        EnvConfig(
            max_turns=6, observation=observation, obs_image_max_pixels=0, obs_image_min_pixels=0
        ),
        image_of=corpus.image_file,
        box_convention=conv if observation == "image" else None,
    ), page


def _decode(url):
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def test_episode_records_pages_and_crops_in_order(tmp_path):
    env, page = _env(tmp_path, "image")
    ep = env.reset("q")
    env.step(ep, "<think>a</think><search>x</search>")
    res = env.step(ep, "<think>b</think><bbox>[140, 0, 280, 70]</bbox>")
    env.step(ep, "<think>c</think><search>x</search>")  # the same page again: recorded once
    assert res.images[0].size == (280, 140)
    assert ep.images[0] == str(page) and len(ep.images) == 2
    crop = _decode(ep.images[1])
    assert crop.size == (280, 140) and crop.getcolors() == [(280 * 140, RED)]
    # The crop's evidence text uses the same page box: only the top-right line.
    assert ep.evidence[1] == ("1_1", "top right")


def test_text_policy_over_an_image_corpus_still_gathers_images(tmp_path):
    env, page = _env(tmp_path, "text")
    ep = env.reset("q")
    env.step(ep, "<think>a</think><search>x</search>")
    res = env.step(ep, "<think>b</think><bbox>[0, 140, 280, 280]</bbox>")  # page pixels
    assert "bottom left" in res.observation and not res.images
    assert ep.images[0] == str(page)
    assert _decode(ep.images[1]).getcolors() == [(280 * 140, BLUE)]


def test_cap_images_keeps_the_latest():
    assert cap_images(["a", "b", "c"], 2) == ["b", "c"]
    assert cap_images(["a"], 8) == ["a"]
    assert cap_images(["a", "b"], 0) == []
    assert cap_images(["a", "b"], None) == ["a", "b"]


def test_scorer_sends_the_capped_images_to_the_generator():
    from ddai.pipelines.backends import GenerateResult, JudgeResult

    class Gen:
        name = "g"

        def __init__(self):
            self.reqs = []

        async def generate(self, reqs):
            self.reqs.extend(reqs)
            return [GenerateResult("x") for _ in reqs]

    class Judge:
        name = "j"

        async def judge(self, reqs):
            return [JudgeResult(1.0) for _ in reqs]

    gen = Gen()
    scorer = StreamingScorer(gen, Judge(), max_images=2)
    try:
        item = {"question": "q", "reference": "r", "evidence": [("1_1", "t")]}
        out = scorer.submit(
            [{**item, "images": ["p1", "c1", "c2"]}, {**item, "images": []}]
        ).result(timeout=10)
    finally:
        scorer.close()
    assert [o.judge for o in out] == [1.0, 1.0]
    assert [list(r.images) for r in gen.reqs] == [["c1", "c2"], []]
