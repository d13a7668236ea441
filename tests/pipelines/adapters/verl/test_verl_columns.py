"""verl dumps read in columns: the same rollouts, quarantine and manifests as the per-row path."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import polars as pl
import pytest
from conftest import FIXTURES, SHARED
from support.columnar import NOT_ROWS, json_line, kinds, odd_line_falls_back, same_store
from support.verl_dump import chat_prompt, write_verl_dump

from ddai.pipelines.adapters import base, line_batches, verl
from ddai.pipelines.adapters.base import RowBatch, SourceRecord
from ddai.pipelines.adapters.verl.ids import UID_UNMATCHED

# Special tokens, dropped as verl decodes by default (skip_special_tokens)
_SPECIAL = re.compile(r"<\|[^|>]*\|>")
DATASET = FIXTURES / "dataset.parquet"
DATA = SHARED / "ddai-data"
PROMPT = chat_prompt([{"role": "system", "content": "Search."}, {"role": "user", "content": "Q?"}])
OBS = "\n<|im_start|>user\n<|vision_start|>[Image Paths: ./img/3_1.jpg]<|vision_end|><|im_end|>\n"
OUT = (
    "<think>look</think>\n<search>q</search><|im_end|>" + OBS + "<|im_start|>assistant\n"
    "<think>done</think>\n<search_complete>true</search_complete><|im_end|>"
)


def _line(i: int, **over) -> str:
    row = {
        "input": PROMPT.replace("Q?", f"Question: Q{i // 4}?"),
        "output": OUT,
        "gts": str(i),
        "score": 0.5 if i % 2 else 1,
        "step": 3,
        "judge_score": 1.0,
        "ndcg": 0.25,
        "data_source": "slidevqa",
        "acc": i % 3 == 0,
        "latency": 1e-05,
        "index": f"train_{i // 4}",
    }
    return json_line(row, **over)


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _world_dump(out: Path) -> list[Path]:
    ds = pl.read_parquet(DATASET)
    prompts = dict(zip(ds["id"].to_list(), ds["prompt"].to_list(), strict=True))
    rows = [json.loads(x) for x in (FIXTURES / "logs" / "curriculum.jsonl").open()]
    return write_verl_dump(rows, prompts, out)


def test_the_world_as_verl_dumps_reads_in_columns(tmp_path):
    files = _world_dump(tmp_path / "dump" / "exp1")
    assert {t for f in files for t in kinds(verl.read, f)} == {RowBatch}  # nothing by rows
    got = same_store(tmp_path / "plain", files)
    world = len((FIXTURES / "logs" / "curriculum.jsonl").read_text().splitlines())
    assert got.quarantine == [] and len(got.rows) == got.result.rows_in == world
    assert {r["run_id"] for r in got.rows} == {"exp1"}
    note = got.result.notes[str(files[0])]
    assert note["rows"] == len(files[0].read_text().splitlines())
    for kw in ({"dataset": DATASET}, {"uid_field": "index"}):
        mapped = same_store(tmp_path / next(iter(kw)), files, run_id="given", fmt="verl", **kw)
        assert not mapped.result.flagged and {r["uid"] for r in mapped.rows} <= set(
            pl.read_parquet(DATASET)["id"].to_list()
        )


def test_a_score_out_of_range_is_quarantined_and_the_rest_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 4096)
    good = [_line(i) for i in range(40)]
    odd = _line(99, ndcg=7.5, judge_score=1.25)
    got = odd_line_falls_back(tmp_path, verl.read, tmp_path / "exp" / "3.jsonl", good, odd, False)
    assert [(e["line"], e["reason"], e["detail"]) for e in got.quarantine] == [
        (
            21,
            "score out of range",
            "judge_score = 1.25 is outside 0..1; ndcg = 7.5 is outside 0..1",
        )
    ]
    assert len(got.rows) == 40 and {(r["judge_score"], r["ndcg"]) for r in got.rows} == {
        (1.0, 0.25)
    }
    s = got.result.summary()
    assert (s["rows in"], s["rollouts out"], s["quarantined by reason"]) == (
        41,
        40,
        {"score out of range": 1},
    )


def test_mapping_in_columns(tmp_path):
    lines = [_line(i) for i in range(6)]
    lines[1] = _line(1, output="<think>a</think><search>x</search>", acc=None, latency=...)
    lines[2] = _line(2, output=..., gts=None, step=None, uid="own", meta={"k": [1, None]})
    lines[3] = _line(3, output="", score=2, extra="e", turns=[1])
    lines[4] = _line(4, latency=1)  # an integer among floats: written as the line has it
    src = _write(tmp_path / "exp" / "7.jsonl", lines)
    assert kinds(verl.read, src) == [RowBatch]
    rows = same_store(tmp_path, src, sort=False).rows
    r0, r1, r2, r3 = rows[:4]
    uid = hashlib.sha1(json.loads(lines[0])["input"].encode()).hexdigest()[:12]
    assert (r0["run_id"], r0["uid"], r0["step"], r0["rollout_idx"]) == ("exp", uid, 3, 0)
    assert [r["rollout_idx"] for r in rows] == [0, 1, 0, 2, 0, 1]  # row 2 has no step
    assert r0["question"] == "Q0?" and r0["reference_answer"] == "0" and r0["reward"] == 1.0
    assert (r0["judge_score"], r0["ndcg"], r0["data_source"]) == (1.0, 0.25, "slidevqa")
    assert r0["response"] == OUT.replace(OBS + "<|im_start|>assistant\n", "")
    assert [t["action"] for t in r0["turns"]] == ["search", "search_complete"]
    assert r0["turns"][0]["retrieved"] == ["3_1"] and r0["retrieved_pages"] == ["3_1"]
    assert (r0["num_turns"], r0["terminated"], r0["format_ok"]) == (2, "complete", True)
    assert r0["extra"] == {
        "acc": True,
        "index": "train_0",
        "input": json.loads(lines[0])["input"],
        "latency": 1e-05,
        "output": OUT,  # observations were cut: the raw output stays
    }
    assert "output" not in r1["extra"] and r1["extra"]["acc"] is None  # named null: kept
    assert "latency" not in r1["extra"] and r1["turns"][0]["action"] == "search"
    assert (r1["terminated"], r1["format_ok"]) == ("invalid", False)
    assert r2["extra"]["output"] is None and r2["response"] == "" and r2["step"] is None
    assert r2["extra"]["source_uid"] == "own" and r2["extra"]["meta"] == {"k": [1, None]}
    assert r2["reference_answer"] is None and r2["extra"]["meta"]["k"][1] is None
    assert (r3["num_turns"], r3["terminated"], r3["format_ok"]) == (0, "invalid", None)
    assert r3["extra"]["source_extra"] == "e" and r3["extra"]["source_turns"] == [1]
    assert type(rows[4]["extra"]["latency"]) is int


# Lines the per-row path quarantines, converts or reads otherwise; each falls back with its batch.
ODD = [
    _line(0, gts=12),  # per-row: "12"
    _line(0, gts=["a", "b"]),  # per-row: JSON text
    _line(0, score="0.5"),  # per-row: 0.5
    _line(0, score=True),
    _line(0, step=2.0),  # per-row: 2
    _line(0, step="2"),
    _line(0, step=-1),
    _line(0, step=2**31),
    _line(0, data_source=5),
    _line(0, input=...),
    _line(0, input=3),
    _line(0, output=7),
    _line(0, output={"text": "x"}),
    _line(0, index=1.5),
    _line(0, source_acc=1),
    _line(0, **{'we"ird': 1}),
    '{"input": "p", "output": "o", "score": NaN}',
    '{"input": "p", "output": "o", "score": 1e400}',
    '{"input": "p", "output": "o", "score": 1, "score": 0}',  # Python keeps the last
    '{"input": "p", "output": "half an emoji \\ud83d"}',
    '{"input": "p", "output": "a\tb"}',
    '{"input": "p", "output": "o", "x": ' + "[" * 3000 + "]" * 3000 + "}",
    '{"input": "p", "output": "o"}{"input": "q", "output": "o"}',
    *NOT_ROWS,
]


@pytest.mark.parametrize("odd", range(len(ODD)))
def test_an_odd_line_falls_back_with_its_batch_only(tmp_path, monkeypatch, odd):
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 4096)
    good = [_line(i) for i in range(40)]
    odd_line_falls_back(tmp_path, verl.read, tmp_path / "exp" / "3.jsonl", good, ODD[odd])


def test_groups_across_batches_and_row_by_row_batches(tmp_path, monkeypatch):
    """rollout_idx counts on over batches, whichever path read the earlier ones."""
    monkeypatch.setattr(line_batches, "BATCH_BYTES", 2048)  # a few lines per batch
    lines = [_line(i % 5 * 4, step=i % 2) for i in range(60)]
    lines[17] = _line(0, step=1, score="1")  # its batch by rows, in the middle of the groups
    src = _write(tmp_path / "exp" / "x.jsonl", lines)
    got = kinds(verl.read, src)
    assert RowBatch in got and SourceRecord in got
    rows = same_store(tmp_path, src).rows
    per_group: dict = {}
    for r in rows:
        per_group.setdefault((r["step"], r["uid"]), []).append(r["rollout_idx"])
    assert all(sorted(v) == list(range(len(v))) for v in per_group.values())
    assert len(per_group) == 10


def test_a_file_read_twice_is_quarantined_as_duplicates_and_long_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(base, "MAX_LINE_BYTES", 3000)
    lines = [
        _line(i, output=f"<think>안녕 {i} 你好 😀</think>\n<search>q</search>") for i in range(8)
    ]
    lines[5] = _line(5, output="<think>" + "x" * 4000 + "</think>")  # over the limit
    a = _write(tmp_path / "exp" / "1.jsonl", lines)
    b = _write(tmp_path / "copy" / "1.jsonl", lines)
    got = same_store(tmp_path, [a, b], run_id="exp")
    reasons = [(e["line"], e["reason"]) for e in got.quarantine]
    assert sorted(reasons) == sorted(
        [(6, "line too long")] * 2 + [(n, "duplicate rollout") for n in (1, 2, 3, 4, 5, 7, 8)]
    )
    assert got.quarantine[-1]["raw"] == lines[-1] + "\n"
    assert got.rows[0]["turns"][0]["think"] == "안녕 0 你好 😀"
    assert got.result.rows_in == 16 and len(got.rows) == 7


def test_uid_mapping_in_columns_counts_as_per_row(tmp_path):
    ds = pl.read_parquet(DATASET)
    ids, prompts = ds["id"].to_list(), ds["prompt"].to_list()
    lines = [_line(i, input=chat_prompt(prompts[i % 3]), index=None) for i in range(12)]
    lines[4] = _line(4, input=PROMPT.replace("Q?", "nowhere"), index=None)  # matches no row
    lines[5] = _line(5, input=chat_prompt(prompts[1]), index=ids[7])  # the field wins
    src = _write(tmp_path / "exp" / "1.jsonl", lines)
    assert kinds(verl.read, src) == [RowBatch]
    got = same_store(tmp_path, src, dataset=DATASET, uid_field="index")
    assert got.result.flagged == {UID_UNMATCHED: 1}
    assert got.result.notes[str(src)]["uid from field index"] == 1
    assert got.result.notes[str(src)]["uid from dataset prompt"] == 10
    assert {r["uid"] for r in got.rows} - {r["uid"] for r in got.rows if r["flags"]} <= set(ids)
    # a dotted field or a float column: the per-row path reads it (batch by batch)
    for kw in ({"uid_field": "meta.id"}, {"uid_field": "score"}):
        same_store(tmp_path / next(iter(kw.values())), src, **kw)


def _images(content: list[dict]) -> str:
    shown = " ".join(c.get("image") or "" for c in content)
    return f"<|vision_start|>[Image Paths: {shown}]<|vision_end|>"


def _real_dump(out: Path, decoded: bool) -> list[Path]:
    """DDAI's real trajectories (SFT sets) as verl dumps them: the episode's turns with each image
    observation as a user turn; ``decoded``: special tokens dropped (verl's default decode)."""
    crop = pl.read_parquet(DATA / "slidevqa_train_crop.parquet")
    prompt_of = dict(zip(crop["id"].to_list(), crop["prompt"].to_list(), strict=True))
    gt_of = dict(zip(crop["id"].to_list(), crop["reward_model"].to_list(), strict=True))
    files = []
    names = ("train1.parquet", "after_focus_half_or_less_sft.v2.rewritten.safe.parquet")
    for step, name in enumerate(names):
        df = pl.read_parquet(DATA / name)
        lines = []
        for k, (uid, messages) in enumerate(zip(df["uid"], df["messages"], strict=True)):
            msgs = json.loads(messages)
            head = [m for m in msgs[:2] if m["role"] != "assistant"]
            parts = []
            for m in msgs[len(head) :]:
                if m["role"] == "assistant":
                    parts.append(m["content"] + "<|im_end|>")
                else:
                    c = m["content"]
                    obs = c if isinstance(c, str) else _images(c)
                    parts.append(f"\n<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n")
            gt = (gt_of.get(uid.split("__")[0]) or {}).get("ground_truth")
            line = {
                "input": chat_prompt(prompt_of.get(uid.split("__")[0]) or head),
                "output": "".join(parts),
                "gts": gt,
                "score": float(k % 3 == 0),
                "step": step,
                "data_source": "slidevqa",
            }
            if decoded:
                for f in ("input", "output"):
                    line[f] = _SPECIAL.sub("", line[f])
            lines.append(json.dumps(line, ensure_ascii=False))
        files.append(_write(out / f"{step}.jsonl", lines))
    return files


@pytest.mark.parametrize("decoded", [False, True])
def test_real_trajectories_as_verl_dumps(tmp_path, decoded):
    files = _real_dump(tmp_path / "dump" / "real", decoded)
    assert {t for f in files for t in kinds(verl.read, f)} == {RowBatch}
    got = same_store(tmp_path, files, dataset=DATA / "slidevqa_train_crop.parquet")
    assert got.quarantine == [] and len(got.rows) == 3555 + 256
    assert sum(r["format_ok"] is True for r in got.rows) > 3000
    assert sum(r["terminated"] == "max_turns" for r in got.rows) >= 100  # the forced completions
    assert sum(bool(r["retrieved_pages"]) for r in got.rows) > 3000
    assert 0 < got.result.flagged.get(UID_UNMATCHED, 0) < len(got.rows)
