"""DDAI's legacy flash_rm_detail.jsonl: the real reconstructed rounds and the field mapping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED

from ddai.pipelines import adapters, store
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import query

EXAMPLE = SHARED / "ddai-formats" / "examples"


@pytest.fixture(scope="module")
def rounds(tmp_path_factory) -> tuple[Path, Path]:
    """Both reconstructed rounds ingested once into one store (run ids from the file stems)."""
    shared = SHARED
    src = shared / "ddai-data" / "reconstructed"
    logs = tmp_path_factory.mktemp("flash-logs")
    files = [src / "round0_flash_rm_detail.jsonl", src / "round1_flash_rm_detail.jsonl"]
    res = ingest(IngestConfig(files, logs, progress=False))
    assert set(res.formats.values()) == {"ddai-flash"}
    return logs, src


def test_real_rounds_ingest_every_line(rounds):
    logs, _ = rounds
    con = query.connect(logs)
    counts = dict(con.execute("SELECT run_id, count(*) FROM rollouts GROUP BY 1").fetchall())
    assert counts == {"round0": 12_480, "round1": 13_664}
    man = store.run_manifest(logs, "round0")
    assert man["rows_in"] == man["rollouts_out"] == 12_480 and man["quarantined"] == {}


def test_real_rounds_reward_is_final_score(rounds):
    logs, src = rounds
    for run in ("round0", "round1"):
        raw = [json.loads(x) for x in (src / f"{run}_flash_rm_detail.jsonl").open()]
        want = {(r["uid"], r["local_idx"]): r["final_score"] for r in raw}
        tbl = store.read_rollouts(logs, [run], columns=["uid", "rollout_idx", "reward"])
        cols = [tbl[c].to_pylist() for c in ("uid", "rollout_idx", "reward")]
        got = {(u, i): x for u, i, x in zip(*cols, strict=True)}
        assert got == want  # exact floats, one rollout per (uid, local_idx)


def test_round0_hard_a_is_272_prompts(rounds):
    logs, _ = rounds
    con = query.connect(logs, ["round0"])
    n = con.execute("SELECT count(*) FROM prompts WHERE mean_reward <= $m", {"m": 0.2}).fetchone()
    assert n[0] == 272
    # round 1's low scorers (mean reward <= 0.3) before the review: DDAI's 436
    con1 = query.connect(logs, ["round1"])
    n1 = con1.execute("SELECT count(*) FROM prompts WHERE mean_reward <= 0.3").fetchone()
    assert n1[0] == 436


def test_example_fields_map_as_designed(tmp_path):
    src = EXAMPLE / "flash_rm_detail.jsonl"
    assert adapters.detect(src) == "ddai-flash"
    ingest(IngestConfig([src], tmp_path, progress=False))
    assert store.list_runs(tmp_path) == ["flash_rm_detail"]  # a bare DDAI name keeps its name
    rows = {r["rollout_idx"]: r for r in store.read_rollouts(tmp_path).to_pylist()}
    r = rows[1]
    assert (r["uid"], r["sample_idx"], r["step"]) == ("train_2747", 17, None)
    assert r["question"].startswith("Which year shows the smallest share")
    assert r["answer"] == "2030" and r["reference_answer"] == "2030"
    assert r["retrieved_pages"] == ["2747_12", "2747_3"]
    assert r["reference_pages"] == ["2747_12", "2747_15"]
    assert r["file_name"] == "2747.pdf"
    assert (r["judge_score"], r["ndcg"], r["reward"]) == (1.0, 0.6131471927654584, 1.0)
    assert r["turns"] is None and r["format_ok"] is None
    assert json.loads(r["extra"]) == {
        "error": None,
        "gemini_raw": '{"score": 1.0}',
        "latency_s": 1.84,
        "pid": 41233,
        "timestamp": 1767578452.1,
    }
    assert rows[0]["reward"] == 0.9261859507142916


def test_query_cut_at_assistant_and_run_id_flag(tmp_path):
    line = {
        "uid": "train_1",
        "local_idx": 0,
        "sample_idx": 0,
        "query": "How many?\nassistant\n",
        "final_score": 0.5,
        "judge_score": 0.5,
    }
    src = tmp_path / "r7_flash_rm_detail.jsonl"
    src.write_text(json.dumps(line) + "\n" + json.dumps({**line, "query": "Kept as is "}) + "\n")
    ingest(IngestConfig([src], tmp_path / "a", progress=False))
    assert store.list_runs(tmp_path / "a") == ["r7"]
    qs = [r["question"] for r in store.read_rollouts(tmp_path / "a").to_pylist()]
    assert qs == ["How many?", "Kept as is "]
    ingest(IngestConfig([src], tmp_path / "b", run_id="mine", progress=False))
    (r, _) = store.read_rollouts(tmp_path / "b").to_pylist()
    assert r["run_id"] == "mine" and "source_run_id" not in json.loads(r["extra"])


@pytest.mark.parametrize("columnar", [True, False])
def test_writer_processes_count_no_missing_pid(tmp_path, columnar):
    """A line without ``pid`` names no writer process: one pid plus pid-less lines count 1."""
    lines = [
        '{"uid": "a", "local_idx": 0, "judge_score": 1, "pid": 4242}',
        '{"uid": "a", "local_idx": 1, "judge_score": 0, "pid": 4242}',
        '{"uid": "b", "local_idx": 0, "judge_score": 1}',
    ]
    src = tmp_path / "x_flash_rm_detail.jsonl"
    src.write_text("\n".join(lines) + "\n")
    res = ingest(IngestConfig([src], tmp_path / "logs", progress=False, columnar=columnar))
    assert res.notes[str(src)] == {"lines": 3, "writer processes (pid)": 1}
    none = tmp_path / "none_flash_rm_detail.jsonl"
    none.write_text('{"uid": "a", "local_idx": 0, "judge_score": 1}\n')
    res = ingest(IngestConfig([none], tmp_path / "logs2", progress=False, columnar=columnar))
    assert res.notes[str(none)] == {"lines": 1, "writer processes (pid)": 0}
