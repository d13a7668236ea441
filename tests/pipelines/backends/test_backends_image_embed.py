"""The embedder role over images and questions: the local default (text vector beside a colour
thumbnail, no key) and an OpenAI-compatible embedding server through the SDK (a fake one)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support.fakes import FakeModelServer, fake_embedding

from ddai.pipelines.backends import (
    BackendSpec,
    EmbedError,
    EmbedItem,
    build,
    get_backend,
    run_sync,
)
from ddai.pipelines.backends.embedders import hash_embed
from ddai.pipelines.backends.image_features import IMAGE_DIM, image_vector, join


def png(path, colors) -> str:
    """An 8x8 picture: ``colors`` is one RGB per row of pixels (a row list of 8), or one colour."""
    img = Image.new("RGB", (8, 8))
    for y in range(8):
        for x in range(8):
            img.putpixel((x, y), colors[y] if isinstance(colors, list) else colors)
    img.save(path)
    return str(path)


def test_image_vector_of_half_black_half_white_is_hand_computed(tmp_path):
    # Rows 0-3 black, 4-7 white: every value is 0 or 1, mean 0.5, so centred ±0.5 and, over 192
    # values, unit-normalized ±1/√192: black pixels negative, white positive, in raster order.
    ref = png(tmp_path / "bw.png", [(0, 0, 0)] * 4 + [(255, 255, 255)] * 4)
    v = image_vector(ref)
    want = np.array([-1.0] * 96 + [1.0] * 96) / np.sqrt(192)
    assert v.shape == (IMAGE_DIM,) and np.allclose(v, want, atol=1e-6)
    assert np.allclose(image_vector(png(tmp_path / "grey.png", (90, 90, 90))), 0.0)


def test_unreadable_picture_is_a_clear_error(tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"broken\.png' is not a picture Pillow can read"):
        image_vector(str(bad))
    with pytest.raises(FileNotFoundError, match=r"missing\.png"):
        image_vector(str(tmp_path / "missing.png"))


def test_join_weights_text_and_images(tmp_path):
    ref = png(tmp_path / "bw.png", [(0, 0, 0)] * 4 + [(255, 255, 255)] * 4)
    text = hash_embed(["what color", "what color"], 8)
    out = join(text, [[ref], []], weight=0.36)
    assert out.shape == (2, 8 + IMAGE_DIM)
    assert np.allclose(out[0, :8], 0.8 * text[0]) and np.allclose(
        out[0, 8:], 0.6 * image_vector(ref)
    )
    assert np.allclose(out[1, 8:], 0.0) and np.isclose(np.linalg.norm(out[0]), 1.0)
    with pytest.raises(ValueError, match=r"image_weight must be in \[0, 1\]"):
        join(text, [[], []], weight=1.5)


def test_local_default_embeds_the_image_with_the_question(tmp_path):
    red = png(tmp_path / "red.png", [(255, 0, 0)] * 4 + [(0, 0, 0)] * 4)
    red2 = png(tmp_path / "red2.png", [(250, 10, 0)] * 4 + [(0, 0, 0)] * 4)
    blue = png(tmp_path / "blue.png", [(0, 0, 0)] * 4 + [(0, 0, 255)] * 4)
    emb = get_backend("embedder", "hash")
    v = emb.embed_items([EmbedItem("What color?", (r,)) for r in (red, red2, blue)])
    assert v.shape == (3, emb.dim + IMAGE_DIM)
    # Same question: the image decides which rows are near each other.
    assert v[0] @ v[1] > 0.99 and v[0] @ v[2] < v[0] @ v[1] - 0.2


def remote(srv: FakeModelServer, tmp_path, **options):
    spec = BackendSpec(
        name="vlm2vec", kind="openai", model="fake-embed", base_url=srv.openai_base_url,
        max_retries=0, options=options,
    )  # fmt: skip
    return build(spec, "embedder", cache=tmp_path / "cache.sqlite")


def test_remote_embedder_sends_image_then_question(srv, tmp_path):
    ref = png(tmp_path / "a.png", (10, 200, 30))
    sha = hashlib.sha256(Path(ref).read_bytes()).hexdigest()
    emb = remote(srv, tmp_path)
    v = emb.embed_items([EmbedItem("What color is it?", (ref,)), EmbedItem("plain text")])
    sent = [[("image", sha), ("text", "What color is it?")], [("text", "plain text")]]
    assert sorted(srv.parts) == sorted(sent)  # concurrent requests: any arrival order
    want = [fake_embedding(p, srv.embed_dim) for p in sent]
    assert v.shape == (2, 16) and np.allclose(v, np.array(want), atol=1e-6)
    # The cache answers a rerun: no request, the same vectors.
    again = remote(srv, tmp_path).embed_items(
        [EmbedItem("What color is it?", (ref,)), EmbedItem("plain text")]
    )
    assert srv.requests == 2 and np.allclose(again, v)
    # `ddai backends check` pings it like any OpenAI backend: the models list, no tokens.
    ping = run_sync(emb.ping())
    assert ping["ok"] and "fake-embed not listed" in ping["detail"]


def test_remote_embedder_failure_names_reasons(srv, tmp_path):
    srv.script = ["500"]
    with pytest.raises(EmbedError, match=r"1 calls failed \(http-500 × 1\)") as err:
        remote(srv, tmp_path).embed(["a", "b"])
    assert err.value.failed == {"http-500": 1}
    with pytest.raises(EmbedError, match=r"wrong-dim × 1.*expected dim = 8"):
        remote(srv, tmp_path, dim=8).embed(["c"])
    with pytest.raises(EmbedError, match=r"bad-input × 1"):
        remote(srv, tmp_path).embed_items([EmbedItem("q", (str(tmp_path / "missing.png"),))])
