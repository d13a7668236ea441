"""One reader for a prompt row in verl's RL parquet shape (DDAI's SlideVQA sets, ``ddai curate``
output, the fixtures), used by the funnel (``ddai.pipelines.funnel.dataset``) and the trainer
(``ddai.trainer.episode.tasks``) alike, so ``curate`` and ``train grpo`` read every row the same.

Columns: ``id``, ``prompt`` (chat messages), ``file_name`` (``N.pdf``), ``reference_page`` (page
numbers), ``data_source``, ``reward_model.ground_truth`` and ``extra_info`` (a struct, or its JSON
text) with ``question``, ``answer``, ``file_name`` and ``reference_page`` as fallbacks.

The rules, where the two readers used to differ:

- question: ``extra_info.question``, else the last user message without a leading
  ``"Question: "`` (the fixtures' and DDAI's user turn), else a top-level ``question``;
- reference answer: the first non-empty of ``reward_model.ground_truth``, ``extra_info.answer``,
  ``answer``; a non-string value as JSON text;
- golden pages ``{doc}_{page}``: ``reference_page`` may be a list or one page; a page is written
  as an integer when it is one (``7``, ``7.0``, ``"7"`` → ``7``), else as given.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

QUESTION_PREFIX = "Question: "


def extra_info(row: dict[str, Any]) -> dict[str, Any]:
    """``extra_info`` as a dict (a struct column, its JSON text, or missing)."""
    return _json_field(row, "extra_info")


def _json_field(row: dict[str, Any], name: str) -> dict[str, Any]:
    value = row.get(name) or {}
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    return value if isinstance(value, dict) else {}


def uid_of(row: dict[str, Any], index: int = 0) -> str:
    """``id``, else ``uid``, else ``row_{index}``."""
    return str(row.get("id") or row.get("uid") or f"row_{index}")


_TRAILING_DIGITS = re.compile(r"(\d+)$")


def ddai_search_id(uid: str) -> str:
    """The document number DDAI's trainer sends as a search's ``id``: the uid's trailing digits
    as an integer (``train_2747`` → ``"2747"``, ``train_007`` → ``"7"``), ``"-1"`` when the uid
    ends in none (``vrag_agent/generation.py``: ``re.search(r"(\\d+)$", uid)``)."""
    m = _TRAILING_DIGITS.search(str(uid))
    return str(int(m.group(1))) if m else "-1"


def messages_of(row: dict[str, Any]) -> list[Any]:
    """``prompt`` as a list of messages (a list column, or its JSON text as in DDAI's ``train1``)."""
    prompt = row.get("prompt") or []
    if isinstance(prompt, str):
        prompt = json.loads(prompt) if prompt.strip() else []
    return list(prompt)


def _text(content: Any) -> str:
    """A message's text: a string, or the ``text`` parts of a multimodal content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(c.get("text") or "") for c in content if isinstance(c, dict))
    return str(content)


def question_of(row: dict[str, Any]) -> str:
    """``extra_info.question``, else the last user message without its ``"Question: "``
    prefix, else ``question``, else ``""``."""
    extra = extra_info(row)
    if extra.get("question"):
        return str(extra["question"])
    for msg in reversed(messages_of(row)):
        if isinstance(msg, dict) and msg.get("role") == "user" and msg.get("content"):
            return _text(msg["content"]).removeprefix(QUESTION_PREFIX)
    return str(row.get("question") or "")


def reference_of(row: dict[str, Any]) -> str:
    """``reward_model.ground_truth``, else ``extra_info.answer``, else ``answer`` (the first that
    is not empty; JSON text when not a string), else ``""``."""
    rm, extra = _json_field(row, "reward_model"), extra_info(row)
    for v in (rm.get("ground_truth"), extra.get("answer"), row.get("answer")):
        if v not in (None, ""):
            return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return ""


def file_name_of(row: dict[str, Any]) -> str | None:
    """``file_name``, else ``extra_info.file_name``."""
    name = row.get("file_name") or extra_info(row).get("file_name")
    return str(name) if name else None


def doc_id_of(row: dict[str, Any]) -> str | None:
    """The document id: ``file_name`` without folder and extension (``12.pdf`` → ``12``)."""
    name = file_name_of(row)
    return Path(name).stem if name else None


def _page(p: Any) -> Any:
    if isinstance(p, float) and p.is_integer():
        return int(p)
    if isinstance(p, str) and p.strip().isdigit():
        return int(p)
    return p


def golden_page_ids(file_name: str | None, pages: Any) -> list[str]:
    """``{doc}_{page}`` for each page (a list, or one page) of ``file_name``'s document."""
    if not file_name or pages is None:
        return []
    if isinstance(pages, int | float | str):
        pages = [pages]
    doc = Path(str(file_name)).stem
    return [f"{doc}_{_page(p)}" for p in pages]


def reference_page_ids(row: dict[str, Any]) -> list[str]:
    """DDAI's golden page basenames ``{doc}_{page}`` from ``file_name`` and ``reference_page``
    (top level, else in ``extra_info``)."""
    pages = row.get("reference_page")
    if pages is None:
        pages = extra_info(row).get("reference_page")
    return golden_page_ids(file_name_of(row), pages)
