"""Distill's rebuild in DuckDB, for the selected rollouts SQL can decide byte for byte.

The fetch query (``fetch.fetch_batches`` with ``sql_rows``) marks each selected rollout
``_sql`` when everything Python would do with it is known from its columns, and builds there
what Python would have built: ``_payload``, the train1 messages JSON as ``formats.dumps``
writes it (``rebuild.rebuild`` + the post-pass, which keeps such a row as it is),
``_key_head`` (``rebuild.sample_key`` without the run tag, added per run), ``_unavailable``
(observations the log lacks), ``_repeats`` (a search query repeated), ``_forced`` (the last
turn a paraphrased forced completion) and, for the identity rewriter, ``_thinks``. Such a row's
big columns come back null and ``take`` spills it as it is: no Python row, rebuild, findings or
post-pass. ``_failed`` marks the one rebuild drop SQL tells (an invalid turn with no response
to cut it from); that row stays among the Python rows, its big columns null.

Every other row goes through the Python path unchanged. A row is ``_sql`` only when all of
these hold (anything else, or any doubt, is Python's):

- no ``response`` to parse (the bodies come from the turn records), a ``question`` and a
  ``uid``, ``sample_idx`` or ``rollout_idx``, an ``extra`` that cannot name a system prompt or
  a source run (no ``system_prompt``, ``source_run_id`` nor backslash in its text);
- every turn a valid action with think, argument and separator: the separator one or more of
  ``[ \\t\\n\\r]`` (``''`` is a grammar fault or DDAI's exact forced completion); the think
  without ``<`` nor a control character but tab, newline and CR; a ``search`` argument
  printable ASCII without ``<`` and not blank; a ``bbox`` argument four JSON numbers (no
  exponent, at most 15 integer and 6 fraction digits, so DOUBLE compares them as Python's ints
  and floats do) forming a box; ``search_complete`` ``true``, the last turn and only there, its
  think printable ASCII (there Python's and RE2's ``\\s`` and case folding agree on
  ``tags.FORCED_THINK_RE``) or holding no ``turn`` in any case (then neither matches);
- when repeated queries drop a row, no query repeated (``_repeats``: lower case, spaces trimmed
  and runs collapsed, which is ``findings.normalize_query`` on printable ASCII); when forced
  completions drop a row, no forced last turn;
- every observation shown (all turns but the last): absent with no ``error`` (``[observation
  unavailable]``, counted), or text that starts with a printable ASCII character other than
  ``[`` (no JSON blocks, no leading space), holds no control character but tab, newline and CR,
  nor ``[System Error``; a one-line observation printable ASCII (an image path by its suffix,
  as ``rebuild.observation_content`` tells it, or text); the question holds no control
  character nor ``[System Error`` either.

Such a rollout has no fault or drop (``findings.inspect``: one valid turn per assistant
message, alternating roles, one final ``search_complete``, no tag text, no system error), so the
post-pass keeps its messages; a repeated query or a paraphrased forced ending is only counted.
DuckDB's ``to_json`` of a string equals Python's ``json.dumps(…, ensure_ascii=False)`` for every
code point from U+0020 up, but writes ``\\u001F`` where Python writes ``\\u001f`` (control
characters with hex letters), which the tests above exclude.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from ddai.pipelines.distill.rebuild import IMAGE_SUFFIXES, UNAVAILABLE, run_tag
from ddai.pipelines.distill.safety import (
    FORCED_PARAPHRASE_ROWS,
    NO_FINDINGS,
    REPEATED_QUERY_ROWS,
    PostPass,
    tally,
)
from ddai.pipelines.records.deps import pa, pc
from ddai.pipelines.records.tags import FORCED_THINK_RE

# Environment switch (tests and the bench): "0" sends every row through the Python path.
ENV = "DDAI_DISTILL_SQL_ROWS"

# The turn struct fields and row columns the SQL reads (a file lacking one: every row Python's).
TURN_FIELDS = ("think", "action", "arg", "sep", "observation", "error")
COLUMNS = ("uid", "sample_idx", "rollout_idx", "question", "response", "extra", "turns")
# What the query adds to the fetched columns.
ADDED = (
    "_sql",
    "_failed",
    "_payload",
    "_key_head",
    "_unavailable",
    "_repeats",
    "_forced",
    "_thinks",
)

_CTRL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"  # control characters other than \t \n \r
_THINK = r"[^<\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*"  # no '<', no control but tab, newline, CR
# A final think: printable ASCII with tab, newline, CR; no '<' (for the forced-completion test).
_FINAL_THINK = r"[\t\n\r -;=-~]*"
_SEARCH = r"[ -;=-~]*[!-;=-~][ -;=-~]*"  # printable ASCII, no '<', not blank
_NUM = r" *-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,6})? *"
_BBOX = rf"\[{_NUM},{_NUM},{_NUM},{_NUM}\]"
# ``tags.FORCED_THINK_RE`` itself: on ``_FINAL_THINK``'s alphabet, Python's and RE2's ``\s`` and
# case folding agree.
_FORCED = FORCED_THINK_RE.pattern
# ``rebuild.observation_content``'s image suffixes (the text lower-cased before the test).
_IMAGE = r"\.(" + "|".join(re.escape(s.removeprefix(".")) for s in IMAGE_SUFFIXES) + ")$"


def _q(pattern: str) -> str:
    """A SQL string literal."""
    return "'" + pattern.replace("'", "''") + "'"


def _turn_ok(n: str, drop_forced: bool) -> str:
    """Whether turn ``t`` (position ``i`` of ``n``) is one SQL can write (see the docstring)."""
    box = "list_transform(string_split(trim(t.arg, '[] '), ','), lambda x: CAST(trim(x) AS DOUBLE))"
    return f"""coalesce(
        regexp_full_match(t.sep, '[ \\t\\n\\r]+')
        AND regexp_full_match(t.think, {_q(_THINK)})
        AND t.arg IS NOT NULL
        AND CASE t.action
            WHEN 'search' THEN regexp_full_match(t.arg, {_q(_SEARCH)}) AND i < {n}
            WHEN 'bbox' THEN regexp_full_match(t.arg, {_q(_BBOX)})
                AND {box}[1] < {box}[3] AND {box}[2] < {box}[4] AND i < {n}
            WHEN 'search_complete' THEN t.arg = 'true' AND i = {n}
                AND (regexp_full_match(t.think, {_q(_FINAL_THINK)})
                    OR lower(t.think) NOT LIKE '%turn%')
                {f"AND NOT regexp_matches(t.think, {_q(_FORCED)})" if drop_forced else ""}
            ELSE false END
        AND (i = {n} OR {_obs_ok()}), false)"""


def _obs_ok() -> str:
    """Whether turn ``t``'s observation is one SQL can write (see the docstring)."""
    return f"""CASE WHEN coalesce(t.observation, '') = '' THEN coalesce(t.error, '') = ''
        ELSE regexp_matches(t.observation, '^[!-Z\\\\-~]')
            AND NOT regexp_matches(t.observation, {_q(_CTRL)})
            AND NOT contains(t.observation, '[System Error')
            AND (contains(t.observation, chr(10)) OR regexp_full_match(t.observation, '[ -~]*'))
        END"""


