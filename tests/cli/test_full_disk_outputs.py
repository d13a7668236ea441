"""A disk that fills up while a paid step writes its outputs: one clear error naming where it was
writing (exit 1), not a pyarrow traceback, and nothing left there."""

from __future__ import annotations

import errno

import pyarrow.parquet as pq
import pytest
from support.funnel_data import write_dataset
from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()


def _full(*_a, **_kw):
    raise OSError(errno.ENOSPC, "Error writing bytes to file. No space left on device")


def _vet(tmp_path, shared):
    src = tmp_path / "sft.parquet"
    pq.write_table(pq.read_table(shared / "ddai-data" / "train1.parquet").slice(0, 2), src)
    out = tmp_path / "out" / "kept.parquet"
    return ["distill", "vet", str(src), "--out", str(out), "--vetter", "local"], out.parent


def _verify(tmp_path, shared):
    ds = write_dataset(tmp_path / "set.parquet", ["train_1", "train_2"])
    (tmp_path / "d.csv").write_text("uid,verdict,reason\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["curate", "verify-gt", "--dataset", str(ds), "--decisions", str(tmp_path / "d.csv")]
    return [*args, "--out-dir", str(out)], out


@pytest.mark.parametrize("command", [_vet, _verify], ids=["distill-vet", "verify-gt"])
def test_a_full_disk_under_the_outputs_is_one_clear_error(command, tmp_path, monkeypatch, shared):
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    args, out = command(tmp_path, shared)
    monkeypatch.setattr(pq, "write_table", _full)
    res = runner.invoke(app, [*args, "--no-progress"])
    assert res.exit_code == 1, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)  # no traceback
    assert "No space left on device" in res.output and str(out) in res.output, res.output
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]


@pytest.mark.parametrize("suffix", [".safetensors", ".parquet"])
@pytest.mark.parametrize("embedder", ["world", "hash"])
def test_pointer_embed_on_a_full_disk_is_one_clear_error(suffix, embedder, tmp_path, monkeypatch):
    import safetensors.numpy
    from safetensors import SafetensorError

    from ddai.pipelines.pointer.world import WorldConfig, make_world, write_world

    def full_st(*_a, **_kw):  # what safetensors raises when the disk fills up under it
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    write_world(make_world(WorldConfig(seed=1, n_queries=6, n_demos=12)), tmp_path / "w")
    out = tmp_path / "out" / f"store{suffix}"
    monkeypatch.setattr(pq, "write_table", _full)
    monkeypatch.setattr(safetensors.numpy, "save_file", full_st)
    args = ["pointer", "embed", str(tmp_path / "w"), "--out", str(out), "--k", "4"]
    res = runner.invoke(app, [*args, "--embedder", embedder, "--no-progress"])
    assert res.exit_code == 1, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)  # no traceback
    text = " ".join(res.output.split())
    assert "No space left on device" in text and str(out) in text, text
    assert "no store was committed" in text, text
    assert ("cached calls are not paid again" in text) == (embedder == "hash"), text
    assert not [p for p in out.parent.rglob("*") if p.is_file() and not p.name.startswith(".")]


@pytest.mark.parametrize(
    ("rewrite", "split", "unwritten"),
    [
        ("none", [], "neither it nor its report was committed"),
        ("think-only", ["--val-ratio", "0.25"], "none of it, its report and its validation file"),
    ],
)
def test_distill_on_a_full_disk_names_its_output(rewrite, split, unwritten, tmp_path, monkeypatch):
    from conftest import FIXTURES

    from ddai.pipelines.ingest import IngestConfig, ingest

    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    logs = tmp_path / "logs"
    ingest(IngestConfig([FIXTURES / "logs" / "focused_r1.jsonl"], logs, progress=False))
    out = tmp_path / "out" / "sft.parquet"

    class FullWriter:  # the rows written (spilled or to the SFT file) hit a full disk
        def __init__(self, *_a, **_kw):
            pass

        write_table = close = _full

    monkeypatch.setattr(pq, "ParquetWriter", FullWriter)
    args = ["distill", "--logs", str(logs), "--run", "focused_r1", "--out", str(out)]
    res = runner.invoke(app, [*args, "--rewrite", rewrite, *split, "--no-progress"])
    assert res.exit_code == 1, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)  # no traceback
    text = " ".join(res.output.split())
    assert "No space left on device" in text and str(out) in text, text
    assert unwritten in text, text
    assert ("cached calls are not paid again" in text) == (rewrite != "none"), text
    assert not [p for p in out.parent.rglob("*") if p.is_file() and not p.name.startswith(".")]


@pytest.mark.parametrize("step", ["check", "check-out", "convert"])
def test_distill_check_and_convert_on_a_full_disk_name_their_output(step, tmp_path, shared):
    """distill check writes its report, then --out; convert its one file: each names the file it
    was writing when the disk filled up (it said only pyarrow's '[Errno 28] Error writing ...')."""
    from unittest import mock

    src = tmp_path / "sft.parquet"
    pq.write_table(pq.read_table(shared / "ddai-data" / "train1.parquet").slice(0, 2), src)
    out, report = tmp_path / "out" / "x.parquet", tmp_path / "out" / "check.jsonl"
    args = {
        "check": ["check", str(src), "--report", str(report)],
        "check-out": ["check", str(src), "--report", str(report), "--out", str(out)],
        "convert": ["convert", str(src), "--to", "messages", "--out", str(out)],
    }[step]
    named = report if step == "check" else out
    patch = "write_report" if step == "check" else "formats.write"
    target = f"ddai.pipelines.distill.check.{patch}"
    with mock.patch(target, side_effect=_full):
        res = runner.invoke(app, ["distill", *args])
    assert res.exit_code == 1, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)  # no traceback
    text = " ".join(res.output.split())
    assert "No space left on device" in text and str(named) in text, text
    assert "fix the cause and rerun" in text
