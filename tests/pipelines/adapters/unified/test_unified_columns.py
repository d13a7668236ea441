"""DDAI's unified log read in columns: the same rollouts, quarantine and notes as event by event."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, SHARED
from support.columnar import kinds, same_store

from ddai.pipelines.adapters import line_batches
from ddai.pipelines.adapters import unified as ddai_unified
from ddai.pipelines.adapters.base import ReaderContext, RowBatch, SourceRecord

FIXTURES = ROOT / "fixtures" / "unified"
EXAMPLES = SHARED / "ddai-formats" / "examples"


def _same(tmp_path: Path, src: Path, **kw):
    """Both paths agree (``support.columnar.same_store``: rows in the store's order, quarantine,
    side tables byte for byte, summary, manifests); the columnar one as (result, rows,
    quarantine, side tables)."""
    got = same_store(tmp_path, src, sort=False, **kw)
    return got.result, got.rows, got.quarantine, got.side


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of about 6 KB: a rollout's dozen events span several of them, and the rollouts in
    flight hold more text than a batch (those batches go event by event)."""
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 6_000)


@pytest.fixture
def step_batches(monkeypatch):
    """Batches of about 400 KB: a fixture run's training step (about 300 KB, its rollouts logged
    turn by turn across it) spans two, so rollouts are carried from batch to batch."""
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 400_000)


@pytest.mark.parametrize("run", ["phase1", "curriculum", "focused_r1", "focused_r2"])
def test_fixture_runs_read_in_columns_as_event_by_event(tmp_path, step_batches, run):
    src = _copies(tmp_path, (FIXTURES / run / "unified_trajectory.jsonl").read_text(), 3)
    res, rows, q, _ = _same(tmp_path, src)
    n = {"focused_r2": 72, "curriculum": 72}.get(run, 144) * 3
    assert q == [] and len(rows) == res.rows_in == n
    out = list(ddai_unified.read(src, ReaderContext(columnar=True)))
    # in columns batch after batch, rollouts carried across (a step spans two batches); at most
    # the last batch's few by events (those the end of the file completes)
    in_columns = sum(r.table.num_rows for r in out if isinstance(r, RowBatch))
    assert sum(isinstance(r, RowBatch) for r in out) >= 3 and in_columns >= 0.8 * n


def _copies(tmp_path: Path, log: str, n: int, odd: str | None = None) -> Path:
    """``n`` copies of a run's log, steps renumbered per copy (``odd`` replaces the second)."""
    out = []
    for c in range(n):
        for line in (odd if c == 1 and odd is not None else log).splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                out.append(line)
                continue
            if isinstance(e, dict) and isinstance(e.get("global_step"), int):
                e["global_step"] += 10 * c
            if c and isinstance(e, dict) and e.get("event_type") == "run.start":
                continue
            out.append(json.dumps(e, ensure_ascii=False))
    src = tmp_path / "unified_trajectory.jsonl"
    src.write_text("\n".join(out) + "\n")
    return src


def _tricky(tmp_path: Path) -> Path:
    """focused_r1's log with every kind of event the assembler treats specially, spread out."""
    lines = (FIXTURES / "focused_r1" / "unified_trajectory.jsonl").read_text().splitlines()
    evs = [json.loads(x) for x in lines]

    def find(et: str, n: int, **match) -> int:
        hits = [
            i
            for i, e in enumerate(evs)
            if e["event_type"] == et and all(e.get(k) == v for k, v in match.items())
        ]
        return hits[n]

    out = list(lines)
    # a reward logged before its rollout's plans (out of order)
    r = find("rm.flash.detail", 3)
    key = {k: evs[r][k] for k in ("global_step", "sample_idx")}
    p0 = find("model.plan", 0, **key)
    out[p0], out[r] = out[r], out[p0]
    # a lost plan (kept, flagged turns_incomplete), a lost reward, a repeated reward
    out[find("model.plan", 1, global_step=1, sample_idx=20)] = None
    out[find("rm.flash.detail", 30)] = None
    rep = find("rm.flash.detail", 40)
    out[rep] = out[rep] + "\n" + out[rep]
    # a different second reward (conflict), a repeated plan
    conf = find("rm.flash.detail", 50)
    other = dict(evs[conf], judge_score=0.5)
    out[conf] = out[conf] + "\n" + json.dumps(other)
    dup = find("model.plan", 200)
    out[dup] = out[dup] + "\n" + out[dup]
    # malformed lines, an event without sample_idx, a plan without turn_idx, a non-object
    out[find("model.plan", 300)] += "\n{not json\n[1, 2]"
    bad = dict(evs[find("tool.search.response", 100)])
    bad.pop("sample_idx")
    out[find("tool.search.response", 100)] += "\n" + json.dumps(bad)
    noturn = dict(evs[find("model.plan", 400)])
    noturn.pop("turn_idx")
    out[find("model.plan", 400)] += "\n" + json.dumps(noturn)
    # a tool event out of place, a plan swapped with the next one of its rollout
    t = find("tool.search.response", 150)
    out[t - 1], out[t] = out[t], out[t - 1]
    s = find("model.plan", 2, global_step=2, sample_idx=5)
    s2 = find("model.plan", 3, global_step=2, sample_idx=5)
    out[s], out[s2] = out[s2], out[s]
    odd = "\n".join(x for x in out if x is not None) + "\n"
    return _copies(tmp_path, "\n".join(lines) + "\n", 4, odd=odd)


