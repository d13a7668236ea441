"""DDAI field conventions, format detection and every example file of ../shared/ddai-formats."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, SHARED

from ddai.pipelines import adapters
from ddai.pipelines.adapters.ddai_common import (
    dataset_id_of,
    executed_action,
    file_name_of,
    flash_rollout,
    question_from_prompt,
    question_from_query,
    run_id_from_stem,
)
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.records.schema import COLUMNS

EXAMPLES = SHARED / "ddai-formats" / "examples"


def test_flash_payload_keys_named_like_columns_are_kept_as_source_fields():
    """A payload key that is a schema column, and not one the mapping takes, is not read as the
    column: it lands under ``source_<name>``; the page lists and ``flags`` are read as given."""
    as_given = {"reference_pages", "retrieved_pages", "flags"}
    mapped = {"uid", "sample_idx", "reference_answer", "judge_score", "ndcg"}
    payload = {c: f"raw {c}" for c in COLUMNS if c not in mapped}
    rec = flash_rollout({**payload, "local_idx": 3, "final_score": 0.5})
    renamed = {c for c in payload if rec.get(f"source_{c}") == f"raw {c}"}
    assert renamed == set(payload) - as_given
    assert {c: rec[c] for c in as_given} == {c: f"raw {c}" for c in as_given}
    assert rec["rollout_idx"] == 3 and rec["reward"] == 0.5


def test_question_from_query_and_prompt():
    assert question_from_query("How many?\nassistant\n") == "How many?"
    assert question_from_query("How many?\n  assistant") == "How many?"
    assert question_from_query("The assistant said so") == "The assistant said so"
    assert question_from_query(None) is None
    chatml = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQuestion: Why?<|im_end|>\n<|im_start|>assistant\n"
    assert question_from_prompt(chatml) == "Why?"
    assert question_from_prompt("system\nS\nuser\nWhat is it?\nassistant\n") == "What is it?"
    assert question_from_prompt("no roles here") is None


def test_pages_documents_and_run_ids():
    assert file_name_of(["2747_12", "2747_15"]) == "2747.pdf"
    assert dataset_id_of(["8_5"]) == "train_8"
    assert file_name_of([]) is None and dataset_id_of(None) is None
    assert run_id_from_stem("round0_flash_rm_detail", "_flash_rm_detail") == "round0"
    assert run_id_from_stem("flash_rm_detail", "_flash_rm_detail") == "flash_rm_detail"
    assert run_id_from_stem("my run/1") == "my_run_1"


def test_executed_action_is_ddai_first_well_formed_tag():
    assert executed_action("<think>t</think><search> q </search>") == ("search", "q")
    # invalid by the grammar (two actions) but DDAI still ran the first one
    assert executed_action("<think>t</think><bbox>[1,2,3,4]</bbox><search>q</search>")[0] == "bbox"
    assert executed_action("<think>t</think><search>q") == (None, "")
    assert executed_action("") == (None, "")
    forced = "<think>Maximum turn limit reached. Trigger search_complete.</think><search_complete>true</search_complete>"
    assert executed_action(forced) == ("search_complete", "true")


def _example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.iterdir() if p.name != "README.md")


def test_every_example_file_is_read_or_refused_with_a_reason(tmp_path):
    files = _example_files()
    assert len(files) >= 30
    taken: dict[str, str] = {}
    for f in files:
        try:
            taken[f.name] = adapters.detect(f)
        except ValueError as e:
            assert "not recognised" not in str(e), f.name  # a named reason, not a shrug
            assert str(f) in str(e)
            continue
        res = ingest(IngestConfig([f], tmp_path / f.name, progress=False))
        lines = [x for x in f.read_text().splitlines() if x.strip()]
        # side rows of a run that got no rollouts are counted, not written
        accounted = res.rows_in + sum(res.side_tables.values()) + sum(res.side_not_written.values())
        if taken[f.name] == "ddai-unified":
            notes = res.notes[str(f)]
            assert notes["events read"] == len(lines), f.name
            accounted += notes.get("runs started", 0)
        assert accounted > 0, f.name  # nothing read and nothing said: never
    assert {n for n, fmt in taken.items() if fmt != "ddai-unified"} == {
        "flash_rm_detail.jsonl",
        "gspo_phase1.example.json",
    }
    unified = {f.name for f in files if f.name.startswith("unified.")}
    assert {n for n, fmt in taken.items() if fmt == "ddai-unified"} == unified


def test_examples_of_the_unified_log_ingest_together(tmp_path):
    files = [f for f in _example_files() if f.name.startswith("unified.")]
    res = ingest(IngestConfig(files, tmp_path, progress=False))
    assert res.rows_in == res.rollouts_out + sum(res.quarantined.values())
    # the three rewards, the plans and the tool calls name rollouts whose other events are not
    # among the examples: each is reported, none joined to a stranger
    assert res.rollouts_out == 0
    assert set(res.quarantined) == {"missing turns", "incomplete rollout"}
    # no run got a rollout, so no side row is written (no manifest would list it): all counted
    assert res.side_tables == {} and sum(res.side_not_written.values()) >= 6


@pytest.mark.parametrize(
    "first_line, fmt",
    [
        ('{"run_id": "r", "uid": "u", "rollout_idx": 0}', "ddai"),
        ('{"event_type": "run.start", "run_id": "r"}', "ddai-unified"),
        ('{"uid": "u", "local_idx": 0, "final_score": 1.0}', "ddai-flash"),
        ('{"input": "p", "output": "o", "score": 1.0, "step": 1}', "verl"),
    ],
)
def test_detect_by_content(tmp_path, first_line, fmt):
    src = tmp_path / "x.jsonl"
    src.write_text(first_line + "\n")
    assert adapters.detect(src) == fmt


VERL_LINE = (
    '{"input": "<|im_start|>user\\nQ?<|im_end|>", "output": "<think>t</think>'
    '<search_complete>true</search_complete>", "score": 1.0, "step": 1}\n'
)


@pytest.mark.parametrize(
    "src",
    [
        ROOT / "fixtures" / "logs" / "phase1.jsonl",
        ROOT / "fixtures" / "unified" / "curriculum" / "unified_trajectory.jsonl",
        EXAMPLES / "flash_rm_detail.jsonl",
        EXAMPLES / "gspo_phase1.example.json",
        "verl",
    ],
    ids=["ddai", "unified", "flash", "phase1", "verl"],
)
def test_a_leading_byte_order_mark_is_not_part_of_the_first_line(src, tmp_path):
    # a UTF-8 BOM (Windows editors) made the first line malformed JSON: one rollout quarantined
    if src == "verl":
        src = tmp_path / "1.jsonl"
        src.write_text(VERL_LINE * 3)
    data = Path(src).read_bytes()
    marked = tmp_path / "bom" / Path(src).name
    marked.parent.mkdir()
    marked.write_bytes(b"\xef\xbb\xbf" + data)
    fmt = adapters.detect(Path(src))
    assert adapters.detect(marked) == fmt
    for columnar in (True, False):
        res = {}
        for name, path in (("plain", Path(src)), ("bom", marked)):
            cfg = IngestConfig([path], tmp_path / f"{name}{columnar}", progress=False)
            res[name] = ingest(replace(cfg, columnar=columnar))
        assert res["bom"].rows_in == res["plain"].rows_in > 0
        assert res["bom"].rollouts_out == res["plain"].rollouts_out
        assert dict(res["bom"].quarantined) == dict(res["plain"].quarantined)
