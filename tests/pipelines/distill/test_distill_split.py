"""DDAI's train1 build as distill options: ``--max-system-errors N`` and the seeded train/val
split (``build_train1_sft_dataset.py``), checked against DDAI's published train1/val1."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_distill_stream import RUN, _rows, stored

from ddai.pipelines.distill import DistillConfig, findings, formats, run_distill
from ddai.pipelines.distill.safety import TOO_MANY_SYSTEM_ERRORS
from ddai.pipelines.distill.stream import Split


def ddai_val(n: int, ratio: float, seed: int) -> list[int]:
    """The val indices as DDAI's script draws them: the module's random, seeded, shuffling."""
    idxs = list(range(n))
    random.seed(int(seed))
    random.shuffle(idxs)
    v = round(n * ratio)
    v = max(1, v) if n > 1 else 0
    return sorted(idxs[:v])


@pytest.mark.parametrize(("n", "ratio", "seed"), [(0, 0.1, 42), (1, 0.1, 42), (2, 0.1, 42),
                                                  (10, 0.1, 42), (3581, 0.1, 42), (97, 0.3, 7)])  # fmt: skip
def test_split_draws_ddai_s_rows(n, ratio, seed):
    mask = Split(ratio, seed).val_mask(n)
    assert [i for i in range(n) if mask[i]] == ddai_val(n, ratio, seed)


@pytest.fixture
def ddai_sets(shared) -> tuple[pa.Table, pa.Table]:
    d = shared / "ddai-data"
    return pq.read_table(d / "train1.parquet"), pq.read_table(d / "val1.parquet")


def test_ddai_train1_and_val1_hold_what_the_options_make(ddai_sets):
    """train1/val1 (3,555 / 26): disjoint, at most one system-error observation per row (the
    script's default cap), some with exactly one; re-split at 26/3,581 they part the same sizes."""
    train, val = ddai_sets
    assert (train.num_rows, val.num_rows) == (3555, 26)
    assert not set(train["uid"].to_pylist()) & set(val["uid"].to_pylist())
    errors = [
        findings.inspect(json.loads(m)).error_observations
        for m in [*train["messages"].to_pylist(), *val["messages"].to_pylist()]
    ]
    assert max(errors) == 1 and errors.count(1) > 0
    n = train.num_rows + val.num_rows
    mask = Split(26 / n, 42).val_mask(n)
    assert sum(mask) == 26


@pytest.fixture
def logs(tmp_path) -> Path:
    return stored(tmp_path, _rows())


def cfg(logs: Path, out: Path, **kw) -> DistillConfig:
    return DistillConfig(
        logs=logs, runs=[RUN], out=out, progress=False, rewrite="none", top_k=8, **kw
    )


def test_max_system_errors_drops_rows_over_the_cap(logs, tmp_path):
    s = run_distill(cfg(logs, tmp_path / "a.parquet", max_system_errors=0))
    assert s["dropped"][TOO_MANY_SYSTEM_ERRORS] == 1 and s["samples written"] == 3
    report = [
        json.loads(x) for x in Path(f"{tmp_path}/a.parquet.report.jsonl").read_text().splitlines()
    ]
    (row,) = [r for r in report if r["rule"] == TOO_MANY_SYSTEM_ERRORS]
    assert row["uid"] == "train_2__s11__abcdef12" and row["action"] == "drop"
    s = run_distill(cfg(logs, tmp_path / "b.parquet", max_system_errors=1))
    assert TOO_MANY_SYSTEM_ERRORS not in s["dropped"] and s["samples written"] == 4


def test_split_writes_train_and_val_that_make_the_whole(logs, tmp_path):
    whole = tmp_path / "whole.parquet"
    run_distill(cfg(logs, whole))
    out, val = tmp_path / "train1.parquet", tmp_path / "val1.parquet"
    s = run_distill(cfg(logs, out, val_ratio=0.5, seed=3, val_out=val))
    assert s["split"] == {"train": 2, "val": 2, "val output": str(val), "seed": 3}
    all_rows = pq.read_table(whole)
    mask = ddai_val(4, 0.5, 3)
    assert pq.read_table(val).equals(all_rows.take(mask))
    assert pq.read_table(out).equals(all_rows.take([i for i in range(4) if i not in mask]))
    assert formats.read(val)[1] == "train1"
    man = json.loads(Path(f"{out}.manifest.json").read_text())
    assert man["rows"]["out"] == 2 and man["rows"]["dropped"]["val_split"] == 2
    assert man["rows"]["in"] == man["rows"]["out"] + sum(man["rows"]["dropped"].values())
    vman = json.loads(Path(f"{val}.manifest.json").read_text())
    assert vman["rows"]["out"] == 2 and vman["step_id"] == man["step_id"]


def test_split_options_refuse_bad_input(logs, tmp_path):
    with pytest.raises(ValueError, match="--val-ratio"):
        cfg(logs, tmp_path / "o.parquet", val_ratio=1.0)
    with pytest.raises(ValueError, match="--val-out"):
        cfg(logs, tmp_path / "o.parquet", val_out=tmp_path / "v.parquet")
    with pytest.raises(ValueError, match="in its folder"):
        cfg(logs, tmp_path / "o.parquet", val_ratio=0.1, val_out=tmp_path / "x" / "v.parquet")
    with pytest.raises(ValueError, match="--max-system-errors"):
        cfg(logs, tmp_path / "o.parquet", max_system_errors=-1)
    assert cfg(logs, tmp_path / "o.parquet", val_ratio=0.1).val_out == tmp_path / "o.val.parquet"


def test_a_rewrite_without_the_split_removes_the_previous_val_file(logs, tmp_path):
    """The previous write's validation file goes when a rewrite of --out does not split (its rows
    are now in the SFT file: left beside it, validation would be on training data) or splits
    into another file; a file of that name that distill did not write stays."""
    out, val = tmp_path / "train1.parquet", tmp_path / "val1.parquet"
    run_distill(cfg(logs, out, val_ratio=0.5, seed=3, val_out=val))
    assert val.exists()
    s = run_distill(cfg(logs, out))
    assert pq.read_table(out).num_rows == 4
    assert not val.exists() and not Path(f"{val}.manifest.json").exists()
    assert s["removed"].startswith(str(val))
    other = tmp_path / "val2.parquet"
    run_distill(cfg(logs, out, val_ratio=0.5, seed=3, val_out=val))
    s = run_distill(cfg(logs, out, val_ratio=0.5, seed=3, val_out=other))
    assert other.exists() and not val.exists() and s["removed"].startswith(str(val))
    s = run_distill(cfg(logs, out, val_ratio=0.5, seed=3, val_out=other))  # unchanged: skipped
    assert other.exists() and "removed" not in s
    mine = tmp_path / "mine.parquet"
    run_distill(cfg(logs, out, val_ratio=0.5, seed=3, val_out=mine))
    Path(f"{mine}.manifest.json").unlink()  # now a file distill cannot claim
    s = run_distill(cfg(logs, out))
    assert mine.exists() and "removed" not in s
