"""``curate bucket`` and ``curate focus`` run in DuckDB alone: a whole command, in a fresh process,
loads no pandas, pyarrow, numpy or polars (pyarrow's first conversions import pandas: about 0.5
CPU s of the command at 1M rollouts, bench/README.md "Whole commands")."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
from conftest import FIXTURES

from ddai.pipelines.ingest import IngestConfig, ingest

HEAVY = ("pandas", "pyarrow", "numpy", "polars")
# The command as the console script runs it, then what it left in sys.modules.
PROBE = (
    "import json, sys\n"
    "from ddai.cli.app import main\n"
    "sys.argv = ['ddai', *json.loads(sys.argv[1])]\n"
    "try:\n    main()\n    rc = 0\nexcept SystemExit as e:\n    rc = e.code or 0\n"
    f"print('\\nMODULES ' + json.dumps([rc, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
)


def _run(*args: str) -> list[str]:
    p = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))], capture_output=True, text=True
    )
    rc, loaded = json.loads(p.stdout.rsplit("MODULES ", 1)[1])
    assert rc == 0, p.stdout + p.stderr
    return loaded


def test_bucket_and_focus_load_no_arrow_numpy_or_pandas(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    ingest(IngestConfig([FIXTURES / "logs" / "phase1.jsonl"], logs, progress=False))
    bucket = ["curate", "bucket", "--dataset", str(FIXTURES / "dataset.parquet")]
    bucket += ["--logs", str(logs), "--run", "phase1", "--out-dir", str(out)]
    assert _run(*bucket) == []
    a, zero = out / "curriculum_bucket_a.parquet", out / "curriculum_bucket_0.parquet"
    focus = ["curate", "focus", "--bucket-a", str(a), "--bucket-0", str(zero)]
    assert (
        _run(*focus, "--logs", str(logs), "--run", "phase1", "--out", str(out / "r1.parquet")) == []
    )
    # the commands did their work (rows written), not an early exit
    assert pq.read_metadata(a).num_rows > 0
    assert pq.read_metadata(out / "r1.parquet").num_rows >= pq.read_metadata(zero).num_rows
