"""Who may reach the explorer: checks every request passes before a route runs.

``Guard`` answers for any web page the user has open: a request whose ``Host`` header names
none of the explorer's own addresses is refused (a page of another site that rebinds its DNS
name to 127.0.0.1 carries its own name there), and every request that may change or cost
something (``POST`` and the other unsafe methods: ``/api/sql``, labels and review decisions)
needs a JSON body and the page token, a random value made per process that only the explorer's
own pages carry (``<meta name="ddai-token">``, sent back as ``X-DDAI-Token``). A page of another
origin can send neither: a JSON content type or a custom header makes the browser ask first
(CORS preflight), which the explorer never grants, and it cannot read the token from our pages.

Started without ``--annotate`` the explorer is read-only: ``Guard`` refuses every unsafe request
but the read-only POSTs (``READ_ONLY_POSTS``: the SQL box and its exports) with a 403 saying so.

``TokenMiddleware`` is the access token of a non-loopback explorer (``--token``).
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Iterable
from typing import Any

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_HEADER = "X-DDAI-Token"
TOKEN_COOKIE = "ddai_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# POSTs that change nothing (a query sent as JSON): allowed on a read-only explorer
READ_ONLY_POSTS = frozenset({"/api/sql"})
# ... and the SQL box's exports (/api/sql/export.csv, .parquet; any other suffix is a 404)
READ_ONLY_POST_PREFIX = "/api/sql/export."
READ_ONLY = (
    "this explorer is read-only: it was started without --annotate, so it refuses every write "
    "(labels, review decisions); start `ddai serve --annotate` to write"
)
# host[:port] as a Host header carries it: a name or IPv4 address, or a bracketed IPv6 one
_HOST = re.compile(r"^(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.\-]+))(?::\d{1,5})?$")


def page_token() -> str:
    """A fresh random page token (256 bits)."""
    return secrets.token_urlsafe(32)


def host_of(header: str | None) -> str | None:
    """The host a Host header names (lower case, no port or brackets); None if malformed."""
    m = _HOST.match(header or "")
    if m is None:
        return None
    return (m["ip6"] or m["name"]).lower()


def _refuse(scope: Scope, status: int, message: str) -> Response:
    if scope.get("path", "").startswith("/api/"):
        return JSONResponse({"error": message}, status_code=status)
    return PlainTextResponse(f"{status}: {message}", status_code=status)


class Guard:
    """ASGI middleware: the Host check on every request, JSON + page token on unsafe ones."""

    def __init__(
        self, app: ASGIApp, *, hosts: Iterable[str], token: str, writes: bool = True
    ) -> None:
        """``writes``: whether unsafe requests other than ``READ_ONLY_POSTS`` may reach a route
        (``--annotate``)."""
        self.app = app
        self.writes = writes
        self.hosts = frozenset(h.lower() for h in hosts)
        self.token = token.encode()

    def refusal(self, scope: Scope) -> Response | None:
        """The answer refusing this request, or None to let it through."""
        request = Request(scope)
        header = request.headers.get("host")
        host = host_of(header)
        if host not in self.hosts:
            shown = ", ".join(sorted(self.hosts))
            return _refuse(
                scope,
                403,
                f"Host {header!r} is not an address of this explorer ({shown}); a page of "
                "another site may not read it. To open it under another name, start ddai serve "
                "with --allow-host NAME",
            )
        if request.method in SAFE_METHODS:
            return None
        path = scope.get("path", "")
        read_only = path in READ_ONLY_POSTS or path.startswith(READ_ONLY_POST_PREFIX)
        if not self.writes and not (request.method == "POST" and read_only):
            return _refuse(scope, 403, f"{request.method} {scope.get('path')}: {READ_ONLY}")
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            return _refuse(
                scope,
                415,
                f"{request.method} needs Content-Type: application/json, got {media or 'none'!r}",
            )
        sent = request.headers.get(TOKEN_HEADER, "").encode()
        if not hmac.compare_digest(sent, self.token):
            return _refuse(
                scope,
                403,
                f"{request.method} needs the page token in {TOKEN_HEADER} (the explorer's pages "
                'carry it as <meta name="ddai-token">); reload the page after a restart',
            )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (response := self.refusal(scope)) is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class TokenMiddleware(BaseHTTPMiddleware):
    """With a token set: a request needs it as ``?token=``, the cookie or a Bearer header.

    A right ``?token=`` also sets an HttpOnly cookie, so links inside the explorer work without
    carrying the token in every URL.
    """

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    def _ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        auth = request.headers.get("authorization", "")
        bearer = auth[7:] if auth.lower().startswith("bearer ") else None
        from_query = request.query_params.get("token")
        if not (
            self._ok(from_query) or self._ok(request.cookies.get(TOKEN_COOKIE)) or self._ok(bearer)
        ):
            return PlainTextResponse(
                "401: this explorer needs its token: open the URL `ddai serve` printed "
                "(…?token=…) or send Authorization: Bearer TOKEN",
                status_code=401,
            )
        response = await call_next(request)
        if self._ok(from_query):
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
        return response
