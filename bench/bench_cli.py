"""Benchmark: CLI start time, ``ddai --help`` and ``ddai runs`` vs a bare Typer + rich import.

Each command runs ``--repeat`` times in a fresh interpreter, interleaved (one of each per round, so
machine load hits all alike); the median wall time of each is printed with its ratio to
``python -c "import typer, rich"`` measured in the same command (the floor any Typer + rich CLI
pays), next to ``python -c pass`` (the interpreter alone) and ``import typer, rich, duckdb`` (the
floor of a command that reads the store with DuckDB). ``ddai runs`` reads a small log store made
once from the committed fixtures, three ways: right after a commit (an untimed ``ddai ingest
--append`` of one new rollout into a run just before each timed listing: the ingest keeps the
run's row), with nothing changed since the last listing, and cold (every kept row removed before
each listing, so DuckDB computes them all). ``ddai query`` runs one group-by on it. The module
count of each (``sys.modules`` at exit) says what was imported.

Every interpreter reads its compiled bytecode from one cache made by an untimed first round
(``PYTHONPYCACHEPREFIX``; ``PYTHONDONTWRITEBYTECODE`` is dropped for the children), as an
installed ddai does: without it an environment that forbids writing bytecode compiles ddai's own
modules from source on every start (~20 ms) while Typer and rich load theirs compiled.

    python bench/bench_cli.py
    python bench/bench_cli.py --repeat 21
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

from ddai.pipelines.store import run_stats

ROOT = Path(__file__).resolve().parent.parent
GROUP_BY = "SELECT uid, avg(ndcg) AS ndcg FROM rollouts GROUP BY uid"
COUNT = "import atexit, sys; atexit.register(lambda: print('MODULES', len(sys.modules), file=sys.stderr)); "


def _ddai(*args: str) -> list[str]:
    # The console script is ``ddai.cli.app:main``; running it through ``-c`` lets us count modules.
    code = (
        f"import sys; sys.argv = ['ddai', *{list(args)!r}]; from ddai.cli.app import main; main()"
    )
    return [sys.executable, "-c", COUNT + code]


def _time(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed ({p.returncode}):\n{p.stderr}")
    mods = [int(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("MODULES")]
    return dt, mods[-1] if mods else -1


def _commit_one(logs: Path, n: int, env: dict[str, str]) -> None:
    """Append one new rollout (prompt ``bench_<n>``) to the run ``curriculum`` with ``ddai
    ingest --append``, untimed: what a training loop does every step."""
    row = json.loads((ROOT / "fixtures/logs/curriculum.jsonl").read_text().splitlines()[0])
    src = logs.parent / f"append-{n}.jsonl"
    src.write_text(json.dumps({**row, "uid": f"bench_{n}", "rollout_idx": 0}) + "\n")
    subprocess.run(
        [sys.executable, "-m", "ddai.cli.app", "ingest", str(src), "--logs", str(logs), "--append",
         "--no-progress"],
        check=True, capture_output=True, cwd=ROOT, env=env,
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=11, help="runs of each command (median kept)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddai-bench-cli-") as tmp:
        logs = Path(tmp) / "logs"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        subprocess.run(
            [sys.executable, "-m", "ddai.cli.app", "ingest", *map(str, sorted((ROOT / "fixtures/logs").glob("*.jsonl"))),
             "--logs", str(logs), "--no-progress"],
            check=True, capture_output=True, cwd=ROOT, env=env,
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
            # right after `ddai ingest --append` committed to a run (the ingest kept its row) ...
            "ddai runs (after a commit)": _ddai("runs", "--logs", str(logs)),
            # ... nothing changed since the last listing ...
            "ddai runs": _ddai("runs", "--logs", str(logs)),
            # ... and cold: every kept row removed, so DuckDB computes them all
            "ddai runs (cold)": _ddai("runs", "--logs", str(logs)),
            "ddai query (group-by)": _ddai(
                "query", GROUP_BY, "--logs", str(logs), "--format", "csv"
            ),
        }
        times: dict[str, list[float]] = {k: [] for k in cmds}
        modules: dict[str, int] = {}
        for n in range(args.repeat + 1):  # round 0 fills the bytecode cache: not counted
            for name, cmd in cmds.items():
                if name == "ddai runs (after a commit)":
                    _commit_one(logs, n, env)
                if name == "ddai runs (cold)":
                    shutil.rmtree(logs / run_stats.STATS_DIR, ignore_errors=True)
                dt, mods = _time(cmd, env)
                if n:
                    times[name].append(dt)
                    modules[name] = mods
    floor = statistics.median(times["import typer, rich"])
    print(f"{'command':<28} {'median s':>9} {'ratio to typer+rich':>20} {'modules':>8}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<28} {med:>9.3f} {med / floor:>20.2f} {modules[name]:>8}")
    print(f"(median of {args.repeat} fresh interpreters each, interleaved; must show: "
          "ddai --help and ddai runs <= 2.0 x import typer, rich)")  # fmt: skip


if __name__ == "__main__":
    main()
