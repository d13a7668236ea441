"""Benchmark: ``ddai ingest`` on a 1M-rollout log, native JSONL and DDAI's unified JSONL.

The inputs are streamed into a temp folder from the committed synthetic world (``fixtures/``):
the native rows of every run, and the events of one run's unified log, repeated with the step
renumbered so every copy is a distinct set of rollouts (same shape, same event mix as DDAI's:
plans, search request/response with ten results, crops, frozen responses, rewards, metrics).

Each measurement runs in a fresh process, so its peak RSS is its own. Baselines, in the same
command: pyarrow's JSON reader over the native file (``pyarrow.json.read_json``: multi-threaded
C++, whole file into memory, no validation), and for the unified log a plain Python loop of
``json.loads`` over its lines. Printed: rollouts/s, events/s and peak memory of each, and ddai's
ratio to its baseline.

    python bench/bench_ingest.py                     # 1,000,000 rollouts
    python bench/bench_ingest.py --rollouts 50000    # a quick look
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
UNIFIED_RUN = "focused_r1"


# ---------------------------------------------------------------- inputs
def _split_at(line: str, key: str) -> tuple[str, str] | None:
    """Cut a JSON line around the integer value of ``key`` (first occurrence)."""
    i = line.find(key)
    if i < 0:
        return None
    j = i + len(key)
    k = j
    while k < len(line) and (line[k].isdigit() or line[k] == "-"):
        k += 1
    return line[:j], line[k:]


def make_native(path: Path, n: int) -> int:
    """``n`` native rows: the world's rows, copy ``c`` with its steps moved to ``c·1000 + step``."""
    rows = []
    for f in sorted((FIXTURES / "logs").glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            obj["run_id"] = "bench_native"
            cut = _split_at(json.dumps(obj, ensure_ascii=False, separators=(",", ":")), '"step":')
            assert cut is not None
            rows.append((cut, obj["step"]))
    written = 0
    with open(path, "w", encoding="utf-8") as fh:
        copy = 0
        while written < n:
            for (head, tail), step in rows:
                if written == n:
                    break
                fh.write(f"{head}{copy * 1000 + step}{tail}\n")
                written += 1
            copy += 1
    return written


def make_unified(path: Path, n: int) -> tuple[int, int]:
    """A unified log of at least ``n`` rollouts: one run's step blocks, renumbered per copy.

    Returns (rollouts, events)."""
    lines = (FIXTURES / "unified" / UNIFIED_RUN / "unified_trajectory.jsonl").read_text(
        encoding="utf-8"
    )
    start, body = None, []
    for line in lines.splitlines():
        obj = json.loads(line)
        if obj["event_type"] == "run.start":
            start = line
            continue
        cut = _split_at(line, '"global_step": ')
        assert cut is not None, line[:200]
        body.append((cut, obj["global_step"], obj["event_type"] == "rm.flash.detail"))
    per_copy = sum(r for _, _, r in body)
    span = max(s for _, s, _ in body) + 1
    rollouts = events = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(start + "\n")
        events += 1
        copy = 0
        while rollouts < n:
            for (head, tail), step, is_reward in body:
                fh.write(f"{head}{copy * span + step}{tail}\n")
                events += 1
                rollouts += is_reward
            copy += 1
    assert rollouts % per_copy == 0
    return rollouts, events


# ---------------------------------------------------------------- measurements (child processes)
def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def job_native_baseline(path: Path) -> dict:
    import pyarrow.json as pj

    t = time.perf_counter()
    table = pj.read_json(path)
    return {"seconds": time.perf_counter() - t, "rollouts": table.num_rows}


def job_unified_baseline(path: Path) -> dict:
    t = time.perf_counter()
    events = rollouts = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            ev = json.loads(line)
            events += 1
            rollouts += ev.get("event_type") == "rm.flash.detail"
    return {"seconds": time.perf_counter() - t, "rollouts": rollouts, "events": events}


def job_ingest(path: Path, fmt: str, logs: Path) -> dict:
    from ddai.pipelines.ingest import IngestConfig, ingest

    t = time.perf_counter()
    res = ingest(IngestConfig([path], logs, fmt=fmt, run_id="bench", progress=False))
    out = {"seconds": time.perf_counter() - t, "rollouts": res.rollouts_out}
    notes = res.notes.get(str(path), {})
    if "events read" in notes:
        out["events"] = notes["events read"]
    shutil.rmtree(logs, ignore_errors=True)
    return out


def run_job(*args: str) -> dict:
    """Run one measurement in a fresh interpreter; its result and peak RSS come back as JSON."""
    out = subprocess.run(
        [sys.executable, __file__, "--job", *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- report
def _rate(r: dict, key: str) -> float | None:
    return r[key] / r["seconds"] if key in r and r["seconds"] > 0 else None


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def report(rows: list[tuple[str, dict, dict]]) -> None:
    print(
        f"{'input':<10} {'reader':<24} {'rollouts/s':>12} {'events/s':>12} {'peak MiB':>9}"
        f"   ratio to baseline: rollouts/s  events/s  peak"
    )
    for name, base, ddai in rows:
        for label, r in (("baseline", base), ("ddai ingest", ddai)):
            who = r["label"] if label == "baseline" else label
            line = (
                f"{name:<10} {who:<24} {_fmt(_rate(r, 'rollouts'), ',.0f'):>12} "
                f"{_fmt(_rate(r, 'events'), ',.0f'):>12} {r['peak_mib']:>9,.0f}"
            )
            if label == "ddai ingest":
                ratios = [
                    _ratio(_rate(ddai, k), _rate(base, k)) for k in ("rollouts", "events")
                ] + [_ratio(ddai["peak_mib"], base["peak_mib"])]
                line += "   " + "  ".join(f"{_fmt(x, '.3f'):>10}" for x in ratios)
            print(line)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=1_000_000, help="Rollouts per input log.")
    ap.add_argument("--dir", type=Path, default=None, help="Work folder (default: a temp dir).")
    ap.add_argument("--job", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        kind, path = args.job[0], Path(args.job[1])
        if kind == "native-baseline":
            out = job_native_baseline(path)
        elif kind == "unified-baseline":
            out = job_unified_baseline(path)
        else:
            out = job_ingest(path, kind, Path(args.job[2]))
        print(json.dumps({**out, "peak_mib": _peak_mib()}))
        return

    work = Path(tempfile.mkdtemp(prefix="ddai-bench-ingest-", dir=args.dir))
    try:
        native, unified = work / "native.jsonl", work / "unified_trajectory.jsonl"
        t = time.perf_counter()
        n_native = make_native(native, args.rollouts)
        n_unified, n_events = make_unified(unified, args.rollouts)
        print(
            f"inputs: native {n_native:,} rollouts ({native.stat().st_size / 2**20:,.0f} MiB), "
            f"unified {n_unified:,} rollouts / {n_events:,} events "
            f"({unified.stat().st_size / 2**20:,.0f} MiB), made in {time.perf_counter() - t:.0f} s"
        )
        base_n = {**run_job("native-baseline", str(native)), "label": "pyarrow.json.read_json"}
        ddai_n = run_job("ddai", str(native), str(work / "logs-native"))
        base_u = {**run_job("unified-baseline", str(unified)), "label": "json.loads line loop"}
        ddai_u = run_job("ddai-unified", str(unified), str(work / "logs-unified"))
        report([("native", base_n, ddai_n), ("unified", base_u, ddai_u)])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
