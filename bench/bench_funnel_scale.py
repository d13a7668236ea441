"""Benchmark: the funnel (bucket + focus + distill selection) at scale, against one bare DuckDB
query per step and against DDAI's own scripts re-expressed in pandas (``ddai_pandas.py``).

Builds a one-run store of ``--size`` rollouts (``100k`` by default; ``1m``, ``10m`` or a number)
with ``bench_report``'s generator, its verl-shaped dataset, and the same rollouts in DDAI's log
shapes (the phase-1 log, the flash reward log, the unified trajectory log). Then, best of
``--repeat``, each step three ways on the same data:

- ddai: ``run_bucket`` / ``run_focus`` (round 1) / distill's selection and its selected full rows
  (in a fresh process, for its peak RSS);
- floor: one DuckDB query computing the same groups (``bench_funnel``'s);
- DDAI: the script's way: its whole log into Python objects, then pandas / Python grouping, its
  outputs written.

DDAI's scripts hold every log line as Python dicts (about 1 KB a line): above
``--ddai-max-rollouts`` (2M by default, about 10 GB for the unified log there) they are not run
and the table says so rather than swapping the machine.

    python bench/bench_funnel_scale.py                  # 100,000 rollouts
    python bench/bench_funnel_scale.py --size 1m
    python bench/bench_funnel_scale.py --size 10m       # the issue's scale (ddai and floor)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ddai_pandas
from bench_funnel import (
    FLOOR_BUCKET,
    FLOOR_FOCUS,
    RUN,
    _duck,
    best_of,
    distill_selection,
    floor_distill,
    make_dataset,
)
from bench_report import make_logs

from ddai.pipelines import store
from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket
from ddai.pipelines.funnel.focus import FocusConfig, run_focus

SIZES = {"100k": 100_000, "1m": 1_000_000, "10m": 10_000_000}


def _peak_mib() -> float:
    """This process's peak RSS since its exec (``VmHWM``; ``ru_maxrss`` would carry the forking
    parent's peak over into a spawned child)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _child(name: str, logs: str, q: mp.Queue) -> None:
    fn = {"ddai": distill_selection, "floor": floor_distill}[name]
    t0 = time.perf_counter()
    n = fn(Path(logs))
    q.put((n, time.perf_counter() - t0, _peak_mib()))


def in_fresh_process(name: str, logs: Path) -> tuple[int, float, float]:
    """(rows, seconds, peak MiB) of one distill reader in a fresh interpreter."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(name, str(logs), q))
    proc.start()
    out = q.get()
    proc.join()
    return out


def size_arg(text: str) -> int:
    return SIZES.get(text.lower()) or int(text.replace("_", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", type=size_arg, default="100k", help="rollouts: 100k, 1m, 10m or N")
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--repeat", type=int, default=2, help="timed repeats (best is kept)")
    ap.add_argument("--ddai-max-rollouts", type=size_arg, default="2000000")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n_prompts = max(1, args.size // args.n_agent)
    run_ddai = args.size <= args.ddai_max_rollouts

    with tempfile.TemporaryDirectory(prefix="ddai-bench-scale-", dir=args.dir) as tmp:
        root = Path(tmp)
        logs, out, ddai_out = root / "logs", root / "out", root / "ddai"
        ddai_out.mkdir()
        t0 = time.perf_counter()
        n = make_logs(logs, args.size, 1, args.n_agent, args.seed)
        make_dataset(root / "dataset.parquet", n_prompts)
        files = [str(f) for f in store.parquet_files(logs, [RUN])]
        what = ("phase1", "flash_rm_detail", "unified_trajectory") if run_ddai else ()
        inputs = ddai_pandas.write_inputs(files, root, what=what)
        print(f"setup: {n:,} rollouts, {n_prompts:,} prompts ({time.perf_counter() - t0:.1f}s)")

        con = _duck()

        def floor(sql: str):
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
        rows: list[tuple[str, float, float, float | None, str]] = []
        t_b = best_of(args.repeat, lambda: run_bucket(bucket_cfg))
        t_bf = best_of(args.repeat, floor(FLOOR_BUCKET))
        sizes = run_bucket(bucket_cfg).summary
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
        t_ff = best_of(args.repeat, floor(FLOOR_FOCUS))
        r1 = run_focus(focus_cfg).summary
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
        picked_f, t_df, rss_f = in_fresh_process("floor", logs)
        assert picked == picked_f, (picked, picked_f)
        t_dd, note = None, f"not run above {args.ddai_max_rollouts:,} rollouts"
        if run_ddai:
            t_dd = best_of(1, lambda: ddai_pandas.distill(inputs["unified_trajectory"]))
            note = f"selected {ddai_pandas.distill(inputs['unified_trajectory']):,}"
        rows.append(("distill selection", t_d, t_df, t_dd, note))

    print(
        f"ddai: buckets B/A/0 {sizes['bucket B']:,} / {sizes['bucket A']:,} / "
        f"{sizes['bucket 0']:,}; round 1 {r1['round 1']:,}; distill selected {picked:,} "
        f"(peak RSS ddai {rss_d:.0f} MiB, floor {rss_f:.0f} MiB)"
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
