"""Benchmark: ddai's commands as a user runs them, each a whole process against its floor.

One command, one table (``process_ab.py``: paired runs, interleaved ABBA, median ratio and its
min-max spread, CPU seconds, peak RSS, the load average before and after). Suites (``--suite``):

- ``help``: ``ddai --help`` and ``--help`` of every command and sub-command of the registry
  against ``python -c "import typer, rich"`` (target 1.5x);
- ``runs``: ``ddai runs`` on a small store (the committed fixture runs) against the same floor
  (target 2x);
- ``funnel``: over a ``--rollouts`` log (``bench_report``'s generator, one run, ``--n-agent`` per
  prompt) and its verl-shaped prompt set: ``curate bucket`` and ``curate focus`` (round 1) each
  against its bare DuckDB query in a fresh ``python`` (the same scores, join, order and zstd
  Parquet outputs as ``bench_funnel.py``'s floors; target 1.5x), and against DDAI's own script
  for the step (``ddai_pandas.py``: whole processes; ddai must be at least 10x faster: ratio
  <= 0.1);
- ``distill``: ``ddai distill --rewrite none`` over the same log against its floor
  (``bench_distill.floor`` with ``ddai distill``'s default rank, ``ddai``: one DuckDB selection
  query picking the same rollouts, the rebuild, a ``ParquetWriter``; target 2x), against DDAI's
  script at equal work (``ddai_pandas.py distill_export`` over the unified log with its tool
  events: the selection, every selected rollout's messages, a train1 Parquet; ddai at least 10x
  faster: ratio <= 0.1) and, without a target, against that script's selection alone
  (``ddai_pandas.py distill``: it selects and writes nothing; the comparison made before);
- ``report``: ``ddai report`` over the same log (target: under 3 s), next to a plain DuckDB scan
  (the untimed warm-up run keeps each part's turn facts, ``pipelines/store/turn_facts.py``: every timed
  run reads them, as every report after the first does);
- ``ingest``: native Parquet ingest of ``--rollouts`` rows (``bench_ingest.make_parquet``) against
  DuckDB's ``read_parquet`` → ``COPY`` (target 2x).

Every ddai command runs as the console script does (``python -m ddai.cli.app``), with bytecode
compiled once into a cache (``PYTHONPYCACHEPREFIX``) as an installed ddai has it.

    python bench/bench_commands.py                       # everything at 1,000,000 rollouts
    python bench/bench_commands.py --suite help,runs     # start-up only (about a minute)
    python bench/bench_commands.py --rollouts 100000 --rounds 3   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from process_ab import Pair, measure, table  # noqa: E402

PY = sys.executable
TYPER_RICH = [PY, "-c", "import typer, rich"]
RUN = "run0"
SUITES = ("help", "runs", "funnel", "distill", "report", "ingest")


def ddai(*args: str) -> list[str]:
    return [PY, "-m", "ddai.cli.app", *args]


def help_pairs() -> list[Pair]:
    from ddai.cli.app import COMMANDS, load_command

    paths: list[list[str]] = [[]]

    def walk(command, words: list[str]) -> None:  # type: ignore[no-untyped-def]
        paths.append(words)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*words, name])

    for name in COMMANDS:
        walk(load_command(name), [name])
    return [
        Pair(
            " ".join(["ddai", *p, "--help"]),
            ddai(*p, "--help"),
            "import typer, rich",
            TYPER_RICH,
            target=1.5,
        )
        for p in paths
    ]


def runs_pairs(work: Path, env: dict[str, str]) -> list[Pair]:
    logs = work / "fixture-logs"
    fixtures = sorted(str(p) for p in (ROOT / "fixtures/logs").glob("*.jsonl"))
    subprocess.run(ddai("ingest", *fixtures, "--logs", str(logs), "--no-progress"), check=True, capture_output=True, env=env)  # fmt: skip
    return [Pair("ddai runs", ddai("runs", "--logs", str(logs)), "import typer, rich", TYPER_RICH, target=2.0)]  # fmt: skip


def _floor_script(work: Path) -> Path:
    """A standalone script (duckdb alone) running one of bench_funnel's floors."""
    import bench_funnel as bf

    path = work / "floor.py"
    path.write_text(
        "import json, sys\nimport duckdb\n"
        f"FLOOR_BUCKET, BUCKET_RULES, FLOOR_FOCUS, COPY = {bf.FLOOR_BUCKET!r}, {bf.BUCKET_RULES!r}, "
        f"{bf.FLOOR_FOCUS!r}, {bf.COPY_OPTIONS!r}\n"
        "step, files, *args = sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:]\n"
        "con = duckdb.connect()\ncon.execute('SET enable_progress_bar = false')\n"
        "if step == 'bucket':\n"
        "    dataset, out = args\n"
        "    con.execute(FLOOR_BUCKET, {'files': files, 'dataset': dataset})\n"
        "    for name, rule in BUCKET_RULES.items():\n"
        '        con.execute(f"COPY (SELECT * EXCLUDE (_score, _pos) FROM scored WHERE {rule} "\n'
        "                    f\"ORDER BY _score DESC, _pos) TO '{out}/floor_bucket_{name}.parquet' {COPY}\")\n"
        "elif step == 'focus':\n"
        "    a, z, out = args\n"
        "    con.execute(f\"COPY ({FLOOR_FOCUS}) TO '{out}' {COPY}\", {'files': files, 'a': a, 'z': z})\n"
        "elif step == 'scan':\n"
        "    con.execute('SELECT uid, count(*), avg(reward), avg(ndcg) FROM read_parquet($f) GROUP BY uid', {'f': files}).fetchall()\n"
    )
    return path


