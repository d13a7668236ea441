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
  outputs written; each step in a fresh process (``ddai_pandas.run_step``), for its peak RSS.

DDAI's scripts hold every log line as Python dicts, so their memory grows with the log, and by
very different amounts per step (bucket reads the phase-1 log, focus the flash reward log,
distill the unified trajectory log). Above the smallest ``--ddai-calibrate`` size each DDAI step
is first run on samples of the store (every rollout of the prompts whose uid hashes to 0 mod k,
about each calibration size), its peak RSS fitted as a line in rollouts and projected to
``--size``; the step runs at full size only if that projection plus ``--ddai-margin-gib`` fits in
the memory available at that moment (``/proc/meminfo`` MemAvailable), else the table says what
it would need. A running step is killed if available memory falls under ``--ddai-guard-gib``.

    python bench/bench_funnel_scale.py                  # 100,000 rollouts
    python bench/bench_funnel_scale.py --size 1m
    python bench/bench_funnel_scale.py --size 10m --store /tmp/funnel10m   # built once, reused
    python bench/bench_funnel_scale.py --size 10m --no-ddai   # ddai and the floor only
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
    funnel_configs,
    in_fresh_process,
    make_dataset,
)
from bench_report import make_logs

from ddai.pipelines import store
from ddai.pipelines.funnel.bucket import run_bucket
from ddai.pipelines.funnel.focus import run_focus

SIZES = {"k": 1_000, "m": 1_000_000}
DDAI_INPUT = {"bucket": "phase1", "focus": "flash_rm_detail", "distill": "unified_trajectory"}