def _obs_json() -> str:
    """Turn ``t``'s observation as message content JSON (``rebuild.observation_content``)."""
    return f"""CASE WHEN coalesce(t.observation, '') = '' THEN {_q(json.dumps(UNAVAILABLE))}
        WHEN NOT contains(t.observation, chr(10))
            AND regexp_matches(lower(rtrim(t.observation)), {_q(_IMAGE)})
        THEN '[{{"image":' || CAST(to_json(t.observation) AS VARCHAR) || '}}]'
        ELSE CAST(to_json(t.observation) AS VARCHAR) END"""


def _body() -> str:
    """``tags.turn_text`` of turn ``t``."""
    return "'<think>' || t.think || '</think>' || t.sep || '<' || t.action || '>' || t.arg || '</' || t.action || '>'"


@dataclass(frozen=True)
class Build:
    """What the SQL needs of the run: the system prompt, and whether a repeated query drops
    its row (then such rows go to Python, which writes the drop's event)."""

    system_prompt: str
    drop_repeated_queries: bool
    drop_forced: bool
    thinks: bool = False  # each built row's thinks (``_thinks``), for the identity rewriter


def query(inner: str, build: Build) -> tuple[str, dict[str, str]]:
    """``inner`` (a query over the rollout columns ``COLUMNS``, ``turns`` holding
    ``TURN_FIELDS``) with ``ADDED``, and the big columns of the ``_sql`` rows nulled; and the
    parameters it takes."""
    n = "len(r.turns)"
    # a query's runs of spaces collapsed only where it has one (the regex costs)
    queries = (
        "list_transform(list_filter(r.turns, lambda t: t.action = 'search'), "
        "lambda t: lower(CASE WHEN contains(t.arg, '  ') "
        "THEN regexp_replace(trim(t.arg), ' +', ' ', 'g') ELSE trim(t.arg) END))"
    )
    repeats = f"len(list_distinct({queries})) < len({queries})"
    # what a row needs for its key and its rebuild to be told in SQL (``rebuild.rebuild``)
    keyed = f"""(r.response IS NULL OR r.response = '')
        AND r.uid IS NOT NULL
        AND (r.sample_idx IS NOT NULL OR r.rollout_idx IS NOT NULL)
        AND coalesce(r.question, '') <> ''
        AND (r.extra IS NULL OR NOT (contains(r.extra, 'system_prompt')
            OR contains(r.extra, 'source_run_id') OR contains(r.extra, '\\')))
        AND {n} > 0"""
    ok = f"""coalesce(
        {keyed}
        AND NOT regexp_matches(r.question, {_q(_CTRL)})
        AND NOT contains(r.question, '[System Error')
        AND list_bool_and(list_transform(r.turns, lambda t, i: {_turn_ok(n, build.drop_forced)}))
        {"AND NOT " + repeats if build.drop_repeated_queries else ""}, false)"""
    per_turn = f"""',{{"role":"assistant","content":' || CAST(to_json({_body()}) AS VARCHAR) || '}}'
        || CASE WHEN i < {n} THEN ',{{"role":"user","content":' || {_obs_json()} || '}}' ELSE '' END"""
    payload = f"""'[{{"role":"system","content":' || $system_json
        || '}},{{"role":"user","content":' || CAST(to_json(r.question) AS VARCHAR) || '}}'
        || array_to_string(list_transform(r.turns, lambda t, i: {per_turn}), '') || ']'"""
    unavailable = (
        f"CAST(len(list_filter(r.turns, lambda t, i: i < {n} "
        "AND coalesce(t.observation, '') = '')) AS BIGINT)"
    )
    key_head = (
        "r.uid || CASE WHEN r.sample_idx IS NOT NULL THEN '__s' || CAST(r.sample_idx AS VARCHAR) "
        "ELSE '__r' || CAST(r.rollout_idx AS VARCHAR) END || '__'"
    )
    big = ("question", "response", "extra", "turns")
    nulled = ", ".join(f"CASE WHEN _sql OR _failed THEN NULL ELSE {c} END AS {c}" for c in big)
    sql = f"""SELECT * REPLACE ({nulled}),
        CASE WHEN _sql THEN {payload} END AS _payload,
        CASE WHEN _sql THEN {key_head} END AS _key_head,
        CASE WHEN _sql THEN {unavailable} ELSE 0 END AS _unavailable,
        CASE WHEN _sql THEN {repeats} ELSE false END AS _repeats,
        CASE WHEN _sql THEN regexp_matches(r.turns[-1].think, {_q(_FORCED)}) ELSE false END
            AS _forced,
        {
        "CASE WHEN _sql THEN list_transform(r.turns, lambda t: t.think) END"
        if build.thinks
        else "CAST(NULL AS VARCHAR[])"
    } AS _thinks
    FROM (SELECT *, {ok} AS _sql, coalesce({keyed}
            AND list_bool_or(list_transform(r.turns, lambda t: t.action = 'invalid')), false)
            AS _failed
        FROM ({inner}) AS r) AS r"""
    return sql, {"system_json": json.dumps(build.system_prompt, ensure_ascii=False)}


