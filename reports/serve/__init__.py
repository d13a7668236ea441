"""``ddai serve``: a local, read-only trajectory explorer over the whole log store.

An ASGI app (Starlette) over one DuckDB connection: the rollout table with server-side paging,
sorting and filters, GRPO group views, transcripts with page images, live report sections whose
counts link to their rollouts, a read-only SQL box and uid export. Nothing is loaded from the
network; plotly.js is served from the plotly package.
"""

from ddai.reports.serve.config import ServeConfig, is_loopback

__all__ = ["ServeConfig", "is_loopback"]
