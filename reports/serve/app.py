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
import threading
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route

from ddai.pipelines import store
from ddai.pipelines.records.deps import pq
from ddai.pipelines.store import objstore
from ddai.reports.formatting import num, pct, template_env
from ddai.reports.serve import annotate, diff, images, live, queries, review_queue, sqlbox
from ddai.reports.serve.config import ServeConfig
from ddai.reports.serve.explorer import Explorer
from ddai.reports.serve.filters import (
    GROUPS,
    OUTCOMES,
    PAGE_SIZES,
    RANGES,
    SORTABLE,
    FilterError,
    RolloutFilter,
    whole,
)
from ddai.reports.serve.guard import Guard, TokenMiddleware, page_token
from ddai.reports.serve.pages import CorpusPages
from ddai.reports.serve.turns import missing_turns, source_formats, turn_views
from ddai.reports.transcript import mark_pages

if TYPE_CHECKING:
    import jinja2
    import pyarrow as pa

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
# plotly.js builds functions at load time (new Function); pages drawing charts allow that, never
# inline scripts
CSP_PLOTLY = CSP.replace("script-src 'self'", "script-src 'self' 'unsafe-eval'")
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}
NO_STORE = {"Cache-Control": "no-store"}


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return template_env("ddai.reports.serve", num=num, pct=pct, best_idx=diff.best_idx)


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


async def _posted_sql(request: Request) -> str | Response:
    """The ``sql`` text of a request's JSON body, or the 400 answer naming the body expected."""
    try:
        sql = (await request.json())["sql"]
    except (ValueError, KeyError, TypeError):
        sql = None
    return sql if isinstance(sql, str) else _error(400, 'send JSON {"sql": "SELECT …"}', request)


def empty_store_notice(cfg: ServeConfig) -> str:
    """What to do when the served store (or its --run selection) holds no rollout: every page
    would otherwise be an empty table with no word why."""
    runs = f" of run {', '.join(cfg.runs)}" if cfg.runs else ""
    logs = objstore.display(cfg.logs)  # a URL, not pathlib's s3:/…
    return (
        f"The log store {logs} holds no rollouts{runs} yet: ingest logs with `ddai ingest "
        f"FILE --logs {logs}`; the explorer shows them on the next page load."
    )


def _bad_filter(request: Request, exc: Exception) -> Response:
    """A URL parameter of the rollout view that does not parse: 400 naming it (every route that
    reads a view)."""
    return _error(400, str(exc), request)


def _export_format(request: Request) -> str | Response:
    """The ``{fmt}`` of an export route, or the 404 answer naming the two formats."""
    fmt = request.path_params["fmt"]
    if fmt in ("csv", "parquet"):
        return fmt
    return _error(404, f"export as csv or parquet, not {fmt!r}", request)


