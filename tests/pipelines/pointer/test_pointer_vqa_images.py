"""The pointer's VQA request shows each demonstration's image before its text, then the query's
(seed 002's in-context prompt), through the real OpenAI and Gemini SDKs to a fake server."""

from __future__ import annotations

import hashlib

import pytest
from support.fakes import FakeModelServer

from ddai.pipelines.backends import BackendSpec, build
from ddai.pipelines.backends.media import IMAGE_SLOT, interleave
from ddai.pipelines.backends.vqa_simulator import VQASimulator
from ddai.pipelines.pointer.vqa import build_prompt, evaluate, make_request


@pytest.fixture
def rows(tmp_path):
    """A query and two demonstrations, each with its own image file (distinct bytes)."""
    out = {}
    for name in ("query", "demo_a", "demo_b"):
        path = tmp_path / f"{name}.png"
        path.write_bytes(f"PNG bytes of {name}".encode())
        out[name] = {"image": str(path), "sha": hashlib.sha256(path.read_bytes()).hexdigest()}
    out["query"] |= {
        "query_id": "q1",
        "question": "What color is the bus?",
        "answers": ["red"] * 10,
    }
    out["demo_a"] |= {"demo_id": "dA", "question": "How many dogs?", "answer": "2"}
    out["demo_b"] |= {"demo_id": "dB", "question": "Is it raining?", "answer": "no"}
    return out


def backend(srv: FakeModelServer, kind: str, api: str = "chat"):
    url = srv.openai_base_url if kind == "openai" else srv.url
    spec = BackendSpec(
        name="vlm", kind=kind, model="fake-vlm", base_url=url, max_retries=0,
        options={"api": api} if kind == "openai" else {},
    )  # fmt: skip
    return build(spec, "vqa", cache=False)


def shown(parts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(image sha, the text right after it) for every image of a request."""
    return [
        (v, parts[i + 1][1] if i + 1 < len(parts) else "")
        for i, (kind, v) in enumerate(parts)
        if kind == "image"
    ]


@pytest.mark.parametrize(
    ("kind", "api"), [("openai", "chat"), ("openai", "responses"), ("gemini", "")]
)
def test_demonstration_images_arrive_in_order_before_their_text(srv, rows, kind, api):
    q, a, b = rows["query"], rows["demo_a"], rows["demo_b"]
    strip = lambda r: {k: v for k, v in r.items() if k != "sha"}  # noqa: E731
    out = evaluate(
        backend(srv, kind, api),
        [(strip(q), [strip(a), strip(b)]), (strip(q), [strip(b), strip(a)])],
    )
    assert [o.eval_failed for o in out] == [False, False]
    assert srv.images == 6 and len(srv.parts) == 2
    by_sha = {r["sha"]: r for r in rows.values()}
    # Requests run concurrently: match each to its pair by its first image.
    by_first = {order[0]["sha"]: order for order in ([a, b, q], [b, a, q])}
    for parts in srv.parts:
        pics = shown(parts)
        assert [sha for sha, _ in pics] == [r["sha"] for r in by_first.pop(pics[0][0])]
        for sha, after in pics:  # each image is followed by its own row's question
            assert after.startswith(f"Question: {by_sha[sha]['question']}")
        assert not any(IMAGE_SLOT in v for kind_, v in parts if kind_ == "text")


def test_rows_without_images_keep_the_text_only_prompt(rows):
    q = {k: v for k, v in rows["query"].items() if k not in ("image", "sha")}
    ex = [{"question": "How many dogs?", "answer": "2"}]
    req = make_request(q, ex)
    assert IMAGE_SLOT not in req.prompt and req.images == ()
    assert req.prompt == build_prompt(q["question"], ex)


def test_simulator_ignores_the_images(rows):
    strip = lambda r: {k: v for k, v in r.items() if k not in ("sha", "image")}  # noqa: E731
    sim = VQASimulator()
    q, a, b = rows["query"], rows["demo_a"], rows["demo_b"]
    with_img = make_request(q, [a, b])
    without = make_request(strip(q), [strip(a), strip(b)])
    assert with_img.prompt.count(IMAGE_SLOT) == 3
    assert sim.answer(with_img.prompt, with_img.examples, with_img.meta) == sim.answer(
        without.prompt, without.examples, without.meta
    )


def test_interleave_places_images_at_slots_and_rest_after():
    s = IMAGE_SLOT
    assert interleave(f"intro\n{s}\nQ1\n\n{s}\nQ2", ["a", "b", "c"]) == [
        ("text", "intro"), ("image", "a"), ("text", "Q1"), ("image", "b"), ("text", "Q2"),
        ("image", "c"),
    ]  # fmt: skip
    assert interleave("plain", ["a"]) == [("text", "plain"), ("image", "a")]
    with pytest.raises(ValueError, match="2 image slots but the request carries 1 images"):
        interleave(f"{s}x{s}", ["a"])


def test_a_missing_demonstration_image_fails_that_pair_only(srv, rows):
    q, a, b = rows["query"], rows["demo_a"], rows["demo_b"]
    gone = {**b, "image": str(rows["demo_b"]["image"]) + ".missing"}
    out = evaluate(backend(srv, "openai"), [(q, [a, gone]), (q, [a, b])])
    assert out[0].eval_failed and "does not exist" in out[0].eval_error
    assert not out[1].eval_failed and srv.requests == 1