def test_tricky_log_same_rows_quarantine_and_counts(tmp_path, step_batches):
    src = _tricky(tmp_path)
    res, rows, q, _ = _same(tmp_path, src)
    reasons = {e["reason"] for e in q}
    assert {"malformed JSON", "wrong type", "unjoinable event", "missing turns"} <= reasons
    assert "duplicate rollout" not in reasons  # a repeated event is ignored, not a rollout
    assert any(r["flags"] == ["turns_incomplete"] for r in rows)
    assert res.rows_in == len(rows) + len(q)
    got = kinds(ddai_unified.read, src)
    # the clean copies still go in columns; the odd one's batches event by event
    assert got.count(RowBatch) >= 3 and got.count(SourceRecord) > 100


def test_log_concatenated_twice_repeats_quarantined_alike(tmp_path, small_batches):
    """A log read twice: the second copy's rollouts repeat the first exactly (same digest in both
    paths), whichever path read them."""
    one = (FIXTURES / "focused_r2" / "unified_trajectory.jsonl").read_text()
    src = tmp_path / "unified_trajectory.jsonl"
    src.write_text(one + one)
    _, rows, q, _ = _same(tmp_path, src)
    assert len(rows) == 72
    assert {e["reason"] for e in q} >= {"duplicate rollout"}


def test_odd_but_valid_events_stay_in_columns(tmp_path):
    """Search results with empty or missing names, a failed search, no results, a bbox crop
    without a path, a turn the parser rejects: all read in columns, as event by event."""
    evs = [
        json.loads(x)
        for x in (FIXTURES / "focused_r1" / "unified_trajectory.jsonl").read_text().splitlines()
    ]
    responses = [e for e in evs if e["event_type"] == "tool.search.response"]
    responses[0]["results"] = [{"image_file": ""}, {"idx": 1}, None, {"image_file": "a/b.c.jpg"}]
    responses[1]["error"] = "search backend timed out"
    del responses[2]["results"]
    responses[3]["results"] = []
    next(e for e in evs if e["event_type"] == "tool.bbox.result")["crop_path"] = None
    plans = [e for e in evs if e["event_type"] == "model.plan" and e["text"]]
    plans[5]["text"] = "I will search.<think>x</think><search>q</search>"  # text before think
    plans[6]["text"] = plans[6]["text"].replace("<think>", "<think>\u3000", 1)
    src = tmp_path / "unified_trajectory.jsonl"
    src.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in evs))
    assert kinds(ddai_unified.read, src) == [RowBatch]
    _, rows, q, _ = _same(tmp_path, src)
    assert q == [] and len(rows) == 144
    turns = [t for r in rows for t in r["turns"]]
    assert any(t["error"] == "search backend timed out" for t in turns)
    assert any(t["error"] == "text before think" for t in turns)
    assert any(
        r["extra"]["search_results"] and ["b.c"] in r["extra"]["search_results"] for r in rows
    )


def test_with_run_id_and_large_batches(tmp_path):
    src = FIXTURES / "focused_r1" / "unified_trajectory.jsonl"
    _, rows, _, _ = _same(tmp_path, src, run_id="mine")
    assert {r["run_id"] for r in rows} == {"mine"}
    assert rows[0]["extra"]["source_run_id"].startswith("gspo_phase2")
    assert kinds(ddai_unified.read, src) == [RowBatch]  # one batch, one table
    first = pq.read_table(next((tmp_path / "columns").rglob("*.parquet")))
    assert first.num_rows == 144


