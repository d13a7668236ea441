"""Dataset ids for verl rollouts, so a verl run joins the dataset in the funnel.

verl's dump has no group id (DESIGN.md: ``uid`` = sha1 of the prompt), which joins no dataset
``id``. Two ways to get the real one, per row, first that applies:

1. ``uid_field``: a field of the dump line that holds it (a reward extra such as ``index`` or
   ``uid``; a dotted path reaches into nested objects: ``extra_info.id``);
2. ``dataset``: the prompt text matched to the dataset's prompts: the last user message of the
   dump's decoded ``input`` against the last user message of the dataset row's ``prompt``, equal
   after dropping chat-template special tokens and collapsing whitespace. A text that matches no
   dataset row, or rows of several ids, is never guessed.

A row neither way maps keeps the sha1 uid and the flag ``uid_unmatched`` (counted at ingest), so
it still counts for its run but joins no dataset row.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.adapters.ddai_common import last_user_message
from ddai.pipelines.records.deps import pl

UID_UNMATCHED = "uid_unmatched"
UID_HEX = 12
_SPECIAL_RE = re.compile(r"<\|[^|>]*\|>")


def uid_of(prompt: str) -> str:
    """The group id verl does not dump: sha1 of the decoded prompt, first 12 hex digits."""
    return hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:UID_HEX]


def normalize_prompt(text: str) -> str:
    """Prompt text as compared: special tokens dropped, whitespace runs as one space, stripped."""
    return " ".join(_SPECIAL_RE.sub(" ", text).split())


def _content_text(content: Any) -> str | None:
    """A message's text: a string, or the text parts of a multimodal content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [c.get("text") for c in content if isinstance(c, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return None


def dataset_prompt_text(prompt: Any) -> str | None:
    """The last user message of a dataset row's ``prompt`` (a list of chat messages, or text)."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list):
        return None
    users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return _content_text(users[-1].get("content")) if users else None


def load_prompt_index(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Normalized prompt text → the dataset ids that have it (verl RL parquet, or JSONL)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--dataset {p}: no such file")
    try:
        df = pl.read_parquet(p) if p.suffix != ".jsonl" else pl.read_ndjson(p)
    except Exception as e:  # polars raises several types for a file it cannot read
        raise ValueError(f"--dataset {p}: not a readable Parquet/JSONL dataset ({e})") from e
    missing = [c for c in ("id", "prompt") if c not in df.columns]
    if missing:
        raise ValueError(
            f"--dataset {p} has no {' or '.join(missing)} column; it must be in verl's RL shape "
            "(id, prompt as chat messages)"
        )
    index: dict[str, list[str]] = {}
    for rid, prompt in zip(df["id"].to_list(), df["prompt"].to_list(), strict=True):
        text = dataset_prompt_text(prompt)
        if rid is None or text is None:
            continue
        ids = index.setdefault(normalize_prompt(text), [])
        if str(rid) not in ids:
            ids.append(str(rid))
    return index


def field_value(obj: dict[str, Any], path: str) -> Any:
    """``obj[a][b]…`` for the dotted ``path`` ``a.b…``; None where a step is missing."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _id_value(v: Any) -> bool:
    """A field value usable as a dataset id: a non-empty string or an integer (not a bool)."""
    return (isinstance(v, str) and bool(v)) or (isinstance(v, int) and not isinstance(v, bool))


@dataclass
class UidMapper:
    """Maps one dump line to its dataset id; counts how each row was mapped."""

    uid_field: str | None = None
    prompts: dict[str, list[str]] | None = None
    counts: Counter = field(default_factory=Counter)

    @classmethod
    def build(cls, uid_field: str | None, dataset: str | os.PathLike[str] | None) -> UidMapper:
        return cls(uid_field or None, load_prompt_index(dataset) if dataset else None)

    def uid_batch(self, inputs: list[str], values: list[Any]) -> tuple[list[str | None], Counter]:
        """``uid`` for many rows (``inputs``: each row's ``input``; ``values``: its ``uid_field``
        value), matching each distinct prompt once; the counts are returned, not added."""
        out: list[str | None] = []
        counts: Counter = Counter()
        by_prompt: dict[str, tuple[str | None, str | None]] = {}
        for prompt, v in zip(inputs, values, strict=True):
            if self.uid_field and _id_value(v):
                counts[f"uid from field {self.uid_field}"] += 1
                out.append(str(v))
                continue
            if prompt not in by_prompt:
                by_prompt[prompt] = self._by_prompt(prompt)
            got, how = by_prompt[prompt]
            if how:
                counts[how] += 1
            if got is None:
                counts[UID_UNMATCHED] += 1
            out.append(got)
        return out, counts

    def _by_prompt(self, prompt: Any) -> tuple[str | None, str | None]:
        """The dataset id matching ``prompt``, and what to count for the match (None: nothing
        matched)."""
        if self.prompts is not None:
            text = last_user_message(prompt)
            ids = self.prompts.get(normalize_prompt(text)) if text is not None else None
            if ids and len(ids) == 1:
                return ids[0], "uid from dataset prompt"
            if ids:
                return None, "prompt matches several dataset ids"
        return None, None

    def uid(self, obj: dict[str, Any]) -> str | None:
        """The row's dataset id, or None (the caller keeps the sha1 uid and flags the row)."""
        v = field_value(obj, self.uid_field) if self.uid_field else None
        (got,), counts = self.uid_batch([obj["input"]], [v])
        self.counts.update(counts)
        return got
