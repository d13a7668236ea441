"""Ground-truth flags for the failure attribution: review sheets loaded into ``review_flags``.

A person's decisions (``ddai curate verify-gt --decisions``) and a verifier's proposals
(``review.csv``) share one shape, ``uid, verdict, reason``; ``wrong`` and ``uncertain`` flag a
prompt's ground truth. Later files overrule earlier ones, as in the funnel.
"""

from __future__ import annotations

import os

from ddai.pipelines.records.decisions import flagged, read_decisions
from ddai.pipelines.records.deps import duckdb, pa
from ddai.pipelines.store import objstore


def load_flags(con: duckdb.DuckDBPyConnection, paths: list[str | os.PathLike[str]]) -> int:
    """Replace ``review_flags`` with the flagged rows of ``paths``; returns how many."""
    if not paths:
        # no sheet, no Arrow table: pyarrow's table() imports pandas (~0.3 s) to check its input
        con.execute("DELETE FROM review_flags")
        return 0
    rows = flagged(read_decisions([objstore.display(p) for p in paths], objstore.any_read_text))
    table = pa.table(
        {
            "uid": [d.uid for d in rows.values()],
            "verdict": [d.verdict for d in rows.values()],
            "source": [d.source for d in rows.values()],
        },
        schema=pa.schema([("uid", pa.string()), ("verdict", pa.string()), ("source", pa.string())]),
    )
    con.execute("DELETE FROM review_flags")
    if table.num_rows:
        con.register("_flags_in", table)
        con.execute("INSERT INTO review_flags SELECT uid, verdict, source FROM _flags_in")
        con.unregister("_flags_in")
    return table.num_rows