def enabled(rewrite: bool, plan_only: bool) -> bool:
    """Whether DuckDB builds the rows it can: not when a rewrite or a dry run needs each row's
    thinks, nor when ``ENV`` is ``0``."""
    return not rewrite and not plan_only and os.environ.get(ENV, "1") != "0"


def take(
    part: pa.Table,
    writer: Any,
    schema: Any,
    out: Any,
    post: PostPass,
    rewriting: Any,
    plan_only: bool,
) -> tuple[pa.Table, list[bool]]:
    """Spill a fetched batch's rows DuckDB built (``_sql``) through ``writer`` as ``schema``'s
    rows, counted into ``out`` (``stream.Built``: kept, spilled, unavailable observations) and
    ``post``. Returns the other rows for the Python path and their ``_failed`` (DuckDB found
    ``rebuild.rebuild`` drops them for an invalid turn with no response to cut it from: their
    big columns are null; they stay among the Python rows, so the drop counts keep the order
    Python gives them). ``rewriting`` (``stream.Rewriting``) may only be the identity
    rewriter's, given each row's unforced thinks (all but a forced last one) to count the
    requests it skips: another rewrite, or a dry run (``plan_only``), needs every row in
    Python (``enabled`` said so)."""
    if plan_only or (rewriting is not None and not rewriting.identity):
        raise ValueError("rows built in SQL reached a rewrite or a dry run")
    done = part.filter(part["_sql"])
    rest = part.filter(pc.invert(part["_sql"])).drop_columns(list(ADDED))
    if done.num_rows:
        table = spill_table(done, schema, post)
        writer.add(table)
        out.spilled += table.num_rows
        out.kept += table.num_rows
        out.unavailable += _count(done["_unavailable"])
        if rewriting is not None:
            thinks = done["_thinks"].to_pylist()
            forced = done["_forced"].to_pylist()
            rewriting.skip([t[:-1] if f else t for t, f in zip(thinks, forced, strict=True)])
    return rest, part["_failed"].filter(pc.invert(part["_sql"])).to_pylist()


