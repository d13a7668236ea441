"""``ddai backends check``: list the configured backends, ping the remote ones (models and\nservices such as ``search-http``), show cache stats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.pipelines import workspace
from ddai.pipelines.backends import build
from ddai.pipelines.backends.base import ROLES, run_sync
from ddai.pipelines.backends.cache import CallCache
from ddai.pipelines.backends.config import KINDS, LOCAL_DEFAULT, backend_name, configured
from ddai.pipelines.lazy import lazy_module

asyncio = lazy_module("asyncio")


def _roles_using(name: str, config: dict[str, Any]) -> list[str]:
    return [r for r in ROLES if backend_name(r, None, config) == name]


async def _ping_all(backends: list[Any]) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(b.ping() for b in backends)))


def check_backends(
    config: dict[str, Any] | None = None, *, ping: bool = True, cache: Path | None = None
) -> dict[str, Any]:
    """Every backend a role can use, with reachability for the remote ones and the cache's state.

    Returns ``{"backends": [...], "roles": {role: name}, "cache": {...}}``; a remote backend's entry
    has ``ping`` (``ok``, ``latency_s``, ``detail``) when ``ping`` is set.
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
            to_ping.append((row, build(spec, role, cache=False, call_site="backends check")))
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
            to_ping, run_sync(_ping_all([b for _, b in to_ping])), strict=True
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