def test_real_ddai_examples_read_alike(tmp_path, small_batches):
    """DDAI's own event examples (every event type its logger writes), as one log."""
    files = sorted(EXAMPLES.glob("unified.*.jsonl"))
    assert len(files) >= 15
    src = tmp_path / "unified_trajectory.jsonl"
    src.write_text("".join(f.read_text() for f in files))
    res, rows, q, _ = _same(tmp_path, src)
    assert res.rows_in == len(rows) + len(q) and res.rows_in > 0


TURN_TEXTS = [
    "<think>a</think> <search>q</search>",
    " <think>a</think>\n<search>  </search>",
    "<think>a<search>x</search></think><search>q</search>",
    "<think>Max turn limit</think><search_complete>TRUE</search_complete><|im_end|>",
    "<think>Maximum turn limit reached. Trigger search_complete.</think>"
    "<search_complete>true</search_complete>",
    "<think>a</think><search>q</bbox>",
    "<think>a</think>\u3000<search>q</search>",
    "<|im_start|>assistant<think>a</think><search>q</search></s>",
    "<think>a</think><search>q</search>x",
    "<think>a</think><bbox>[1, 2, 3, 4]</bbox><|im_end|>",
    "<think>a</think><bbox>[3, 2, 1, 0]</bbox>",
    "<think>a</think><bbox>[1, 2, 3]</bbox>",
    "<think>a</think><search>q</search><search>r</search>",
    "<think>a</think><search>\u3000</search>",
    "<think>a</think><answer>x</answer>",
    "<think>a</think>\n\n<search_complete> true </search_complete>\n<|im_end|>",
    "no tags at all",
    "</think><think>a</think><search>q</search>",
    "x<think>a</think><search>q</search>",
    "<|im_end|> <think>a</think><search>q</search>",
    "<think>a</think>x</think><search>q</search>",
    "<think>a<think>b</think><search>q</search>",
    "<think>a</think> <search>q</search> <|im_end|>\n",
    "<think>a</think><search>q</bbox></search>",
    "<think>a</think><search>q</search></search>",
    "<think></think><search></search>",
    "<think>a</think><search_complete>true</search_complete></think>",
    "<|im_start|>assistant <think>a</think><bbox>[1,2,3,4]</bbox>",
    "<think>a</think>",
    # argument checks sure in columns, or left to the parser's own strip and lower
    "<think>a</think><search>\x1c</search>",
    "<think>a</think><search>é</search>",
    "<think>a</think><search_complete>\x1ctrue\x1d</search_complete>",
    "<think>a</think><search_complete> TrUe\t</search_complete>",
    "<think>a</think><search_complete>ｔｒｕｅ</search_complete>",
    "<think>a</think><search_complete>truee</search_complete>",
    "<think>max\x1cturn limit</think><search_complete>true</search_complete>",
    "<think>MAXIMUM turn\u2003limit</think><search_complete>true</search_complete>",
    # boxes the parser reads through JSON: integers, floats, odd spacing, numbers past Int64
    *[
        f"<think>a</think><bbox>{box}</bbox>"
        for box in (
            "[-1,-2,3,4]",
            " [0,0,0,0] ",
            "[01,2,3,4]",
            "[1.5,2,3,4]",
            "[1,2,3,4]\u00a0",
            "[1,2,3,4 ]\n",
            "[123456789012345678,2,123456789012345679,4]",
            "[1234567890123456789,2,12345678901234567890,4]",
            "[true,1,2,3]",
            "[1, 2, 3, 4]]",
        )
    ],
]


def test_plan_texts_cut_in_columns_as_the_tag_parser():
    """The regex over the column and the tag parser give the same turn and executed action."""
    import polars as pl

    from ddai.pipelines.adapters.ddai_common import executed_action, turn_record
    from ddai.pipelines.adapters.unified.turns import parse_plans
    from ddai.pipelines.records import tags

    texts = TURN_TEXTS + [
        e["text"]
        for f in sorted(FIXTURES.glob("*/unified_trajectory.jsonl"))
        for e in map(json.loads, f.open())
        if e["event_type"] == "model.plan" and e.get("text")
    ]
    got = parse_plans(pl.Series(texts, dtype=pl.String))
    fields = ("think", "action", "arg", "sep", "forced", "error")
    for text, row in zip(texts, got.iter_rows(named=True), strict=True):
        assert row["act"] == executed_action(text)[0], text
        want = turn_record(tags.parse_turn(text))
        assert {f: row[f] for f in fields} == {f: want[f] for f in fields}, text
    assert set(got["error"][: len(TURN_TEXTS)]) >= {"bad bbox", "empty search", None}
    assert got["forced"].any()  # a forced completion is among the texts


