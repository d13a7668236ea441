"""Benchmark: ``ddai distill --rewrite none`` as a user runs it, a whole process, against its floor.

Builds a one-run store of each ``--sizes`` rollouts with ``bench_report``'s generator (built once
per size under ``--store`` and reused), then runs, interleaved ``--repeat`` times (one of each per
round, so machine load hits both alike), each in a fresh interpreter:

- ddai: ``ddai distill --logs … --run run0 --out … --rewrite none --force --no-progress --json``;
- floor (``floor``): the same work with nothing but DuckDB and the rebuild: one DuckDB query (selection by
  success rate and top 4, the selected rows' rebuild columns; ``bench_funnel.FLOOR_DISTILL``)
  streamed as Arrow batches, each row rebuilt into train1 messages (``rebuild.rebuild``, the
  Python work any SFT writer of these logs does) and written by a ``pyarrow`` ``ParquetWriter``.
  It names, checks, reports and orders nothing.
- floor with DDAI's rank (``floor-ddai``): the same, ranking a prompt's successes as ``ddai
  distill`` does by default (``--rank ddai``: ndcg, then fewer searches, fewer boxes, shorter
  text, log order; ``FLOOR_DDAI_RANK``), which reads every rollout's ``turns`` for the counts
  (``fetch.STATS_SQL``): the same selection, so equal work. ``floor`` ranks by reward and reads
  no turns to select.

Each process's wall time, CPU time (user + system, its ``rusage`` from ``os.wait4``) and peak
RSS (its ``VmHWM`` at exit) are recorded; the table prints the median and the range of each, the ratio of
the medians, and the load average before and after (ratios taken under load look better than
they are: the floor suffers more from contention).

    python bench/bench_distill.py                        # 100k and 1M rollouts, 3 pairs each
    python bench/bench_distill.py --sizes 100k,1m,3m --repeat 5 --store /tmp/distill-bench
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_funnel import FLOOR_DISTILL, RUN
from bench_funnel_scale import size_arg

from ddai.pipelines.distill import fetch

# ``FLOOR_DISTILL`` with ``ddai distill``'s default rank (``select.py``, rank "ddai"): the
# prompts' rates from the scalar columns, then the successes of the open prompts ranked by ndcg
# and their turns' counts (``fetch.STATS_SQL``: this scan reads ``turns``, the rates' does not).
_SCAN = "read_parquet($files, filename = true, file_row_number = true)"
_SUCCESS = "coalesce(judge_score >= 1.0 AND format_ok IS DISTINCT FROM false, false)"
FLOOR_DDAI_RANK = f"""
WITH p AS (
    SELECT run_id, uid, sum({_SUCCESS}::INT) / count(judge_score) AS rate
    FROM {_SCAN} GROUP BY run_id, uid
),
c AS (
    SELECT s.run_id, s.uid, s.ndcg, s.filename, s.file_row_number, {fetch.STATS_SQL}
    FROM {_SCAN} AS s JOIN p USING (run_id, uid)
    WHERE {_SUCCESS} AND rate > 0 AND rate <= 0.5
),
ranked AS (
    SELECT filename, file_row_number FROM c
    QUALIFY row_number() OVER (
        PARTITION BY run_id, uid
        ORDER BY ndcg DESC NULLS LAST, n_search, n_bbox, approx_len, file_row_number
    ) <= 4
)
SELECT {", ".join(f"s.{c}" for c in fetch.REBUILD_COLUMNS)}
FROM {_SCAN} AS s
SEMI JOIN ranked USING (filename, file_row_number)
"""

ROOT = Path(__file__).resolve().parent.parent
WHO = ("ddai", "floor", "floor-ddai")
# Each child prints its own peak RSS at exit (``VmHWM``, reset by exec): ``ru_maxrss`` from
# ``wait4`` starts from the forking parent's peak, which building a store raised.
PEAK = (
    "import atexit, sys; atexit.register(lambda: print('PEAK_KIB', [l.split()[1] for l in "
    "open('/proc/self/status') if l.startswith('VmHWM:')][0], file=sys.stderr)); "
)


def floor(logs: str, out: str, rank: str = "reward") -> None:
    """The floor's work (run in its own interpreter), selecting with ``rank``'s order."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ddai.pipelines import store
    from ddai.pipelines.distill import formats
    from ddai.pipelines.distill.rebuild import RebuildError, default_system_prompt, rebuild

    files = [str(f) for f in store.parquet_files(logs, [RUN])]
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET memory_limit = '1GB'")
    sql = FLOOR_DDAI_RANK if rank == "ddai" else FLOOR_DISTILL
    reader = con.sql(sql, params={"files": files}).to_arrow_reader(4_000)
    system = default_system_prompt()
    n = 0
    with pq.ParquetWriter(out, formats.TRAIN1_SCHEMA, compression="zstd") as w:
        for batch in reader:
            uids, msgs = [], []
            for row in batch.to_pylist():
                try:
                    rb = rebuild(row, system)
                except RebuildError:
                    continue
                uids.append(f"{row['uid']}__r{row['rollout_idx']}")
                msgs.append(formats.dumps(rb.messages))
            w.write_table(
                pa.table(
                    {"uid": uids, "format_version": ["v1"] * len(uids), "messages": msgs},
                    schema=formats.TRAIN1_SCHEMA,
                )
            )
            n += len(uids)
    print(json.dumps({"samples_written": n}))


