"""Benchmark: the funnel and the report over a store split into many runs and parts on S3, and a
projection to 100M rollouts from the measured per-part costs.

Builds ``--rollouts`` rollouts (``bench_report``'s generator) as ``--runs`` runs of ``--parts``
parts each (one commit per part, as a run appended to step by step or ingested in pieces) in a
local store, publishes every run to an S3-compatible server (moto in server mode on 127.0.0.1,
or the bucket ``--bucket`` names at ``AWS_ENDPOINT_URL``), then runs each step as a user does,
in a fresh process under ``/usr/bin/time`` (wall and CPU seconds, peak RSS), reading the store
on S3:

- ``curate bucket``: per-prompt scores over every run, the three bucket files;
- ``curate focus``: round 1 over the bucket files;
- ``distill selection``: distill's scan and selection (``fetch.scan_select``);
- ``report``: the HTML report over every run.

Each step runs twice: over all runs and over the first quarter of them (``--subset``), so each
step's cost splits into a fixed part and a part per store part (a line through the two points).
Printed: per step the seconds, CPU seconds and peak MiB at both sizes, the cost per part (seconds
and MiB), and the line's projection to ``--project`` rollouts in parts of the same size; the
machine's load average before and after each step.

    python bench/bench_scale_s3.py                                  # 1M rollouts, 20 runs x 5 parts
    python bench/bench_scale_s3.py --rollouts 3000000 --runs 30 --parts 10
    python bench/bench_scale_s3.py --worker bucket --logs s3://b/logs --root DIR --runs-list run000

``--worker``: one step in this process (what the parent runs under ``/usr/bin/time``); its
summary goes to ``<root>/out/<step>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS = ("bucket", "focus", "distill", "report")


def build_store(local: Path, rollouts: int, runs: int, parts: int, n_agent: int, seed: int) -> int:
    """``runs`` runs of ``parts`` parts each (one commit per part) holding about ``rollouts``
    rollouts; every run covers the same prompts (``n_prompts(...)``). Returns the rollouts."""
    import numpy as np
    from bench_report import make_chunk

    from ddai.pipelines import store

    rng = np.random.default_rng(seed)
    per_part = max(1, rollouts // (runs * parts * n_agent))  # prompts per part
    total = 0
    for r in range(runs):
        run = run_name(r)
        for p in range(parts):
            table = make_chunk(rng, run, p * per_part, per_part, n_agent)
            w = store.PartitionWriter(local, run, append=p > 0)
            w.add_table(table)
            w.commit({"sources": []})
            total += table.num_rows
    return total


def run_name(r: int) -> str:
    return f"run{r:03d}"


def n_prompts(rollouts: int, runs: int, parts: int, n_agent: int) -> int:
    return max(1, rollouts // (runs * parts * n_agent)) * parts


def run_step(step: str, logs: Any, runs: tuple[str, ...], root: Path, out: Path) -> dict[str, Any]:
    """One step over ``runs`` of the store at ``logs`` (a folder or a URL); its outputs go to
    ``out`` (the bucket files are focus's input). Returns what it produced, in numbers."""
    out.mkdir(parents=True, exist_ok=True)
    if step == "bucket":
        from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket

        cfg = BucketConfig(
            dataset=root / "dataset.parquet", out=out, logs=logs, runs=runs, force=True
        )
        return dict(run_bucket(cfg).summary)
    if step == "focus":
        from ddai.pipelines.funnel.focus import FocusConfig, run_focus

        cfg = FocusConfig(
            out=out / "focused_round1.parquet",
            logs=logs,
            runs=runs,
            bucket_a=out / "curriculum_bucket_a.parquet",
            bucket_0=out / "curriculum_bucket_0.parquet",
            force=True,
        )
        return dict(run_focus(cfg).summary)
    if step == "distill":
        from ddai.pipelines import store
        from ddai.pipelines.distill import fetch
        from ddai.pipelines.distill.select import SelectConfig

        files = [str(f) for f in store.parquet_files(logs, list(runs))]
        sel, _, n = fetch.scan_select(files, SelectConfig())
        (out / "selection.json").write_text(json.dumps(list(map(int, sel.rows))))
        return {"rollouts_read": n, "selected": len(sel.rows), "files": len(files)}
    if step == "report":
        from ddai.reports import ReportConfig, build_report

        res = build_report(
            ReportConfig(logs=logs, out=out / "report.html", runs=runs, progress=False)
        )
        return {"bytes": res["bytes"], "browser_rows": res["browser rows"]}
    raise ValueError(f"unknown step {step!r}: one of {', '.join(STEPS)}")


def fit(xs: tuple[int, int], ys: tuple[float, float]) -> tuple[float, float]:
    """``(fixed, per_x)`` of the line through two points."""
    per = (ys[1] - ys[0]) / (xs[1] - xs[0])
    return ys[1] - per * xs[1], per


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=1_000_000, help="rollouts in the store")
    ap.add_argument("--runs", type=int, default=20, help="runs the rollouts are split over")
    ap.add_argument("--parts", type=int, default=5, help="parts (commits) per run")
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--subset", type=int, default=4, help="the smaller size: 1/N of the runs")
    ap.add_argument("--project", type=int, default=100_000_000, help="rollouts to project to")
    ap.add_argument("--bucket", help="an existing bucket at $AWS_ENDPOINT_URL (default: moto)")
    ap.add_argument("--steps", default=",".join(STEPS), help="steps to run, in order")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", choices=STEPS, help=argparse.SUPPRESS)
    ap.add_argument("--logs", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--runs-list", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        root = Path(args.root)
        out = root / "out"
        res = run_step(args.worker, args.logs, tuple(args.runs_list.split(",")), root, out)
        (out / f"{args.worker}.json").write_text(json.dumps(res))
        return res

    from bench_funnel import make_dataset
    from bench_objstore import open_bucket
    from process_ab import run_once

    from ddai.pipelines import store
    from ddai.pipelines.store import objstore, remote_store

    proc, bucket = open_bucket(args.bucket)
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="ddai-bench-scale-") as tmp:
            root = Path(tmp)
            local = root / "logs"
            t0 = time.perf_counter()
            n = build_store(local, args.rollouts, args.runs, args.parts, args.n_agent, args.seed)
            prompts = n_prompts(args.rollouts, args.runs, args.parts, args.n_agent)
            make_dataset(root / "dataset.parquet", prompts)
            t_build = time.perf_counter() - t0
            files = store.parquet_files(local)
            size = sum(f.stat().st_size for f in files)
            url = f"s3://{bucket}/scale-{uuid.uuid4().hex[:8]}/logs"
            t0 = time.perf_counter()
            runs = tuple(store.list_runs(local))
            for run in runs:
                remote_store.publish(local, url, run, append=False)
            t_pub = time.perf_counter() - t0
            parts = len(files)
            print(
                f"store: {n:,} rollouts, {prompts:,} prompts, {len(runs)} runs x {args.parts} "
                f"parts = {parts} parts of {n // parts:,} rollouts, {size / 2**20:.0f} MiB of "
                f"Parquet ({size / parts / 2**20:.1f} MiB per part); built locally in "
                f"{t_build:.1f}s, published in {t_pub:.1f}s ({size / 2**20 / t_pub:.1f} MiB/s, "
                f"{t_pub / parts * 1e3:.0f} ms per part); S3 = "
                f"{'moto on 127.0.0.1' if proc else bucket}, scan {objstore.scan()}"
            )
            sizes = {"all": runs, "subset": runs[: max(1, len(runs) // args.subset)]}
            env = dict(os.environ)
            measured: dict[tuple[str, str], Any] = {}
            for step in args.steps.split(","):
                for label in ("subset", "all"):  # bucket's files must be those of all runs last
                    chosen = sizes[label]
                    load = os.getloadavg()[0]
                    argv = [sys.executable, __file__, "--worker", step, "--logs", url]
                    argv += ["--root", str(root), "--runs-list", ",".join(chosen)]
                    run = run_once(argv, env)
                    summary = json.loads((root / "out" / f"{step}.json").read_text())
                    measured[(step, label)] = (run, len(chosen) * args.parts, load, summary)
    finally:
        if proc is not None:
            proc.terminate()

    head = (
        f"{'step':10}{'parts':>6}{'s':>8}{'cpu s':>8}{'MiB':>7}{'load':>6}"
        f"{'s/part':>8}{'cpu/part':>9}{'MiB/part':>9}{'fixed s':>8}{'fixed MiB':>10}"
        f"{'@' + f'{args.project / 1e6:.0f}M s':>10}{'cpu s':>8}{'MiB':>8}"
    )
    print(head)
    per_rollout_part = n // parts
    parts_proj = args.project // per_rollout_part
    for step in args.steps.split(","):
        (r_s, p_s, l_s, _), (r_a, p_a, l_a, summ) = (
            measured[(step, "subset")],
            measured[(step, "all")],
        )
        t0_, tp = fit((p_s, p_a), (r_s.wall, r_a.wall))
        c0, cp = fit((p_s, p_a), (r_s.cpu, r_a.cpu))
        m0, mp = fit((p_s, p_a), (r_s.peak_mib, r_a.peak_mib))
        proj_t, proj_c = t0_ + tp * parts_proj, c0 + cp * parts_proj
        proj_m = m0 + mp * parts_proj
        for r, p, ld in ((r_s, p_s, l_s), (r_a, p_a, l_a)):
            print(f"{step:10}{p:>6}{r.wall:>8.2f}{r.cpu:>8.2f}{r.peak_mib:>7.0f}{ld:>6.1f}")
        print(
            f"{'':37}{tp:>8.3f}{cp:>9.4f}{mp:>9.2f}{t0_:>8.2f}{m0:>10.0f}"
            f"{proj_t:>10.0f}{proj_c:>8.0f}{proj_m:>8.0f}"
        )
        results[step] = {
            "subset": {"parts": p_s, "wall": r_s.wall, "cpu": r_s.cpu, "peak_mib": r_s.peak_mib},
            "all": {"parts": p_a, "wall": r_a.wall, "cpu": r_a.cpu, "peak_mib": r_a.peak_mib},
            "per_part_s": tp,
            "per_part_cpu": cp,
            "per_part_mib": mp,
            "projected_cpu": proj_c,
            "projected_s": proj_t,
            "projected_mib": proj_m,
            "summary": summ,
        }
    print(
        f"projection: {args.project:,} rollouts = {parts_proj:,} parts of {per_rollout_part:,} "
        f"rollouts, each step's line (fixed + per part) through the two measured sizes"
    )
    return results


if __name__ == "__main__":
    main()
