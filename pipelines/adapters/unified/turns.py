"""Plan texts cut into turns in columns, as ``tags.parse_turn`` would, where the grammar allows.

A turn in the canonical shape (ASCII whitespace, one think, one action, the chat template's
residue around) is cut in columns: split at the first ``</think>`` and its head at the first
``<think>``, the short tail matched by one regex; no other tag in the think or the argument, the
closing tag the opening one's. The tag parser reads such a text the same way, so the fields are
taken from those pieces; the argument checks (a non-empty search, a box,
``search_complete`` being ``true``) and the forced-completion test stay the parser's own. Every
other text goes through ``tags.parse_turn``, one by one.
"""

from __future__ import annotations

from ddai.pipelines.adapters.ddai_common import executed_action
from ddai.pipelines.records import tags
from ddai.pipelines.records.deps import pl

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
# ``_CANON`` in three cheaper steps (the regex's captures over whole texts cost most of the cut):
# split at the first ``</think>``, then the head at its first ``<think>`` (the residue before it
# holds no tag), and match only the short tail after ``</think>``. Where ``_CANON`` takes a later
# ``</think>`` or ``<think>`` the think holds a tag, which no candidate may (below).
_HEAD = rf"(?s)^{_RESIDUE}$"
_TAIL = (
    rf"(?s)^({_WS}*)<(search|bbox|search_complete)>(.*?)"
    rf"</(search|bbox|search_complete)>{_RESIDUE}$"
)


def _canonical_groups(texts: pl.Series) -> pl.DataFrame:
    """``_CANON``'s groups per text (``think``, ``sep``, ``name``, ``arg``, ``close``; nulls where
    it does not match), where the think holds no tag."""
    cut = (
        pl.DataFrame({"t": texts})
        .select(c=pl.col("t").str.splitn("</think>", 2))
        .unnest("c")
        .select(
            h=pl.col("field_0").str.splitn("<think>", 2),
            tail=pl.col("field_1").str.extract_groups(_TAIL),
        )
        .unnest("h", "tail")
    )
    cut.columns = ["head", "think", "sep", "name", "arg", "close"]
    ok = pl.col("think").is_not_null() & pl.col("sep").is_not_null()
    ok = ok & ((pl.col("head") == "") | pl.col("head").str.contains(_HEAD))
    return cut.select(pl.when(ok).then(pl.col(c)).alias(c) for c in cut.columns[1:])


def parse_plans(texts: pl.Series) -> pl.DataFrame:
    """Per plan text, in order: ``act`` (the action DDAI executed) and the parsed turn's
    ``think``, ``action``, ``arg``, ``sep``, ``forced`` and ``error`` (``tags.parse_turn``)."""
    g = _canonical_groups(texts)
    cand = g.select(
        (
            (pl.col("name") == pl.col("close"))
            & ~pl.col("think").str.contains(_ANY_TAG)
            & ~pl.col("arg").str.contains(_ANY_TAG)
        ).fill_null(False)
    ).to_series()
    # the argument checks: sure in columns where the answer cannot differ from the parser's
    # (a search with a printable ASCII character; ``true`` in ASCII case and spacing), the
    # parser's own (Python's strip and lower, the box's JSON) for the rest of the candidates
    name, arg = pl.col("name"), pl.col("arg")
    sure = g.select(
        pl.lit(cand)
        & (
            ((name == "search") & arg.str.contains(r"[!-~]"))
            | (
                (name == "search_complete")
                & arg.str.contains(r"^[\x00-\x7f]*$")
                & (arg.str.strip_chars(" \t\n\r\f\v").str.to_lowercase() == "true")
            )
        )
    ).to_series()
    check = (cand & ~sure).arg_true()
    if len(check):
        picked = g[check]
        verdict = [
            (n == "search" and bool(a.strip()))
            or (n == "search_complete" and a.strip().lower() == "true")
            or (n == "bbox" and tags._bbox_ok(a))
            for n, a in zip(picked["name"].to_list(), picked["arg"].to_list(), strict=True)
        ]
        sure = sure.scatter(check, pl.Series(verdict, dtype=pl.Boolean))
    ok = sure
    # forced completion: the parser's regex on the thinks of the completions taken
    complete = (ok & (g["name"] == "search_complete")).arg_true()
    forced = pl.Series("forced", [False] * len(g), dtype=pl.Boolean)
    if len(complete):
        hits = [bool(tags.FORCED_THINK_RE.search(th)) for th in g["think"][complete].to_list()]
        forced = forced.scatter(complete, pl.Series(hits, dtype=pl.Boolean))
    out = g.select(
        act=pl.col("name"),
        think="think",
        action=pl.col("name"),
        arg="arg",
        sep="sep",
        forced=forced,
        error=pl.lit(None, pl.String),
    ).filter(ok)
    # every other text through the tag parser, one by one
    slow = (~ok).arg_true().to_list()
    if not slow:
        return out
    slow_texts = texts.gather(slow).to_list()
    turns = [tags.parse_turn(x) for x in slow_texts]
    rest = pl.DataFrame(
        {
            "act": [executed_action(x)[0] for x in slow_texts],
            "think": [t.think for t in turns],
            "action": [t.action for t in turns],
            "arg": [t.arg for t in turns],
            "sep": [t.sep for t in turns],
            "forced": [t.forced for t in turns],
            "error": [t.error for t in turns],
        },
        schema=out.schema,
    )
    return (
        pl.concat(
            [
                out.with_columns(i=ok.arg_true().cast(pl.Int64)),
                rest.with_columns(i=pl.Series(slow, dtype=pl.Int64)),
            ]
        )
        .sort("i")
        .drop("i")
    )
