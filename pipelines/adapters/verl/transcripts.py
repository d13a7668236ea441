"""verl transcripts cut in columns, as ``transcript.split_transcript`` would, where the shape allows.

An output in the canonical shape (chat-template residue, then turns ``<think>T</think>S<A>X</C>``
each followed by a gap holding no tag but special tokens ``<|…|>``: where an observation sits) is
matched by one regex over the whole column and cut into turns at its ``<``s: think and argument
hold no ``<``, the separator is ASCII whitespace. For such a text the splitter's segments are these
turns and its observation cut lands in the gap after a ``</search>`` or ``</bbox>``, so the turn
fields come from the cut; the gap in its usual shape (an end-of-turn token, then a chat user turn)
is split and cleaned as expressions, as are the argument checks (a non-empty search, a box in the
usual JSON shape, ``search_complete`` being ``true``), the forced-completion test on an ASCII
think and the page names in an ASCII observation. The splitter's and the parser's own code run only
for the rest: an odd gap, a box in another shape, non-ASCII text where Python's and Rust's regexes
may differ, and a turn the checks reject (the parser reads its text, one turn, and has the last
word). Every output not in the canonical shape goes through ``split_transcript``, row by row.
"""

from __future__ import annotations

from typing import Any

from ddai.pipelines.adapters.line_batches import from_turns
from ddai.pipelines.adapters.transcript import (
    _EOS_TOKEN_RE,
    _OBS_FIND_RE,
    clean_observation,
    images_in,
    split_transcript,
)
from ddai.pipelines.records import tags
from ddai.pipelines.records.deps import pa, pl
from ddai.pipelines.records.schema import TURN_TYPE

_WS = r"[ \t\n\r\f\v]"  # Python's \s takes more: other whitespace goes row by row
_RESIDUE = (
    rf"(?:{_WS}|<\|im_end\|>|<\|endoftext\|>|<\|im_start\|>(?:assistant)?|</s>|<\|eot_id\|>)*"
)
_ACT = "search|bbox|search_complete"
_GAP = r"(?:[^<]|<\|[A-Za-z_]+\|>)*"
# one turn and the gap after it
_UNIT = rf"<think>[^<]*</think>{_WS}*<(?:{_ACT})>[^<]*</(?:{_ACT})>{_GAP}"
_WHOLE = rf"^{_RESIDUE}(?:{_UNIT})+$"
_TURN_FIELDS = [f.name for f in TURN_TYPE]


def _gap(name: str, gap: str) -> tuple[str, str | None]:
    """The gap after an action: the policy's part and the observation cut from it (or None), as
    ``split_transcript`` cuts it (an observation after a search or crop only)."""
    if name == "search_complete":
        return gap, None
    text = ">" + gap  # the lookbehind sees the action's closing ``>``, as in the whole text
    found = _OBS_FIND_RE.search(text, 1)
    if found is None:
        return gap, None
    head = text[1 : found.start()]
    tokens = list(_EOS_TOKEN_RE.finditer(head))
    eos = tokens[-1].end() if tokens else len(head.rstrip())
    if not gap[eos:].strip():
        return gap, None
    return gap[:eos], gap[eos:]


_EOS = r"<\|im_end\|>|<\|endoftext\|>|<\|eot_id\|>"
# A gap holding an observation in its usual shape: [whitespace, one end-of-turn token], then the
# user turn. The splitter cuts it after the token (before the whitespace when there is none).
_OBS_GAP = rf"^((?:{_WS}*(?:{_EOS}))?)({_WS}*<\|im_start\|>user\n{_GAP})$"
_PY_WS = r"[\s\x1c-\x1f]"  # Python's \s (str.isspace) in Rust's regex: \s less \x1c-\x1f
_SPECIAL = r"<\|[^|>]*\|>"
_NUM = r"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
_JWS = r"[ \t\n\r]*"  # JSON's whitespace
_BOX = rf"^{_JWS}\[{_JWS}{_NUM}{_JWS},{_JWS}{_NUM}{_JWS},{_JWS}{_NUM}{_JWS},{_JWS}{_NUM}{_JWS}\]{_JWS}$"
_FORCED = r"(?i)max(imum)?[\s\x1c-\x1f]+turn[\s\x1c-\x1f]+limit"  # tags.FORCED_THINK_RE
_IMAGE = r"(?i)[\w\-./]+?\.(?:jpe?g|png|webp)\b"  # transcript._IMAGE_RE


def _clean(raw: pl.Expr) -> pl.Expr:
    """``transcript.clean_observation`` as an expression."""
    text = raw.str.replace_all(_SPECIAL, "")
    text = text.str.replace(rf"^{_PY_WS}*user{_PY_WS}*\n", "")
    text = text.str.replace(rf"\n{_PY_WS}*assistant{_PY_WS}*$", "")
    return text.str.replace_all(rf"^{_PY_WS}+|{_PY_WS}+$", "")


