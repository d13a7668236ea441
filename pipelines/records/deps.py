"""The third-party modules the package loads at their first use, each bound once.

``from ddai.pipelines.records.deps import pl`` in place of ``import polars as pl``: the module's
code reads the same, but polars (pyarrow, numpy, duckdb, plotly: 50-150 ms each) loads only when an
attribute is first read (``lazy.lazy_module``), so a command's ``--help`` loads none of them. One
binding per library here, under the alias the code base uses for it everywhere.
"""

from __future__ import annotations

from ddai.pipelines.records.lazy import lazy_module

duckdb = lazy_module("duckdb")
go = lazy_module("plotly.graph_objects")
np = lazy_module("numpy")
pa = lazy_module("pyarrow")
pc = lazy_module("pyarrow.compute")
pj = lazy_module("pyarrow.json")
pl = lazy_module("polars")
pq = lazy_module("pyarrow.parquet")
