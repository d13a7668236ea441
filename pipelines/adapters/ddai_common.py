"""DDAI field conventions shared by the DDAI adapters (``../shared/ddai-formats/README.md``).

Pure functions: the question behind a reward query or a chat prompt, page basenames, the document
of the reference, the action DDAI's environment executed for a turn, and the mapping of one
``rm.flash.detail`` payload (also a line of the legacy ``flash_rm_detail.jsonl``) onto rollout
fields (DESIGN.md, "Adapter mappings").
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ddai.pipelines.records import metrics, tags
from ddai.pipelines.records.schema import COLUMNS

# DDAI's reward query may keep the chat template's next role header: "...?\nassistant\n".
_ASSISTANT_TAIL_RE = re.compile(r"\n\s*assistant\b")
# The last user message of a chat-templated prompt, with or without the special tokens
# (verl decodes prompts with ``skip_special_tokens=True``, leaving bare "user\n" headers).
_USER_MSG_RE = re.compile(
    r"(?:<\|im_start\|>|^|\n)user\n(.*?)(?=<\|im_end\|>|\n(?:assistant|system|user)\n|\Z)", re.S
)
_QUESTION_PREFIX = "Question:"
# DDAI's environment executes the first well-formed action tag of a turn, valid or not
# (``vrag_agent/generation.py``: ``<(search|bbox|search_complete)>(.*?)</\1>``).
_EXECUTED_RE = re.compile(r"<(search|bbox|search_complete)>(.*?)</\1>", re.S)

# rm.flash.detail / flash_rm_detail.jsonl field → rollout column.
FLASH_FIELDS = {
    "generated_answer": "answer",
    "reference_answer": "reference_answer",
    "retrieved_basenames": "retrieved_pages",
    "reference_basenames": "reference_pages",
    "judge_score": "judge_score",
    "ndcg": "ndcg",
    "final_score": "reward",
    "uid": "uid",
    "sample_idx": "sample_idx",
}


# The stored turn's fields: tags.Turn's compared ones, in order (schema.TURN_TYPE is tested equal).
TURN_FIELDS = tuple(f.name for f in dataclasses.fields(tags.Turn) if f.compare)


def turn_record(t: tags.Turn) -> dict[str, Any]:
    """``Turn.to_record()`` without ``dataclasses.asdict``'s deep copy (hot in bulk ingest)."""
    return {f: getattr(t, f) for f in TURN_FIELDS}


# Columns a payload field must not be read as (it is kept under ``source_<name>`` instead): every
# schema column but the page lists and ``flags``, which a payload key of that name still sets.
_RESERVED = frozenset(COLUMNS) - {"reference_pages", "retrieved_pages", "flags"}


def question_from_query(query: Any) -> Any:
    """DDAI's reward ``query`` cut at a trailing ``\\nassistant`` (the chat template's next header).

    A query without that tail is returned unchanged; a non-string passes through (the schema
    reports it).
    """
    if not isinstance(query, str):
        return query
    m = _ASSISTANT_TAIL_RE.search(query)
    return query[: m.start()] if m else query


def last_user_message(prompt: str | None) -> str | None:
    """The last user message of a chat-templated prompt, special tokens removed, stripped."""
    if not prompt:
        return None
    found = _USER_MSG_RE.findall(prompt)
    if not found:
        return None
    return re.sub(r"<\|[^|>]*\|>", "", found[-1]).strip()


def question_from_prompt(prompt: str | None) -> str | None:
    """The last user message of a chat-templated prompt, without DDAI's ``Question:`` prefix."""
    text = last_user_message(prompt)
    if text is None:
        return None
    if text.startswith(_QUESTION_PREFIX):
        text = text[len(_QUESTION_PREFIX) :].strip()
    return text or None


def basename(path: str) -> str:
    """``./search_engine/corpus/img/2747_12.jpg`` → ``2747_12`` (DDAI's page basename)."""
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name else name


def file_name_of(pages: Any) -> str | None:
    """DDAI's SlideVQA convention: page ``{doc}_{page}`` comes from ``{doc}.pdf``."""
    if isinstance(pages, list) and pages and isinstance(pages[0], str) and "_" in pages[0]:
        return f"{metrics.doc_of(pages[0])}.pdf"
    return None


def dataset_id_of(pages: Any) -> str | None:
    """DDAI's dataset id ``train_N`` recovered from the first reference page ``N_page``."""
    if isinstance(pages, list) and pages and isinstance(pages[0], str) and "_" in pages[0]:
        return f"train_{metrics.doc_of(pages[0])}"
    return None


def executed_action(text: Any) -> tuple[str | None, str]:
    """The action DDAI's environment ran for one turn's text, and its stripped content.

    The forced completion and any text holding ``<search_complete>…</search_complete>`` first end
    the rollout; text with no well-formed action tag executes nothing (``(None, "")``).
    """
    if not isinstance(text, str) or not text:
        return None, ""
    if text.strip() == tags.FORCED_COMPLETION:
        return "search_complete", "true"
    m = _EXECUTED_RE.search(text)
    return (m.group(1), m.group(2).strip()) if m else (None, "")


def flash_rollout(payload: dict[str, Any]) -> dict[str, Any]:
    """One ``rm.flash.detail`` payload as a loose rollout record (``normalize_rollout`` input).

    ``local_idx`` → ``rollout_idx``, ``query`` → ``question`` (cut at ``\\nassistant``),
    ``final_score`` → ``reward``, ``file_name`` from the first reference page; every other field
    stays under its own name and so lands in ``extra``.
    """
    rec: dict[str, Any] = {}
    rest = dict(payload)
    for src, dst in FLASH_FIELDS.items():
        if src in rest:
            rec[dst] = rest.pop(src)
    if "local_idx" in rest:
        rec["rollout_idx"] = rest.pop("local_idx")
    if "query" in rest:
        rec["question"] = question_from_query(rest.pop("query"))
    rec["file_name"] = file_name_of(rec.get("reference_pages"))
    rest.pop("event_type", None)
    # Keys that collide with schema columns would be read as columns: keep them as extra.
    for k in [k for k in rest if k in _RESERVED]:
        rest[f"source_{k}"] = rest.pop(k)
    return {**rest, **rec}


_UNSAFE_RUN_CHARS = re.compile(r"[^A-Za-z0-9._\-:+@]+")


def run_id_from_stem(stem: str, suffix: str = "") -> str:
    """A run id for a source that names none: its file stem, less a format suffix, made safe.

    ``round0_flash_rm_detail`` → ``round0``; a bare ``flash_rm_detail`` keeps its name.
    """
    name = stem[: -len(suffix)] if suffix and stem.endswith(suffix) else stem
    name = _UNSAFE_RUN_CHARS.sub("_", name.strip("_-. ")).lstrip("._")
    return name or _UNSAFE_RUN_CHARS.sub("_", stem).lstrip("._") or "run"
