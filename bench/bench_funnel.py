"""Benchmark: the funnel (``curate bucket``, ``curate focus``, ``distill``'s selection) over a
1M-rollout log, each step against one bare DuckDB query computing the same groups.

Builds, in a temp folder, a log store with one run of ``--rollouts`` rollouts (``--n-agent`` per
prompt, 1–6 parsed turns each, seeded NDCG / judge / reward / format values: ``bench_report``'s
generator) and a verl-shaped dataset of its prompts. Then times, best of ``--repeat``, each step
and its floor in the same command:

- ``bucket``: mean NDCG per prompt (format failures count 0) from the log, joined to the dataset,
  three bucket files and their manifests (input hashing included); floor: the same per-prompt
  mean as one DuckDB group-by over the run's Parquet files;
- ``focus`` round 1: mean reward per prompt, hard A in bucket-A order + bucket 0, one file and its
  manifest; floor: the per-prompt mean reward group-by;
- ``distill selection``: the rare-success selection (success rate per prompt, the ranked top-k)
  on its few columns, then the full rows of the selected rollouts as Python dicts (what distill
  rebuilds its SFT samples from); floor: one DuckDB query computing the same selection and
  returning the selected rollouts' full rows as Arrow. Peak RSS of each is measured in its own
  fresh process, next to the old path (the whole run read, then selected) for comparison.

Printed: seconds and rollouts/s of each, and each step's time as a ratio to its floor.

    python bench/bench_funnel.py                      # 1,000,000 rollouts
    python bench/bench_funnel.py --rollouts 100000    # a quick look
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import make_logs

from ddai.pipelines import store
from ddai.pipelines.distill import fetch
from ddai.pipelines.distill.select import SelectConfig, select
from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket
from ddai.pipelines.funnel.focus import FocusConfig, run_focus

RUN = "run0"
FLOOR_BUCKET = """
SELECT uid, avg(CASE WHEN format_ok IS NOT DISTINCT FROM false THEN 0.0 ELSE ndcg END) AS score
FROM read_parquet($files) GROUP BY uid
"""
FLOOR_FOCUS = "SELECT uid, avg(reward) AS score FROM read_parquet($files) GROUP BY uid"
# distill's selection (success rate in (0, 0.5], successes ranked, top 4 per prompt) and the
# selected rollouts' full rows, in one query
FLOOR_DISTILL = """
WITH r AS (
    SELECT *, coalesce(judge_score >= 1.0 AND format_ok IS DISTINCT FROM false, false) AS success
    FROM read_parquet($files, file_row_number = true)
),
p AS (
    SELECT run_id, uid, sum(success::INT) / count(judge_score) AS rate
    FROM r GROUP BY run_id, uid
),
ranked AS (
    SELECT r.run_id, r.file_row_number FROM r JOIN p USING (run_id, uid)
    WHERE success AND rate > 0 AND rate <= 0.5
    QUALIFY row_number() OVER (
        PARTITION BY r.run_id, r.uid
        ORDER BY reward DESC NULLS LAST, ndcg DESC NULLS LAST, num_turns, rollout_idx
    ) <= 4
)
SELECT r.* FROM r SEMI JOIN ranked USING (run_id, file_row_number)
"""


def _duck() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection without its progress bar (DuckDB draws it on stdout)."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    return con


def make_dataset(path: Path, n_prompts: int) -> None:
    """A verl-shaped prompt set (the shape the funnel carries through)."""
    ids = [f"train_{i}" for i in range(n_prompts)]
    q = [f"What is the value on slide 2 of deck {i}?" for i in range(n_prompts)]
    prompt_t = pa.struct([("content", pa.string()), ("role", pa.string())])
    table = pa.table(
        {
            "id": ids,
            "file_name": [f"{i}.pdf" for i in range(n_prompts)],
            "reference_page": [[2]] * n_prompts,
            "data_source": ["bench"] * n_prompts,
            "prompt": pa.array(
                [
                    [
                        {"content": "You are a search agent.", "role": "system"},
                        {"content": f"Question: {x}", "role": "user"},
                    ]
                    for x in q
                ],
                pa.list_(prompt_t),
            ),
            "reward_model": pa.array(
                [{"ground_truth": f"answer {i}", "style": "rule"} for i in range(n_prompts)]
            ),
            "extra_info": pa.array(
                [{"answer": f"answer {i}", "index": i, "question": x} for i, x in enumerate(q)]
            ),
        }
    )
    pq.write_table(table, path)


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def distill_selection(logs: Path) -> int:
    """What ``ddai distill`` reads: selection columns, the selection, the selected full rows."""
    files = store.parquet_files(logs, [RUN])
    keys = fetch.selection_columns(files)
    sel = select(keys, SelectConfig())
    return len(fetch.fetch_rows(files, keys, sel.rows))


def distill_selection_whole_run(logs: Path) -> int:
    """The old path: the whole run in memory, then the selection (for comparison)."""
    table = store.read_rollouts(logs, [RUN])
    sel = select(table, SelectConfig())
    return len(table.take(sel.rows).to_pylist())


def floor_distill(logs: Path) -> int:
    files = [str(f) for f in store.parquet_files(logs, [RUN])]
    return _duck().sql(FLOOR_DISTILL, params={"files": files}).to_arrow_table().num_rows


def _child(name: str, logs: str, q: mp.Queue) -> None:
    fn = {"ddai": distill_selection, "whole": distill_selection_whole_run, "floor": floor_distill}
    t0 = time.perf_counter()
    n = fn[name](Path(logs))
    dt = time.perf_counter() - t0
    q.put((n, dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def in_fresh_process(name: str, logs: Path) -> tuple[int, float, float]:
    """(rows, seconds, peak MiB) of one distill reader in a fresh interpreter."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(name, str(logs), q))
    proc.start()
    out = q.get()
    proc.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=1_000_000, help="rollouts in the log")
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats (best is kept)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n_prompts = max(1, args.rollouts // args.n_agent)

    with tempfile.TemporaryDirectory(prefix="ddai-bench-funnel-") as tmp:
        root = Path(tmp)
        logs, out = root / "logs", root / "out"
        t0 = time.perf_counter()
        n = make_logs(logs, args.rollouts, 1, args.n_agent, args.seed)
        make_dataset(root / "dataset.parquet", n_prompts)
        print(f"setup: {n:,} rollouts, {n_prompts:,} prompts ({time.perf_counter() - t0:.1f}s)")

        files = [str(f) for f in store.parquet_files(logs, [RUN])]
        con = _duck()

        def floor(sql: str) -> Callable[[], object]:
            return lambda: con.sql(sql, params={"files": files}).to_arrow_table()

        bucket_cfg = BucketConfig(
            dataset=root / "dataset.parquet", out=out, logs=logs, runs=(RUN,), force=True
        )
        focus_cfg = FocusConfig(
            out=out / "focused_round1.parquet",
            logs=logs,
            runs=(RUN,),
            bucket_a=out / "curriculum_bucket_a.parquet",
            bucket_0=out / "curriculum_bucket_0.parquet",
            force=True,
        )
        rows = [
            ("curate bucket", best_of(args.repeat, lambda: run_bucket(bucket_cfg)),
             best_of(args.repeat, floor(FLOOR_BUCKET)), None, None),
        ]  # fmt: skip
        sizes = run_bucket(bucket_cfg).summary
        rows.append(
            ("curate focus (round 1)", best_of(args.repeat, lambda: run_focus(focus_cfg)),
             best_of(args.repeat, floor(FLOOR_FOCUS)), None, None)
        )  # fmt: skip
        r1 = run_focus(focus_cfg).summary
        picked, t_d, rss_d = in_fresh_process("ddai", logs)
        picked_f, t_f, rss_f = in_fresh_process("floor", logs)
        picked_w, t_w, rss_w = in_fresh_process("whole", logs)
        assert picked == picked_f == picked_w, (picked, picked_f, picked_w)
        rows.append(("distill selection", t_d, t_f, rss_d, rss_f))
        rows.append(("  old: whole run read", t_w, t_f, rss_w, rss_f))

    print(
        f"buckets B/A/0: {sizes['bucket B']:,} / {sizes['bucket A']:,} / {sizes['bucket 0']:,};"
        f" round 1: {r1['round 1']:,}; distill selected {picked:,} rollouts"
    )
    print(f"{'step':24}{'ddai s':>9}{'floor s':>9}{'x floor':>9}{'ddai MiB':>10}{'floor MiB':>11}")
    for name, t, base, rss, rss_base in rows:
        mem = f"{rss:10.0f}{rss_base:11.0f}" if rss is not None else ""
        print(f"{name:24}{t:9.3f}{base:9.3f}{t / base:9.2f}{mem}")
    print(f"({n:,} rollouts; distill rows: one run each in a fresh process, peak RSS)")


if __name__ == "__main__":
    main()
