"""Two rollouts of one prompt side by side, turn by turn: ``GET /diff``.

``/diff?uid=UID&run=RUN&step=S&a=I&b=J`` (``run_b`` / ``step_b`` for a rollout of another run or
step) aligns turn ``k`` of rollout ``a`` with turn ``k`` of ``b``: action and query, the pages
each turn retrieved (golden ones marked), the crop a ``bbox`` turn took, then the answers and
scores; a row where the two differ is marked. The group view links each rollout to the best of
its group ("compare with the best rollout").
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import zip_longest
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ddai.reports.serve import queries
from ddai.reports.serve.config import ServeConfig
from ddai.reports.serve.explorer import Explorer
from ddai.reports.serve.filters import whole
from ddai.reports.transcript import mark_pages

Render = Callable[..., Response]
SCORES = ("outcome", "reward", "judge_score", "ndcg", "advantage", "num_turns", "terminated")


def best_idx(rollouts: list[dict[str, Any]]) -> int | None:
    """The rollout index of the group's best rollout: highest reward, then judge score, then
    the lowest index; None when no rollout has a reward or judge score."""
    scored = [
        r for r in rollouts if r.get("reward") is not None or r.get("judge_score") is not None
    ]
    if not scored:
        return None

    def key(r: dict[str, Any]) -> tuple[float, float, int]:
        reward, judge = r.get("reward"), r.get("judge_score")
        return (
            -(reward if reward is not None else float("-inf")),
            -(judge if judge is not None else float("-inf")),
            r["rollout_idx"],
        )

    return min(scored, key=key)["rollout_idx"]


def turn_views(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Each turn with its pages marked against the reference pages and, for a ``bbox`` turn,
    the page its crop was taken from (the page last shown)."""
    golden = row.get("reference_pages")
    out, shown = [], None
    for t in row.get("turns") or []:
        crop_of = shown if t.get("action") == "bbox" else None
        if t.get("retrieved"):
            shown = t["retrieved"][0]
        out.append({**t, "pages": mark_pages(t.get("retrieved"), golden), "crop_of": crop_of})
    return out


def aligned(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Turn ``k`` of ``a`` beside turn ``k`` of ``b`` (None where one has fewer turns), with
    ``same``: whether action, argument and retrieved pages agree."""
    rows = []
    for k, (ta, tb) in enumerate(zip_longest(turn_views(a), turn_views(b))):

        def sig(t: dict[str, Any] | None) -> tuple[Any, ...] | None:
            return None if t is None else (t.get("action"), t.get("arg"), t.get("retrieved"))

        rows.append({"k": k, "a": ta, "b": tb, "same": sig(ta) == sig(tb)})
    return rows


def routes(cfg: ServeConfig, ex: Explorer, html: Render, error: Render) -> list[Route]:
    """The diff page over ``cfg``'s store."""

    def page(request: Request) -> Response:
        q = request.query_params
        if any(not q.get(k) for k in ("uid", "run", "a", "b")):
            return error(
                400,
                "a diff is uid=UID&run=RUN&step=S&a=IDX&b=IDX (run_b, step_b for another run or "
                "step)",
                request,
            )
        uid, run = q["uid"], q["run"]
        step = whole("step", q["step"]) if q.get("step") else None
        run_b = q.get("run_b") or run
        step_b = whole("step_b", q["step_b"]) if q.get("step_b") else step
        ia, ib = whole("a", q["a"]), whole("b", q["b"])
        with ex.connection() as con:
            ra = queries.rollout(con, run, uid, step, ia)
            rb = queries.rollout(con, run_b, uid, step_b, ib)
        for name, row, r, s, i in (("a", ra, run, step, ia), ("b", rb, run_b, step_b, ib)):
            if row is None:
                return error(404, f"no rollout {name} = {r}/{uid}/step {s}/{i}", request)
        assert ra is not None and rb is not None
        scores = [
            {"name": s, "a": ra.get(s), "b": rb.get(s), "same": ra.get(s) == rb.get(s)}
            for s in SCORES
        ]
        return html(
            "diff.html",
            title=f"diff {uid} #{ia} / #{ib}",
            nav="",
            uid=uid,
            ra=ra,
            rb=rb,
            turns=aligned(ra, rb),
            scores=scores,
            same_answer=ra.get("answer") == rb.get("answer"),
            retrieved_a=mark_pages(ra.get("retrieved_pages"), ra.get("reference_pages")),
            retrieved_b=mark_pages(rb.get("retrieved_pages"), rb.get("reference_pages")),
            images=cfg.shows_images,
        )

    return [Route("/diff", page)]
