"""``ddai ingest`` over DDAI's formats: per-file format in the summary, --input-format overrides."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import SHARED
from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = SHARED / "ddai-formats" / "examples"
UNIFIED = ROOT / "fixtures" / "unified" / "curriculum" / "unified_trajectory.jsonl"


def test_summary_names_each_file_format(tmp_path):
    flash = EXAMPLES / "flash_rm_detail.jsonl"
    args = ["ingest", str(UNIFIED), str(flash), "--logs", str(tmp_path), "--no-progress"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert f"file 1 ddai-unified: {UNIFIED}" in out and f"file 2 ddai-flash: {flash}" in out
    assert "file 1 notes" in out and "events read" in out  # the unified reader's notes
    res = runner.invoke(app, [*args, "--json"])
    data = json.loads(res.output)
    assert data["formats"] == {str(UNIFIED): "ddai-unified", str(flash): "ddai-flash"}
    assert data["rows_in"] == data["rollouts_out"] + data["quarantined"] == 72 + 3
    assert data["side_tables"]["frozen.response"] == 72


def test_format_flag_overrides_detection_and_refusals_exit_2(tmp_path):
    # a verl-shaped line read as DDAI's legacy flash file: every row lacks uid → quarantined
    src = tmp_path / "3.jsonl"
    src.write_text(json.dumps({"input": "p", "output": "o", "score": 1.0, "step": 3}) + "\n")
    res = runner.invoke(
        app,
        [
            "ingest",
            str(src),
            "--logs",
            str(tmp_path / "a"),
            "--input-format",
            "ddai-flash",
            "--json",
        ],
    )
    assert res.exit_code == 1 and json.loads(res.output)["quarantined_by_reason"] == {
        "missing required key": 1
    }
    res = runner.invoke(app, ["ingest", str(src), "--logs", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["formats"] == {str(src): "verl"}
    sft = EXAMPLES / "train1_rows.jsonl"
    res = runner.invoke(app, ["ingest", str(sft), "--logs", str(tmp_path / "c")])
    assert res.exit_code == 2 and "a training set, not a rollout log" in " ".join(
        res.output.split()
    )
    res = runner.invoke(app, ["ingest", str(src), "--input-format", "nope"])
    assert res.exit_code == 2 and "ddai-unified" in res.output


def test_ingest_verl_ids_flags_need_a_verl_dump(tmp_path):
    from typer.testing import CliRunner

    from ddai.cli.app import app

    src = tmp_path / "rows.jsonl"
    src.write_text('{"run_id": "r", "uid": "u", "rollout_idx": 0}\n')
    res = CliRunner().invoke(
        app, ["ingest", str(src), "--logs", str(tmp_path / "logs"), "--uid-field", "index"]
    )
    assert res.exit_code == 2
    assert "verl" in res.output and "--uid-field" in res.output
    assert not (tmp_path / "logs").exists()


def test_parquet_files_that_are_not_rollouts_are_named(tmp_path):
    # DDAI's SFT sets, prompt sets and score tables as Parquet were "format not recognised"
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = {
        "train1.parquet": (
            {"uid": ["u"], "format_version": ["v1"], "messages": ["[]"]},
            "DDAI SFT rows (uid, format_version, messages): a training set, not a rollout log",
        ),
        "set.parquet": (
            {"id": ["train_1"], "prompt": [[{"role": "user", "content": "q"}]], "x": [1]},
            "a prompt set (verl RL dataset: id, prompt, ...), not rollouts: pass it as --dataset",
        ),
        "scores.parquet": (
            {"id": ["train_1"], "phase1_ndcg": [0.5]},
            "a per-prompt score table (id and one score column), not rollouts: use it with "
            "`ddai curate bucket --scores FILE --score-col COLUMN`",
        ),
        "other.parquet": ({"a": [1], "b": [2], "c": [3]}, "format not recognised"),
    }
    for name, (cols, why) in tables.items():
        pq.write_table(pa.table(cols), tmp_path / name)
        res = runner.invoke(app, ["ingest", str(tmp_path / name), "--logs", str(tmp_path / "l")])
        assert res.exit_code == 2
        assert f"error: {tmp_path / name}: {why}" in " ".join(res.stderr.split())
    assert not (tmp_path / "l").exists()


def test_compressed_inputs_are_named_with_the_command_that_opens_them(tmp_path):
    import gzip

    src = tmp_path / "rows.jsonl.gz"
    src.write_bytes(gzip.compress(b'{"run_id": "r", "uid": "u", "rollout_idx": 0}\n'))
    why = (
        f"error: {src}: a gzip-compressed file; ingest reads JSONL, JSON and Parquet as they "
        f"are: decompress it first (`gunzip -k {src}`) and ingest the result"
    )
    for fmt in ("auto", "ddai"):  # an explicit format quarantined every line as non-UTF-8
        args = ["ingest", str(src), "--input-format", fmt, "--logs", str(tmp_path / "l")]
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and why in " ".join(res.stderr.split())
    assert not (tmp_path / "l").exists()
    zst = tmp_path / "rows.jsonl.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 8)
    res = runner.invoke(app, ["ingest", str(zst), "--logs", str(tmp_path / "l")])
    assert res.exit_code == 2 and "a zstd-compressed file" in res.stderr


def test_a_json_array_of_rollouts_is_named_with_a_conversion(tmp_path):
    src = tmp_path / "rows.json"
    src.write_text(json.dumps([{"run_id": "r", "uid": "u", "rollout_idx": 0}]))
    res = runner.invoke(app, ["ingest", str(src), "--logs", str(tmp_path / "l")])
    assert res.exit_code == 2
    assert (
        f"error: {src}: a JSON array; ingest reads JSON Lines (one object per line): convert it "
        f"first, e.g. `jq -c '.[]' {src} > {tmp_path / 'rows.jsonl'}`"
    ) in " ".join(res.stderr.split())