def spill_table(done: pa.Table, schema: Any, post: PostPass) -> pa.Table:
    """``take``'s built rows as ``stream``'s spill rows (``schema``): a kept sample each, with
    its key (``rebuild.sample_key``: the head DuckDB wrote and the run's tag) and no event;
    counted into ``post`` as its ``one`` counts them (no event, no drop; the findings'
    counters each row creates, repeated queries and paraphrased forced endings)."""
    n = done.num_rows
    if n:
        post.rows_in += n
        tally(post.found, NO_FINDINGS)  # the keys a Python row would add, each by 0
        post.found[REPEATED_QUERY_ROWS] += _count(done["_repeats"])
        forced = _count(done["_forced"])  # the last turn, never exact (it has a separator)
        for k in FORCED_PARAPHRASE_ROWS:
            post.found[k] += forced
    heads = done["_key_head"].to_pylist()
    runs = done["run_id"].to_pylist()
    keys = [h + run_tag(r) for h, r in zip(heads, runs, strict=True)]
    return pa.table(
        {
            "_slot": done["_slot"],
            "key": pa.array(keys, pa.string()),
            "step": done["step"].cast(pa.int64()),
            "built": pa.array([True] * n, pa.bool_()),
            "payload": done["_payload"],
            "events": pa.nulls(n, pa.string()),
        },
        schema=schema,
    )


def _count(values: Any) -> int:
    return pc.sum(values.cast(pa.int64())).as_py() or 0
