"""Observation contents flatten to text the way a text policy should see them."""

from __future__ import annotations

from ddai.trainer.episode.chat import flatten_messages


def observation_text(content):
    """One message's content as ``flatten_messages`` flattens it (images as ``[image: path]``)."""
    return flatten_messages([{"role": "user", "content": content}])[0][0]["content"]


def test_image_block_read_back_from_parquet_keeps_its_path():
    # A Parquet round trip fills every struct key: the image block has text=None.
    block = {"type": "image", "text": None, "image": "corpus/img/3_2.jpg"}
    assert observation_text([block]) == "[image: corpus/img/3_2.jpg]"
    assert observation_text([{"image": "a.jpg"}]) == "[image: a.jpg]"
    assert observation_text({"type": "image", "image": "b.jpg"}) == "[image: b.jpg]"


def test_text_blocks_and_strings():
    assert observation_text([{"type": "text", "text": "page 3", "image": None}]) == "page 3"
    assert observation_text([{"text": "raw"}]) == "raw"
    assert observation_text(["a", {"type": "text", "text": "b"}]) == "a\nb"
    assert observation_text(None) == "" and observation_text("s") == "s"


def test_a_template_with_generation_markers_is_kept_in_either_spelling():
    from types import SimpleNamespace

    from ddai.trainer.episode.chat import CHATML_TEMPLATE, ensure_training_template

    for marked in (
        "{% generation %}x{% endgeneration %}",
        "{%- generation %}x{%- endgeneration %}",
    ):
        tok = SimpleNamespace(chat_template=marked)
        assert ensure_training_template(tok) == marked and tok.chat_template == marked
    bare = SimpleNamespace(chat_template=None)
    assert ensure_training_template(bare) == CHATML_TEMPLATE == bare.chat_template
