"""Peak memory of an ingest whose rows are all bad: quarantine streams to disk.

Writes a JSONL file of ``--lines`` bad lines (default 600,000: half malformed JSON that names no
run, so they wait for the source's run; half rows of run ``bench`` with a wrong type), ingests it
in a child process and reports that child's peak RSS against ``--limit-mb`` (default 400). The
baseline is the same child importing ddai and ingesting one good line, so the table shows what
the bad lines add. Exit 1 when the peak is over the limit. Not a timed test: memory only.

    python bench/bench_quarantine.py [--lines 600000] [--limit-mb 400]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import resource, sys
from pathlib import Path
from ddai.pipelines.ingest import IngestConfig, ingest
res = ingest(IngestConfig([Path(sys.argv[1])], Path(sys.argv[2]), progress=False))
print(sum(res.quarantined.values()), res.rollouts_out)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def write_bad(path: Path, lines: int) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(lines):
            if i % 2:
                # malformed (unterminated string): names no run
                fh.write(f'{{"uid": "u{i}", "rollout_idx": 0, "response": "{"x" * 200}\n')
            else:
                row = {"run_id": "bench", "uid": f"u{i}", "rollout_idx": "zero", "x": "y" * 200}
                fh.write(json.dumps(row) + "\n")


def peak_mb(src: Path, logs: Path) -> tuple[float, str]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(src), str(logs)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[-1]) / 1024, f"{out[0]} quarantined, {out[1]} rollouts"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=600_000)
    ap.add_argument("--limit-mb", type=float, default=400.0)
    args, _ = ap.parse_known_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        good = root / "good.jsonl"
        good.write_text(json.dumps({"run_id": "bench", "uid": "u", "rollout_idx": 0}) + "\n")
        base, _ = peak_mb(good, root / "logs0")
        bad = root / "bad.jsonl"
        write_bad(bad, args.lines)
        size = bad.stat().st_size / 2**20
        peak, what = peak_mb(bad, root / "logs1")
        parts = (root / "logs1" / "_quarantine" / "bench").glob("part-*.jsonl")
        qsize = sum(p.stat().st_size for p in parts) / 2**20
    print(f"{'case':<32}{'peak RSS MB':>12}{'ratio':>8}")
    print(f"{'1 good line (baseline)':<32}{base:>12.0f}{1:>8.2f}")
    print(f"{f'{args.lines:,} bad lines ({size:.0f} MB)':<32}{peak:>12.0f}{peak / base:>8.2f}")
    print(f"{what}; quarantine file {qsize:.0f} MB; limit {args.limit_mb:.0f} MB")
    if peak > args.limit_mb:
        print(f"FAIL: peak RSS {peak:.0f} MB over {args.limit_mb:.0f} MB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
