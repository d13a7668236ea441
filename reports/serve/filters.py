"""A view of the rollout table as URL parameters (pure): parsed, validated, turned into SQL.

One ``RolloutFilter`` is what a shareable URL holds: filters, sort and page. ``where`` gives the
SQL condition over the explorer table with every value bound as ``$name``; column names come from
fixed lists, never from the request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

# The columns of one row of the rollout table (all from ``explorer``): the question first, the one
# column a reader recognises a rollout by, so it stays on screen at 1400 px.
TABLE_COLUMNS = (
    "question",
    "run_id",
    "step",
    "uid",
    "rollout_idx",
    "outcome",
    "tags",
    "judge_score",
    "ndcg",
    "reward",
    "advantage",
    "num_turns",
    "n_search",
    "n_bbox",
    "n_invalid",
    "first_golden_rank",
    "terminated",
    "cost_usd",
)
# Columns a view may sort on: every column the table shows but the tag list.
SORTABLE = tuple(c for c in TABLE_COLUMNS if c != "tags")
OUTCOMES = ("success", "failure", "format_fail", "unjudged")
GROUPS = ("zero_variance", "mixed")
# numeric range filters: URL name prefix -> explorer column
RANGES = {
    "step": "step",
    "turns": "num_turns",
    "judge": "judge_score",
    "ndcg": "ndcg",
    "reward": "reward",
}
MAX_PAGE_SIZE = 500
# The page sizes the table offers (any size up to MAX_PAGE_SIZE parses).
PAGE_SIZES = (25, 50, 100, 200, 500)
# Pages past the last one are empty; past this one the offset would leave DuckDB's BIGINT.
MAX_PAGE = 10**12
# What DuckDB binds as a BIGINT (step, rollout_idx): a larger number names no rollout.
MAX_BIGINT = 2**63 - 1


class FilterError(ValueError):
    """A URL parameter that does not parse; the message names it and what it takes."""


def number(name: str, value: str) -> float:
    """``value`` as a finite float; FilterError naming ``name`` otherwise (nan, inf, 1e999)."""
    try:
        v = float(value)
    except ValueError:
        raise FilterError(f"{name}={value!r} is not a number") from None
    if not math.isfinite(v):
        raise FilterError(f"{name}={value!r} is not a finite number")
    return v


def whole(name: str, value: str, lo: int = 0, hi: int = MAX_BIGINT) -> int:
    """``value`` as an int in [lo, hi]; FilterError naming ``name`` otherwise (1e20, -1, 2**70)."""
    try:
        v = int(value)
    except ValueError:
        raise FilterError(f"{name}={value!r} is not a whole number") from None
    if v < lo:
        raise FilterError(f"{name} must be >= {lo}, got {v}")
    if v > hi:
        raise FilterError(f"{name} must be <= {hi}, got {v}")
    return v


@dataclass(frozen=True)
class RolloutFilter:
    """Which rollouts, in which order, which page.

    ``runs`` / ``outcomes`` match any of their values; ``tag`` is a class (a report_facts tag such
    as ``same_doc_success``); ``group`` keeps rollouts of zero-variance or mixed-score GRPO
    groups (two or more rollouts scored by reward, else judge, as the report's); ``ranges`` maps a RANGES name to an inclusive (min, max), either side None; ``q`` is a
    case-insensitive substring of the question, the answer or the response (thinks and queries).
    ``judge_level`` / ``ndcg_band`` pick one cell of the report's judge-vs-NDCG grid and
    ``score_band`` one of its score bands (the band of the rollout's prompt), so a count of the
    sections page opens exactly its rollouts.
    """

    runs: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    tag: str | None = None
    terminated: str | None = None
    uid: str | None = None
    group: str | None = None
    ranges: tuple[tuple[str, float | None, float | None], ...] = ()
    q: str | None = None
    judge_level: float | None = None
    ndcg_band: int | None = None
    score_band: int | None = None
    sort: str = "run_id"
    desc: bool = False
    page: int = 1
    size: int = 50
    default_size: int = field(default=50, compare=False)
    # the page size a URL without size= gets (`ddai serve --page-size`)

    @classmethod
    def from_params(cls, params: Mapping[str, Sequence[str]], *, size: int = 50) -> RolloutFilter:
        """Parse URL parameters (each name to its list of values); raises FilterError."""

        def one(name: str) -> str | None:
            vals = [v for v in params.get(name, ()) if v != ""]
            return vals[-1] if vals else None

        outcomes = tuple(v for v in params.get("outcome", ()) if v)
        bad = [o for o in outcomes if o not in OUTCOMES]
        if bad:
            raise FilterError(f"outcome={bad[0]!r}: use one of {', '.join(OUTCOMES)}")
        group = one("group")
        if group is not None and group not in GROUPS:
            raise FilterError(f"group={group!r}: use one of {', '.join(GROUPS)}")
        sort = one("sort") or "run_id"
        if sort not in SORTABLE:
            raise FilterError(f"sort={sort!r}: use one of {', '.join(SORTABLE)}")
        direction = one("dir") or "asc"
        if direction not in ("asc", "desc"):
            raise FilterError(f"dir={direction!r}: use asc or desc")
        ranges = []
        for name in RANGES:
            lo, hi = one(f"{name}_min"), one(f"{name}_max")
            if lo is None and hi is None:
                continue
            ranges.append(
                (
                    name,
                    None if lo is None else number(f"{name}_min", lo),
                    None if hi is None else number(f"{name}_max", hi),
                )
            )
        cell: dict[str, Any] = {}
        if (v := one("judge_level")) is not None:
            cell["judge_level"] = number("judge_level", v)
        for name, top in (("ndcg_band", 6), ("score_band", 5)):
            if (v := one(name)) is not None:
                cell[name] = whole(name, v)
                if cell[name] > top:
                    raise FilterError(f"{name} must be <= {top}, got {cell[name]}")
        page_size = whole("size", one("size") or str(size), 1)
        if page_size > MAX_PAGE_SIZE:
            raise FilterError(f"size must be <= {MAX_PAGE_SIZE}, got {page_size}")
        return cls(
            runs=tuple(v for v in params.get("run", ()) if v),
            outcomes=outcomes,
            tag=one("tag"),
            terminated=one("terminated"),
            uid=one("uid"),
            group=group,
            ranges=tuple(ranges),
            q=one("q"),
            **cell,
            sort=sort,
            desc=direction == "desc",
            page=whole("page", one("page") or "1", 1, MAX_PAGE),
            size=page_size,
            default_size=size,
        )

    def where(self) -> tuple[str, dict[str, Any]]:
        """The SQL condition over ``explorer`` (alias ``e``) and its bound parameters."""
        conds: list[str] = []
        params: dict[str, Any] = {}
        # IN lists of bound values (not list_contains), so DuckDB pushes them into the scan
        for col, name, values in (
            ("run_id", "run", self.runs),
            ("outcome", "outcome", self.outcomes),
        ):
            if values:
                names = [f"{name}{i}" for i in range(len(values))]
                conds.append(f"e.{col} IN ({', '.join('$' + n for n in names)})")
                params.update(zip(names, values, strict=True))
        if self.tag:
            conds.append("list_contains(e.tags, $tag)")
            params["tag"] = self.tag
        if self.terminated:
            conds.append("e.terminated = $terminated")
            params["terminated"] = self.terminated
        if self.uid:
            conds.append("e.uid = $uid")
            params["uid"] = self.uid
        if self.group == "zero_variance":
            conds.append("e.group_scored > 1 AND e.group_min_score = e.group_max_score")
        elif self.group == "mixed":
            conds.append("e.group_min_score < e.group_max_score")
        for name, lo, hi in self.ranges:
            col = RANGES[name]
            if lo is not None:
                conds.append(f"e.{col} >= ${name}_min")
                params[f"{name}_min"] = lo
            if hi is not None:
                conds.append(f"e.{col} <= ${name}_max")
                params[f"{name}_max"] = hi
        for name in ("judge_level", "ndcg_band", "score_band"):
            if getattr(self, name) is not None:
                conds.append(f"e.{name} = ${name}")
                params[name] = getattr(self, name)
        if self.q:
            # the text columns live in the rollouts view; a semi-join reads them only here
            conds.append(
                "EXISTS (SELECT 1 FROM rollouts AS r WHERE r.run_id = e.run_id AND r.uid = e.uid"
                " AND r.rollout_idx = e.rollout_idx AND r.step IS NOT DISTINCT FROM e.step AND ("
                "contains(lower(r.question), $q) OR contains(lower(r.answer), $q)"
                " OR contains(lower(r.response), $q)))"
            )
            params["q"] = self.q.lower()
        return (" AND ".join(conds) or "true"), params

    def order_by(self) -> str:
        """``ORDER BY`` text: the sort column, then the rollout key so pages never overlap.

        ``rid`` numbers the explorer's rows in (run_id, uid, step, rollout_idx) order, so it
        breaks ties exactly as those four columns would, at the cost of one integer compare."""
        direction = "DESC" if self.desc else "ASC"
        return f"e.{self.sort} {direction} NULLS LAST, e.rid"

    def to_params(self, **changes: Any) -> dict[str, Any]:
        """The URL parameters of this view (with ``changes`` applied), defaults left out."""
        view = replace(self, **changes) if changes else self
        out: dict[str, Any] = {}
        if view.runs:
            out["run"] = list(view.runs)
        if view.outcomes:
            out["outcome"] = list(view.outcomes)
        for name in ("tag", "terminated", "uid", "group", "q"):
            if getattr(view, name):
                out[name] = getattr(view, name)
        for name in ("judge_level", "ndcg_band", "score_band"):
            if getattr(view, name) is not None:
                out[name] = _num(getattr(view, name))
        for name, lo, hi in view.ranges:
            if lo is not None:
                out[f"{name}_min"] = _num(lo)
            if hi is not None:
                out[f"{name}_max"] = _num(hi)
        if view.sort != "run_id":
            out["sort"] = view.sort
        if view.desc:
            out["dir"] = "desc"
        if view.page != 1:
            out["page"] = view.page
        if not view.size == view.default_size == 50:  # a URL without size= gets default_size
            out["size"] = view.size
        return out

    def query_string(self, **changes: Any) -> str:
        """``to_params`` as a URL query string (``a=1&b=2``)."""
        return urlencode(self.to_params(**changes), doseq=True)

    def chips(self) -> list[tuple[str, str]]:
        """The active filters as (label, query string of this view without it), one per value
        of a many-valued filter, so each can be removed alone; sort, page and size are no
        filters and stay."""
        out: list[tuple[str, str]] = []
        for name, label in (("runs", "run"), ("outcomes", "outcome")):
            values = getattr(self, name)
            for v in values:
                rest = tuple(x for x in values if x != v)
                out.append((f"{label}: {v}", self.query_string(**{name: rest}, page=1)))
        for name, label in (
            ("tag", "class"),
            ("group", "group"),
            ("uid", "uid"),
            ("terminated", "ended"),
            ("q", "text"),
        ):
            if getattr(self, name):
                out.append(
                    (f"{label}: {getattr(self, name)}", self.query_string(**{name: None}, page=1))
                )
        for name in ("judge_level", "ndcg_band", "score_band"):
            if getattr(self, name) is not None:
                label = f"{name.replace('_', ' ')}: {_num(getattr(self, name))}"
                out.append((label, self.query_string(**{name: None}, page=1)))
        for name, lo, hi in self.ranges:
            if lo is not None and hi is not None:
                label = f"{_num(lo)} ≤ {name} ≤ {_num(hi)}"
            elif lo is not None:
                label = f"{name} ≥ {_num(lo)}"
            else:
                label = f"{name} ≤ {_num(hi)}"  # type: ignore[arg-type]
            rest = tuple(r for r in self.ranges if r[0] != name)
            out.append((label, self.query_string(ranges=rest, page=1)))
        return out

    def range_of(self, name: str) -> tuple[float | None, float | None]:
        for n, lo, hi in self.ranges:
            if n == name:
                return lo, hi
        return None, None


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)
