"""Run every ``bench/bench_*.py`` in turn (``make bench``); extra arguments go to each script.

Each benchmark prints its own table of ratios against a baseline measured in the same command.
``--only NAME`` runs the scripts whose name contains NAME.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="", help="run only scripts whose file name contains this")
    args, rest = ap.parse_known_args()
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        if args.only not in script.name:
            continue
        print(f"\n=== {script.name} ===", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(script), *rest])
        print(f"--- {script.name}: exit {rc}, {time.perf_counter() - t0:.1f}s", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
