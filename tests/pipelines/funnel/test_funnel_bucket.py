"""``curate bucket``: thresholds, ordering, missing and duplicate prompts, empty buckets, reruns."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from support.funnel_data import group, ids_of, write_dataset, write_log

from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket, split
from ddai.pipelines.store import manifest


def _scores(path, pairs):
    pl.DataFrame({"id": [p[0] for p in pairs], "s": [p[1] for p in pairs]}).write_parquet(path)
    return path


def test_split_boundaries_are_inclusive_for_bucket_a():
    # 0.7 and 0.1 are A (0.1 <= x <= 0.7); just above 0.7 is B, just below 0.1 is 0; NaN: none.
    vals = np.array([0.7, 0.1, 0.7 + 1e-6, 0.1 - 1e-6, 0.0, 1.0, np.nan])
    parts = split(vals, mastered=0.7, floor=0.1)
    assert parts["b"].tolist() == [5, 2]  # 1.0 then 0.700001: score descending
    assert parts["a"].tolist() == [0, 1]
    assert parts["0"].tolist() == [3, 4]


def test_split_ties_keep_row_order():
    vals = np.array([0.5, 0.3, 0.5, 0.3, 0.5])
    assert split(vals, mastered=0.7, floor=0.1)["a"].tolist() == [0, 2, 4, 1, 3]


def test_bucket_from_score_table(tmp_path):
    ids = [f"train_{i}" for i in range(8)]
    ds = write_dataset(tmp_path / "set.parquet", ids)
    scores = _scores(
        tmp_path / "s.parquet",
        [
            ("train_0", 0.7),  # A (boundary)
            ("train_1", 0.1),  # A (boundary)
            ("train_2", 0.9),  # B
            ("train_3", 0.05),  # 0
            ("train_4", 0.4),  # A
            ("train_5", 0.9),  # B, tie with train_2: dataset order
            ("train_99", 0.5),  # not in the dataset
            # train_6, train_7: no score
        ],
    )
    res = run_bucket(BucketConfig(dataset=ds, out=tmp_path / "out", scores=scores, score_col="s"))
    assert ids_of(res.outputs["b"]) == ["train_2", "train_5"]
    assert ids_of(res.outputs["a"]) == ["train_0", "train_4", "train_1"]
    assert ids_of(res.outputs["0"]) == ["train_3"]
    assert res.summary["no score"] == 2
    assert res.summary["scored ids not in the dataset"] == 1
    m = manifest.read(res.outputs["a"])
    assert m["notes"]["unscored_ids"] == ["train_6", "train_7"]
    assert m["rows"] == {
        "in": 8,
        "out": 3,
        "dropped": {"bucket B": 2, "bucket 0": 1, "no score": 2},
    }
    # The dataset's shape, plus the score in extra_info under the score column's name.
    a = pq.read_table(res.outputs["a"])
    src = pq.read_table(ds)
    assert a.column_names == src.column_names
    assert [a.schema.field(c).type for c in a.column_names[:-1]] == [
        src.schema.field(c).type for c in src.column_names[:-1]
    ]
    assert a.schema.field("extra_info").type.names[-1] == "s"
    assert [r["s"] for r in a["extra_info"].to_pylist()] == [0.7, 0.4, 0.1]
    assert (
        a["extra_info"].to_pylist()[0]["question"] == src["extra_info"].to_pylist()[0]["question"]
    )
    hf = json.loads(a.schema.metadata[b"huggingface"])
    assert hf["info"]["features"]["extra_info"]["s"] == {"dtype": "float64", "_type": "Value"}


def test_bucket_from_log_mean_ndcg_with_format_failures_as_zero(tmp_path):
    ids = ["train_1", "train_2", "train_3", "train_4", "train_5"]
    ds = write_dataset(tmp_path / "set.parquet", ids)
    rows = (
        # (0.1 + 1 + 1) / 3 is 0.7000000000000001 in floating point: still A (0.7 is A's bound)
        group("train_1", "ndcg", [0.1, 1.0, 1.0])
        # 1.0, 1.0 and a format failure with NDCG 1.0 counted as 0: mean 2/3 → A
        + group("train_2", "ndcg", [1.0, 1.0])
        + [{"uid": "train_2", "rollout_idx": 2, "ndcg": 1.0, "format_ok": False}]
        # NDCG 0.3 and a missing NDCG (counts 0): mean 0.15 → A; max 0.3
        + group("train_3", "ndcg", [0.3, None])
        # train_4 has no rollouts
        # (0.3 + 0 + 0) / 3 is 0.09999999999999999 in floating point: still A (0.1 is A's bound)
        + group("train_5", "ndcg", [0.3, 0.0, 0.0])
    )
    logs = tmp_path / "logs"
    write_log(logs, "p1", rows)
    res = run_bucket(BucketConfig(dataset=ds, out=tmp_path / "o", logs=logs, runs=("p1",)))
    assert ids_of(res.outputs["a"]) == ["train_1", "train_2", "train_3", "train_5"]
    assert ids_of(res.outputs["b"]) == [] and ids_of(res.outputs["0"]) == []
    got = [r["ndcg_mean"] for r in pq.read_table(res.outputs["a"])["extra_info"].to_pylist()]
    assert got == pytest.approx([0.7, 2 / 3, 0.15, 0.1], abs=1e-12)
    assert manifest.read(res.outputs["a"])["notes"]["unscored_ids"] == ["train_4"]

    res_max = run_bucket(
        BucketConfig(dataset=ds, out=tmp_path / "m", logs=logs, runs=("p1",), agg="max", floor=0.35)
    )
    # max: train_1 1.0 and train_2 1.0 (B, dataset order), train_3 0.3 and train_5 0.3 (0)
    assert ids_of(res_max.outputs["b"]) == ["train_1", "train_2"]
    assert ids_of(res_max.outputs["0"]) == ["train_3", "train_5"]
    assert res_max.summary["score"] == "ndcg_max"


def test_duplicate_ids_keep_first_row(tmp_path):
    ds = write_dataset(tmp_path / "set.parquet", ["train_1", "train_2", "train_1"])
    scores = _scores(tmp_path / "s.parquet", [("train_1", 0.5), ("train_2", 0.5)])
    res = run_bucket(BucketConfig(dataset=ds, out=tmp_path / "o", scores=scores, score_col="s"))
    a = pq.read_table(res.outputs["a"])
    assert a["id"].to_pylist() == ["train_1", "train_2"]
    assert [r["index"] for r in a["extra_info"].to_pylist()] == [0, 1]  # the first train_1 row
    m = manifest.read(res.outputs["a"])
    assert m["notes"]["duplicate_ids"] == ["train_1"]
    assert m["rows"]["dropped"]["duplicate id"] == 1


def test_empty_buckets_are_written_with_the_schema(tmp_path):
    ds = write_dataset(tmp_path / "set.parquet", ["train_1", "train_2"])
    scores = _scores(tmp_path / "s.parquet", [("train_1", 0.95), ("train_2", 0.8)])
    res = run_bucket(BucketConfig(dataset=ds, out=tmp_path / "o", scores=scores, score_col="s"))
    for b in ("a", "0"):
        t = pq.read_table(res.outputs[b])
        assert t.num_rows == 0
        assert t.schema.field("extra_info").type.names[-1] == "s"
        assert manifest.read(res.outputs[b])["rows"]["out"] == 0


def test_unchanged_rerun_is_skipped_and_changes_rerun(tmp_path):
    ds = write_dataset(tmp_path / "set.parquet", ["train_1", "train_2"])
    scores = _scores(tmp_path / "s.parquet", [("train_1", 0.5), ("train_2", 0.05)])
    cfg = BucketConfig(dataset=ds, out=tmp_path / "o", scores=scores, score_col="s")
    first = run_bucket(cfg)
    stamp = manifest.read(first.outputs["a"])["created"], first.outputs["a"].stat().st_mtime_ns
    again = run_bucket(cfg)
    assert again.skipped and again.summary == first.summary
    assert (
        manifest.read(first.outputs["a"])["created"],
        first.outputs["a"].stat().st_mtime_ns,
    ) == stamp

    forced = run_bucket(BucketConfig(**{**cfg.__dict__, "force": True}))
    assert not forced.skipped
    # A changed parameter reruns: with floor 0.01, train_2 (0.05) moves from 0 to A.
    moved = run_bucket(BucketConfig(**{**cfg.__dict__, "floor": 0.01}))
    assert not moved.skipped and ids_of(moved.outputs["a"]) == ["train_1", "train_2"]
    # A changed input reruns.
    _scores(scores, [("train_1", 0.9), ("train_2", 0.05)])
    changed = run_bucket(BucketConfig(**{**cfg.__dict__}))
    assert not changed.skipped and ids_of(changed.outputs["b"]) == ["train_1"]


def test_a_deleted_output_reruns(tmp_path):
    ds = write_dataset(tmp_path / "set.parquet", ["train_1"])
    scores = _scores(tmp_path / "s.parquet", [("train_1", 0.5)])
    cfg = BucketConfig(dataset=ds, out=tmp_path / "o", scores=scores, score_col="s")
    run_bucket(cfg)
    (tmp_path / "o" / "curriculum_bucket_0.parquet").unlink()
    assert not run_bucket(cfg).skipped
    assert (tmp_path / "o" / "curriculum_bucket_0.parquet").is_file()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "give one score source"),
        ({"runs": ("r",), "scores": "s.parquet", "score_col": "s"}, "give one score source"),
        ({"scores": "s.parquet", "score_col": "s", "floor": 0.8}, "must not exceed"),
        ({"runs": ("r",), "logs": "l", "metric": "bleu"}, "metric 'bleu' is not known"),
    ],
)
def test_config_errors_say_how_to_fix(tmp_path, kw, message):
    with pytest.raises(ValueError, match=message):
        BucketConfig(dataset=tmp_path / "d.parquet", out=tmp_path, **kw)


def test_conflicting_scores_for_one_id_are_an_error(tmp_path):
    ds = write_dataset(tmp_path / "set.parquet", ["train_1"])
    scores = _scores(tmp_path / "s.parquet", [("train_1", 0.5), ("train_1", 0.6)])
    with pytest.raises(ValueError, match="different scores"):
        run_bucket(BucketConfig(dataset=ds, out=tmp_path / "o", scores=scores, score_col="s"))


def test_scores_that_name_none_of_the_dataset_are_an_error_and_write_nothing(tmp_path):
    # three empty buckets with exit 0 looked like a finished step (wrong --scores or --dataset)
    ds = write_dataset(tmp_path / "set.parquet", ["train_1", "train_2"])
    scores = _scores(tmp_path / "s.parquet", [("val_1", 0.5), ("val_2", None)])
    out = tmp_path / "o"
    with pytest.raises(ValueError) as e:
        run_bucket(BucketConfig(dataset=ds, out=out, scores=scores, score_col="s"))
    msg = str(e.value)
    assert f"no prompt of {ds} has a score in the score table {scores} (column s)" in msg
    assert "its 2 ids (e.g. train_1, train_2) and the 1 scored ids (e.g. val_1)" in msg
    assert not out.exists()
    # from a run's rollouts: the run is named
    logs = tmp_path / "logs"
    write_log(logs, "p1", group("val_1", "ndcg", [0.5]))
    with pytest.raises(ValueError, match=r"has a score in the ndcg of run\(s\) p1: its 2 ids"):
        run_bucket(BucketConfig(dataset=ds, out=out, logs=logs, runs=("p1",)))
    assert not out.exists()
    # one scored prompt is enough to bucket (the rest are counted as having no score)
    scores = _scores(tmp_path / "s2.parquet", [("train_2", 0.5)])
    res = run_bucket(BucketConfig(dataset=ds, out=out, scores=scores, score_col="s"))
    assert res.summary["no score"] == 1 and res.summary["bucket A"] == 1


def test_score_column_defaults_to_the_tables_one_numeric_column(tmp_path):
    ds = write_dataset(tmp_path / "set.parquet", ["train_1", "train_2"])
    scores = _scores(tmp_path / "s.parquet", [("train_1", 0.9), ("train_2", 0.5)])
    res = run_bucket(BucketConfig(dataset=ds, out=tmp_path / "o", scores=scores))
    assert res.summary["score"] == "s" and res.summary["bucket B"] == 1
    assert pq.read_table(res.outputs["a"])["extra_info"].to_pylist()[0]["s"] == 0.5
    two = tmp_path / "two.csv"
    two.write_text("id,a,b,note\ntrain_1,0.1,0.2,x\n")
    with pytest.raises(ValueError) as e:
        run_bucket(BucketConfig(dataset=ds, out=tmp_path / "o2", scores=two))
    assert str(e.value) == (
        f"{two}: pass --score-col naming the score column (columns: id, a, b, note); the "
        "default needs exactly one numeric column besides id, found 2: a, b"
    )


def test_native_output_equals_the_arrow_transform_on_unusual_shapes(tmp_path):
    # integer ids (read as text), a repeated id, a null extra_info (stays null), a field of the
    # score's name already there (replaced, moved last), Hugging Face metadata, and a dataset
    # without extra_info (gets one of just the score): the rows pyarrow's transform gave
    import pyarrow as pa

    from ddai.pipelines.funnel import dataset as ds

    extra = pa.array(
        [{"s": 9.0, "k": "x"}, None, {"s": None, "k": "z"}, {"s": 1.0, "k": "w"}],
        pa.struct([("s", pa.float64()), ("k", pa.string())]),
    )
    meta = {b"huggingface": json.dumps({"info": {"features": {"extra_info": {}}}}).encode()}
    src = pa.table({"id": [3, 1, 2, 3], "extra_info": extra}).replace_schema_metadata(meta)
    bare = pa.table({"id": ["3", "1", "2"], "v": [[1], None, [2, 3]]})
    scores = _scores(tmp_path / "s.parquet", [("1", 0.5), ("2", 0.4), ("3", 0.5)])
    for name, table in (("src", src), ("bare", bare)):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table, path)
        res = run_bucket(
            BucketConfig(dataset=path, out=tmp_path / name, scores=scores, score_col="s")
        )
        first, _ = ds.first_occurrences(ds.read_dataset(path))
        # bucket A: 0.5, 0.5 (dataset order: 3 then 1), then 0.4
        order = [first["id"].to_pylist().index(u) for u in ("3", "1", "2")]
        want = ds.with_extra_field(first.take(order), "s", pa.array([0.5, 0.5, 0.4]))
        pq.write_table(want, tmp_path / "want.parquet")  # as the Arrow path wrote it
        want = pq.read_table(tmp_path / "want.parquet")
        got = pq.read_table(res.outputs["a"])
        assert got.to_pylist() == want.to_pylist()
        assert got.schema == want.schema, (got.schema, want.schema)  # names, types, nullability
        assert got.schema.metadata == want.schema.metadata
        assert manifest.read(res.outputs["a"])["notes"]["duplicate_ids"] == (
            ["3"] if name == "src" else []
        )
