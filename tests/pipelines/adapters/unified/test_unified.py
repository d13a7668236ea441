"""DDAI's unified trajectory log: assembly, damage, identity and the synthetic world's two shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from ddai.pipelines import store
from ddai.pipelines.adapters import unified as ddai_unified
from ddai.pipelines.adapters.unified.events import HORIZON
from ddai.pipelines.funnel import scores
from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import query

RUNS = ("phase1", "curriculum", "focused_r1", "focused_r2")
RUN = "exp_20260105_101500_a1b2c3d4"
KEY = ("step", "uid", "rollout_idx")


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: tuple(r[k] for k in KEY))


def _ingest(tmp: Path, src: Path, **kw) -> tuple[object, list[dict]]:
    res = ingest(IngestConfig([src], tmp, progress=False, **kw))
    rows = _sorted(store.read_rollouts(tmp).to_pylist()) if store.list_runs(tmp) else []
    return res, rows


def _assert_same_rollouts(native: list[dict], unified: list[dict]) -> None:
    """Every column equal; ``extra`` holds at least native's keys with native's values."""
    assert len(native) == len(unified)
    for a, b in zip(native, unified, strict=True):
        for col in a:
            if col == "extra":
                ea, eb = json.loads(a[col]), json.loads(b[col])
                assert {k: eb.get(k) for k in ea} == ea, (a["uid"], a["rollout_idx"])
            else:
                assert a[col] == b[col], (col, a["uid"], a["rollout_idx"])


# ---------------------------------------------------------------- the synthetic world


@pytest.mark.parametrize("run", RUNS)
def test_world_native_and_unified_shapes_give_identical_rollouts(tmp_path, run):
    native = FIXTURES / "logs" / f"{run}.jsonl"
    unified = FIXTURES / "unified" / run / "unified_trajectory.jsonl"
    _, a = _ingest(tmp_path / "native", native)
    res, b = _ingest(tmp_path / "unified", unified, run_id=run)
    assert res.formats == {str(unified): "ddai-unified"}
    assert sum(res.quarantined.values()) == 0
    _assert_same_rollouts(a, b)
    # the comparison is not vacuous: pages were shown, crops taken, scores set
    turns = [t for r in b for t in r["turns"]]
    assert any(t["retrieved"] for t in turns) and any(t["action"] == "bbox" for t in turns)
    assert all(r["reward"] is not None for r in b)
    man = store.run_manifest(tmp_path / "unified", run)
    assert (
        man["run_config"]["max_turns"]
        == json.loads(unified.open().readline())["config"]["max_turns"]
    )


def _events(run: str = "curriculum") -> list[str]:
    return (FIXTURES / "unified" / run / "unified_trajectory.jsonl").read_text().splitlines()


def _write(path: Path, lines: list[str], tail: str = "") -> Path:
    path.write_text("".join(x + "\n" for x in lines) + tail)
    return path


def test_rewards_before_plans_still_join(tmp_path):
    lines = _events()
    _, want = _ingest(tmp_path / "a", _write(tmp_path / "a.jsonl", lines), run_id="curriculum")
    # Every reward of every step moved to the front of its step, reversed: all arrive before the
    # rollouts' last plans (and most before their first).
    out, step_start, rewards = [], None, []
    for x in [*lines, '{"event_type": "train.step.start"}']:
        et = json.loads(x)["event_type"]
        if et == "train.step.start":
            if step_start is not None:
                out[step_start + 1 : step_start + 1] = rewards[::-1]
            step_start, rewards = len(out), []
        if et == "rm.flash.detail":
            rewards.append(x)
        else:
            out.append(x)
    out.pop()  # the sentinel
    assert len(out) == len(lines) and out != lines
    res, got = _ingest(tmp_path / "b", _write(tmp_path / "b.jsonl", out), run_id="curriculum")
    assert sum(res.quarantined.values()) == 0
    _assert_same_rollouts(want, got)


def test_damaged_log_keeps_what_is_complete(tmp_path):
    lines = _events()
    _, full = _ingest(tmp_path / "a", _write(tmp_path / "a.jsonl", lines), run_id="curriculum")
    evs = [json.loads(x) for x in lines]

    def where(et, r, **kw):
        return [
            i
            for i, e in enumerate(evs)
            if e["event_type"] == et
            and (e.get("global_step"), e.get("sample_idx")) == (r["step"], r["sample_idx"])
            and all(e.get(k) == v for k, v in kw.items())
        ]

    multi = [r for r in full if r["num_turns"] >= 3]
    gap, cut, unscored = multi[0], multi[1], next(r for r in full if r["terminated"] == "complete")
    assert len({(r["step"], r["sample_idx"]) for r in (gap, cut, unscored)}) == 3
    drop = set(where("model.plan", gap, turn_idx=1))  # a hole in the turns → kept, flagged
    drop |= set(where("rm.flash.detail", cut))  # no reward and no last turn → incomplete
    drop |= set(where("model.plan", cut, turn_idx=cut["num_turns"] - 1))
    drop |= set(where("rm.flash.detail", unscored))  # turns that end it, no reward → kept
    assert len(drop) == 4
    kept = [x for i, x in enumerate(lines) if i not in drop]
    kept.insert(len(kept) // 2, '{"event_type": "model.plan", "uid": ')  # malformed mid-file
    kept.insert(len(kept) // 3, json.dumps({"event_type": "model.plan", "uid": "train_1"}))
    last = kept.pop()
    src = _write(tmp_path / "d.jsonl", kept, tail=last[: len(last) // 2])  # writer killed
    res, got = _ingest(tmp_path / "d", src, run_id="curriculum")

    assert dict(res.quarantined) == {
        "incomplete rollout": 1,
        "malformed JSON": 1,
        "unjoinable event": 1,
        "truncated last line": 1,
    }
    assert dict(res.flagged) == {"turns_incomplete": 1}
    assert res.summary()["flagged by reason"] == {"turns_incomplete": 1}
    assert res.rollouts_out == len(full) - 1
    assert res.rows_in == res.rollouts_out + sum(res.quarantined.values())
    ids = {(r["step"], r["sample_idx"]) for r in got}
    assert (cut["step"], cut["sample_idx"]) not in ids
    by_id = {(r["step"], r["sample_idx"]): r for r in got}
    u = by_id[(unscored["step"], unscored["sample_idx"])]
    assert u["turns"] == unscored["turns"] and u["terminated"] == "complete"
    assert (u["reward"], u["judge_score"], u["question"]) == (None, None, None)
    g = by_id[(gap["step"], gap["sample_idx"])]
    assert g["flags"] == ["turns_incomplete"] and json.loads(g["extra"])["turns_missing"] == [1]
    rest = [r for r in got if r is not u and r is not g]
    assert all(r["flags"] is None for r in rest)
    _assert_same_rollouts(
        [r for r in full if (r["step"], r["sample_idx"]) in ids and r not in (unscored, gap)],
        rest,
    )
    notes = res.notes[str(src)]
    assert notes["rollouts without a reward event"] == 1
    assert notes["rollouts kept with missing turns"] == 1
    assert notes["events read"] == len(kept) - 1  # the malformed line is not an event
    man = store.run_manifest(tmp_path / "d", "curriculum")
    assert man["notes"][str(src)] == notes
    assert man["flagged"] == {"turns_incomplete": 1}


def _drop_plan(lines: list[str], step: int, sample_idx: int, turn_idx: int) -> list[str]:
    out = []
    for x in lines:
        e = json.loads(x)
        hit = (e["event_type"], e.get("global_step"), e.get("sample_idx"), e.get("turn_idx"))
        if hit != ("model.plan", step, sample_idx, turn_idx):
            out.append(x)
    assert len(out) == len(lines) - 1
    return out


def test_a_lost_plan_event_keeps_the_rollout_flagged_and_the_prompt_means(tmp_path):
    lines = _events()
    _, full = _ingest(tmp_path / "a", _write(tmp_path / "a.jsonl", lines), run_id="curriculum")
    # a rewarded rollout of 3+ turns whose middle turn was a search: its pages and score are known
    r = next(
        r
        for r in full
        if r["num_turns"] >= 3 and r["reward"] is not None and r["turns"][1]["action"] == "search"
    )
    src = _write(tmp_path / "b.jsonl", _drop_plan(lines, r["step"], r["sample_idx"], 1))
    res, got = _ingest(tmp_path / "b", src, run_id="curriculum")

    assert res.rollouts_out == len(full) and sum(res.quarantined.values()) == 0
    assert dict(res.flagged) == {"turns_incomplete": 1}
    by_id = {(x["step"], x["sample_idx"]): x for x in got}
    g = by_id[(r["step"], r["sample_idx"])]
    assert g["flags"] == ["turns_incomplete"]
    extra = json.loads(g["extra"])
    assert extra["turns_missing"] == [1]
    # the lost turn's search result is kept with the rollout, not moved onto another turn
    assert [e["event_type"] for e in extra["unplaced_tool_events"]] == ["tool.search.response"]
    assert [t["idx"] for t in g["turns"]] == [i for i in range(r["num_turns"]) if i != 1]
    assert [t["think"] for t in g["turns"]] == [t["think"] for t in r["turns"] if t["idx"] != 1]
    assert g["num_turns"] == r["num_turns"]
    for col in ("reward", "judge_score", "ndcg", "retrieved_pages", "answer", "uid"):
        assert g[col] == r[col], col
    # per-prompt means of the intact log, from the views and from the funnel's score source
    sql = (
        "SELECT uid, n, success_rate, mean_judge, mean_ndcg, mean_reward FROM prompts ORDER BY uid"
    )
    want = query.connect(tmp_path / "a").execute(sql).fetchall()
    assert query.connect(tmp_path / "b").execute(sql).fetchall() == want
    assert any(row[0] == r["uid"] for row in want)
    for metric in ("ndcg", "judge", "reward"):
        a = scores.as_dict(scores.log_scores(tmp_path / "a", ["curriculum"], metric))
        assert scores.as_dict(scores.log_scores(tmp_path / "b", ["curriculum"], metric)) == a


# ---------------------------------------------------------------- hand-written events


def ev(et: str, step: int | None, sample_idx: int | None, **payload) -> dict:
    e = {"ts": 1.0, "host": "h", "pid": 7, "run_id": RUN, "project_name": "p"}
    e |= {"experiment_name": "exp", "n_agent": 4, "epoch": 0, "event_type": et}
    if step is not None:
        e["global_step"] = step
    if sample_idx is not None:
        e["sample_idx"] = sample_idx
    return e | payload


def plan(step, s, turn, text, uid="train_5", last=False):
    return ev("model.plan", step, s, uid=uid, turn_idx=turn, is_last_turn=last, text=text)


def reward(step, s, uid="train_5", local_idx=None, final=0.5, **kw):
    return ev(
        "rm.flash.detail",
        step,
        s,
        uid=uid,
        local_idx=s % 4 if local_idx is None else local_idx,
        query="Q?\nassistant\n",
        generated_answer="A",
        reference_answer="A",
        retrieved_basenames=["5_1"],
        reference_basenames=["5_1", "5_2"],
        judge_score=1.0,
        ndcg=0.6131471927654584,
        final_score=final,
        latency_s=1.5,
        gemini_raw='{"score": 1.0}',
        error=None,
        **kw,
    )


def search(step, s, pages, uid="train_5"):
    files = [{"idx": i, "image_file": f"./img/{p}.jpg"} for i, p in enumerate(pages)]
    return [
        ev("tool.search.request", step, s, uid=uid, query="q", search_id=5),
        ev("tool.search.response", step, s, uid=uid, results=files),
    ]


S = "<think>look</think>\n<search>q</search><|im_end|>"
B = "<think>crop</think>\n<bbox>[1, 2, 30, 40]</bbox><|im_end|>"
C = "<think>done</think>\n<search_complete>true</search_complete><|im_end|>"


def _run(tmp_path: Path, events: list[dict], **kw) -> tuple[object, list[dict]]:
    src = _write(tmp_path / "unified_trajectory.jsonl", [json.dumps(e) for e in events])
    assert ddai_unified.sniff(src)
    return _ingest(tmp_path / "logs", src, **kw)


def test_same_uid_and_sample_idx_in_two_steps_stay_two_rollouts(tmp_path):
    events = []
    for step, final in ((1, 0.25), (2, 0.75)):
        events += [plan(step, 1, 0, C), reward(step, 1, final=final)]
    _, rows = _run(tmp_path, events)
    assert [(r["step"], r["uid"], r["rollout_idx"], r["reward"]) for r in rows] == [
        (1, "train_5", 1, 0.25),
        (2, "train_5", 1, 0.75),
    ]
    assert store.list_runs(tmp_path / "logs") == [RUN]


def test_padding_repeated_prompt_suffix_and_partial_submit(tmp_path):
    # sample 5 with n_agent 4 is rollout 1 of prompt 1; the prompt repeats in the batch, so the
    # reward names it "train_5-1"; the partial submit numbered it 0 among the submitted ones.
    events = [
        plan(3, 5, 0, S),
        *search(3, 5, ["5_1", "5_2"]),
        plan(3, 5, 1, C),
        plan(3, 5, 2, ""),  # DDAI's padding for a finished rollout
        reward(3, 5, uid="train_5-1", local_idx=0),
        plan(3, 5, 3, ""),  # padding after the rollout was written: ignored
    ]
    res, (r,) = _run(tmp_path, events)
    assert sum(res.quarantined.values()) == 0
    assert (r["uid"], r["rollout_idx"], r["sample_idx"], r["num_turns"]) == ("train_5", 1, 5, 2)
    assert r["question"] == "Q?" and r["file_name"] == "5.pdf" and r["terminated"] == "complete"
    extra = json.loads(r["extra"])
    assert extra["local_idx"] == 0 and "reward_uid" not in extra
    assert res.notes[str(tmp_path / "unified_trajectory.jsonl")]["empty plans ignored"] == 1


def test_shown_image_is_first_unseen_else_top_and_crops(tmp_path):
    events = [plan(0, 0, 0, S), *search(0, 0, ["a_1", "b_1"])]
    events += [plan(0, 0, 1, S), *search(0, 0, ["a_1", "c_1"])]
    events += [plan(0, 0, 2, B)]
    crop = ev(
        "tool.bbox.result", 0, 0, uid="train_5", bbox=[1, 2, 30, 40], crop_path="./crops/x.jpg"
    )
    events += [plan(0, 0, 3, S), *search(0, 0, ["a_1", "c_1"])]
    events += [crop]  # logged late (after turn 3's plan): matched to the bbox turn by its box
    events += [plan(0, 0, 4, C), reward(0, 0)]
    res, (r,) = _run(tmp_path, events)
    assert sum(res.quarantined.values()) == 0
    assert [t["retrieved"] for t in r["turns"]] == [["a_1"], ["c_1"], None, ["a_1"], None]
    assert [t["observation"] for t in r["turns"]] == [
        "./img/a_1.jpg",
        "./img/c_1.jpg",
        "./crops/x.jpg",
        "./img/a_1.jpg",
        None,
    ]
    assert json.loads(r["extra"])["search_results"] == [
        ["a_1", "b_1"],
        ["a_1", "c_1"],
        ["a_1", "c_1"],
    ]
    assert r["retrieved_pages"] == ["5_1"]  # the reward's list is authoritative
    assert r["response"] == S + S + B + S + C


def test_conflicts_unjoinable_events_side_tables_and_run_config(tmp_path):
    start = ev("run.start", None, None, config={"max_turns": 3, "data": {"train_files": "x"}})
    summary = ev("rm.batch.summary", 4, None, uid="3f1e9a52-uuid", final_score=1.0)
    events = [
        start,
        summary,
        plan(4, 0, 0, S),
        plan(4, 0, 0, C),  # the same turn twice with different text
        reward(4, 0),
        ev("tool.search.response", 4, None, uid="train_5", results=[]),  # no sample_idx
        plan(4, 1, 0, S),
        plan(4, 1, 1, S),
        plan(4, 1, 2, S, last=True),  # max turns reached without search_complete
        reward(4, 1),
    ]
    res, (r,) = _run(tmp_path, events)
    assert dict(res.quarantined) == {"conflicting events": 1, "unjoinable event": 1}
    assert (r["sample_idx"], r["terminated"], r["format_ok"]) == (1, "max_turns", False)
    assert json.loads(r["extra"])["max_turns"] == 3
    man = store.run_manifest(tmp_path / "logs", RUN)
    assert man["run_config"]["max_turns"] == 3 and man["run_config"]["source_run_id"] == RUN
    side = tmp_path / "logs" / "_side" / "rm.batch.summary" / f"{RUN}.jsonl"
    assert [json.loads(x)["uid"] for x in side.open()] == ["3f1e9a52-uuid"]
    assert res.side_tables == {"rm.batch.summary": 1}
    notes = res.notes[str(tmp_path / "unified_trajectory.jsonl")]
    assert notes["side-table rows"] == {"rm.batch.summary": 1}
    assert notes["events by type"]["model.plan"] == 5
    assert notes["search turns without a response"] == 3


def test_side_tables_replace_on_reingest_and_add_on_append(tmp_path):
    events = [ev("train.step.metrics", 1, None, metrics={"m": 1}), plan(1, 0, 0, C), reward(1, 0)]
    side = tmp_path / "logs" / "_side" / "train.step.metrics" / f"{RUN}.jsonl"
    _run(tmp_path, events)
    _run(tmp_path, events)
    assert len(side.read_text().splitlines()) == 1
    # (another step's metrics: the same file again would be recognised as stored already)
    more = [ev("train.step.metrics", 2, None, metrics={"m": 2}), *events[1:]]
    _run(tmp_path, more, append=True)
    assert len(side.read_text().splitlines()) == 2
    _run(tmp_path, events[1:])  # the run re-ingested without side events: its rows go
    assert not side.exists()


def test_reward_beyond_the_horizon_does_not_join(tmp_path):
    # Rollouts of step 0 are written once step 2 is seen; a reward that late joins nothing.
    events = [plan(0, 0, 0, C), plan(2, 0, 0, C), reward(2, 0), reward(0, 0)]
    res, rows = _run(tmp_path, events)
    assert [(r["step"], r["reward"]) for r in rows] == [(0, None), (2, 0.5)]
    assert dict(res.quarantined) == {"missing turns": 1}
    assert HORIZON == 2


def test_odd_values_are_quarantined_not_raised(tmp_path):
    events = [
        plan(0, 0, 0, C) | {"run_id": ["not", "a", "string"]},
        plan(1, 0, 0, C) | {"text": 17},
        reward(1, 0),
        ev("model.plan", 1, 2, uid="train_5", text=C),  # no turn_idx
        ev("model.plan", "3", 2, uid="train_5", turn_idx=0, text=C),  # step as text
        {"no": "event_type"},
    ]
    res, rows = _run(tmp_path, events)
    assert [(r["step"], r["turns"][0]["error"]) for r in rows] == [(1, "empty turn")]
    assert dict(res.quarantined) == {
        "missing required key": 1,  # the rollout with no usable run id (and no --run-id)
        "unjoinable event": 2,
        "not an event": 1,
    }


def test_side_table_names_from_the_log_stay_inside_the_store(tmp_path):
    res, _ = _run(tmp_path, [ev("../../escape", 1, None), plan(1, 0, 0, C), reward(1, 0)])
    assert res.side_tables == {"_.._escape": 1}
    assert (tmp_path / "logs" / "_side" / "_.._escape" / f"{RUN}.jsonl").is_file()
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("columnar", [True, False])
def test_a_run_start_logged_twice_is_one_run_not_two(tmp_path, columnar):
    """A duplicated ``run.start`` line (a log copied twice over) is a duplicate event: the run's
    config is recorded once, not again under ``more_runs`` as if a second run had started."""
    lines = _events()
    assert json.loads(lines[0])["event_type"] == "run.start"
    src = _write(tmp_path / "unified_trajectory.jsonl", [lines[0], *lines])
    res, _ = _ingest(tmp_path / "logs", src, run_id="curriculum", columnar=columnar)
    man = store.run_manifest(tmp_path / "logs", "curriculum")
    assert "more_runs" not in man["run_config"]
    notes = res.notes[str(src)]
    assert notes["runs started"] == 1 and notes["duplicate events ignored"] == 1


@pytest.mark.parametrize("bad", [[1], {"id": "train_1"}])
@pytest.mark.parametrize("rewarded", [True, False])
def test_a_plan_uid_that_is_not_text_quarantines_its_rollout_not_the_ingest(
    tmp_path, bad, rewarded
):
    """A ``model.plan`` whose ``uid`` is a list or an object ended the ingest in a TypeError
    (unhashable) traceback when its rollout was written at the end of the file (no reward
    event); its rollout is now quarantined as wrong type, wherever it is written, and the rest
    stored."""
    lines = _events()
    evs = [json.loads(x) for x in lines]
    i = next(k for k, e in enumerate(evs) if e["event_type"] == "model.plan")
    key = (evs[i]["global_step"], evs[i]["sample_idx"])
    lines[i] = json.dumps({**evs[i], "uid": bad})
    if not rewarded:  # no reward: the rollout is written when the file ends
        lines = [
            x
            for x, e in zip(lines, evs, strict=True)
            if not (
                e["event_type"] == "rm.flash.detail"
                and (e.get("global_step"), e.get("sample_idx")) == key
            )
        ]
    _, want = _ingest(tmp_path / "a", _write(tmp_path / "a.jsonl", _events()), run_id="curriculum")
    res, got = _ingest(tmp_path / "b", _write(tmp_path / "b.jsonl", lines), run_id="curriculum")
    assert dict(res.quarantined) == {"wrong type": 1}
    assert len(got) == len(want) - 1
    assert key not in {(r["step"], r["sample_idx"]) for r in got}
