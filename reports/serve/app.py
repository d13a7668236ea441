"""The explorer's ASGI app (Starlette): routes that parse a request, ask ``queries``, render.

Every page is server-rendered through jinja2 with autoescaping, so model text is always text;
pages also carry a Content-Security-Policy that runs scripts from this server only, so even a
mistake in escaping could not run a planted ``<script>``. The live report (``/report``) is the
static report built over the current store.

Longer than 400 lines because every route of the explorer is declared here next to the security
headers they share.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    Response,
)
from starlette.routing import Route

from ddai.pipelines import csv_cells
from ddai.pipelines.lazy import lazy_module
from ddai.reports.formatting import num, pct
from ddai.reports.serve import images, queries, sqlbox
from ddai.reports.serve.config import ServeConfig
from ddai.reports.serve.explorer import Explorer
from ddai.reports.serve.filters import (
    GROUPS,
    OUTCOMES,
    RANGES,
    SORTABLE,
    FilterError,
    RolloutFilter,
    whole,
)
from ddai.reports.serve.guard import Guard, TokenMiddleware, page_token
from ddai.reports.transcript import mark_pages

jinja2 = lazy_module("jinja2")
pq = lazy_module("pyarrow.parquet")

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
# plotly.js builds functions at load time (new Function); pages drawing charts allow that, never
# inline scripts
CSP_PLOTLY = CSP.replace("script-src 'self'", "script-src 'self' 'unsafe-eval'")
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ddai.reports.serve", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = num
    env.filters["pct"] = pct
    return env


def _html(
    name: str,
    status: int = 200,
    *,
    csp: str = CSP,
    notice: str = "",
    token: str = "",
    **ctx: Any,
) -> HTMLResponse:
    """``name`` rendered; ``notice``: a line above the page (e.g. the store holds no rollouts);
    ``token``: the page token its scripts send with a POST (``guard``)."""
    page = _env().get_template(name).render(notice=notice, page_token=token, **ctx)
    return HTMLResponse(page, status_code=status, headers={"Content-Security-Policy": csp})


def _error(status: int, message: str, request: Request) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    return _html("error.html", status, title=f"error {status}", message=message, nav="")


def empty_store_notice(cfg: ServeConfig) -> str:
    """What to do when the served store (or its --run selection) holds no rollout: every page
    would otherwise be an empty table with no word why."""
    runs = f" of run {', '.join(cfg.runs)}" if cfg.runs else ""
    return (
        f"The log store {cfg.logs} holds no rollouts{runs} yet: ingest logs with `ddai ingest "
        f"FILE --logs {cfg.logs}`; the explorer shows them on the next page load."
    )


def _bad_filter(request: Request, exc: Exception) -> Response:
    """A URL parameter of the rollout view that does not parse: 400 naming it (every route that
    reads a view)."""
    return _error(400, str(exc), request)


def _view(request: Request, cfg: ServeConfig) -> RolloutFilter:
    params = {k: request.query_params.getlist(k) for k in request.query_params}
    return RolloutFilter.from_params(params, size=cfg.page_size)


def create_app(cfg: ServeConfig, *, explorer: Explorer | None = None) -> Starlette:
    """The explorer app over ``cfg.logs`` (builds the explorer table now; raises on a bad store)."""
    ex = explorer or Explorer(cfg)
    token = page_token()

    def html(name: str, status: int = 200, **kw: Any) -> HTMLResponse:
        return _html(name, status, token=token, **kw)

    def notice() -> str:
        return "" if ex.meta["runs"] else empty_store_notice(cfg)

    def rollouts_page(request: Request) -> Response:
        view = _view(request, cfg)  # a bad parameter: 400 through _bad_filter
        with ex.connection() as con:
            rows = queries.page(con, view)
            total = queries.count(con, view)
            runs, tags = ex.meta["runs"], ex.meta["tags"]
        pages = max(1, -(-total // view.size))
        return html(
            "rollouts.html",
            notice=notice(),
            title="rollouts",
            nav="rollouts",
            view=view,
            rows=rows,
            total=total,
            pages=pages,
            runs=runs,
            tags=tags,
            outcomes=OUTCOMES,
            groups=GROUPS,
            ranges=RANGES,
            sortable=SORTABLE,
            columns=queries.TABLE_COLUMNS,
        )

    def rollouts_api(request: Request) -> Response:
        view = _view(request, cfg)  # a bad parameter: 400 through _bad_filter
        total_param = request.query_params.get("total", "1")
        if total_param not in ("0", "1"):
            return _error(400, f"total={total_param!r}: use 0 (skip the count) or 1", request)
        counted = total_param == "1"
        with ex.connection() as con:
            rows = queries.page(con, view)
            total = queries.count(con, view) if counted else None
        return JSONResponse(
            {"total": total, "page": view.page, "size": view.size, "rows": rows},
            headers={"Cache-Control": "no-store"},
        )

    def group_page(request: Request) -> Response:
        uid = request.query_params.get("uid")
        if not uid:
            return _error(400, "group needs uid=PROMPT_ID (and optionally run=RUN)", request)
        runs = [r for r in request.query_params.getlist("run") if r]
        with ex.connection() as con:
            data = queries.group(con, uid, runs)
        if not data["groups"]:
            return _error(
                404,
                f"no rollouts of prompt {uid!r}"
                + (f" in run(s) {', '.join(runs)}" if runs else ""),
                request,
            )
        return html("group.html", title=f"group {uid}", nav="", uid=uid, runs=runs, **data)

    def rollout_page(request: Request) -> Response:
        q = request.query_params
        if any(k not in q for k in ("run", "uid", "idx")):
            return _error(
                400, "a rollout is run=RUN&uid=UID&step=STEP&idx=N (step may be empty)", request
            )
        run, uid = q["run"], q["uid"]
        # a bad number: 400 naming it through _bad_filter
        step = whole("step", q["step"]) if q.get("step") not in (None, "") else None
        idx = whole("idx", q["idx"])
        with ex.connection() as con:
            row = queries.rollout(con, run, uid, step, idx)
        if row is None:
            return _error(404, f"no rollout {run}/{uid}/step {step}/{idx}", request)
        golden = row.get("reference_pages")
        turns, shown = [], None
        for t in row.get("turns") or []:
            marked = mark_pages(t.get("retrieved"), golden)
            crop_of = shown if t.get("action") == "bbox" else None
            if t.get("retrieved"):
                shown = t["retrieved"][0]  # a crop applies to the page last shown
            turns.append({**t, "pages": marked, "crop_of": crop_of})
        return html(
            "rollout.html",
            title=f"{run} {uid} #{idx}",
            nav="",
            r=row,
            turns=turns,
            retrieved=mark_pages(row.get("retrieved_pages"), golden),
            images=cfg.shows_images,
        )

    def sections_page(request: Request) -> Response:
        runs = ex.meta["runs"]
        a = request.query_params.get("a") or (runs[0] if len(runs) > 1 else None)
        b = request.query_params.get("b") or (runs[1] if len(runs) > 1 else None)
        if (a or b) and (a not in runs or b not in runs or a == b):
            return _error(
                400, f"compare two different runs of {', '.join(runs)} (a=RUN&b=RUN)", request
            )
        with ex.connection() as con:
            data = queries.sections(con)
            tags = ex.meta["tags"]
            deltas = queries.compare(con, a, b) if a and b else None
        chart = {t["run_id"]: data["outcomes"].get(t["run_id"], {}) for t in data["totals"]}
        return html(
            "sections.html",
            csp=CSP_PLOTLY,
            notice=notice(),
            title="sections",
            nav="sections",
            tags=tags,
            outcomes=OUTCOMES,
            chart_json=json.dumps(chart),
            totals=data["totals"],
            grid=data["grid"],
            bands=data["bands"],
            outcomes_by_run=data["outcomes"],
            tags_by_run=data["tags"],
            terminated=data["terminated"],
            groups=data["groups"],
            suspects=data["suspects"],
            runs=runs,
            a=a,
            b=b,
            deltas=deltas,
        )

    def sql_page(request: Request) -> Response:
        return html("sql.html", title="SQL", nav="sql", max_rows=cfg.sql_max_rows)

    async def sql_api(request: Request) -> Response:
        try:
            body = await request.json()
            sql = body["sql"]
            if not isinstance(sql, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            return _error(400, 'send JSON {"sql": "SELECT …"}', request)
        return await _in_thread(_run_sql, sql)

    def _run_sql(sql: str) -> Response:
        try:
            with ex.connection() as con:
                result = sqlbox.run_select(
                    con, sql, max_rows=cfg.sql_max_rows, timeout_s=cfg.sql_timeout_s
                )
        except sqlbox.SqlRejected as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        return JSONResponse(json.loads(json.dumps(result, default=str)))

    def export(request: Request) -> Response:
        fmt = request.path_params["fmt"]
        if fmt not in ("csv", "parquet"):
            return _error(404, f"export as csv or parquet, not {fmt!r}", request)
        view = _view(request, cfg)  # a bad parameter: 400 through _bad_filter
        with ex.connection() as con:
            table = queries.keys(con, view).to_arrow_table()
        buf = io.BytesIO()
        if fmt == "csv":
            rows = zip(*(c.to_pylist() for c in table.columns), strict=True)
            buf.write(csv_cells.rows_text(table.column_names, rows).encode())
            media = "text/csv"
        else:
            pq.write_table(table, buf, compression="zstd")
            media = "application/vnd.apache.parquet"
        return Response(
            buf.getvalue(),
            media_type=media,
            headers={"Content-Disposition": f'attachment; filename="rollouts.{fmt}"'},
        )

    drawn = _page_drawer(cfg.corpus) if cfg.corpus is not None else None

    def image(request: Request) -> Response:
        if not cfg.shows_images:
            return _error(
                404, "no --image-root or --corpus given: page images are not served", request
            )
        page_id = request.path_params["page_id"]
        path = images.find_image(cfg.image_root, page_id) if cfg.image_root else None
        src: Path | bytes | None = path
        if src is None and drawn is not None:
            src = drawn(page_id)
        if src is None:
            return _error(404, f"no image for page {page_id!r} (--image-root / --corpus)", request)
        bbox = request.query_params.get("bbox")
        if not bbox:
            if isinstance(src, bytes):
                return Response(src, media_type="image/png")
            media = images.MEDIA.get(src.suffix.lower(), "application/octet-stream")
            return FileResponse(src, media_type=media)
        try:
            return Response(images.crop_png(src, images.parse_bbox(bbox)), media_type="image/png")
        except ValueError as e:
            return _error(400, str(e), request)

    def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return Response(_plotly_js(), media_type="text/javascript")
        suffix = Path(name).suffix
        if name not in ("explorer.js", "explorer.css"):
            return _error(404, f"no static file {name!r}", request)
        text = resources.files("ddai.reports.serve").joinpath("static", name).read_text("utf-8")
        return Response(text, media_type=STATIC_TYPES[suffix])

    def report(request: Request) -> Response:
        from ddai.reports import ReportConfig, build_report

        ex.refresh()
        if not ex.meta["runs"]:  # the report refuses an empty store: say so, not a 500
            return _error(404, f"No report to build. {empty_store_notice(cfg)}", request)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "report.html"
            build_report(ReportConfig(out=out, progress=False, **cfg.report_fields()))
            # the report inlines its own scripts; it gets no CSP of the explorer's kind
            return HTMLResponse(out.read_text(encoding="utf-8"))

    routes = [
        Route("/", rollouts_page),
        Route("/api/rollouts", rollouts_api),
        Route("/group", group_page),
        Route("/rollout", rollout_page),
        Route("/sections", sections_page),
        Route("/sql", sql_page),
        Route("/api/sql", sql_api, methods=["POST"]),
        Route("/export.{fmt:str}", export),
        Route("/img/{page_id:str}", image),
        Route("/static/{name:str}", static),
        Route("/report", report),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
    ]
    # the Host check and the POST guard first, then the access token of a non-loopback host
    middleware = [Middleware(Guard, hosts=cfg.hosts(), token=token)]
    if cfg.token:
        middleware.append(Middleware(TokenMiddleware, token=cfg.token))
    app = Starlette(
        routes=routes, middleware=middleware, exception_handlers={FilterError: _bad_filter}
    )
    app.state.explorer = ex
    app.state.page_token = token
    return app


async def _in_thread(fn: Any, *args: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn, *args)


def _page_drawer(corpus_path: Path) -> Callable[[str], Path | bytes | None]:
    """``page_id`` → the page's image file when the corpus holds one (``ddai corpus build``),
    else the page drawn from its text as PNG bytes; None if the corpus lacks the page. The corpus
    loads on first use and the last 256 drawings are kept."""
    from ddai.pipelines.corpus import Corpus
    from ddai.pipelines.page_images import draw_page

    @lru_cache(maxsize=1)
    def corpus() -> Corpus:
        return Corpus.load(corpus_path)

    @lru_cache(maxsize=256)
    def draw(page_id: str) -> Path | bytes | None:
        c = corpus()
        if page_id not in c:
            return None
        image = c.image_file(page_id)
        if image is not None and image.is_file():
            return image
        return draw_page(c.page(page_id))

    return draw


@lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()
