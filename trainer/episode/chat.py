"""Chat templates and message normalisation shared by SFT and the GRPO rollout.

The policy speaks ChatML (``<|im_start|>role\\n…<|im_end|>\\n``, Qwen's format). Assistant-only SFT
loss needs a template with ``{% generation %}`` markers around each assistant message *including*
its ``<|im_end|>``, so the model learns to end its turn; ``ensure_training_template`` supplies one
where a tokenizer lacks it (TRL's patched template for a known family first, else ChatML).
"""

from __future__ import annotations

import json
from typing import Any

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"

# ChatML with generation markers; prefix-preserving (rendering a conversation's first k messages
# gives a prefix of rendering all of them), which the multi-turn rollout relies on.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _flatten(content: Any) -> tuple[str, int]:
    """``(text, images)``: ``content`` flattened to text, and how many images became
    ``[image: path]`` in it."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    if isinstance(content, dict):
        content = [content]
    parts: list[str] = []
    images = 0
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            # Typed blocks read back from Parquet carry every key (``text: None`` on an image
            # block), so decide by ``type`` first and by which key holds a value second.
            kind = block.get("type") or ("image" if block.get("image") is not None else "text")
            if kind == "image" or block.get("image") is not None:
                parts.append(f"[image: {block.get('image') or block.get('path') or ''}]")
                images += 1
            elif kind == "text" and block.get("text") is not None:
                parts.append(str(block["text"]))
            else:
                parts.append(json.dumps(block, ensure_ascii=False))
        else:
            parts.append(str(block))
    return "\n".join(parts), images


def normalize_messages(messages: Any) -> list[dict[str, str]]:
    """``[{role, content}]`` with text content, from a list or its JSON text (DDAI ``train1``)."""
    return flatten_messages(messages)[0]


def flatten_messages(messages: Any) -> tuple[list[dict[str, str]], int]:
    """``normalize_messages`` and how many of the messages had images flattened to
    ``[image: path]`` text (a text model never sees their pixels)."""
    if isinstance(messages, str):
        messages = json.loads(messages)
    out = []
    flattened = 0
    for m in messages:
        text, images = _flatten(m.get("content"))
        out.append({"role": str(m["role"]), "content": text})
        flattened += images > 0
    return out, flattened


def ensure_training_template(tokenizer: Any) -> str:
    """Give ``tokenizer`` a chat template with generation markers (returns the one it now has).

    Keeps a template that already has markers; else TRL's training variant of a known family;
    else, for a ChatML tokenizer or one with no template at all, ``CHATML_TEMPLATE``.
    """
    current = getattr(tokenizer, "chat_template", None)
    if current and "{% generation %}" in current.replace("{%- generation %}", "{% generation %}"):
        return current
    if current:
        try:
            from trl import get_training_chat_template

            patched = get_training_chat_template(tokenizer)
        except (ValueError, KeyError, NotImplementedError):
            patched = None
        if patched:
            tokenizer.chat_template = patched
            return patched
        if IM_START not in current:
            raise ValueError(
                "the tokenizer's chat template has no {% generation %} markers and is not a known "
                "family; add the markers around assistant content (end-of-turn token included) or "
                "train with --no-assistant-only-loss"
            )
    tokenizer.chat_template = CHATML_TEMPLATE
    return CHATML_TEMPLATE