@pytest.mark.parametrize(
    "keep",
    [
        lambda e: e.startswith(("train.step", "run.start")),  # no rollout event at all
        lambda e: e == "rm.flash.detail",  # rewards without turns
        lambda e: e == "model.plan",  # turns without rewards
        lambda e: False,  # an empty file
    ],
    ids=["side-only", "rewards-only", "plans-only", "empty"],
)
def test_batches_that_complete_nothing(tmp_path, keep):
    lines = (FIXTURES / "focused_r1" / "unified_trajectory.jsonl").read_text().splitlines()
    src = tmp_path / "unified_trajectory.jsonl"
    src.write_text("".join(x + "\n" for x in lines if keep(json.loads(x)["event_type"])))
    out = []
    for columnar in (True, False):
        ctx = ReaderContext(columnar=columnar)
        recs = [(r.line, r.reason, r.detail, r.raw) for r in ddai_unified.read(src, ctx)]
        out.append((recs, ctx.notes[str(src)], {k: len(v) for k, v in ctx.side_tables.items()}))
    assert out[0] == out[1]


def test_odd_but_valid_rewards_stay_in_columns(tmp_path):
    """Rewards mapped in columns as event by event: a reward uid of another prompt, the prompt's
    ``uid-group`` form, a ``local_idx`` off ``sample_idx mod n_agent``, no ``n_agent``, no
    retrieved pages (the pages the turns showed), a field some rewards name as null and others
    leave out, a query with the chat template's tail."""
    evs = [
        json.loads(x)
        for x in (FIXTURES / "focused_r1" / "unified_trajectory.jsonl").read_text().splitlines()
    ]
    rewards = [e for e in evs if e["event_type"] == "rm.flash.detail"]
    rewards[0]["uid"] = "someone_else"
    rewards[1]["uid"] = f"{rewards[1]['uid']}-{rewards[1]['sample_idx'] // rewards[1]['n_agent']}"
    rewards[2]["local_idx"] = 7 if rewards[2]["local_idx"] != 7 else 6
    del rewards[3]["n_agent"]
    del rewards[4]["retrieved_basenames"]
    del rewards[5]["error"]
    rewards[6]["note"] = "kept"
    rewards[7]["query"] = "Which year?\n  assistant\nsome tail"
    src = tmp_path / "unified_trajectory.jsonl"
    src.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in evs))
    assert kinds(ddai_unified.read, src) == [RowBatch]
    res, rows, q, _ = _same(tmp_path, src)
    assert q == [] and len(rows) == 144
    by_sample = {r["sample_idx"]: r for r in rows if r["step"] == rewards[0]["global_step"]}
    assert by_sample[rewards[0]["sample_idx"]]["extra"]["reward_uid"] == "someone_else"
    assert "reward_uid" not in by_sample[rewards[1]["sample_idx"]]["extra"]
    assert by_sample[rewards[2]["sample_idx"]]["extra"]["local_idx"] in (6, 7)
    assert by_sample[rewards[3]["sample_idx"]]["rollout_idx"] == rewards[3]["local_idx"]
    assert by_sample[rewards[4]["sample_idx"]]["retrieved_pages"]  # from the turns
    assert "error" not in by_sample[rewards[5]["sample_idx"]]["extra"]
    assert by_sample[rewards[6]["sample_idx"]]["extra"]["error"] is None
    assert by_sample[rewards[6]["sample_idx"]]["extra"]["note"] == "kept"
    assert by_sample[rewards[7]["sample_idx"]]["question"] == "Which year?"
    notes = res.summary()["notes"]
    assert "reward uid differs from plan uid" in json.dumps(notes)


@pytest.mark.parametrize("field", ["ndcg", "judge_score"])
def test_a_reward_out_of_range_quarantines_its_rollout_only(tmp_path, field):
    """A reward whose ``ndcg`` (or ``judge_score``) lies outside 0..1: its batch goes event by
    event, where the rollout is quarantined with the field and value; the others are stored."""
    evs = [
        json.loads(x)
        for x in (FIXTURES / "focused_r1" / "unified_trajectory.jsonl").read_text().splitlines()
    ]
    at = [i for i, e in enumerate(evs) if e["event_type"] == "rm.flash.detail"][10]
    evs[at][field] = 7.5
    src = tmp_path / "unified_trajectory.jsonl"
    src.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in evs))
    assert RowBatch not in kinds(ddai_unified.read, src)  # one batch: by events
    res, rows, q, _ = _same(tmp_path, src)
    assert [(e["line"], e["reason"], e["detail"]) for e in q] == [
        (at + 1, "score out of range", f"{field} = 7.5 is outside 0..1")
    ]
    assert len(rows) == 143 and all(r[field] <= 1 for r in rows)
    s = res.summary()
    assert (s["rollouts out"], s["quarantined by reason"]) == (143, {"score out of range": 1})
    assert s["rows in"] == 144


