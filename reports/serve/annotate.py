"""Labels in the browser: the annotation page of a prompt or rollout and its JSON API.

``GET /annotate?run=RUN&uid=UID[&step=S&idx=N]`` shows what is labelled there and, on an
explorer started with ``--annotate``, a form that labels the prompt, the rollout or one of its
turns (``pipelines.annotations.LABELS`` plus a note). ``POST /api/annotations`` (JSON and the
page token, ``guard``) stores one row in the run's side table; a body with ``retracts`` withdraws
an annotation. ``GET /api/annotations?run=RUN[&uid=UID]`` lists the rows in force, read from the
store itself (the explorer's table is rebuilt a moment after the commit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ddai.pipelines.store import annotations, store_read
from ddai.reports.serve import queries
from ddai.reports.serve.config import ServeConfig
from ddai.reports.serve.explorer import Explorer
from ddai.reports.serve.filters import whole
from ddai.reports.serve.guard import READ_ONLY

Render = Callable[..., Response]


def in_force(logs: Any, run: str, uid: str | None = None) -> list[dict[str, Any]]:
    """The run's committed annotations not retracted (of prompt ``uid`` when given), oldest
    first."""
    man = store_read.run_manifest(logs, run)
    if man is None:
        return []
    rows = annotations.rows_of(logs, {run: man})
    gone = {r["retracts"] for r in rows if r.get("retracts")}
    return [
        r
        for r in rows
        if not r.get("retracts")
        and r["annotation_id"] not in gone
        and (uid is None or r["uid"] == uid)
    ]


def routes(cfg: ServeConfig, ex: Explorer, html: Render, error: Render) -> list[Route]:
    """The annotation page and API over ``cfg``'s store."""

    def page(request: Request) -> Response:
        q = request.query_params
        run, uid = q.get("run"), q.get("uid")
        if not run or not uid:
            return error(
                400, "annotate needs run=RUN&uid=UID (and step=S&idx=N for a rollout)", request
            )
        step = whole("step", q["step"]) if q.get("step") else None
        idx = whole("idx", q["idx"]) if q.get("idx") not in (None, "") else None
        row = None
        with ex.connection() as con:
            if idx is not None:
                row = queries.rollout(con, run, uid, step, idx)
                if row is None:
                    return error(404, f"no rollout {run}/{uid}/step {step}/{idx}", request)
            prompt = queries.group(con, uid, [run])["prompt"]
        if idx is None and prompt is None:
            return error(404, f"no rollouts of prompt {uid!r} in run {run!r}", request)
        shown = in_force(cfg.logs, run, uid)
        return html(
            "annotate.html",
            title=f"annotate {uid}",
            nav="",
            run=run,
            uid=uid,
            step=step,
            idx=idx,
            r=row,
            prompt=prompt,
            turns=list(range(len((row or {}).get("turns") or []))),
            labels=annotations.LABELS,
            shown=shown,
            annotate=cfg.annotate,
            annotator=cfg.annotator,
        )

    def listing(request: Request) -> Response:
        run = request.query_params.get("run")
        if not run:
            return error(400, "list annotations with run=RUN[&uid=UID]", request)
        uid = request.query_params.get("uid") or None
        return JSONResponse({"annotations": in_force(cfg.logs, run, uid)})

    async def post(request: Request) -> Response:
        if not cfg.annotate:  # the guard refuses it first; kept here for any other way in
            return JSONResponse({"error": READ_ONLY}, status_code=403)
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise TypeError
        except (ValueError, TypeError):
            return error(400, "send a JSON object {run_id, uid, label | note, ...}", request)
        known = {"run_id", "uid", "step", "rollout_idx", "turn", "label", "note", "retracts"}
        if unknown := sorted(set(body) - known):
            return error(
                400,
                f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                request,
            )
        try:
            row = annotations.make_row(annotator=cfg.annotator or "", **body)
            if row["retracts"] and row["retracts"] not in {
                r["annotation_id"] for r in in_force(cfg.logs, row["run_id"], row["uid"])
            }:
                return error(404, f"no annotation {row['retracts']!r} in force to retract", request)
            with ex.connection() as con:  # a label names a rollout or prompt the store holds
                known_rows = queries.group(con, row["uid"], [row["run_id"]])["groups"]
            if not known_rows:
                return error(
                    404, f"no rollouts of prompt {row['uid']!r} in run {row['run_id']!r}", request
                )
            annotations.add(cfg.logs, row)
        except (ValueError, TypeError) as e:
            return error(400, str(e), request)
        except FileNotFoundError as e:
            return error(404, str(e), request)
        return JSONResponse(row, status_code=201)

    return [
        Route("/annotate", page),
        Route("/api/annotations", listing, methods=["GET"]),
        Route("/api/annotations", post, methods=["POST"]),
    ]
