"""What ``--max-length`` leaves of the SFT conversations.

TRL truncates each tokenized conversation to ``max_length`` and drops the ones left with no
trained token (the prompt alone fills the window, so no Searcher turn remains). Both happen
silently, and DDAI's multi-turn trajectories often run past 2,048 tokens: ``kept`` counts what
TRL dropped (all of them is refused: there is nothing to train on), ``cut`` the conversations
whose later turns (often the ``<search_complete>`` ending) were truncated away.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddai.trainer import common

log = logging.getLogger(__name__)

NO_TURN = "no Searcher turn within --max-length"


def cut_count(tok: Any, convs: Sequence[list[dict[str, str]]], max_length: int) -> int:
    """How many of ``convs`` the chat template makes longer than ``max_length`` tokens."""
    n = 0
    for conv in convs:
        ids = tok.apply_chat_template(conv, tokenize=True, return_dict=True)["input_ids"]
        n += len(ids) > max_length
    return n


def check_kept(
    rows: int, kept: int, max_length: int | None, data: Sequence[Path], dropped: dict[str, int]
) -> None:
    """Count the conversations TRL dropped for ``max_length`` in ``dropped``; refuse when it
    dropped them all (TRL would fail later with 'num_samples=0')."""
    if kept == rows:
        return
    if not kept:
        raise common.TrainConfigError(
            f"--max-length {max_length}: none of the {rows:,} conversations of --data "
            f"{', '.join(map(str, data))} has a Searcher token within its first {max_length} "
            "tokens (the system prompt and question alone fill them), so there is nothing to "
            "train on; raise --max-length"
        )
    dropped[NO_TURN] = rows - kept
    log.warning(
        "%d of %d conversations have no Searcher turn within --max-length %s and are left out",
        rows - kept,
        rows,
        max_length,
    )


def warn_cut(cut: int, rows: int, max_length: int) -> None:
    if cut:
        log.warning(
            "%d of %d conversations are longer than --max-length %d: their later turns are not "
            "trained on (raise --max-length to keep them)",
            cut,
            rows,
            max_length,
        )


def remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` when it holds nothing (made by a run that was then refused)."""
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