def _table_file(
    table: pa.Table, fmt: str, name: str, headers: dict[str, str] | None = None
) -> Response:
    """``table`` as the attachment ``<name>.<fmt>``: CSV through the formula-cell escape
    (``sqlbox.csv_text``) or zstd parquet, with ``headers`` after the disposition."""
    if fmt == "csv":
        data, media = sqlbox.csv_text(table).encode(), "text/csv"
    else:
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        data, media = buf.getvalue(), "application/vnd.apache.parquet"
    disposition = {"Content-Disposition": f'attachment; filename="{name}.{fmt}"'}
    return Response(data, media_type=media, headers={**disposition, **(headers or {})})


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
            unknown_runs=[r for r in view.runs if r not in runs],
            page_sizes=PAGE_SIZES,
            chips=view.chips(),
            f=view.query_string(),
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
        # f: the table view this rollout was opened from (its query string), for previous / next
        f = q.get("f", "")
        view = RolloutFilter.from_params(parse_qs(f), size=cfg.page_size)
        with ex.connection() as con:
            if "step" not in q:  # a SQL result without its step: the one rollout, if one
                steps = queries.steps_of(con, run, uid, idx)
                if len(steps) > 1:
                    return RedirectResponse(
                        "/?" + urlencode({"run": run, "uid": uid}), status_code=303
                    )
                step = steps[0] if steps else None
            row = queries.rollout(con, run, uid, step, idx)
            near = queries.neighbours(con, view, run, uid, step, idx) if row else None
        if row is None:
            return _error(404, f"no rollout {run}/{uid}/step {step}/{idx}", request)
        transcript, no_raw = turn_views(row)
        formats = source_formats(store.run_manifest(cfg.logs, run)) if not transcript else []
        return html(
            "rollout.html",
            title=f"{run} {uid} #{idx}",
            nav="",
            r=row,
            turns=transcript,
            no_raw=no_raw,
            no_turns=missing_turns(row, formats),
            retrieved=mark_pages(row.get("retrieved_pages"), row.get("reference_pages")),
            images=cfg.shows_images,
            near=near,
            f=f,
            view=view,
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
            suspect_basis=data["suspect_basis"],
            runs=runs,
            a=a,
            b=b,
            deltas=deltas,
        )

    def live_page(request: Request) -> Response:
        runs = ex.meta["runs"]
        run = request.query_params.get("run") or live.newest_run(cfg.logs, runs) or ""
        if runs and run not in runs:
            return _error(
                404, f"no run {run!r} in this store; its runs: {', '.join(runs)}", request
            )
        return html(
            "live.html",
            csp=CSP_PLOTLY,
            notice=notice(),
            title=f"live {run}",
            nav="live",
            run=run,
            runs=runs,
        )

    def live_api(request: Request) -> Response:
        run = request.query_params.get("run", "")
        since = request.query_params.get("since", "")
        ex.refresh(now=True)  # a commit since the last poll rebuilds now, not 2 s later
        if since and since == ex.version:
            return JSONResponse({"version": ex.version, "same": True}, headers=NO_STORE)
        if run not in ex.meta["runs"]:
            return _error(404, f"no run {run!r} in this store", request)
        with ex.connection() as con:
            tail = live.run_tail(con, run)
        steps = live.step_source(cfg.logs, run)
        body = {"version": ex.version, "same": False, "run": run, **tail, "step_source": steps}
        return JSONResponse(json.loads(json.dumps(body, default=str)), headers=NO_STORE)

    def sql_page(request: Request) -> Response:
        # q: the query of a shared URL, run as the page opens
        with ex.connection() as con:
            views = sqlbox.relations(con)
        return html(
            "sql.html",
            title="SQL",
            nav="sql",
            max_rows=cfg.sql_max_rows,
            export_rows=sqlbox.EXPORT_MAX_ROWS,
            sql=request.query_params.get("q", ""),
            views=views,
        )

    async def sql_api(request: Request) -> Response:
        if isinstance(sql := await _posted_sql(request), Response):
            return sql
        return await run_in_threadpool(_run_sql, sql)

    async def sql_export(request: Request) -> Response:
        if isinstance(fmt := _export_format(request), Response):
            return fmt
        if isinstance(sql := await _posted_sql(request), Response):
            return sql
        return await run_in_threadpool(_export_sql, sql, fmt)

    def _export_sql(sql: str, fmt: str) -> Response:
        try:
            with ex.connection() as con:
                table, cut = sqlbox.select_table(
                    con, sql, max_rows=sqlbox.EXPORT_MAX_ROWS, timeout_s=cfg.sql_timeout_s
                )
        except sqlbox.SqlRejected as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        # a cut export says so: the page tells the reader
        counts = {"X-DDAI-Rows": str(table.num_rows), "X-DDAI-Truncated": "1" if cut else "0"}
        return _table_file(table, fmt, "query", counts)

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
        if isinstance(fmt := _export_format(request), Response):
            return fmt
        view = _view(request, cfg)  # a bad parameter: 400 through _bad_filter
        if missing := [r for r in view.runs if r not in ex.meta["runs"]]:
            # a file of no ids would read as "nothing matched"; the page says so in a notice
            known = ", ".join(ex.meta["runs"]) or "none"
            return _error(
                400, f"run(s) {', '.join(missing)} not in {cfg.logs} (known runs: {known})", request
            )
        with ex.connection() as con:
            table = queries.keys(con, view).to_arrow_table()
        return _table_file(table, fmt, "rollouts")

    corpus = CorpusPages(cfg.corpus) if cfg.corpus is not None else None
    if corpus is not None:
        corpus.start()  # its index is read while the server starts, not by the first image
    drawn = corpus.find if corpus is not None else None

    def image(request: Request) -> Response:
        if not cfg.shows_images:
            return _error(
                404, "no --image-root or --corpus given: page images are not served", request
            )
        page_id = request.path_params["page_id"]
        path = images.find_image(cfg.image_root, page_id) if cfg.image_root else None
        src: Path | bytes | None = path
        if src is None and drawn is not None:
            try:
                src = drawn(page_id)
            except RuntimeError as e:  # the corpus could not be read: say so on each image
                return _error(500, str(e), request)
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
        if name not in ("explorer.js", "explorer.css", "workbench.js", "workbench.css"):
            return _error(404, f"no static file {name!r}", request)
        text = resources.files("ddai.reports.serve").joinpath("static", name).read_text("utf-8")
        return Response(text, media_type=STATIC_TYPES[suffix])

    built: dict[str, Any] = {}  # the last report: {"key": (store version, datasets), "html"}
    building = threading.Lock()

    def report(request: Request) -> Response:
        ex.refresh()
        if not ex.meta["runs"]:  # the report refuses an empty store: say so, not a 500
            return _error(404, f"No report to build. {empty_store_notice(cfg)}", request)
        key = (ex.version, _folder_print(cfg.datasets_dir))
        with building:  # one build at a time; a click while it builds gets its result
            if built.get("key") != key:
                built.update(key=key, html=_build_report(cfg))
                built["count"] = built.get("count", 0) + 1
        # the report inlines its own scripts; it gets no CSP of the explorer's kind
        return HTMLResponse(built["html"], headers={"X-DDAI-Report-Version": ex.version})

    routes = [
        Route("/", rollouts_page),
        Route("/api/rollouts", rollouts_api),
        Route("/group", group_page),
        Route("/rollout", rollout_page),
        Route("/sections", sections_page),
        Route("/live", live_page),
        Route("/api/live", live_api),
        Route("/sql", sql_page),
        Route("/api/sql", sql_api, methods=["POST"]),
        Route("/api/sql/export.{fmt:str}", sql_export, methods=["POST"]),
        Route("/export.{fmt:str}", export),
        Route("/img/{page_id:str}", image),
        Route("/static/{name:str}", static),
        Route("/report", report),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
    ]
    # the workbench: labels, the ground-truth review queue, rollout diffs (own modules)
    for area in (annotate, review_queue, diff):
        routes += area.routes(cfg, ex, html, _error)
    # the Host check and the POST guard first, then the access token of a non-loopback host
    middleware = [Middleware(Guard, hosts=cfg.hosts(), token=token, writes=cfg.annotate)]
    if cfg.token:
        middleware.append(Middleware(TokenMiddleware, token=cfg.token))
    app = Starlette(
        routes=routes, middleware=middleware, exception_handlers={FilterError: _bad_filter}
    )
    app.state.explorer = ex
    app.state.page_token = token
    app.state.report = built
    app.state.corpus = corpus
    return app


def _build_report(cfg: ServeConfig) -> str:
    """The static report ``ddai report`` would build over ``cfg``'s store, as HTML text."""
    from ddai.reports import ReportConfig, build_report

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        build_report(ReportConfig(out=out, progress=False, **cfg.report_fields()))
        return out.read_text(encoding="utf-8")


def _folder_print(folder: Path | None) -> tuple[tuple[str, int, int | str], ...]:
    """(name, size, mtime_ns) of each file in ``folder`` (the report's datasets), sorted; on
    object storage (URL, 0, version) of each object under it."""
    if folder is None:
        return ()
    if url := objstore.url_of(folder):  # object storage: each object's version, one listing
        return tuple((name, 0, tag or "") for name, tag in objstore.find(url).items())
    out = []
    for f in sorted(Path(folder).iterdir()):
        try:
            st = f.stat()
        except FileNotFoundError:
            continue
        out.append((f.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


@lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()
