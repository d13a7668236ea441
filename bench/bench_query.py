"""Benchmark: ``ddai query`` group-bys over a 1M-rollout log vs bare DuckDB on the same files.

Builds, in a temp folder, the ``bench_report`` log (``--rollouts`` rollouts in ``--runs`` runs,
parsed turns, pages, scores). Then, for each query, best of ``--repeat`` (interleaved):

- in process: ``ddai.pipelines.store.query.connect`` with the views the SQL names (``views_for``, as
  ``ddai query`` does) + ``run_sql`` to Arrow, against
  ``duckdb.sql`` of the same query over ``read_parquet(files)`` to Arrow;
- end to end: ``ddai query SQL --format parquet --out F`` in a fresh interpreter, against a fresh
  interpreter running ``import duckdb`` and the bare query's ``COPY … TO F``.

Printed: seconds of each side, the difference (ddai's fixed overhead; must show: under 0.3 s)
and the ratio. Queries: per-prompt mean NDCG over ``rollouts``, and actions per run over the
``turns`` view (an ``unnest`` over a projected subquery).

    python bench/bench_query.py                      # 1,000,000 rollouts
    python bench/bench_query.py --rollouts 100000    # a quick look
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import make_logs

from ddai.pipelines import store
from ddai.pipelines.store import query

# (name, ddai SQL over the views, the same over read_parquet($files))
QUERIES = (
    (
        "group-by uid (rollouts)",
        "SELECT run_id, uid, avg(ndcg) AS ndcg, count(*) AS n FROM rollouts GROUP BY ALL",
        "SELECT run_id, uid, avg(ndcg) AS ndcg, count(*) AS n FROM read_parquet($files) "
        "GROUP BY ALL",
    ),
    (
        "group-by action (turns)",
        "SELECT run_id, action, count(*) AS n FROM turns GROUP BY ALL",
        "SELECT run_id, t.turn.action AS action, count(*) AS n "
        "FROM (SELECT run_id, turns FROM read_parquet($files)) AS r, unnest(r.turns) AS t(turn) "
        "GROUP BY ALL",
    ),
)


def _duck() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection without its progress bar (DuckDB draws it on stdout)."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    return con


def _best(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _run(cmd: list[str]) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{cmd[:4]} failed:\n{p.stderr}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=1_000_000, help="rollouts in the log")
    ap.add_argument("--runs", type=int, default=2, help="runs the rollouts are split over")
    ap.add_argument("--repeat", type=int, default=5, help="timed repeats (best is kept)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="ddai-bench-query-") as tmp:
        root = Path(tmp)
        logs = root / "logs"
        t0 = time.perf_counter()
        n = make_logs(logs, args.rollouts, args.runs, 8, args.seed)
        print(f"setup: {n:,} rollouts in {args.runs} runs ({time.perf_counter() - t0:.1f}s)")
        files = [str(f) for f in store.parquet_files(logs)]
        for name, sql, bare in QUERIES:
            t_ddai = _best(
                args.repeat,
                lambda sql=sql: (
                    query.run_sql(query.connect(logs, views=query.views_for(sql)), sql).num_rows
                ),
            )
            t_bare = _best(
                args.repeat,
                lambda bare=bare: _duck().sql(bare, params={"files": files}).to_arrow_table(),
            )
            out = root / "out.parquet"
            ddai_cmd = [sys.executable, "-m", "ddai.cli.app", "query", sql, "--logs", str(logs),
                        "--format", "parquet", "--out", str(out)]  # fmt: skip
            copy = f"COPY ({bare.replace('$files', repr(files))}) TO '{out}' (FORMAT parquet)"
            bare_cmd = [sys.executable, "-c", f"import duckdb; duckdb.sql({copy!r})"]
            e_ddai = _best(args.repeat, lambda c=ddai_cmd: _run(c))
            e_bare = _best(args.repeat, lambda c=bare_cmd: _run(c))
            results += [(f"{name}, in process", t_ddai, t_bare), (f"{name}, CLI", e_ddai, e_bare)]
    print(f"{'query':40}{'ddai s':>9}{'bare s':>9}{'diff s':>9}{'ratio':>8}")
    for name, t, b in results:
        print(f"{name:40}{t:9.3f}{b:9.3f}{t - b:9.3f}{t / b:8.2f}")
    print(f"({n:,} rollouts; best of {args.repeat}; must show: the group-by within 0.3 s of bare)")


if __name__ == "__main__":
    main()
