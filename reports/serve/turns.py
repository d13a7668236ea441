"""A transcript's turns as the rollout page shows them (pure): raw text, boxes, values, gaps.

The store keeps each turn's parsed fields, not the text the model wrote; the raw text of turn i
is recovered by parsing the rollout's ``response`` again with the one tag grammar
(``pipelines.tags.parse_turns``), used only when it cuts the response into exactly the stored
number of turns (otherwise the two disagree about where a turn starts and no raw text is shown,
with a sentence why). A rollout without turns gets a sentence saying why, from its run's
manifest: a DDAI flash log records no turns at all.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ddai.pipelines.records.tags import parse_turns
from ddai.reports.transcript import mark_pages

# Ingest formats whose rows carry no turns: what each keeps instead.
TURNLESS_FORMATS = {
    "ddai-flash": "a DDAI flash log (flash_rm_detail.jsonl), which keeps the question, the final "
    "answer, the pages retrieved and the scores of each rollout, not its turns",
}


def bbox_of(arg: str | None) -> list[float] | None:
    """A ``<bbox>`` argument as ``[x1, y1, x2, y2]`` page pixels; None when it is not one."""
    try:
        box = json.loads(arg or "")
    except (ValueError, RecursionError):
        return None
    if not isinstance(box, list) or len(box) != 4:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in box):
        return None
    if not all(math.isfinite(v) for v in box) or not (box[0] < box[2] and box[1] < box[3]):
        return None
    return [float(v) for v in box]


def raw_texts(response: str | None, n_turns: int) -> tuple[list[str | None], str | None]:
    """The raw text of each of ``n_turns`` stored turns, cut from ``response``, and a sentence
    when it cannot be (no response, or the response parses into another number of turns)."""
    if not n_turns:
        return [], None
    if not response:
        return [None] * n_turns, "the log keeps no response text, so no turn's raw text is shown"
    parsed = parse_turns(response)
    if len(parsed) != n_turns:
        return [None] * n_turns, (
            f"the response text parses into {len(parsed)} turn(s) but the log stores {n_turns}: "
            "no raw text per turn is shown (the whole response is below)"
        )
    return [t.raw for t in parsed], None


def turn_views(row: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """Each stored turn with what the page draws: ``pages`` (marked golden / same document),
    ``crop_of`` (the page a ``<bbox>`` turn crops: the one last shown), ``bbox`` (its box in page
    pixels, or None), ``raw`` (the text the model wrote, or None); and the sentence of
    ``raw_texts`` when raw text is missing."""
    golden = row.get("reference_pages")
    stored = row.get("turns") or []
    raws, why = raw_texts(row.get("response"), len(stored))
    out, shown = [], None
    for t, raw in zip(stored, raws, strict=True):
        crop_of = shown if t.get("action") == "bbox" else None
        if t.get("retrieved"):
            shown = t["retrieved"][0]  # a crop applies to the page last shown
        out.append(
            {
                **t,
                "pages": mark_pages(t.get("retrieved"), golden),
                "crop_of": crop_of,
                "bbox": bbox_of(t.get("arg")) if crop_of else None,
                # the cropped page's frame: golden / same document / other, as in the lists
                "crop_mark": mark_pages([crop_of], golden)[0]["mark"] if crop_of else None,
                "raw": raw,
            }
        )
    return out, why


def source_formats(manifest: dict[str, Any] | None) -> list[str]:
    """The ingest formats a run's rows came from (its manifest's sources, every commit)."""
    if not manifest:
        return []
    seen: dict[str, None] = {}
    for record in [*manifest.get("history", []), manifest]:
        for src in record.get("sources") or []:
            if isinstance(src, dict) and src.get("format"):
                seen[str(src["format"])] = None
    return list(seen)


def missing_turns(row: dict[str, Any], formats: list[str]) -> str | None:
    """Why a rollout shows no turns, as a sentence; None when it has turns."""
    if row.get("turns"):
        return None
    turnless = [TURNLESS_FORMATS[f] for f in formats if f in TURNLESS_FORMATS]
    if turnless:
        return f"No turns: run {row['run_id']} was ingested from {turnless[0]}."
    if row.get("response"):
        return "No turns: the log stores this rollout's response text (below) but no parsed turns."
    return (
        f"No turns: the log of run {row['run_id']} records neither turns nor response text for "
        "this rollout" + (f" (ingested as {', '.join(formats)})." if formats else ".")
    )
