"""A batch read in columns is routed without a Python object per row: ``duplicate_key`` flags
built from buffers (the same lists as for single rows), and a native Parquet ingest that never
imports pandas (pyarrow imports it on its first conversion of a Python value: 0.3 CPU s)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ddai.pipelines.ingest import _with_duplicate_key
from ddai.pipelines.records.row_checks import DUPLICATE_KEY
from ddai.pipelines.records.schema import ROLLOUT_SCHEMA

FLAGS = pa.list_(pa.string())


def _reference(flags: list, rows: list[int]) -> list:
    out = list(flags)
    for i in rows:
        out[i] = sorted({*(out[i] or ()), DUPLICATE_KEY})
    return out


@pytest.mark.parametrize(
    "flags, rows",
    [
        ([None] * 7, [1, 2, 6]),  # a columnar reader's rows: built from buffers
        ([None] * 3, [0, 1, 2]),
        ([None, ["turns_incomplete"], None, ["z", "a"]], [0, 1, 3]),  # flags already set
    ],
)
def test_duplicate_key_flags_as_for_single_rows(flags, rows):
    col = pa.chunked_array([pa.array(flags, FLAGS)])
    got = _with_duplicate_key(col, rows)
    assert got.type == FLAGS and got.validate(full=True) is None
    assert got.to_pylist() == _reference(flags, rows)


def test_native_parquet_ingest_imports_no_pandas(tmp_path):
    """Two runs in one batch (split by run), an exact repeat (quarantined) and a same-key row of
    other content (flagged): the whole ingest runs without pandas."""
    src, logs = tmp_path / "in.parquet", tmp_path / "logs"
    rows = [
        dict(run_id=f"r{i % 2}", step=1, uid=f"u{i}", rollout_idx=0, turns=[], reward=float(i))
        for i in range(6)
    ]
    rows += [dict(rows[2]), {**rows[3], "reward": 9.0}]
    pq.write_table(pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA), src)
    code = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from ddai.pipelines.ingest import IngestConfig, ingest
        res = ingest(IngestConfig([Path({str(src)!r})], Path({str(logs)!r}), progress=False))
        print(json.dumps([sorted(res.runs), res.rows_in, res.rollouts_out,
                          dict(res.quarantined), dict(res.flagged), "pandas" in sys.modules]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    runs, rows_in, kept, quarantined, flagged, pandas = json.loads(out.stdout.splitlines()[-1])
    assert runs == ["r0", "r1"] and rows_in == 8 and kept == 7
    assert quarantined == {"duplicate rollout": 1} and flagged == {"duplicate_key": 1}
    assert pandas is False
