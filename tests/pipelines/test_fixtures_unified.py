"""The committed unified trajectory logs: DDAI's event shapes, and the same rollouts as the native
logs (read back with the mapping ``ddai.pipelines.fixtures.unified`` documents)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import SHARED

from ddai.pipelines.records import metrics, tags

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "fixtures"
EXAMPLES = SHARED / "ddai-formats" / "examples"
RUNS = ("phase1", "curriculum", "focused_r1", "focused_r2")
# DDAI writes a search response's ``error`` only when the search failed; no simulated search fails.
OPTIONAL = {"tool.search.response": {"error"}}
ENVELOPE = ("ts", "host", "pid", "run_id", "project_name", "experiment_name", "n_agent")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def events() -> dict[str, list[dict]]:
    return {
        run: read_jsonl(FIXTURES / "unified" / run / "unified_trajectory.jsonl") for run in RUNS
    }


@pytest.fixture(scope="module")
def native() -> dict[str, list[dict]]:
    return {run: read_jsonl(FIXTURES / "logs" / f"{run}.jsonl") for run in RUNS}


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def read_unified(evs: list[dict], run_name: str) -> list[dict]:
    """A plain reader of the documented mapping (not the ingest adapter): one row per rollout."""
    start = next(e for e in evs if e["event_type"] == "run.start")
    cfg = start["config"]
    max_turns = cfg["max_turns"]
    by_key: dict[tuple[int, int], dict] = {}
    order: list[tuple[int, int]] = []
    for e in evs:
        if "sample_idx" not in e:
            continue
        key = (e["global_step"], e["sample_idx"])
        if key not in by_key:
            by_key[key] = {"plans": [], "events": [], "reward": None, "ctx": e}
            order.append(key)
        r = by_key[key]
        if e["event_type"] == "model.plan":
            r["plans"].append(e)
            r["events"].append(e)
        elif e["event_type"] in ("tool.search.response", "tool.bbox.result"):
            r["events"].append(e)
        elif e["event_type"] == "rm.flash.detail":
            r["reward"] = e
    rows = []
    for key in order:
        r = by_key[key]
        rw, ctx = r["reward"], r["ctx"]
        plans = sorted(r["plans"], key=lambda e: e["turn_idx"])
        response = "".join(e["text"] for e in plans)
        turns = [t.to_record() for t in tags.parse_turns(response)]
        for t in turns:
            t.pop("value")
            t["retrieved"] = t["observation"] = None
        shown: set[str] = set()
        search_results = []
        turn = -1
        for e in r["events"]:
            if e["event_type"] == "model.plan":
                turn = e["turn_idx"]
            elif e["event_type"] == "tool.search.response":
                files = [x["image_file"] for x in e["results"]]
                img = next((f for f in files if f not in shown), files[0])
                shown.add(img)
                turns[turn]["retrieved"] = [basename(img)]
                turns[turn]["observation"] = img
                search_results.append([basename(f) for f in files])
            else:
                turns[turn]["observation"] = e["crop_path"]
        parsed = tags.parse_turns(response)
        rows.append(
            {
                "run_id": run_name,
                "step": key[0],
                "uid": rw["uid"],
                "rollout_idx": rw["local_idx"],
                "sample_idx": key[1],
                "data_source": cfg["data"]["data_source"],
                "question": re.split(r"\nassistant", rw["query"])[0],
                "reference_answer": rw["reference_answer"],
                "file_name": metrics.doc_of(rw["reference_basenames"][0]) + ".pdf",
                "reference_pages": rw["reference_basenames"],
                "response": response,
                "turns": turns,
                "retrieved_pages": rw["retrieved_basenames"],
                "answer": rw["generated_answer"],
                "judge_score": rw["judge_score"],
                "ndcg": rw["ndcg"],
                "format_ok": tags.is_format_ok(parsed),
                "reward": rw["final_score"],
                "reward_parts": None,
                "advantage": None,
                "num_turns": len(plans),
                "terminated": tags.terminated_from(parsed, max_turns),
                "extra": {
                    "source_run_id": ctx["run_id"],
                    "experiment_name": ctx["experiment_name"],
                    "n_agent": ctx["n_agent"],
                    "epoch": ctx["epoch"],
                    "max_turns": max_turns,
                    "search_results": search_results,
                    "latency_s": rw["latency_s"],
                    "gemini_raw": rw["gemini_raw"],
                    "error": rw["error"],
                },
            }
        )
    return rows


def test_unified_logs_hold_the_native_rollouts(events, native):
    for run in RUNS:
        assert read_unified(events[run], run) == native[run], run


def test_events_use_ddai_field_names(events):
    # Every field DDAI's example events carry is there (values are ours).
    example_files = {
        "run.start": "run_start",
        "model.plan": "model_plan",
        "tool.search.request": "tool_search_request",
        "tool.search.response": "tool_search_response",
        "tool.bbox.result": "tool_bbox_result",
        "frozen.response": "frozen_response",
        "rm.flash.detail": "rm_flash_detail",
        "train.step.metrics": "train_step_metrics",
    }
    ours = {}
    for e in events["focused_r1"]:
        ours.setdefault(e["event_type"], set()).update(e)
    assert set(ours) == {*example_files, "train.step.start"}
    for event_type, stem in example_files.items():
        theirs = set().union(*map(set, read_jsonl(EXAMPLES / f"unified.{stem}.jsonl")))
        theirs -= OPTIONAL.get(event_type, set())
        assert theirs <= ours[event_type], (event_type, theirs - ours[event_type])
    assert {"train_batch_size", "n_agent", "ids", "epoch", "global_step"} <= ours[
        "train.step.start"
    ]


def test_envelope_run_id_and_sample_layout(events, native):
    for run in RUNS:
        evs = events[run]
        run_id = evs[0]["run_id"]
        experiment = evs[0]["experiment_name"]
        assert evs[0]["event_type"] == "run.start"
        assert re.fullmatch(rf"{re.escape(experiment)}_\d{{8}}_\d{{6}}_[0-9a-f]{{8}}", run_id)
        assert native[run][0]["extra"]["source_run_id"] == run_id
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts)
        assert all(all(k in e for k in ENVELOPE) and e["run_id"] == run_id for e in evs)
        n_agent = evs[0]["config"]["actor_rollout_ref"]["rollout"]["n_agent"]
        ids: list[str] = []
        for e in evs:
            if e["event_type"] == "train.step.start":
                ids = e["ids"]
            elif e["event_type"] == "rm.flash.detail":
                # sample_idx = p·n_agent + local_idx, p = the prompt's place in the step's batch
                assert e["sample_idx"] == ids.index(e["uid"]) * n_agent + e["local_idx"]


def test_plans_end_like_ddai_s(events):
    for run in RUNS:
        max_turns = events[run][0]["config"]["max_turns"]
        for e in events[run]:
            if e["event_type"] != "model.plan":
                continue
            last = e["turn_idx"] == max_turns - 1
            assert e["is_last_turn"] is last
            if last:  # the injected completion carries no end-of-turn token
                assert tags.parse_turn(e["text"]).forced and "<|im_end|>" not in e["text"]
            else:  # a policy turn ends in <|im_end|> unless it was cut off mid-action
                cut = tags.parse_turn(e["text"]).error == "unclosed search"
                assert e["text"].endswith("<|im_end|>") != cut