def run_child(cmd: list[str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak MiB, stdout) of one child process (CPU from its ``rusage``, the
    peak from the child itself: ``PEAK``)."""
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=fo, stderr=fe, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        err = fe.read()
        if p.returncode != 0:
            raise SystemExit(f"{cmd} failed ({p.returncode}):\n{err[-3000:]}")
        peak = [int(x.split()[1]) for x in err.splitlines() if x.startswith("PEAK_KIB")]
        return wall, ru.ru_utime + ru.ru_stime, peak[-1] / 1024, fo.read()


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _stat(xs: list[float]) -> str:
    return f"{statistics.median(xs):8.2f} ({min(xs):.2f}–{max(xs):.2f})"


def bench_size(n: int, args: argparse.Namespace, root: Path) -> dict[str, object]:
    from bench_report import make_logs

    logs = root / f"logs_{n}"
    if not logs.is_dir():  # built once per size, reused by later runs with --store
        t0 = time.perf_counter()
        make_logs(logs, n, 1, 8, args.seed)
        print(f"store of {n:,} rollouts built in {time.perf_counter() - t0:.1f}s", flush=True)
    out = root / f"sft_{n}.parquet"
    ddai = [
        sys.executable,
        "-c",
        PEAK + "from ddai.cli.app import main; sys.argv = ['ddai', *sys.argv[1:]]; main()",
        "distill",
        "--logs",
        str(logs),
        "--run",
        RUN,
        "--out",
        str(out),
        "--rewrite",
        "none",
        "--force",
        "--no-progress",
        "--json",
    ]

    def fl(rank: str) -> list[str]:
        return [
            sys.executable,
            "-c",
            PEAK + f"sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_distill; "
            "bench_distill.floor(*sys.argv[1:])",
            str(logs),
            str(root / f"floor_{rank}_{n}.parquet"),
            rank,
        ]

    env_home = root / "home"
    os.environ["DDAI_HOME"] = str(env_home)
    res: dict[str, list[tuple[float, float, float]]] = {w: [] for w in WHO}
    load0 = _load()
    summary: dict = {}
    written: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, cmd in (("ddai", ddai), ("floor", fl("reward")), ("floor-ddai", fl("ddai"))):
            wall, cpu, rss, stdout = run_child(cmd)
            res[name].append((wall, cpu, rss))
            if name == "ddai":
                summary = json.loads(stdout)
            else:
                written[name] = json.loads(stdout)["samples_written"]
    return {"n": n, "res": res, "load": (load0, _load()), "summary": summary, "written": written}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="100k,1m", help="rollouts per store, comma-separated")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved pairs per size")
    ap.add_argument("--store", type=Path, default=None, help="keep and reuse the stores here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sizes = [size_arg(s) for s in args.sizes.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="ddai-bench-distill-") as tmp:
        root = args.store or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        rows = [bench_size(n, args, root) for n in sizes]
    print(
        f"{'rollouts':>10} {'who':10} {'wall s (range)':>22} {'CPU s (range)':>22} "
        f"{'peak MiB (range)':>24}"
    )
    for r in rows:
        for who in WHO:
            xs = r["res"][who]
            print(
                f"{r['n']:>10,} {who:10} {_stat([x[0] for x in xs]):>22} "
                f"{_stat([x[1] for x in xs]):>22} {_stat([x[2] for x in xs]):>24}"
            )
        d = r["res"]["ddai"]
        s = r["summary"]
        for who in WHO[1:]:
            f = r["res"][who]
            print(
                f"{'':>10} ddai / {who}: wall "
                f"{statistics.median(x[0] for x in d) / statistics.median(x[0] for x in f):.2f}×"
                f"  CPU {statistics.median(x[1] for x in d) / statistics.median(x[1] for x in f):.2f}×"
                f"  ({who} wrote {r['written'].get(who, 0):,})"
            )
        print(
            f"{'':>10} selected {s.get('selected_rollouts', 0):,}, written "
            f"{s.get('samples_written', 0):,}; load {r['load'][0]} → {r['load'][1]}"
        )


if __name__ == "__main__":
    main()
