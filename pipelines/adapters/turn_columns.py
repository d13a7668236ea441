"""Plan texts cut into turns in columns, as ``tags.parse_turn`` would, where the grammar allows.

A turn in the canonical shape (ASCII whitespace, one think, one action, the chat template's
residue around) is cut by one regex over the whole column: no other tag in the think or the
argument, the closing tag the opening one's. The tag parser reads such a text the same way, so
the fields are taken from the regex's groups; the argument checks (a non-empty search, a box,
``search_complete`` being ``true``) and the forced-completion test stay the parser's own. Every
other text goes through ``tags.parse_turn``, one by one.
"""

from __future__ import annotations

import polars as pl

from ddai.pipelines import tags
from ddai.pipelines.adapters.ddai_common import executed_action

# Python's ``\s`` takes more than ASCII whitespace: other whitespace goes through the parser.
_WS = r"[ \t\n\r\f\v]"
_RESIDUE = (
    rf"(?:{_WS}|<\|im_end\|>|<\|endoftext\|>|<\|im_start\|>(?:assistant)?|</s>|<\|eot_id\|>)*"
)
_CANON = (
    rf"(?s)^{_RESIDUE}<think>(.*?)</think>({_WS}*)<(search|bbox|search_complete)>(.*?)"
    rf"</(search|bbox|search_complete)>{_RESIDUE}$"
)
_ANY_TAG = r"</?(?:think|search_complete|search|bbox|answer)>"


def parse_plans(texts: pl.Series) -> tuple[list[str | None], list[tags.Turn]]:
    """Per plan text: the action DDAI executed and the parsed turn (``tags.parse_turn``)."""
    g = (
        pl.DataFrame({"t": texts})
        .select(
            m=pl.col("t").str.extract_groups(_CANON),
        )
        .unnest("m")
    )
    g.columns = ["think", "sep", "name", "arg", "close"]
    ok = g.select(
        (
            (pl.col("name") == pl.col("close"))
            & ~pl.col("think").str.contains(_ANY_TAG)
            & ~pl.col("arg").str.contains(_ANY_TAG)
        ).fill_null(False)
    ).to_series()
    acts: list[str | None] = []
    turns: list[tags.Turn] = []
    cols = zip(
        texts.to_list(),
        ok.to_list(),
        *(g[c].to_list() for c in ("think", "sep", "name", "arg")),
        strict=True,
    )
    for text, fast, think, sep, name, arg in cols:
        if fast and (
            (name == "search" and arg.strip())
            or (name == "search_complete" and arg.strip().lower() == "true")
            or (name == "bbox" and tags._bbox_ok(arg))
        ):
            forced = name == "search_complete" and bool(tags.FORCED_THINK_RE.search(think))
            acts.append(name)
            turns.append(tags.Turn(0, think, name, arg, sep, forced=forced))
        else:
            acts.append(executed_action(text)[0])
            turns.append(tags.parse_turn(text))
    return acts, turns