def _units(outputs: pl.Series) -> pl.DataFrame:
    """One row per turn of the canonical outputs (``row``: the output's row), with its fields,
    ``policy`` (its text in the response) and ``cut`` (an observation was cut after it)."""
    rows = outputs.str.contains(_WHOLE).fill_null(False).arg_true()
    sub = pl.DataFrame({"row": rows, "t": outputs.gather(rows)})
    # a canonical unit is "<think>T</think>S<A>X</C>" + gap, T and X without "<": cut at "<"
    g = sub.select(
        "row",
        head=pl.col("t").str.extract(rf"^({_RESIDUE})<think>"),
        u=pl.col("t").str.extract_all(_UNIT),
    ).explode("u")
    p = pl.col("u").str.splitn("<", 6).struct
    a = p.field("field_3").str.splitn(">", 2).struct
    c = p.field("field_4").str.splitn(">", 2).struct
    g = g.select(
        "row",
        "head",
        "u",
        think=p.field("field_1").str.slice(len("think>")),
        sep=p.field("field_2").str.slice(len("/think>")),
        action=a.field("field_0"),
        arg=a.field("field_1"),
        close=c.field("field_0").str.slice(1),
        gap=pl.concat_str(
            [c.field("field_1"), pl.lit("<") + p.field("field_5")], ignore_nulls=True
        ),
    )
    act = pl.col("action")
    cuts = pl.col("close") != "search_complete"  # the splitter cuts after </search>, </bbox>
    g = g.with_columns(
        idx=pl.int_range(pl.len()).over("row").cast(pl.Int32),
        res=pl.col("gap").str.contains(rf"^{_RESIDUE}$"),
        o=pl.col("gap").str.extract_groups(_OBS_GAP),
    ).with_columns(
        pre=pl.col("o").struct.field("1"),
        raw=pl.when(cuts).then(pl.col("o").struct.field("2")),
    )
    g = g.with_columns(
        policy=pl.when(pl.col("raw").is_not_null()).then("pre").otherwise("gap"),
        obs=_clean(pl.col("raw")),
        # the turn's tail is chat-template residue (else: text after the action, invalid)
        tail_ok=pl.col("res") | pl.col("raw").is_not_null(),
    )
    # gaps after a search or crop in neither usual shape: the splitter's own code, one by one
    odd = g.select((cuts & ~pl.col("res") & pl.col("raw").is_null()).arg_true()).to_series()
    if len(odd):
        fix = {c: g[c].to_list() for c in ("policy", "raw", "obs", "tail_ok")}
        for i in odd.to_list():
            pol, raw = _gap(g["close"][i], g["gap"][i])
            fix["policy"][i], fix["raw"][i] = pol, raw
            fix["obs"][i] = clean_observation(raw) if raw is not None else None
            fix["tail_ok"][i] = tags.RESIDUE_RE.match(pol).end() == len(pol)
        g = g.with_columns(
            policy=pl.Series(fix["policy"], dtype=pl.String),
            raw=pl.Series(fix["raw"], dtype=pl.String),
            obs=pl.Series(fix["obs"], dtype=pl.String),
            tail_ok=pl.Series(fix["tail_ok"], dtype=pl.Boolean),
        )
    # the argument checks: a search with text, search_complete true (Python's strip and lower),
    # a box by the parser's own check
    arg = pl.col("arg")
    box = arg.str.extract_groups(_BOX)
    corner = [box.struct.field(str(i)).cast(pl.Float64) for i in range(1, 5)]
    # a box in the usual JSON shape, checked as expressions (a False sends the turn to the
    # parser, which has the last word); any other box by the parser's own check
    box_ok = (
        pl.all_horizontal(c.is_finite() for c in corner)
        & (corner[0] < corner[2])
        & (corner[1] < corner[3])
    )
    g = g.with_columns(
        box_ok=box_ok.fill_null(False), box_plain=box.struct.field("1").is_not_null()
    )
    others = g.select((act == "bbox") & ~pl.col("box_plain")).to_series()
    boxes = g.filter(others)["arg"].to_list()
    box_py = pl.Series([tags._bbox_ok(a) for a in boxes], dtype=pl.Boolean)
    g = g.with_columns(
        ok=(pl.col("close") == act)
        & pl.col("tail_ok")
        & pl.when(act == "search")
        .then(arg.str.contains(r"[^\s\x1c-\x1f]"))
        .when(act == "search_complete")
        .then(arg.str.contains(rf"^{_PY_WS}*(?i:true){_PY_WS}*$"))
        .when(act == "bbox")
        .then(pl.col("box_ok"))
        .otherwise(pl.lit(True)),
        # the turn's part of the response: [the residue before the first turn,] its body and
        # the policy's part of the gap
        policy=pl.when(pl.col("idx") == 0).then("head").otherwise(pl.lit(""))
        + pl.col("u").str.head(pl.col("u").str.len_chars() - pl.col("gap").str.len_chars())
        + pl.col("policy"),
    )
    if len(boxes):
        where = others.arg_true()
        g = g.with_columns(ok=g["ok"].scatter(where, g["ok"].gather(where) & box_py))
    # page names in ASCII observations and the forced completion after an ASCII think as
    # expressions (Python's \\w, \\s and case folding agree with Rust's there); the rest by
    # Python's regexes, and a turn the parser rejects by the parser (its text is one turn: the
    # splitter's segment)
    pages = (
        pl.col("obs")
        .str.extract_all(_IMAGE)
        .list.eval(pl.element().str.replace(r"^.*/", "").str.replace(r"\.[^.]*$", ""))
    )
    ascii_obs = pl.col("obs").str.contains(r"^[\x00-\x7f]*$")
    ascii_think = pl.col("think").str.contains(r"^[\x00-\x7f]*$")
    search = (act == "search") & pl.col("obs").is_not_null()
    complete = act == "search_complete"
    g = g.with_columns(
        retrieved=pl.when(search & ascii_obs & (pages.list.len() > 0)).then(pages),
        forced=complete & pl.col("think").str.contains(_FORCED).fill_null(False),
        error=pl.lit(None, pl.String),
        py=~pl.col("ok") | (search & ~ascii_obs) | (complete & ~ascii_think),
    )
    slow = g["py"].arg_true()
    if len(slow):
        fix: dict[str, list[Any]] = {
            c: [] for c in ("think", "action", "arg", "sep", "error", "forced", "retrieved")
        }
        for ok, think, act_, arg, sep, o, policy in g.select(
            "ok", "think", "action", "arg", "sep", "obs", "policy"
        )[slow].iter_rows():
            err = None
            if not ok:
                (t,) = tags.parse_turns(policy)
                think, act_, arg, sep, err, forced = (
                    t.think,
                    t.action,
                    t.arg,
                    t.sep,
                    t.error,
                    t.forced,
                )
            else:
                forced = act_ == "search_complete" and bool(tags.FORCED_THINK_RE.search(think))
            found = images_in(o) if act_ == "search" and o is not None else []
            for k, v in zip(fix, (think, act_, arg, sep, err, forced, found or None), strict=True):
                fix[k].append(v)
        patch = pl.DataFrame(
            {"_i": slow, **{k: pl.Series(v, dtype=g[k].dtype) for k, v in fix.items()}}
        )
        g = g.with_row_index("_i").update(patch, on="_i", include_nulls=True).drop("_i")
    return g.select(
        "row",
        "idx",
        "think",
        "action",
        "arg",
        "sep",
        "forced",
        "retrieved",
        observation="obs",
        error="error",
        value=pl.lit(None, pl.Float64),
        policy="policy",
        cut=pl.col("raw").is_not_null(),
    )


