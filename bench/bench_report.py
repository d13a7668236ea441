"""Benchmark: ``ddai report`` over a 1M-rollout log vs a plain DuckDB scan of the same columns.

Builds, in a temp folder, a log store of ``--runs`` runs with ``--rollouts`` rollouts in all
(``--n-agent`` per prompt, 1–6 parsed turns each with thinks, queries, crops, invalid and forced
turns, retrieved and reference pages, judge / NDCG / reward). Then times:

- the baseline: one DuckDB scan over the store's Parquet files reading the columns the report
  reads (turns, pages, scores, terminations, extra) and reducing them to one row;
- the report: ``build_report`` end to end (per-rollout facts, every section, the page written).

Printed: seconds and rollouts/s of each, the report's time as a ratio to the baseline measured in
the same command, the CPU seconds of each (this process, DuckDB's threads included) and their
ratio, seconds per report stage, and the file size (plotly.js is ~4.8 MB of it; the browser's part
is bounded by ``--browse-max``; the CSV lists and per-prompt charts grow with the prompts). On a
machine shared with other jobs the wall ratio swings with their load; the CPU ratio much less.

    python bench/bench_report.py                      # 1,000,000 rollouts
    python bench/bench_report.py --rollouts 100000    # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from ddai.pipelines import store
from ddai.pipelines.records.schema import ROLLOUT_SCHEMA, TURN_TYPE
from ddai.reports import ReportConfig, build_report

MAX_TURNS = 6
CHUNK = 100_000
THINKS = np.array(
    [f"Step {i}: the slide should list the figure; search for it." for i in range(64)]
)
SCAN = """
SELECT count(*), sum(len(turns)), sum(len(retrieved_pages)), sum(len(reference_pages)),
       avg(judge_score), avg(ndcg), avg(reward), count(format_ok), avg(num_turns),
       count(terminated), count(extra)
