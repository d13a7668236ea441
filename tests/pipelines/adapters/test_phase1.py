"""DDAI's legacy gspo_phase1.json: steps, agents, the recovered dataset id and the transcript."""

from __future__ import annotations

import json

from conftest import SHARED

from ddai.pipelines import adapters, store
from ddai.pipelines.adapters.ddai_phase1 import step_of
from ddai.pipelines.ingest import IngestConfig, ingest

EXAMPLE = SHARED / "ddai-formats" / "examples" / "gspo_phase1.example.json"


def test_step_keys():
    assert step_of("step_tensor([57, 57, 57, 57])") == 57
    assert step_of("step_12") == 12
    assert step_of("step_tensor([3, 4])") is None  # no single step: left null, not guessed
    assert step_of("step_") is None


def test_example_agents_become_rollouts(tmp_path):
    assert adapters.detect(EXAMPLE) == "ddai-phase1"
    res = ingest(IngestConfig([EXAMPLE], tmp_path, progress=False))
    assert res.rollouts_out == 3 and store.list_runs(tmp_path) == ["gspo_phase1.example"]
    rows = sorted(store.read_rollouts(tmp_path).to_pylist(), key=lambda r: r["rollout_idx"])
    assert [r["rollout_idx"] for r in rows] == [0, 1, 2]  # agent_id − 1
    assert {(r["uid"], r["step"]) for r in rows} == {("train_8", 57)}  # from reference "8_5"
    assert [r["reward"] for r in rows] == [1.0, 0.6678367782143118, 0.0]
    assert [r["ndcg"] for r in rows] == [1.0, 0.6309297535714575, 0.0]
    assert [r["format_ok"] for r in rows] == [True, True, False]  # DDAI's raw_score > 0
    assert [r["retrieved_pages"] for r in rows] == [["8_5"], ["8_2", "8_5"], ["8_2"]]
    assert rows[0]["reference_pages"] == ["8_5"] and rows[0]["file_name"] == "8.pdf"
    assert rows[0]["question"] == "What does the gas detector on the slide measure?"
    # the observation is cut out of the response and hangs on the search turn it answers
    a = rows[0]
    assert a["response"] == (
        "<think>...</think>\n<search>gas detector</search><|im_end|>"
        "<think>...</think>\n<search_complete>true</search_complete><|im_end|>"
    )
    assert [t["action"] for t in a["turns"]] == ["search", "search_complete"]
    assert a["turns"][0]["observation"] == "[Image Paths: 8_5.jpg]"
    assert a["turns"][0]["retrieved"] == ["8_5"]
    assert a["terminated"] == "complete"
    assert [t["action"] for t in rows[2]["turns"]] == ["invalid"]
    extra = json.loads(rows[2]["extra"])
    assert extra["prompt_uuid"] == "9b2e4c1a-77d0-4f5e-b3a1-6e8c2d9f0b34"
    assert extra["scores"] == {"raw_score": 0.0, "fail_reason": "Turn 0 missing action tag"}
    assert extra["step_key"] == "step_tensor([57, 57, 57, 57])"


def test_prompt_without_reference_keeps_its_uuid_and_bad_document_is_quarantined(tmp_path):
    doc = {"step_3": {"u-1": {"prompt": "x", "agents": [{"agent_id": 1, "response": ""}]}}}
    src = tmp_path / "gspo_phase1.json"
    src.write_text(json.dumps(doc))
    res = ingest(IngestConfig([src], tmp_path / "a", progress=False))
    (r,) = store.read_rollouts(tmp_path / "a").to_pylist()
    assert (r["uid"], r["rollout_idx"], r["step"], r["reward"]) == ("u-1", 0, 3, None)
    assert res.notes[str(src)]["prompts without a reference document (uid = prompt uuid)"] == 1
    src.write_text(json.dumps(doc)[:-7])  # caught mid-rewrite
    res = ingest(IngestConfig([src], tmp_path / "b", progress=False))
    assert dict(res.quarantined) == {"malformed JSON": 1} and res.rows_in == 1


def test_an_agent_ndcg_out_of_range_is_quarantined(tmp_path):
    doc = json.loads(EXAMPLE.read_text())
    agents = next(iter(next(iter(doc.values())).values()))["agents"]
    agents[1]["scores"]["ndcg_value"] = 7.5  # the phase-1 name of ``ndcg``
    src = tmp_path / "gspo_phase1.json"
    src.write_text(json.dumps(doc))
    res = ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    assert (res.rows_in, res.rollouts_out) == (3, 2)
    assert res.summary()["quarantined by reason"] == {"score out of range": 1}
    rows = store.read_rollouts(tmp_path / "logs").to_pylist()
    assert sorted(r["ndcg"] for r in rows) == [0.0, 1.0]
