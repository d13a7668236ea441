"""`pointer world --from`: a user's VQA set becomes a world; bad rows and columns are named."""

from __future__ import annotations

import json

import polars as pl
import pytest
from user_set_data import make_user_set

from ddai.pipelines.pointer.user_set import UserSetConfig, UserSetError, build_world, majority
from ddai.pipelines.pointer.world import load_world


def test_jsonl_rows_split_into_pool_and_queries(tmp_path):
    src = make_user_set(tmp_path / "src", 20)
    out = build_world(UserSetConfig(src, tmp_path / "w", seed=3, n_demos=8, test_frac=0.25))
    assert (out["queries"], out["demos"], out["train queries"], out["test queries"]) == (
        12,
        8,
        9,
        3,
    )
    w = load_world(tmp_path / "w")
    assert not w.labels and w.query_emb.shape == (12, 0)
    q = w.queries[0]
    # Image paths are resolved against the file's folder, ids kept from question_id.
    assert q["image"].startswith(str((tmp_path / "src" / "images").resolve()))
    assert q["query_id"].startswith("q-10") and len(q["answers"]) == 10
    assert all(d["answer"] == d["answers"][0] for d in w.demos)  # 8 of 10 agree
    ids = {q["image_id"] for q in w.queries} | {d["image_id"] for d in w.demos}
    assert len(ids) == 20  # every row used once


def test_split_column_and_parquet(tmp_path):
    src = make_user_set(tmp_path / "src", 12, fmt="parquet", split=True)
    out = build_world(UserSetConfig(src, tmp_path / "w"))
    assert (out["demos"], out["train queries"], out["test queries"]) == (4, 4, 4)
    w = load_world(tmp_path / "w")
    assert {d["image_id"] for d in w.demos} == {str(1000 + i) for i in range(0, 12, 3)}


def test_same_seed_same_world(tmp_path):
    src = make_user_set(tmp_path / "src", 16)
    build_world(UserSetConfig(src, tmp_path / "a", seed=1))
    build_world(UserSetConfig(src, tmp_path / "b", seed=1))
    build_world(UserSetConfig(src, tmp_path / "c", seed=2))
    a, b, c = (load_world(tmp_path / x) for x in "abc")
    assert [q["query_id"] for q in a.queries] == [q["query_id"] for q in b.queries]
    assert [q["query_id"] for q in a.queries] != [q["query_id"] for q in c.queries]


def test_vqav2_answer_dicts_are_read(tmp_path):
    src = make_user_set(tmp_path / "src", 6)
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    for r in rows:
        r["answers"] = [{"answer": a, "answer_confidence": "yes"} for a in r["answers"]]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_world(UserSetConfig(src, tmp_path / "w", n_demos=3))
    w = load_world(tmp_path / "w")
    assert all(q["answers"][8:] == ["gray", "brown"] for q in w.queries)


def test_majority_uses_vqa_normalization():
    assert majority(["Two", "2", "2", "three"]) == "Two"
    assert majority(["a dog", "cat", "dog"]) == "a dog"


def test_bad_rows_are_named_and_nothing_is_written(tmp_path):
    src = make_user_set(tmp_path / "src", 8)
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    rows[1]["question"] = ""
    rows[3]["image"] = "images/missing.png"
    rows[4]["answers"] = []
    rows[6]["question_id"] = rows[0]["question_id"]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserSetError) as err:
        build_world(UserSetConfig(src, tmp_path / "w"))
    msg = str(err.value)
    assert "4 of 8 rows are unusable" in msg and str(src) in msg
    assert "row 2: question is empty" in msg
    assert "row 4: image 'images/missing.png' is not a file" in msg
    assert "row 5: answers is not a non-empty list" in msg
    assert "row 7: question_id '1000' repeats row 1" in msg
    assert not (tmp_path / "w").exists()


def test_missing_column_names_the_columns_there(tmp_path):
    src = tmp_path / "vqa.parquet"
    pl.DataFrame({"img": ["a.png"], "question": ["q?"], "answers": [["x"]]}).write_parquet(src)
    with pytest.raises(UserSetError, match=r"no column image / image_path / image_file; the file "
                       r"has img, question, answers"):  # fmt: skip
        build_world(UserSetConfig(src, tmp_path / "w"))


def test_bad_split_and_bad_suffix(tmp_path):
    src = make_user_set(tmp_path / "src", 6, split=True)
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    rows[2]["split"] = "val"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserSetError, match=r"row 3: split 'val' is not one of train, test, demo"):
        build_world(UserSetConfig(src, tmp_path / "w"))
    csv = tmp_path / "vqa.csv"
    csv.write_text("image,question\n")
    with pytest.raises(UserSetError, match=r"use a \.parquet or \.jsonl file, not \.csv"):
        build_world(UserSetConfig(csv, tmp_path / "w"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        build_world(UserSetConfig(tmp_path / "nope.jsonl", tmp_path / "w"))


def test_pool_size_must_leave_queries(tmp_path):
    src = make_user_set(tmp_path / "src", 6)
    with pytest.raises(UserSetError, match="at least 2 demonstrations and 1 query out of 6"):
        build_world(UserSetConfig(src, tmp_path / "w", n_demos=6))


def test_a_synthetic_world_folder_is_not_overwritten(tmp_path):
    from ddai.pipelines.pointer.world import WorldConfig, make_world, write_world

    write_world(make_world(WorldConfig(n_queries=4, n_demos=4)), tmp_path / "w")
    src = make_user_set(tmp_path / "src", 6)
    with pytest.raises(UserSetError, match=r"holds a synthetic world \(sft_labels\.jsonl, "):
        build_world(UserSetConfig(src, tmp_path / "w"))