FROM read_parquet($files)
"""


def _duck() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection without its progress bar (DuckDB draws it on stdout)."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    return con


def _strings(a: np.ndarray) -> pa.Array:
    """A numpy string array as one Arrow array (large ones convert to chunks)."""
    arr = pa.array(a, pa.string())
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _turns(rng: np.random.Generator, k: np.ndarray, docs: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """Turns of rollouts with ``k`` turns each, and each rollout's retrieved pages.

    One page per search turn (the rollout's own document 60% of the time), ``{doc}_{turn}`` so
    pages never repeat within a rollout; the last turn completes (forced at the turn limit)."""
    n, total = len(k), int(k.sum())
    starts = np.concatenate([[0], np.cumsum(k)]).astype(np.int32)
    owner = np.repeat(np.arange(n), k)
    pos = np.arange(total) - starts[owner]
    last = pos == k[owner] - 1
    draw = rng.random(total)
    action = np.where(
        last,
        "search_complete",
        np.where(draw < 0.75, "search", np.where(draw < 0.97, "bbox", "invalid")),
    )
    search = action == "search"
    query = rng.integers(0, 4, total)  # few distinct queries per rollout: repeats happen
    arg = np.where(
        search,
        np.char.add("revenue by region ", query.astype(str)),
        np.where(action == "bbox", "[10, 20, 300, 400]", np.where(last, "true", "")),
    )
    page_doc = np.where(rng.random(total) < 0.6, docs[owner], rng.integers(0, 100_000, total))
    pages = np.char.add(np.char.add(page_doc.astype(str), "_"), pos.astype(str))[search]
    per_turn = np.concatenate([[0], np.cumsum(search)]).astype(np.int32)
    forced = last & (k[owner] == MAX_TURNS)
    think = np.where(
        forced,
        "Maximum turn limit reached. Trigger search_complete.",
        THINKS[rng.integers(0, len(THINKS), total)],
    )
    page_arr = _strings(pages)
    null_str = pa.nulls(total, pa.string())
    struct = pa.StructArray.from_arrays(
        [
            pa.array(pos.astype(np.int32)),
            _strings(think),
            _strings(action),
            _strings(arg),
            _strings(np.full(total, "\n")),
            pa.array(forced),
            pa.ListArray.from_arrays(pa.array(per_turn), page_arr),
            null_str,
            pa.array(np.where(action == "invalid", "empty search", None)),
            pa.nulls(total, pa.float64()),
        ],
        fields=list(TURN_TYPE),
    )
    turns = pa.ListArray.from_arrays(pa.array(starts), struct)
    retrieved = pa.ListArray.from_arrays(pa.array(per_turn[starts]), page_arr)
    return turns, retrieved


def make_chunk(
    rng: np.random.Generator, run: str, first_prompt: int, n_prompts: int, n_agent: int
) -> pa.Table:
    n = n_prompts * n_agent
    prompt = np.repeat(np.arange(first_prompt, first_prompt + n_prompts), n_agent)
    skill = np.repeat(rng.beta(0.8, 0.8, n_prompts), n_agent)
    k = rng.integers(1, MAX_TURNS + 1, n)
    turns, retrieved = _turns(rng, k, prompt)
    judge = (rng.random(n) < skill).astype(np.float64)
    ndcg = np.where(rng.random(n) < skill, rng.choice([0.5, 0.63, 1.0], n), 0.0)
    fmt = rng.random(n) > 0.03
    cols = {
        "run_id": pa.array(np.full(n, run)),
        "step": pa.array((prompt // 64).astype(np.int32)),
        "uid": pa.array(np.char.add("train_", prompt.astype(str))),
        "rollout_idx": pa.array(np.tile(np.arange(n_agent, dtype=np.int32), n_prompts)),
        "question": pa.array(np.char.add("What does deck ", prompt.astype(str))),
        "reference_answer": pa.array(np.char.add("answer ", prompt.astype(str))),
        "reference_pages": pa.ListArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int32)),
            _strings(
                np.char.add(np.char.add(prompt.astype(str), "_"), rng.integers(0, 6, n).astype(str))
            ),
        ),
        "turns": turns,
        "retrieved_pages": retrieved,
        "answer": pa.array(
            np.where(judge > 0, np.char.add("answer ", prompt.astype(str)), "unknown")
        ),
        "judge_score": pa.array(judge),
        "ndcg": pa.array(ndcg),
        "format_ok": pa.array(fmt),
        "reward": pa.array(np.where(fmt, 0.8 * judge + 0.2 * ndcg, 0.0)),
        "num_turns": pa.array(k.astype(np.int32)),
        "terminated": pa.array(np.where(k == MAX_TURNS, "max_turns", "complete")),
        "extra": pa.array(np.full(n, f'{{"max_turns": {MAX_TURNS}}}')),
    }
    return pa.table(
        [cols.get(f.name, pa.nulls(n, f.type)) for f in ROLLOUT_SCHEMA], schema=ROLLOUT_SCHEMA
    )


def make_logs(logs: Path, rollouts: int, runs: int, n_agent: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    per_run = max(1, rollouts // runs // n_agent)
    step = max(1, CHUNK // n_agent)
    total = 0
    for r in range(runs):
        w = store.PartitionWriter(logs, f"run{r}")
        for first in range(0, per_run, step):
            w.add_table(make_chunk(rng, f"run{r}", first, min(step, per_run - first), n_agent))
        total += w.commit({"sources": []})["rollouts_out"]
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=1_000_000, help="rollouts in the log, all runs")
    ap.add_argument("--runs", type=int, default=2, help="runs the rollouts are split over")
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--browse-max", type=int, default=500, help="rollouts in the browser")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ddai-bench-report-") as tmp:
        root = Path(tmp)
        logs = root / "logs"
        t0 = time.perf_counter()
        n = make_logs(logs, args.rollouts, args.runs, args.n_agent, args.seed)
        print(f"setup: {n:,} rollouts in {args.runs} runs ({time.perf_counter() - t0:.1f}s)")

        files = [str(f) for f in store.parquet_files(logs)]
        c0, t0 = time.process_time(), time.perf_counter()
        _duck().execute(SCAN, {"files": files}).fetchall()
        base, base_cpu = time.perf_counter() - t0, time.process_time() - c0

        cfg = ReportConfig(
            logs=logs,
            out=root / "report.html",
            compare=("run0", "run1") if args.runs > 1 else None,
            browse_max=args.browse_max,
            progress=False,
        )
        c0, t0 = time.process_time(), time.perf_counter()
        res = build_report(cfg)
        t_report, cpu_report = time.perf_counter() - t0, time.process_time() - c0

    print(f"{'':24}{'seconds':>10}{'rollouts/s':>14}{'x scan':>9}{'cpu s':>9}{'x scan':>9}")
    for name, t, cpu in (
        ("duckdb scan (baseline)", base, base_cpu),
        ("ddai report", t_report, cpu_report),
    ):
        print(f"{name:24}{t:10.3f}{n / t:14,.0f}{t / base:9.2f}{cpu:9.2f}{cpu / base_cpu:9.2f}")
    print("stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in res["timings"].items()))
    print(
        f"file size: {res['bytes'] / 1e6:.2f} MB ({res['browser rows']:,} rollouts in the browser)"
    )


if __name__ == "__main__":
    main()
