"""Benchmark: CLI start time, ``ddai --help`` and ``ddai runs`` vs a bare Typer + rich import.

Each command runs ``--repeat`` times in a fresh interpreter, interleaved (one of each per round, so
machine load hits all alike); the median wall time of each is printed with its ratio to
``python -c "import typer, rich"`` measured in the same command (the floor any Typer + rich CLI
pays), next to ``python -c pass`` (the interpreter alone) and ``import typer, rich, duckdb`` (the
floor of a command that reads the store with DuckDB). ``ddai runs`` reads a small log store made
once from the committed fixtures: once with every run changed since the last listing (its kept
rows removed before each round, so DuckDB computes them), once with none changed. ``ddai query``
runs one group-by on it. The module count of each (``sys.modules`` at exit) says what was
imported.

    python bench/bench_cli.py
    python bench/bench_cli.py --repeat 21
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddai.pipelines import run_stats

ROOT = Path(__file__).resolve().parent.parent
GROUP_BY = "SELECT uid, avg(ndcg) AS ndcg FROM rollouts GROUP BY uid"
COUNT = "import atexit, sys; atexit.register(lambda: print('MODULES', len(sys.modules), file=sys.stderr)); "


def _ddai(*args: str) -> list[str]:
    # The console script is ``ddai.cli.app:main``; running it through ``-c`` lets us count modules.
    code = (
        f"import sys; sys.argv = ['ddai', *{list(args)!r}]; from ddai.cli.app import main; main()"
    )
    return [sys.executable, "-c", COUNT + code]


def _time(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed ({p.returncode}):\n{p.stderr}")
    mods = [int(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("MODULES")]
    return dt, mods[-1] if mods else -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=11, help="runs of each command (median kept)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddai-bench-cli-") as tmp:
        logs = Path(tmp) / "logs"
        subprocess.run(
            [sys.executable, "-m", "ddai.cli.app", "ingest", *map(str, sorted((ROOT / "fixtures/logs").glob("*.jsonl"))),
             "--logs", str(logs), "--no-progress"],
            check=True, capture_output=True, cwd=ROOT,
        )  # fmt: skip
        cmds = {
            "python -c pass": [sys.executable, "-c", COUNT + "pass"],
            "import typer, rich": [sys.executable, "-c", COUNT + "import typer, rich"],
            # what a command that reads the store with DuckDB cannot start under
            "import typer, rich, duckdb": [
                sys.executable,
                "-c",
                COUNT + "import typer, rich, duckdb",
            ],
            "ddai --help": _ddai("--help"),
            # every run changed since the last listing (its rows computed by DuckDB) ...
            "ddai runs (runs changed)": _ddai("runs", "--logs", str(logs)),
            # ... and none (the rows kept by manifest version: no DuckDB)
            "ddai runs": _ddai("runs", "--logs", str(logs)),
            "ddai query (group-by)": _ddai(
                "query", GROUP_BY, "--logs", str(logs), "--format", "csv"
            ),
        }
        times: dict[str, list[float]] = {k: [] for k in cmds}
        modules: dict[str, int] = {}
        for _ in range(args.repeat):
            for name, cmd in cmds.items():
                if name == "ddai runs (runs changed)":
                    shutil.rmtree(logs / run_stats.STATS_DIR, ignore_errors=True)
                dt, n = _time(cmd)
                times[name].append(dt)
                modules[name] = n
    floor = statistics.median(times["import typer, rich"])
    print(f"{'command':<28} {'median s':>9} {'ratio to typer+rich':>20} {'modules':>8}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<28} {med:>9.3f} {med / floor:>20.2f} {modules[name]:>8}")
    print(f"(median of {args.repeat} fresh interpreters each, interleaved; must show: "
          "ddai --help <= 2.0 x import typer, rich)")  # fmt: skip


if __name__ == "__main__":
    main()