def test_side_events_kept_as_logged(tmp_path, small_batches):
    """Side events are written as their source lines (no parse and re-encode), by both readers:
    compact separators, escaped non-ASCII and exponents stay as DDAI wrote them."""
    lines = (FIXTURES / "focused_r1" / "unified_trajectory.jsonl").read_text().splitlines()
    odd = [
        '{"event_type":"train.step.metrics","run_id":"r","global_step":1,"lr":1.0e-05}',
        '{"event_type": "debug.note", "run_id": "r", "msg": "\\u00e9t\\u00e9 \\ud55c"}',
    ]
    src = tmp_path / "unified_trajectory.jsonl"
    spaced = "  " + odd[0] + " "  # JSON whitespace around the object: not kept
    src.write_text("\n".join([lines[0], spaced, *lines[1:40], odd[1], *lines[40:]]) + "\n")
    *_, side = _same(tmp_path, src, run_id="mine")
    assert side["_side/train.step.metrics/mine.jsonl"].decode().splitlines()[0] == odd[0]
    assert side["_side/debug.note/mine.jsonl"].decode() == odd[1] + "\n"
    frozen = side["_side/frozen.response/mine.jsonl"].decode().splitlines()
    assert frozen == [x for x in lines if '"event_type": "frozen.response"' in x]


def test_columnar_ingest_does_not_import_pandas(tmp_path):
    """Arrow imports pandas on its first numpy conversion, a few tenths of a CPU second per
    ingest: the reader builds its Arrow arrays from buffers instead."""
    import subprocess
    import sys

    src = FIXTURES / "focused_r1" / "unified_trajectory.jsonl"
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from ddai.pipelines.ingest import IngestConfig, ingest\n"
        f"res = ingest(IngestConfig([Path({str(src)!r})], Path({str(tmp_path / 'logs')!r}),"
        " progress=False))\n"
        "print(res.rollouts_out, 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["144", "False"]


@pytest.mark.parametrize(
    "steps",
    [
        [3, 3, 4, 3, 4, 5],  # offsets packed into one integer
        [0, 0, 2**62, 0, 2**62, 7],  # too far apart to pack: the key's dense rank
    ],
)
def test_rollout_key_is_one_integer_per_rollout(steps):
    import polars as pl

    from ddai.pipelines.adapters.unified.columns import _rollout_key

    roll = pl.DataFrame(
        {
            "run_id": ["b", "b", "a", "a", "b", "a"],
            "global_step": steps,
            "sample_idx": [1, 1, 1, 2, 1, 1],
        }
    )
    k = roll.select(k=_rollout_key(roll))["k"].to_list()
    keys = list(roll.iter_rows())
    # equal integers exactly where the three-part keys are equal
    assert [[k[i] == k[j] for j in range(6)] for i in range(6)] == [
        [keys[i] == keys[j] for j in range(6)] for i in range(6)
    ]
    assert len(set(k)) == len(set(keys)) == 5


@pytest.mark.parametrize("batches", ["one", "small"])
def test_two_runs_interleaved_in_one_batch(tmp_path, monkeypatch, batches):
    """Two runs' events interleaved line by line: the step horizon and the joins go per run."""
    if batches == "small":
        monkeypatch.setattr(line_batches, "BATCH_BYTES", 400_000)
    a, b = (
        (FIXTURES / run / "unified_trajectory.jsonl").read_text().splitlines()
        for run in ("focused_r1", "phase1")
    )
    mixed = [x for pair in zip(a, b, strict=False) for x in pair]
    mixed += a[len(b) :] + b[len(a) :]
    src = tmp_path / "unified_trajectory.jsonl"
    src.write_text("\n".join(mixed) + "\n")
    res, rows, q, _ = _same(tmp_path, src)
    assert q == [] and len(rows) == res.rows_in == 144 + 144
    assert len({r["run_id"] for r in rows}) == 2
    out = [
        r for r in ddai_unified.read(src, ReaderContext(columnar=True)) if isinstance(r, RowBatch)
    ]
    # most in columns, both runs (small batches leave more to the events: the last ones, declines)
    assert sum(r.table.num_rows for r in out) >= 0.6 * 288 and len({r.run_id for r in out}) == 2
