"""Benchmark: ``ddai serve`` paging over 1M rollouts vs the bare DuckDB query for the same page.

Builds the same synthetic 1M-rollout store as ``bench_report.py``, starts the explorer (timed:
the per-rollout facts are built once at start) under uvicorn on 127.0.0.1, then for each view
times, taking turns, ``--reps`` times each (medians):

- ``explorer``: ``GET /api/rollouts?…&total=0`` over HTTP (keep-alive): parse, query, JSON;
- ``bare store``: the DuckDB query a researcher would write for that page over the store's
  Parquet files (same columns where the store has them, same order, ``LIMIT``/``OFFSET``), on a
  fresh connection, fetched to Python; views that filter by a class have no bare form (the class
  is derived) and show "—";
- ``same SQL``: the explorer's own page SQL in-process on its table (the serving overhead alone).

Printed: milliseconds of each and the explorer's ratios to both (target: ≤ 2 against the bare
query), plus ``/api/rollouts`` with the total count (page + count) for the record.

    python bench/bench_serve.py                       # 1,000,000 rollouts
    python bench/bench_serve.py --rollouts 100000     # a quick look
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs

import duckdb
import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import make_logs

from ddai.pipelines import store
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app
from ddai.reports.serve.filters import RolloutFilter
from ddai.reports.serve.queries import page_sql

BARE_COLUMNS = "run_id, step, uid, rollout_idx, judge_score, ndcg, reward, advantage, num_turns, terminated, left(question, 200) AS question"
# (label, URL query, bare SQL over read_parquet($files) or None)
VIEWS = (
    (
        "first page",
        "",
        f"SELECT {BARE_COLUMNS} FROM read_parquet($files) ORDER BY run_id, uid, step, rollout_idx LIMIT 50",
    ),
    (
        "by reward, page 1",
        "sort=reward&dir=desc",
        f"SELECT {BARE_COLUMNS} FROM read_parquet($files) ORDER BY reward DESC NULLS LAST, run_id, uid, step, rollout_idx LIMIT 50",
    ),
    (
        "by reward, middle page",
        "sort=reward&dir=desc&page={mid}",
        f"SELECT {BARE_COLUMNS} FROM read_parquet($files) ORDER BY reward DESC NULLS LAST, run_id, uid, step, rollout_idx LIMIT 50 OFFSET {{offset}}",
    ),
    (
        "run + judge range, by NDCG",
        "run=run1&judge_min=1&sort=ndcg",
        f"SELECT {BARE_COLUMNS} FROM read_parquet($files) WHERE run_id = 'run1' AND judge_score >= 1 ORDER BY ndcg ASC NULLS LAST, run_id, uid, step, rollout_idx LIMIT 50",
    ),
    ("class filter, by reward", "tag=hallucination_suspect&sort=reward&dir=desc", None),
)


def _interleaved(sides: dict, reps: int) -> dict[str, float]:
    """Median milliseconds of each side, the sides taking turns (one warm-up each first), so a
    burst of load on a shared machine falls on all of them alike."""
    for fn in sides.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(reps):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: 1000 * statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=1_000_000, help="rollouts in the store")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--n-agent", type=int, default=8)
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions per view and side")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ddai-bench-serve-") as tmp:
        logs = Path(tmp) / "logs"
        t0 = time.perf_counter()
        n = make_logs(logs, args.rollouts, args.runs, args.n_agent, args.seed)
        print(f"setup: {n:,} rollouts in {args.runs} runs ({time.perf_counter() - t0:.1f}s)")
        files = [str(f) for f in store.parquet_files(logs)]

        t0 = time.perf_counter()
        app = create_app(ServeConfig(logs=logs))
        print(f"explorer start (facts over every rollout): {time.perf_counter() - t0:.1f}s")
        ex = app.state.explorer
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        bare = duckdb.connect()
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)

        print(
            f"{'view':30}{'explorer ms':>13}{'bare ms':>10}{'same SQL ms':>13}{'x bare':>8}{'x SQL':>7}{'+count ms':>11}"
        )
        mid = max(1, n // 100)  # the middle page of 50-row pages
        for label, qs, bare_sql in VIEWS:
            qs = qs.format(mid=mid)
            bare_sql = bare_sql and bare_sql.format(offset=(mid - 1) * 50)
            view = RolloutFilter.from_params(parse_qs(qs))
            sql, params = page_sql(view)

            def explorer(qs=qs):
                r = http.get(f"/api/rollouts?{qs}&total=0")
                r.raise_for_status()
                assert len(r.json()["rows"]) == 50

            def with_count(qs=qs):
                http.get(f"/api/rollouts?{qs}").raise_for_status()

            def same_sql(sql=sql, params=params):
                with ex.connection() as con:
                    con.execute(sql, params).fetchall()

            def bare_query(bare_sql=bare_sql):
                bare.execute(bare_sql, {"files": files}).fetchall()

            sides = {"explorer": explorer, "same": same_sql, "count": with_count}
            if bare_sql:
                sides["bare"] = bare_query
            times = _interleaved(sides, args.reps)
            t_ex, t_sql, t_count = times["explorer"], times["same"], times["count"]
            t_bare = times.get("bare")
            bare_txt = f"{t_bare:10.1f}" if t_bare else f"{'—':>10}"
            ratio = f"{t_ex / t_bare:8.2f}" if t_bare else f"{'—':>8}"
            print(
                f"{label:30}{t_ex:13.1f}{bare_txt}{t_sql:13.1f}{ratio}{t_ex / t_sql:7.2f}{t_count:11.1f}"
            )
        http.close()
        server.should_exit = True
        thread.join(10)
        ex.close()


if __name__ == "__main__":
    main()
