"""``ddai backends check``: list the configured backends, ping the remote ones (models and
services such as ``search-http``), show cache stats.

A ping is a real call per role, since a server can list its models and fail every completion: a
search service answers one query (after its ``/health`` route where it has one), a model backend
answers one small uncached completion for each of the ``judge`` and ``generator`` roles that use
it (its other roles: the metadata call, which costs no tokens). A failed call fails the ping with
the role, the backend's URL and the failure (an HTTP status as ``http-500``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.pipelines.backends import build
from ddai.pipelines.backends.base import (
    ROLES,
    GenerateRequest,
    JudgeRequest,
    run_sync,
)
from ddai.pipelines.backends.cache import CallCache
from ddai.pipelines.backends.config import KINDS, LOCAL_DEFAULT, backend_name, configured
from ddai.pipelines.backends.step_configs import CheckConfig  # noqa: F401 (re-exported)
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.store import workspace

asyncio = lazy_module("asyncio")


def _roles_using(name: str, config: dict[str, Any]) -> list[str]:
    return [r for r in ROLES if backend_name(r, None, config) == name]


# The roles a ping makes one real call for, and that call (the smallest useful request).
PROBED_ROLES = ("judge", "generator")


async def _probe(backend: Any, role: str, url: str) -> dict[str, Any]:
    """One real, uncached call of ``role``: ``{role, url, ok, detail}``."""
    if role == "judge":
        (res,) = await backend.judge([JudgeRequest("What is 2 + 2?", "4", "4")])
        done = f"score {res.score}"
    else:
        req = GenerateRequest("What is 2 + 2?", ("probe_1",), ("2 + 2 = 4",))
        (res,) = await backend.generate([req])
        done = f"answered {str(res.answer)[:40]!r}"
    if res.ok:
        return {"role": role, "url": url, "ok": True, "detail": done}
    return {"role": role, "url": url, "ok": False, "detail": f"{role} call to {url}: {res.error}"}


async def _ping_one(main: Any, probes: list[tuple[str, Any]], url: str) -> dict[str, Any]:
    """``main``'s ping, then a real call per probed role; the ping fails when any call did."""
    out = await main.ping()
    calls = [await _probe(b, role, url) for role, b in probes] if out["ok"] else []
    failed = [c for c in calls if not c["ok"]]
    if calls:
        out["calls"] = calls
    if failed:
        out["ok"] = False
        out["detail"] = "; ".join(c["detail"] for c in failed)
    return out


async def _ping_all(pings: list[tuple[Any, list[tuple[str, Any]], str]]) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(_ping_one(*p) for p in pings)))


def check_backends(
    config: dict[str, Any] | None = None, *, ping: bool = True, cache: Path | None = None
) -> dict[str, Any]:
    """Every backend a role can use, with reachability for the remote ones and the cache's state.

    Returns ``{"backends": [...], "roles": {role: name}, "cache": {...}}``; a remote backend's entry
    has ``ping`` (``ok``, ``latency_s``, ``detail``, and ``calls``: ``{role, url, ok, detail}``
    per real call) when ``ping`` is set.
    """
    cfg = workspace.load_config() if config is None else config
    specs = configured(cfg)
    rows: list[dict[str, Any]] = []
    to_ping: list[tuple[dict[str, Any], Any]] = []
    for name, spec in specs.items():
        row = {"name": name, "roles": _roles_using(name, cfg), **spec.describe()}
        rows.append(row)
        if ping and (spec.remote or spec.service):
            role = row["roles"][0] if row["roles"] else KINDS[spec.kind][0]
            main = build(spec, role, cache=False, call_site="backends check")
            probed = [r for r in row["roles"] if r in PROBED_ROLES] if spec.remote else []
            probes = [(r, build(spec, r, cache=False, call_site="backends check")) for r in probed]
            url = spec.options.get("url") or spec.base_url or f"the {spec.kind} SDK's default URL"
            to_ping.append((row, (main, probes, str(url))))
    for role, kind in LOCAL_DEFAULT.items():
        if "local" not in specs:
            rows.append(
                {
                    "name": "local",
                    "kind": kind,
                    "roles": [role] if backend_name(role, None, cfg) == "local" else [],
                }
            )
    if to_ping:
        for (row, _), result in zip(
            to_ping, run_sync(_ping_all([p for _, p in to_ping])), strict=True
        ):
            row["ping"] = result
    cache_file = Path(cache) if cache is not None else workspace.cache_path()
    if cache_file.is_file():
        with CallCache(cache_file) as c:
            cache_stats = c.stats()
    else:
        cache_stats = {"path": str(cache_file), "entries": 0, "bytes": 0, "groups": []}
    return {
        "backends": rows,
        "roles": {r: backend_name(r, None, cfg) for r in ROLES},
        "cache": cache_stats,
    }