def transcripts(outputs: pl.Series) -> pl.DataFrame:
    """Per row of ``outputs`` (verl's ``output``, null where not dumped): ``response``,
    ``output_kept`` (observations were cut, or no output: the raw output stays in ``extra``),
    ``turns`` (``list<TURN_TYPE>``) and what ``normalize_rollout`` derives from them:
    ``num_turns``, ``retrieved_pages``, ``terminated``, ``format_ok``."""
    fast = (
        _units(outputs)
        .group_by("row", maintain_order=True)
        .agg(
            response=pl.col("policy").str.join(""),
            output_kept=pl.col("cut").any(),
            turns=pl.struct(_TURN_FIELDS),
        )
    )
    every = pl.Series("row", range(len(outputs)), dtype=pl.UInt32)
    slow_rows = every.filter(~every.is_in(fast["row"]))
    texts = outputs.gather(slow_rows).to_list()
    split = [split_transcript(t) for t in texts]
    turns = pl.from_arrow(pa.array([tr.turns for tr in split], pa.list_(TURN_TYPE)))
    assert isinstance(turns, pl.Series)
    slow = pl.DataFrame(
        {
            "row": slow_rows,
            "response": pl.Series([tr.response for tr in split], dtype=pl.String),
            "output_kept": pl.Series(
                [bool(tr.observations) or t is None for tr, t in zip(split, texts, strict=True)],
                dtype=pl.Boolean,
            ),
            "turns": turns,
        }
    )
    fast = fast.with_columns(
        row=pl.col("row").cast(pl.UInt32), turns=pl.col("turns").cast(turns.dtype)
    )
    both = pl.concat([fast, slow]).sort("row")
    t = pl.col("turns")
    pages = t.list.eval(
        pl.element().struct.field("retrieved").explode().drop_nulls().unique(maintain_order=True)
    )
    return both.select(
        "response",
        "output_kept",
        "turns",
        retrieved_pages=pl.when(pages.list.len() > 0).then(pages),
        **from_turns(t),
    )