def size_arg(text: str) -> int:
    """``100k``, ``1m``, ``2.5m`` or a plain number of rollouts."""
    t = text.lower().replace("_", "").strip()
    try:
        if t[-1:] in SIZES:
            return int(float(t[:-1]) * SIZES[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a size is 100k, 1m, 2.5m or N") from None


def sizes_arg(text: str) -> list[int]:
    return sorted(size_arg(x) for x in text.split(",") if x.strip())


def project(points: list[tuple[int, float]], n: int) -> float | None:
    """Peak MiB at ``n`` rollouts from (rollouts, peak MiB) calibration points: the line through
    the smallest and largest (a fixed part, the dataset and imports, plus a part per rollout);
    from one point, proportional (an upper bound); None without points."""
    if not points:
        return None
    (m1, p1), (m2, p2) = points[0], points[-1]
    if m2 == m1:
        return p2 * n / m2
    slope = max(0.0, (p2 - p1) / (m2 - m1))
    return p2 + slope * (n - m2)


class DdaiSteps:
    """DDAI's three scripts on one store: calibrated on samples, run at full size when they fit.

    ``run(step, …)`` returns (seconds or None, note, the step's result or None); ``memory``
    holds every measured point (step, sample k, rollouts, peak MiB, seconds) and ``plans`` each
    step's projection."""

    def __init__(self, files: list[str], root: Path, n: int, args: argparse.Namespace) -> None:
        self.files, self.root, self.n, self.args = files, root, n, args
        self.memory: list[tuple[str, int, int, float, float]] = []
        self.plans: dict[str, str] = {}
        self.points: dict[str, list[tuple[int, float]]] = {s: [] for s in DDAI_INPUT}
        self.guard = args.ddai_guard_gib * 1024

    def calibrate(self, dataset: Path, hard_max: float) -> None:
        """Each step on samples of about each ``--ddai-calibrate`` size below ``n``."""
        for target in [c for c in self.args.ddai_calibrate if c < self.n]:
            k = max(2, round(self.n / target))
            m = ddai_pandas.sampled_rollouts(self.files, k)
            ins = ddai_pandas.write_inputs(
                self.files, self.root, what=tuple(DDAI_INPUT.values()), sample=k
            )
            out = self.root / f"ddai-sample{k}"
            out.mkdir(exist_ok=True)
            jobs = {
                "bucket": (ins["phase1"], dataset, out),
                "focus": (
                    ins["flash_rm_detail"],
                    out / "ddai_bucket_A.parquet",
                    out / "ddai_bucket_0.parquet",
                    out / "ddai_focused_round1.parquet",
                    hard_max,
                ),
                "distill": (ins["unified_trajectory"],),
            }
            for step, job in jobs.items():
                r = ddai_pandas.run_step(step, *job, guard_mib=self.guard)
                if "error" in r:
                    raise SystemExit(
                        f"DDAI {step} on the 1/{k} sample ({m:,} rollouts): {r['error']}"
                    )
                self.points[step].append((m, r["peak_mib"]))
                self.memory.append((step, k, m, r["peak_mib"], r["seconds"]))
                print(
                    f"  DDAI {step} on 1/{k} ({m:,} rollouts): {r['seconds']:.1f} s, "
                    f"{r['peak_mib']:,.0f} MiB",
                    flush=True,
                )

    def run(self, step: str, *job: object) -> tuple[float | None, str, Any]:
        """Best of the repeats (one above 1M rollouts) at full size if the projection fits now:
        (seconds, "", result), or (None, why not, None)."""
        need = project(self.points[step], self.n)
        pts = self.points[step]
        fit = ""
        if len(pts) > 1:
            slope = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
            fit = f" ({slope * 1024:.2f} KiB per rollout between the samples)"
        avail = ddai_pandas.mem_available_mib()
        margin = self.args.ddai_margin_gib * 1024
        if need is not None and need + margin > avail:
            why = (
                f"needs ~{need / 1024:.1f} GiB (projected), {avail / 1024:.1f} GiB available "
                f"less {self.args.ddai_margin_gib:g} GiB margin: not run"
            )
            self.plans[step] = why + fit
            return None, why, None
        self.plans[step] = (
            f"projected {need / 1024:.1f} GiB, {avail / 1024:.1f} GiB available: run"
            if need is not None
            else "run (not projected: no --ddai-calibrate size below --size)"
        )
        self.plans[step] += fit
        ins = ddai_pandas.write_inputs(self.files, self.root, what=(DDAI_INPUT[step],))
        job = (ins[DDAI_INPUT[step]], *job)
        best: dict[str, Any] | None = None
        for _ in range(self.args.repeat if self.n <= 1_000_000 else 1):
            r = ddai_pandas.run_step(step, *job, guard_mib=self.guard)
            if "error" in r:
                return None, f"failed: {r['error']}", None
            if best is None or r["seconds"] < best["seconds"]:
                best = r
        assert best is not None
        self.memory.append((step, 1, self.n, best["peak_mib"], best["seconds"]))
        return best["seconds"], "", best["result"]

    def print_memory(self) -> None:
        print("DDAI's scripts, peak RSS per step (fresh process; 1/k: a sample of the store):")
        print(
            f"{'step':9}{'sample':>8}{'rollouts':>12}{'peak MiB':>10}{'seconds':>9}{'peak/rollout KiB':>18}"
        )
        for step, k, m, peak, secs in sorted(self.memory, key=lambda r: (r[0], r[2])):
            print(
                f"{step:9}{'1/' + str(k) if k > 1 else 'all':>8}{m:>12,}{peak:>10,.0f}"
                f"{secs:>9.1f}{peak * 1024 / m:>18.2f}"
            )
        for step, plan in self.plans.items():
            print(f"  {step} at {self.n:,}: {plan}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--size", type=size_arg, default="100k", help="rollouts: 100k, 1m, 2.5m, 10m or N"
    )
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="timed repeats, best kept (DDAI's steps: once above 1M rollouts, minutes each)",
    )
    ap.add_argument("--no-ddai", action="store_true", help="skip DDAI's scripts altogether")
    ap.add_argument(
        "--ddai-calibrate",
        type=sizes_arg,
        default="100k,1m",
        help="sample sizes (rollouts) each DDAI step is first run at, for its peak RSS, when\n"
        "--size is larger; a line through them projects the step's peak at --size (one\n"
        "size below --size: proportional, an upper bound; '' runs every step unchecked)",
    )
    ap.add_argument(
        "--ddai-margin-gib",
        type=float,
        default=4.0,
        help="a DDAI step runs at --size only if its projected peak plus this fits in the\n"
        "memory available when it starts (others share the machine)",
    )
    ap.add_argument(
        "--ddai-guard-gib",
        type=float,
        default=1.5,
        help="a running DDAI step is killed if available memory falls under this",
    )
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument(
        "--store",
        type=Path,
        default=None,
        help="keep the generated store (and DDAI's logs, written as needed) here and reuse\n"
        "them when already there (the 10M store takes minutes to build); default: a temp\n"
        "dir, removed at the end",
    )
    ap.add_argument(
        "--memory-limit",
        default="4GB",
        help="DuckDB's memory_limit for the floors (the 10M distill floor peaked at 11 GB\n"
        "without one); '' for DuckDB's default",
    )
    ap.add_argument("--seed", type=int, default=0, help="the generator's random seed")
    args = ap.parse_args()
    load0 = _loadavg()
    n_prompts = max(1, args.size // args.n_agent)

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
        print(f"setup: {n:,} rollouts, {n_prompts:,} prompts ({time.perf_counter() - t0:.1f}s)")

        memory_limit = args.memory_limit or None
        con = _duck(memory_limit)
        floor_out = root / "floor"

        bucket_cfg, focus_cfg = funnel_configs(root, logs, out)
        rows: list[tuple[str, float, float, float | None, str]] = []
        t_b = best_of(args.repeat, lambda: run_bucket(bucket_cfg))
        t_bf = best_of(args.repeat, lambda: floor_bucket(con, files, bucket_cfg.dataset, floor_out))
        sizes = run_bucket(bucket_cfg).summary
        check_floor_bucket(sizes, floor_out)
        ddai = None if args.no_ddai else DdaiSteps(files, root, n, args)
        if ddai is not None:
            ddai.calibrate(root / "dataset.parquet", focus_cfg.hard_max)
        t_bd, note = None, "not run (--no-ddai)"
        if ddai is not None:
            t_bd, note, d = ddai.run("bucket", root / "dataset.parquet", ddai_out)
            if d is not None:
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
        t_fd, note = None, "not run (--no-ddai)"
        if ddai is not None:
            # DDAI's bucket files when its bucket ran, else ddai's (focus reads their ids only)
            a, z = ddai_out / "ddai_bucket_A.parquet", ddai_out / "ddai_bucket_0.parquet"
            theirs = t_bd is not None
            if not theirs:
                a, z = focus_cfg.bucket_a, focus_cfg.bucket_0
            t_fd, note, r = ddai.run(
                "focus", a, z, ddai_out / "ddai_focused_round1.parquet", focus_cfg.hard_max
            )
            if r is not None:
                note = f"round 1: {r:,}" + ("" if theirs else " (from ddai's buckets)")
        rows.append(("curate focus (round 1)", t_f, t_ff, t_fd, note))

        picked, t_d, rss_d = in_fresh_process("ddai", logs)
        picked_f, t_df, rss_f = in_fresh_process("floor", logs, memory_limit)
        picked_r, t_dr, rss_r = in_fresh_process("ddai+rows", logs)
        assert picked == picked_f == picked_r, (picked, picked_f, picked_r)
        t_dd, note = None, "not run (--no-ddai)"
        if ddai is not None:
            t_dd, note, n_dd = ddai.run("distill")
            if n_dd is not None:
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
    if ddai is not None:
        ddai.print_memory()
    print(f"load average at the end: {_loadavg()} (at the start: {load0})")


def _loadavg() -> str:
    with open("/proc/loadavg", encoding="ascii") as fh:
        return " ".join(fh.read().split()[:3])


if __name__ == "__main__":
    main()
