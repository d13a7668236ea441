"""Benchmark: ``curate bucket`` + ``curate focus`` over a 1M-rollout log vs a plain DuckDB scan.

Builds, in a temp folder, a log store with one run of ``--rollouts`` rollouts (``--n-agent`` per
prompt, seeded NDCG / judge / reward / format values) and a verl-shaped dataset of its prompts.
Then times, best of ``--repeat``:

- the baseline: one DuckDB scan over the run's Parquet files reading the columns the steps read
  (``uid``, ``ndcg``, ``judge_score``, ``format_ok``, ``reward``, ``num_turns``) and reducing them
  to a row (nothing to group, join, sort or write);
- ``bucket``: mean NDCG per prompt from the log, joined to the dataset, three bucket files and
  their manifests (input hashing included);
- ``focus`` round 1: mean reward per prompt, hard A in bucket-A order + bucket 0, one file and its
  manifest.

Printed: seconds and rollouts/s of each, and each step's time as a ratio to the baseline measured
in the same command (``--force`` semantics: every repeat does the full work).

    python bench/bench_funnel.py                      # 1,000,000 rollouts
    python bench/bench_funnel.py --rollouts 100000    # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ddai.pipelines import store
from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket
from ddai.pipelines.funnel.focus import FocusConfig, run_focus
from ddai.pipelines.schema import ROLLOUT_SCHEMA

RUN = "bench"
SCAN = """
SELECT count(uid), sum(ndcg), sum(judge_score), count(format_ok), sum(reward), sum(num_turns)
FROM read_parquet($files)
"""


def make_log(logs: Path, n_prompts: int, n_agent: int, seed: int) -> int:
    """One run: ``n_agent`` rollouts for each of ``n_prompts`` prompts, written in the store."""
    rng = np.random.default_rng(seed)
    n = n_prompts * n_agent
    skill = rng.beta(0.8, 0.8, n_prompts)  # per-prompt difficulty, so buckets are all populated
    p = np.repeat(skill, n_agent)
    ndcg = np.clip(p + rng.normal(0, 0.15, n), 0, 1).round(4)
    judge = (rng.random(n) < p).astype(np.float64)
    fmt = rng.random(n) > 0.03
    cols = {
        "run_id": pa.array(np.full(n, RUN)),
        "uid": pa.array(np.repeat([f"train_{i}" for i in range(n_prompts)], n_agent)),
        "rollout_idx": pa.array(np.tile(np.arange(n_agent, dtype=np.int32), n_prompts)),
        "ndcg": pa.array(ndcg),
        "judge_score": pa.array(judge),
        "format_ok": pa.array(fmt),
        "reward": pa.array(np.where(fmt, 0.8 * judge + 0.2 * ndcg, 0.0)),
        "num_turns": pa.array(rng.integers(1, 8, n).astype(np.int32)),
    }
    table = pa.table(
        [cols.get(f.name, pa.nulls(n, f.type)) for f in ROLLOUT_SCHEMA], schema=ROLLOUT_SCHEMA
    )
    store.write_run(logs, RUN, table)
    return n


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
        n = make_log(logs, n_prompts, args.n_agent, args.seed)
        make_dataset(root / "dataset.parquet", n_prompts)
        print(f"setup: {n:,} rollouts, {n_prompts:,} prompts ({time.perf_counter() - t0:.1f}s)")

        files = [str(f) for f in store.parquet_files(logs, [RUN])]
        con = duckdb.connect()
        base = best_of(args.repeat, lambda: con.execute(SCAN, {"files": files}).fetchall())

        bucket_cfg = BucketConfig(
            dataset=root / "dataset.parquet", out=out, logs=logs, runs=(RUN,), force=True
        )
        t_bucket = best_of(args.repeat, lambda: run_bucket(bucket_cfg))
        sizes = run_bucket(bucket_cfg).summary
        focus_cfg = FocusConfig(
            out=out / "focused_round1.parquet",
            logs=logs,
            runs=(RUN,),
            bucket_a=out / "curriculum_bucket_a.parquet",
            bucket_0=out / "curriculum_bucket_0.parquet",
            force=True,
        )
        t_focus = best_of(args.repeat, lambda: run_focus(focus_cfg))
        r1 = run_focus(focus_cfg).summary

    print(
        f"buckets B/A/0: {sizes['bucket B']:,} / {sizes['bucket A']:,} / {sizes['bucket 0']:,};"
        f" round 1: {r1['round 1']:,}"
    )
    print(f"{'':24}{'seconds':>10}{'rollouts/s':>14}{'x scan':>9}")
    for name, t in (
        ("duckdb scan (baseline)", base),
        ("curate bucket", t_bucket),
        ("curate focus (round 1)", t_focus),
        ("bucket + focus", t_bucket + t_focus),
    ):
        print(f"{name:24}{t:10.3f}{n / t:14,.0f}{t / base:9.2f}")


if __name__ == "__main__":
    main()
