"""Benchmark: the funnel (bucket + focus + distill selection) at scale, against one bare DuckDB
query per step and against DDAI's own scripts re-expressed in pandas (``ddai_pandas.py``).

Builds a one-run store of ``--size`` rollouts (``100k`` by default; ``1m``, ``10m`` or a number)
with ``bench_report``'s generator, its verl-shaped dataset, and the same rollouts in DDAI's log
shapes (the phase-1 log, the flash reward log, the unified trajectory log). Then, best of
``--repeat``, each step three ways on the same data:

- ddai: ``run_bucket`` / ``run_focus`` (round 1) / distill's selection and its selected rows as
  bounded Arrow batches (in a fresh process, for its peak RSS; once more with each batch turned
  into Python rows, the SFT rebuild's input);
- floor: DuckDB alone computing what the step produces (``bench_funnel``'s): the group-by, its
  join to the dataset and the output files by ``COPY``; distill's selection and selected rows in
  one query (DuckDB capped at ``--memory-limit``);
- DDAI: the script's way: its whole log into Python objects, then pandas / Python grouping, its
  outputs written.

DDAI's scripts hold every log line as Python dicts (about 1 KB a line): above
``--ddai-max-rollouts`` (2M by default, about 10 GB for the unified log there) they are not run
and the table says so rather than swapping the machine.

    python bench/bench_funnel_scale.py                  # 100,000 rollouts
    python bench/bench_funnel_scale.py --size 1m
    python bench/bench_funnel_scale.py --size 10m --store /tmp/funnel10m   # built once, reused
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ddai_pandas
import pyarrow.parquet as pq
from bench_funnel import (
    RUN,
    _duck,
    best_of,
    check_floor_bucket,
    floor_bucket,
    floor_focus,
    in_fresh_process,
    make_dataset,
)
from bench_report import make_logs

from ddai.pipelines import store
from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket
from ddai.pipelines.funnel.focus import FocusConfig, run_focus

SIZES = {"100k": 100_000, "1m": 1_000_000, "10m": 10_000_000}


def size_arg(text: str) -> int:
    return SIZES.get(text.lower()) or int(text.replace("_", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", type=size_arg, default="100k", help="rollouts: 100k, 1m, 10m or N")
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--repeat", type=int, default=2, help="timed repeats (best is kept)")
    ap.add_argument("--ddai-max-rollouts", type=size_arg, default="2000000")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument(
        "--store",
        type=Path,
        default=None,
        help="keep the generated store here and reuse it when it is already there (the 10M "
        "store takes minutes to build); default: a temp dir, removed at the end",
    )
    ap.add_argument(
        "--memory-limit",
        default="4GB",
        help="DuckDB's memory_limit for the floors (the 10M distill floor peaked at 11 GB "
        "without one); '' for DuckDB's default",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n_prompts = max(1, args.size // args.n_agent)
    run_ddai = args.size <= args.ddai_max_rollouts

    with contextlib.ExitStack() as stack:
        if args.store is None:
            tmp = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="ddai-bench-scale-", dir=args.dir)
            )
        root = args.store or Path(tmp)
        logs, out, ddai_out = root / "logs", root / "out", root / "ddai"
        ddai_out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        if not (root / "dataset.parquet").is_file():  # a store built before is reused
            make_logs(logs, args.size, 1, args.n_agent, args.seed)
            make_dataset(root / "dataset.parquet", n_prompts)
        files = [str(f) for f in store.parquet_files(logs, [RUN])]
        n = sum(pq.read_metadata(f).num_rows for f in files)
        assert n == args.size, f"{root} holds {n:,} rollouts, not {args.size:,}"
        what = ("phase1", "flash_rm_detail", "unified_trajectory") if run_ddai else ()
        inputs = ddai_pandas.write_inputs(files, root, what=what)
        print(f"setup: {n:,} rollouts, {n_prompts:,} prompts ({time.perf_counter() - t0:.1f}s)")

        memory_limit = args.memory_limit or None
        con = _duck(memory_limit)
        floor_out = root / "floor"

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
        rows: list[tuple[str, float, float, float | None, str]] = []
        t_b = best_of(args.repeat, lambda: run_bucket(bucket_cfg))
        t_bf = best_of(args.repeat, lambda: floor_bucket(con, files, bucket_cfg.dataset, floor_out))
        sizes = run_bucket(bucket_cfg).summary
        check_floor_bucket(sizes, floor_out)
        t_bd, note = None, f"not run above {args.ddai_max_rollouts:,} rollouts"
        if run_ddai:
            t_bd = best_of(
                args.repeat,
                lambda: ddai_pandas.bucket(inputs["phase1"], root / "dataset.parquet", ddai_out),
            )
            d = ddai_pandas.bucket(inputs["phase1"], root / "dataset.parquet", ddai_out)
            note = f"B/A/0 {d.get('B', 0):,}/{d.get('A', 0):,}/{d.get('0', 0):,}"
        rows.append(("curate bucket", t_b, t_bf, t_bd, note))

        t_f = best_of(args.repeat, lambda: run_focus(focus_cfg))
        floor_r1 = floor_out / "focused_round1.parquet"
        t_ff = best_of(
            args.repeat,
            lambda: floor_focus(con, files, focus_cfg.bucket_a, focus_cfg.bucket_0, floor_r1),
        )
        r1 = run_focus(focus_cfg).summary
        assert pq.read_metadata(floor_r1).num_rows == r1["round 1"], "floor != focus"
        con.close()
        t_fd, note = None, f"not run above {args.ddai_max_rollouts:,} rollouts"
        if run_ddai:
            hard_max = focus_cfg.hard_max

            def ddai_focus() -> int:
                return ddai_pandas.focus(
                    inputs["flash_rm_detail"],
                    ddai_out / "ddai_bucket_A.parquet",
                    ddai_out / "ddai_bucket_0.parquet",
                    ddai_out / "ddai_focused_round1.parquet",
                    hard_max,
                )

            t_fd = best_of(args.repeat, ddai_focus)
            note = f"round 1: {ddai_focus():,}"
        rows.append(("curate focus (round 1)", t_f, t_ff, t_fd, note))

        picked, t_d, rss_d = in_fresh_process("ddai", logs)
        picked_f, t_df, rss_f = in_fresh_process("floor", logs, memory_limit)
        picked_r, t_dr, rss_r = in_fresh_process("ddai+rows", logs)
        assert picked == picked_f == picked_r, (picked, picked_f, picked_r)
        t_dd, note = None, f"not run above {args.ddai_max_rollouts:,} rollouts"
        if run_ddai:
            t0 = time.perf_counter()  # once: minutes at 1M
            n_dd = ddai_pandas.distill(inputs["unified_trajectory"])
            t_dd = time.perf_counter() - t0
            note = f"selected {n_dd:,}"
        rows.append(("distill selection", t_d, t_df, t_dd, note))
        rows.append(("  + rows as Python", t_dr, t_df, t_dd, "(each batch to dicts, dropped)"))

    print(
        f"ddai: buckets B/A/0 {sizes['bucket B']:,} / {sizes['bucket A']:,} / "
        f"{sizes['bucket 0']:,}; round 1 {r1['round 1']:,}; distill selected {picked:,} "
        f"(peak RSS ddai {rss_d:.0f} MiB, with Python rows {rss_r:.0f} MiB, floor "
        f"{rss_f:.0f} MiB)"
    )
    print(
        f"{'step':24}{'ddai s':>9}{'floor s':>9}{'DDAI s':>9}{'x floor':>9}{'DDAI/ddai':>11}  DDAI"
    )
    for name, t, base, theirs, note in rows:
        d = f"{theirs:9.2f}" if theirs is not None else f"{'-':>9}"
        speed = f"{theirs / t:11.1f}" if theirs is not None else f"{'-':>11}"
        print(f"{name:24}{t:9.2f}{base:9.2f}{d}{t / base:9.2f}{speed}  {note}")
    print(
        f"({n:,} rollouts, one run; DDAI = its scripts re-expressed in pandas, bench/ddai_pandas)"
    )


if __name__ == "__main__":
    main()
