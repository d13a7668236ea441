"""Datasets kept in their own shape, and review decisions read from CSV."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from support.funnel_data import verl_rows, write_dataset

from ddai.pipelines.funnel import dataset as ds
from ddai.pipelines.records.decisions import read_decisions


def test_with_extra_field_keeps_everything_else(tmp_path):
    path = write_dataset(tmp_path / "d.parquet", ["train_1", "train_2"])
    t = ds.read_dataset(path)
    out = ds.with_extra_field(t, "score", pa.array([0.5, None], pa.float64()))
    assert out.column_names == t.column_names
    for name in t.column_names:
        if name != "extra_info":
            assert out[name].equals(t[name])
    rows = out["extra_info"].to_pylist()
    assert rows[0] == {**t["extra_info"].to_pylist()[0], "score": 0.5}
    assert rows[1]["score"] is None
    feats = json.loads(out.schema.metadata[b"huggingface"])["info"]["features"]
    assert feats["extra_info"]["score"] == {"dtype": "float64", "_type": "Value"}
    # Setting it again replaces the field instead of adding a second one.
    again = ds.with_extra_field(out, "score", pa.array([1.0, 2.0]))
    assert again.schema.field("extra_info").type.names.count("score") == 1
    assert [r["score"] for r in again["extra_info"].to_pylist()] == [1.0, 2.0]


def test_with_extra_field_keeps_null_structs_and_creates_a_missing_column():
    t = pa.table(
        {
            "id": ["a", "b"],
            "extra_info": pa.array([{"k": 1}, None], pa.struct([("k", pa.int64())])),
        }
    )
    out = ds.with_extra_field(t, "s", [0.1, 0.2])
    assert out["extra_info"].to_pylist() == [{"k": 1, "s": 0.1}, None]
    bare = ds.with_extra_field(pa.table({"id": ["a"]}), "s", [0.3])
    assert bare["extra_info"].to_pylist() == [{"s": 0.3}]


def test_unreadable_hf_metadata_is_dropped_not_left_wrong():
    t = pa.table({"id": ["a"]}).replace_schema_metadata({b"huggingface": b"not json"})
    out = ds.with_extra_field(t, "s", [0.3])
    assert b"huggingface" not in (out.schema.metadata or {})


def test_first_occurrences():
    t = pa.table({"id": ["a", "b", "a", "c", "b"], "v": [1, 2, 3, 4, 5]})
    kept, dups = ds.first_occurrences(t)
    assert kept.to_pydict() == {"id": ["a", "b", "c"], "v": [1, 2, 4]}
    assert dups == ["a", "b"]


def test_first_occurrences_match_polars_is_first_distinct():
    """Against polars' ``is_first_distinct`` (the reference): nulls, chunk borders, no dups."""
    import random

    import polars as pl
    import pyarrow.compute as pc

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 40)
        names = [None, *(f"u{k}" for k in range(rng.randint(1, 10)))]
        vals = [rng.choice(names) for _ in range(n)]
        cut = rng.randint(0, n)
        ids = pa.chunked_array(
            [pa.array(vals[:cut], pa.string()), pa.array(vals[cut:], pa.string())]
        )
        t = pa.table({"id": ids, "row": list(range(n))})
        first = pl.from_arrow(t["id"]).is_first_distinct().to_arrow()
        kept, dups = ds.first_occurrences(t)
        assert kept.equals(t.filter(first)), vals
        assert dups == t["id"].filter(pc.invert(first)).to_pylist(), vals


def test_read_dataset_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        ds.read_dataset(tmp_path / "nope.parquet")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"uid": ["a"]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="no `id` column"):
        ds.read_dataset(tmp_path / "x.parquet")


def test_verl_row_fields():
    row = verl_rows(["train_17"])[0]
    assert ds.question_of(row) == "What is the value on slide 2 of deck 17?"
    assert ds.reference_of(row) == "answer 17"
    assert ds.reference_page_ids(row) == ["17_2"]
    # Fallbacks: the user message without its "Question: " prefix; extra_info's pages.
    bare = {
        "prompt": [{"role": "user", "content": "Question: Why?"}],
        "extra_info": {"answer": "because", "file_name": "3.pdf", "reference_page": [4, 5]},
    }
    assert ds.question_of(bare) == "Why?"
    assert ds.reference_of(bare) == "because"
    assert ds.reference_page_ids(bare) == ["3_4", "3_5"]


def test_read_decisions(tmp_path):
    a = tmp_path / "a.csv"
    # A BOM and upper-case headers, as spreadsheets write them; an empty verdict is undecided.
    a.write_text(
        "\ufeffUID,Verdict,Reason\ntrain_1,Wrong,bad\ntrain_2,,\ntrain_3,uncertain,?\n",
        encoding="utf-8",
    )
    b = tmp_path / "b.csv"
    b.write_text("uid,verdict\ntrain_3,ok\n", encoding="utf-8")
    got = read_decisions([a, b])
    assert {u: d.verdict for u, d in got.items()} == {"train_1": "wrong", "train_3": "ok"}
    assert got["train_1"].flagged and not got["train_3"].flagged
    assert got["train_1"].reason == "bad" and got["train_3"].source == str(b)
    bad = tmp_path / "bad.csv"
    bad.write_text("id,decision\nx,ok\n", encoding="utf-8")
    with pytest.raises(ValueError, match="needs the columns uid, verdict"):
        read_decisions([bad])
    # rows but no verdict at all: a sheet not filled in (a header alone is an empty review)
    blank = tmp_path / "blank.csv"
    blank.write_text("uid,verdict,reason\ntrain_1,,\ntrain_2, ,\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"blank\.csv: none of its 2 rows has a verdict"):
        read_decisions([blank])
    (tmp_path / "empty.csv").write_text("uid,verdict,reason\n", encoding="utf-8")
    assert read_decisions([tmp_path / "empty.csv"]) == {}
