"""Benchmark: ``ddai ingest`` against the columnar floor, on DDAI's flash log, DDAI's unified log
and ddai's own Parquet, at 100k and 1M rollouts (the unified log: 100k; ``--big``: 10M too for
flash and Parquet).

Inputs are written into a temp folder from the committed synthetic world (``fixtures/``):

- flash: DDAI's ``flash_rm_detail.jsonl`` (the ``rm.flash.detail`` payloads of every fixture run
  plus ``timestamp`` and ``pid``, as DDAI's writer logs them), copy ``c`` with ``-c`` on the uid;
- unified: one run's ``unified_trajectory.jsonl`` events, step blocks renumbered per copy
  (12 events per rollout: plans, search request/response, crops, frozen responses, rewards);
- native Parquet: ddai's own rows (every fixture run, ingested once) with steps renumbered per copy;
- native JSONL (``--inputs jsonl``, not in the default set): the fixture runs' own JSONL lines,
  steps renumbered per copy;
- verl (``--inputs verl``, not in the default set): the fixture runs as verl dumps them
  (``tests/support/verl_dump.py``: the chat-templated prompt, the episode with its observations as
  user turns, ``gts``, ``score``, ``step`` and the reward extras), steps renumbered per copy.

Each measurement runs in a fresh process, so its peak RSS is its own. Floors, in the same command
on the same file: polars ``scan_ndjson → sink_parquet`` (``scan_parquet`` for Parquet) and DuckDB
``COPY (SELECT * FROM read_json(…)) TO … (FORMAT parquet)``: parse and write Parquet, nothing more
(no validation, no quarantine, no manifest, no tag parsing). Printed per input: seconds,
rollouts/s, events/s (unified), peak RSS, ddai's time as a multiple of each floor, and CPU
seconds (all threads, imports included) with ddai's as a multiple of DuckDB's: on a shared VM
wall time moves with the other jobs' load, CPU time much less.

    python bench/bench_ingest.py                         # 100k and 1M rollouts
    python bench/bench_ingest.py --rollouts 100000       # one size
    python bench/bench_ingest.py --big                   # adds 10M (about 10 GB of temp files)
    python bench/bench_ingest.py --inputs flash,parquet  # a subset
    python bench/bench_ingest.py --inputs unified --rollouts 100000,1000000
                                          # the unified log at 1M too (12M events, 6.2 GiB)
    python bench/bench_ingest.py --per-row               # also the per-row path (before/after)
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
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
UNIFIED_RUN = "focused_r1"
CONTEXT = (
    "ts",
    "host",
    "pid",
    "run_id",
    "project_name",
    "experiment_name",
    "n_agent",
    "epoch",
    "global_step",
    "event_type",
)


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


def _write_copies(path: Path, n: int, copy_lines: Callable[[int], Iterable[str]]) -> int:
    """Write ``n`` lines to ``path``: copy 0's lines, then copy 1's, ... (``copy_lines(c)``),
    the last copy cut at ``n``. Returns ``n``."""
    written = copy = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < n:
            for line in copy_lines(copy):
                if written == n:
                    break
                fh.write(line + "\n")
                written += 1
            copy += 1
    return written


def make_flash(path: Path, n: int) -> int:
    """``n`` flash lines: every fixture run's ``rm.flash.detail`` payloads, ``-c`` on copy ``c``'s
    uids (so every copy's rollouts are new keys)."""
    templates = []
    for f in sorted((FIXTURES / "unified").glob("*/unified_trajectory.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            ev = json.loads(line)
            if ev["event_type"] != "rm.flash.detail":
                continue
            payload = {k: v for k, v in ev.items() if k not in CONTEXT}
            uid = payload.pop("uid")
            row = {"timestamp": ev["ts"], "pid": ev["pid"], "uid": "@UID@", **payload}
            templates.append((json.dumps(row, ensure_ascii=False), uid))
    return _write_copies(
        path, n, lambda c: (text.replace("@UID@", f"{uid}-{c}", 1) for text, uid in templates)
    )


def make_parquet(path: Path, n: int, work: Path) -> int:
    """``n`` rows of ddai's own Parquet: the fixture runs ingested once, steps renumbered per copy."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ddai.pipelines import store
    from ddai.pipelines.ingest import IngestConfig, ingest
    from ddai.pipelines.records.schema import ROLLOUT_SCHEMA

    logs = work / "seed-logs"
    ingest(IngestConfig(sorted((FIXTURES / "logs").glob("*.jsonl")), logs, progress=False))
    base = store.read_rollouts(logs)
    base = base.set_column(0, "run_id", pa.array(["bench_parquet"] * base.num_rows, pa.string()))
    shutil.rmtree(logs)
    written = copy = 0
    step_at = base.schema.get_field_index("step")
    with pq.ParquetWriter(path, ROLLOUT_SCHEMA, compression="zstd") as w:
        while written < n:
            part = base.slice(0, n - written)
            steps = pc.add(pc.fill_null(part["step"], 0), pa.scalar(copy * 1000, pa.int32()))
            w.write_table(part.set_column(step_at, "step", steps))
            written += part.num_rows
            copy += 1
    return written


def make_jsonl(path: Path, n: int) -> int:
    """``n`` lines of ddai's own JSONL: every fixture run's lines, steps renumbered per copy (so
    every copy's rollouts are new keys)."""
    templates = []
    for f in sorted((FIXTURES / "logs").glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            cut = _split_at(line, '"step":')
            assert cut is not None, line[:200]
            templates.append((cut, json.loads(line)["step"]))
    return _write_copies(
        path, n, lambda c: (f"{head}{c * 1000 + step}{tail}" for (head, tail), step in templates)
    )


def make_verl(path: Path, n: int) -> int:
    """``n`` lines of a verl dump: every fixture run's rollouts as verl dumps them (prompts from
    the fixture dataset), steps renumbered per copy (so every copy's groups are new)."""
    import polars as pl

    sys.path.insert(0, str(ROOT / "tests"))
    from support.verl_dump import dump_line

    ds = pl.read_parquet(FIXTURES / "dataset.parquet")
    prompts = dict(zip(ds["id"].to_list(), ds["prompt"].to_list(), strict=True))
    templates = []
    for f in sorted((FIXTURES / "logs").glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["uid"] in prompts:
                obj = {**dump_line(row, prompts[row["uid"]]), "step": -7}
                templates.append((json.dumps(obj, ensure_ascii=False), row.get("step") or 0))
    return _write_copies(
        path,
        n,
        lambda c: (
            text.replace('"step": -7', f'"step": {c * 1000 + step}', 1) for text, step in templates
        ),
    )


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
def _cpu_s() -> float:
    """CPU seconds of this process, all threads (steadier than wall time on a shared VM)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _peak_mib() -> float:
    """Peak RSS since this process's exec (``VmHWM``; ``ru_maxrss`` would carry over the forking
    parent's peak, which after ``make_parquet`` holds ddai and pyarrow)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: KiB elsewhere


def job_polars(path: Path, out: Path) -> dict:
    import polars as pl

    t = time.perf_counter()
    if path.suffix == ".parquet":
        pl.scan_parquet(path).sink_parquet(out)
    else:
        pl.scan_ndjson(path, infer_schema_length=None).sink_parquet(out)
    return {"seconds": time.perf_counter() - t}


def job_duckdb(path: Path, out: Path) -> dict:
    import duckdb

    fn = "read_parquet" if path.suffix == ".parquet" else "read_json"
    t = time.perf_counter()
    duckdb.sql(f"COPY (SELECT * FROM {fn}('{path}')) TO '{out}' (FORMAT parquet)")
    return {"seconds": time.perf_counter() - t}


def job_ingest(path: Path, fmt: str, logs: Path, columnar: bool = True) -> dict:
    from ddai.pipelines.ingest import IngestConfig, ingest

    t = time.perf_counter()
    cfg = IngestConfig([path], logs, fmt=fmt, run_id="bench", progress=False, columnar=columnar)
    res = ingest(cfg)
    out = {"seconds": time.perf_counter() - t, "rollouts": res.rollouts_out}
    out["quarantined"] = sum(res.quarantined.values())
    notes = res.notes.get(str(path), {})
    if "events read" in notes:
        out["events"] = notes["events read"]
    shutil.rmtree(logs, ignore_errors=True)
    return out


def run_job(*args: str) -> dict:
    """Run one measurement in a fresh interpreter; its result and peak RSS come back as JSON."""
    out = subprocess.run([sys.executable, __file__, "--job", *args], capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- report
FORMATS = {
    "flash": "ddai-flash",
    "unified": "ddai-unified",
    "parquet": "ddai",
    "jsonl": "ddai",
    "verl": "verl",
}


def measure(
    name: str, path: Path, work: Path, rollouts: int, events: int | None, per_row: bool
) -> list[dict]:
    rows = []
    floor_out = work / "floor.parquet"
    jobs = [
        ("polars floor", ("polars", str(path), str(floor_out))),
        ("DuckDB floor", ("duckdb", str(path), str(floor_out))),
        ("ddai ingest", (FORMATS[name], str(path), str(work / "logs"))),
    ]
    if per_row:
        jobs.append(("ddai per row", (FORMATS[name], str(path), str(work / "logs"), "rows")))
    for label, args in jobs:
        r = run_job(*args)
        floor_out.unlink(missing_ok=True)
        rows.append({"input": name, "reader": label, "rollouts": rollouts, "events": events, **r})
    return rows


def print_rows(rows: list[dict]) -> None:
    print(
        f"{'input':<8} {'rollouts':>10} {'reader':<13} {'seconds':>8} {'rollouts/s':>11} "
        f"{'events/s':>10} {'peak MiB':>9} {'× polars':>9} {'× DuckDB':>9} {'CPU s':>7} "
        f"{'CPU × DuckDB':>12}"
    )
    floors: dict[tuple[str, int, str], float] = {}
    cpu_floor: dict[tuple[str, int], float] = {}
    for r in rows:
        key = (r["input"], r["rollouts"])
        if "error" in r:
            print(f"{r['input']:<8} {r['rollouts']:>10,} {r['reader']:<13} failed: {r['error']}")
            continue
        s = r["seconds"]
        if r["reader"].endswith("floor"):
            floors[(*key, r["reader"])] = s
        if r["reader"] == "DuckDB floor":
            cpu_floor[key] = r["cpu_s"]
        pol, duck = floors.get((*key, "polars floor")), floors.get((*key, "DuckDB floor"))
        ev = f"{r['events'] / s:,.0f}" if r.get("events") else "-"
        x_pol = f"{s / pol:.2f}" if pol else "-"
        x_duck = f"{s / duck:.2f}" if duck else "-"
        print(
            f"{r['input']:<8} {r['rollouts']:>10,} {r['reader']:<13} {s:>8.2f} "
            f"{r['rollouts'] / s:>11,.0f} {ev:>10} {r['peak_mib']:>9,.0f} {x_pol:>9} {x_duck:>9} "
            f"{r['cpu_s']:>7.2f} {r['cpu_s'] / cpu_floor[key] if key in cpu_floor else 0:>12.2f}"
        )


def _plan(rollouts: str | None, big: bool, inputs: list[str]) -> list[tuple[int, str]]:
    """(size, input) pairs to measure, smallest size first.

    Without ``--rollouts`` the unified log stops at 100k (12 events per rollout: 1.2M events, a
    few minutes with its floors on a busy 2-core VM); ``--rollouts 100000,1000000`` asks for 1M."""
    if rollouts is not None:
        sizes = {name: [int(x) for x in rollouts.split(",") if x] for name in inputs}
    else:
        sizes = {n: [100_000] if n == "unified" else [100_000, 1_000_000] for n in inputs}
    if big:
        for name in inputs:
            if name != "unified":
                sizes[name].append(10_000_000)
    pairs = [(n, name) for name in inputs for n in sizes[name]]
    order = {name: i for i, name in enumerate(inputs)}
    return sorted(pairs, key=lambda p: (p[0], order[p[1]]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--rollouts",
        default=None,
        help="Comma-separated sizes (rollouts per input); default 100000,1000000 for flash and "
        "Parquet and 100000 for the unified log (1.2M events).",
    )
    ap.add_argument(
        "--big", action="store_true", help="Also 10,000,000 rollouts (flash and Parquet only)."
    )
    ap.add_argument(
        "--inputs",
        default="flash,unified,parquet",
        help="Comma-separated: flash, unified, parquet, jsonl (ddai's own JSONL), verl (dumps).",
    )
    ap.add_argument(
        "--per-row",
        action="store_true",
        help="Also time ddai's per-row path (columnar reading off; the unified log event by event).",
    )
    ap.add_argument("--dir", type=Path, default=None, help="Work folder (default: a temp dir).")
    ap.add_argument("--job", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        kind, path = args.job[0], Path(args.job[1])
        if kind == "polars":
            out = job_polars(path, Path(args.job[2]))
        elif kind == "duckdb":
            out = job_duckdb(path, Path(args.job[2]))
        else:
            out = job_ingest(path, kind, Path(args.job[2]), columnar=args.job[3:] != ["rows"])
        print(json.dumps({**out, "peak_mib": _peak_mib(), "cpu_s": _cpu_s()}))
        return

    inputs = [x for x in args.inputs.split(",") if x]
    unknown = set(inputs) - set(FORMATS)
    if unknown:
        ap.error(f"unknown --inputs {', '.join(sorted(unknown))}; known: {', '.join(FORMATS)}")
    rows: list[dict] = []
    for n, name in _plan(args.rollouts, args.big, inputs):
        work = Path(tempfile.mkdtemp(prefix="ddai-bench-ingest-", dir=args.dir))
        try:
            t = time.perf_counter()
            events = None
            if name == "flash":
                path = work / "flash_rm_detail.jsonl"
                got = make_flash(path, n)
            elif name == "unified":
                path = work / "unified_trajectory.jsonl"
                got, events = make_unified(path, n)
            elif name == "jsonl":
                path = work / "rollouts.jsonl"
                got = make_jsonl(path, n)
            elif name == "verl":
                path = work / "0.jsonl"
                got = make_verl(path, n)
            else:
                path = work / "rollouts.parquet"
                got = make_parquet(path, n, work)
            mib = path.stat().st_size / 2**20
            print(
                f"# {name}: {got:,} rollouts{f' / {events:,} events' if events else ''}, "
                f"{mib:,.0f} MiB, made in {time.perf_counter() - t:.0f} s",
                flush=True,
            )
            rows += measure(name, path, work, got, events, args.per_row)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print_rows(rows)


if __name__ == "__main__":
    main()
