"""A tiny, deterministic search task for smoke tests, benches and the demo.

Eight two-page "slide decks" about distinct topics; each question names its topic, so a policy that
searches for the topic word usually finds the golden page with BM25 in one step (not always: some
topics appear on both pages of their deck, which leaves GRPO something to learn). ``write_toy(out)``
writes ``pages.parquet``, ``dataset.parquet`` (verl's RL shape) and ``sft.parquet`` (DDAI ``train1``
shape: search, then ``search_complete``), which is all ``ddai train sft`` / ``ddai train grpo``
need. The synthetic world of ``ddai fixtures make`` is the larger, realistic alternative.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ddai.pipelines.fixtures.dataset import verl_row as verl_row  # re-exported: learn_task
from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.records.deps import pa
from ddai.pipelines.store import io

SYSTEM_PROMPT = (
    "You are a search agent. Begin with <think>...</think>, then write exactly one action: "
    "<search>query</search>, <bbox>[x1, y1, x2, y2]</bbox> or <search_complete>true</search_complete>."
)
# (topic, page 1 lines, page 2 lines, question about page 1 or 2, answer, golden page)
_DECKS: tuple[tuple[str, list[str], list[str], str, str, int], ...] = (
    (
        "revenue",
        ["Revenue by year", "2019 revenue 10", "2021 revenue 30"],
        ["Outlook", "costs fall"],
        "Which year had the highest revenue?",
        "2021",
        1,
    ),
    (
        "phones",
        ["Phone market share", "Brand A 40%", "Brand B 35%"],
        ["Phone sales", "units grow"],
        "What is the phone market share of Brand A?",
        "40%",
        1,
    ),
    (
        "employees",
        ["Team overview", "founded 2010"],
        ["Employees by region", "Europe 200", "Asia 300"],
        "How many employees work in Asia?",
        "300",
        2,
    ),
    (
        "coffee",
        ["Coffee consumption", "cups per day 3", "tea per day 1"],
        ["Coffee prices", "rising"],
        "How many cups of coffee per day?",
        "3",
        1,
    ),
    (
        "rainfall",
        ["Climate summary", "dry season"],
        ["Rainfall by month", "June rainfall 120 mm", "July rainfall 90 mm"],
        "What is the June rainfall?",
        "120 mm",
        2,
    ),
    (
        "students",
        ["Students enrolled", "science 500", "arts 250"],
        ["Campus map", "north gate"],
        "How many students are enrolled in science?",
        "500",
        1,
    ),
    (
        "energy",
        ["Energy mix", "solar 25%", "wind 15%"],
        ["Energy policy", "targets"],
        "What share of the energy mix is solar?",
        "25%",
        1,
    ),
    (
        "tourism",
        ["Tourism trends", "visitors 2 million"],
        ["Tourism by country", "Spain first", "Italy second"],
        "Which country is first in tourism?",
        "Spain",
        2,
    ),
)


def page_record(doc_id: int, page: int, lines: list[str]) -> dict[str, Any]:
    """A corpus page of an 800 × 600 slide: ``lines`` stacked 100 px apart, top to bottom."""
    return {
        "doc_id": str(doc_id),
        "page": page,
        "lines": [
            {"text": t, "bbox": [0.0, 100.0 * i, 800.0, 100.0 * i + 90]}
            for i, t in enumerate(lines)
        ],
        "width": 800,
        "height": 600,
    }


def page_records() -> list[dict[str, Any]]:
    return [
        page_record(d, page, lines)
        for d, (_, p1, p2, *_rest) in enumerate(_DECKS, start=1)
        for page, lines in ((1, p1), (2, p2))
    ]


def corpus() -> Corpus:
    return Corpus.from_records(page_records())


def dataset_rows() -> list[dict[str, Any]]:
    return [
        verl_row(
            f"train_{d}",
            str(d),
            golden,
            "toy",
            SYSTEM_PROMPT,
            q,
            answer,
            index=d - 1,
            split="train",
        )
        for d, (_, _, _, q, answer, golden) in enumerate(_DECKS, start=1)
    ]


def sft_rows(c: Corpus | None = None) -> list[dict[str, Any]]:
    """One golden trajectory per question: search for the topic, see the page, complete."""
    c = c or corpus()
    rows = []
    for d, (topic, _, _, q, _, golden) in enumerate(_DECKS, start=1):
        page = f"{d}_{golden}"
        msgs = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": q},
            {
                "role": "assistant",
                "content": f"<think>I need the {topic} page.</think>\n<search>{topic}</search>",
            },
            {"role": "user", "content": f"[page {page}]\n{c.text(page)}"},
            {
                "role": "assistant",
                "content": "<think>The page answers it.</think>\n<search_complete>true</search_complete>",
            },
        ]
        rows.append({"uid": f"train_{d}", "format_version": "v1", "messages": json.dumps(msgs)})
    return rows


def write_toy(out: str | os.PathLike[str]) -> Path:
    """Write ``pages.parquet``, ``dataset.parquet`` and ``sft.parquet`` under ``out``."""
    root = Path(out)
    c = corpus()
    c.save(root / "pages.parquet")
    io.write_parquet(root / "dataset.parquet", pa.Table.from_pylist(dataset_rows()))
    io.write_parquet(root / "sft.parquet", pa.Table.from_pylist(sft_rows(c)))
    return root


def local_backends(c: Corpus) -> Any:
    """The local search / generator / judge backends over ``c``, without the call cache."""
    from ddai.pipelines.backends import get_backend
    from ddai.trainer.episode.episodes import Backends

    return Backends(
        search=get_backend("search", "local", corpus=c, cache=False),
        generator=get_backend("generator", "local", corpus=c, cache=False),
        judge=get_backend("judge", "local", cache=False),
    )