def funnel_pairs(
    work: Path, rollouts: int, n_agent: int, env: dict[str, str], suites: set[str]
) -> list[Pair]:
    import pyarrow.parquet as pq
    from bench_funnel import make_dataset
    from bench_report import make_logs

    from ddai.pipelines import store

    logs, out, floor_out = work / "logs", work / "out", work / "floor"
    floor_out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    make_logs(logs, rollouts, 1, n_agent, 0)
    dataset = work / "dataset.parquet"
    make_dataset(dataset, max(1, rollouts // n_agent))
    files = json.dumps([str(f) for f in store.parquet_files(logs, [RUN])])
    floor = _floor_script(work)
    bucket = ddai("curate", "bucket", "--dataset", str(dataset), "--logs", str(logs), "--run", RUN, "--out-dir", str(out), "--force")  # fmt: skip
    subprocess.run(bucket, check=True, capture_output=True, env=env)  # focus reads its buckets
    a, z = out / "curriculum_bucket_a.parquet", out / "curriculum_bucket_0.parquet"
    focus = ddai("curate", "focus", "--bucket-a", str(a), "--bucket-0", str(z), "--logs", str(logs), "--run", RUN, "--out", str(out / "r1.parquet"), "--force")  # fmt: skip
    print(f"setup: {rollouts:,} rollouts ({time.perf_counter() - t0:.1f}s)", flush=True)
    pairs: list[Pair] = []
    if "funnel" in suites:
        # the floors write the same outputs: their sizes are checked against ddai's below
        subprocess.run([PY, str(floor), "bucket", files, str(dataset), str(floor_out)], check=True, env=env)  # fmt: skip
        for b in ("a", "0"):
            n_ddai = pq.read_metadata(out / f"curriculum_bucket_{b}.parquet").num_rows
            assert n_ddai == pq.read_metadata(floor_out / f"floor_bucket_{b}.parquet").num_rows, b
        pairs += [
            Pair(
                "curate bucket",
                bucket,
                "DuckDB query",
                [PY, str(floor), "bucket", files, str(dataset), str(floor_out)],
                target=1.5,
            ),
            Pair(
                "curate focus",
                focus,
                "DuckDB query",
                [PY, str(floor), "focus", files, str(a), str(z), str(floor_out / "r1.parquet")],
                target=1.5,
            ),
        ]
        from ddai_pandas import write_inputs

        (work / "ddai").mkdir(exist_ok=True)
        raw = write_inputs(json.loads(files), work / "ddai", what=("phase1", "flash_rm_detail"))
        script = str(HERE / "ddai_pandas.py")
        pairs += [
            Pair(
                "curate bucket vs DDAI",
                bucket,
                "DDAI's bucket script",
                [PY, script, "bucket", str(raw["phase1"]), str(dataset), str(work / "ddai-out")],
                target=0.1,
            ),
            Pair(
                "curate focus vs DDAI",
                focus,
                "DDAI's focus script",
                [
                    PY,
                    script,
                    "focus",
                    str(raw["flash_rm_detail"]),
                    str(a),
                    str(z),
                    str(work / "ddai-r1.parquet"),
                    "0.2",
                ],
                target=0.1,
            ),
        ]
        (work / "ddai-out").mkdir(exist_ok=True)
    if "distill" in suites:
        from ddai_pandas import write_inputs

        sft = work / "sft.parquet"
        distill = ddai("distill", "--logs", str(logs), "--run", RUN, "--out", str(sft), "--rewrite", "none", "--force", "--no-progress")  # fmt: skip
        floor_distill = [PY, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_distill; bench_distill.floor(*sys.argv[1:])", str(logs), str(work / "floor-sft.parquet"), "ddai"]  # fmt: skip
        (work / "ddai").mkdir(exist_ok=True)
        events = str(write_inputs(json.loads(files), work / "ddai", what=("unified_events",))["unified_events"])  # fmt: skip
        script = [PY, str(HERE / "ddai_pandas.py")]
        export = [*script, "distill_export", events, str(work / "ddai-train1.parquet")]
        pairs += [
            Pair(
                "distill --rewrite none",
                distill,
                "DuckDB + rebuild + write",
                floor_distill,
                target=2.0,
            ),
            # equal work: DDAI's script selects, builds every selected rollout's messages and
            # writes them (--export-train1-parquet), as ddai distill does
            Pair(
                "distill vs DDAI (equal work)", distill, "DDAI's export script", export, target=0.1
            ),
            # the earlier comparison, kept beside it: DDAI's selection alone (writes nothing)
            Pair(
                "distill vs DDAI's selection only",
                distill,
                "DDAI's selection alone",
                [*script, "distill", events],
            ),
        ]
    if "report" in suites:
        report = ddai("report", "--logs", str(logs), "--out", str(work / "report.html"))
        pairs.append(
            Pair("report", report, "DuckDB scan", [PY, str(floor), "scan", files], limit_s=3.0)
        )
    return pairs


def ingest_pairs(work: Path, rollouts: int) -> list[Pair]:
    from bench_ingest import make_parquet

    src = work / "native.parquet"
    make_parquet(src, rollouts, work)
    logs, copy = work / "ingest-logs", work / "duck-copy.parquet"

    def clean() -> None:
        shutil.rmtree(logs, ignore_errors=True)
        copy.unlink(missing_ok=True)

    duck = f"import duckdb; duckdb.sql(\"COPY (SELECT * FROM read_parquet('{src}')) TO '{copy}' (FORMAT parquet)\")"
    ingest = ddai("ingest", str(src), "--logs", str(logs), "--run-id", "bench", "--no-progress")
    return [Pair("ingest (native Parquet)", ingest, "DuckDB COPY", [PY, "-c", duck], target=2.0, before=clean)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--suite", default=",".join(SUITES), help=f"comma-separated, of {', '.join(SUITES)}"
    )
    ap.add_argument(
        "--rollouts",
        type=int,
        default=1_000_000,
        help="rollouts of the funnel/report/ingest suites",
    )
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved pairs per command")
    args = ap.parse_args()
    suites = set(args.suite.split(","))
    if unknown := suites - set(SUITES):
        ap.error(f"unknown suite(s) {', '.join(sorted(unknown))}; known: {', '.join(SUITES)}")
    with tempfile.TemporaryDirectory(prefix="ddai-bench-commands-") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        env["DDAI_HOME"] = str(work / "home")  # the workspace (spills, kept turn facts) goes too
        pairs: list[Pair] = []
        if "help" in suites:
            pairs += help_pairs()
        if "runs" in suites:
            pairs += runs_pairs(work, env)
        if suites & {"funnel", "distill", "report"}:
            pairs += funnel_pairs(work, args.rollouts, args.n_agent, env, suites)
        if "ingest" in suites:
            pairs += ingest_pairs(work, args.rollouts)
        load = measure(pairs, args.rounds, env=env, cwd=ROOT)
        print(table(pairs, load))
        for p in pairs:  # the table's MiB is the command's; DDAI's scripts hold their logs whole
            if "DDAI" in p.floor_name:
                cpu = statistics.median(r.cpu for r in p.floor_runs)
                peak = max(r.peak_mib for r in p.floor_runs)
                print(f"{p.floor_name}: {cpu:.2f} CPU s, peak {peak:,.0f} MiB")
        if "distill" in suites:
            import pyarrow.parquet as pq

            rows = {n: pq.read_metadata(work / n).num_rows for n in ("sft.parquet", "ddai-train1.parquet")}  # fmt: skip
            print(f"rows written: ddai distill {rows['sft.parquet']:,}, DDAI's export {rows['ddai-train1.parquet']:,}")  # fmt: skip
        if suites - {"help", "runs"}:
            print(f"({args.rollouts:,} rollouts, {args.n_agent} per prompt)")


if __name__ == "__main__":
    main()
