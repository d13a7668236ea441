"""``curate focus``: round 1 and round N+1 selection, boundaries, flags, order, missing prompts."""

from __future__ import annotations

import csv

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.funnel_data import group, ids_of, write_dataset, write_log

from ddai.pipelines.funnel import scores
from ddai.pipelines.funnel.focus import FocusConfig, keys, run_focus
from ddai.pipelines.store import manifest


def _csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["uid", "verdict", "reason"])
        w.writerows(rows)
    return path


def test_selection_reasons_in_order(tmp_path):
    ds = write_dataset(tmp_path / "p.parquet", ["a", "b", "c", "d", "e", "a"])
    con = duckdb.connect()
    con.execute(
        f"CREATE TEMP TABLE {scores.SCORES} AS SELECT * FROM (VALUES ('d', 0.1), ('c', 0.0), "
        "('b', 0.31), ('a', 0.3)) t(uid, score)"
    )
    sel = keys(con, [str(ds)], 0.3, flagged={"d": "uncertain", "b": "wrong"})
    kept = con.execute("SELECT _pos FROM _keys WHERE reason = 'keep' ORDER BY _pos").fetchall()
    assert kept == [(0,), (2,)] and sel.kept == 2
    # b is above the threshold before it is flagged; e has no rollouts; the second a is a
    # repeat (no reason: it is counted as a duplicate by the step)
    assert sel.ids == {"flagged uncertain": ["d"], "missing from run": ["e"]}
    assert sel.dropped == {"above 0.3": 1, "flagged uncertain": 1, "missing from run": 1}
    assert list(sel.dropped) == ["missing from run", "above 0.3", "flagged uncertain"]


def test_first_rows_per_file_with_repeats_and_null_ids(tmp_path):
    # an id's first row in each file is its own (a repeat in another file is no repeat here);
    # null ids are one id: only the first counts as a first row, and it has no score
    first = tmp_path / "first.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "a", None, None, "c", "a"]}), first)
    second = write_dataset(tmp_path / "second.parquet", ["c", "c", "a", "b", "b"])
    con = duckdb.connect()
    con.execute(
        f"CREATE TEMP TABLE {scores.SCORES} AS SELECT * FROM (VALUES ('a', 0.1), ('b', 0.5), "
        "('c', 0.0)) t(uid, score)"
    )
    sel = keys(con, [str(first), str(second)], 0.3)
    got = con.execute("SELECT _f, _pos, _first, reason FROM _keys ORDER BY _f, _pos").fetchall()
    assert got == [
        (0, 0, True, "keep"),
        (0, 1, True, "above"),
        (0, 2, False, None),
        (0, 3, True, "missing from run"),
        (0, 4, False, None),
        (0, 5, True, "keep"),
        (0, 6, False, None),
        (1, 0, True, None),
        (1, 1, False, None),
        (1, 2, True, None),
        (1, 3, True, None),
        (1, 4, False, None),
    ]
    assert sel.kept == 2 and sel.dropped == {"missing from run": 1, "above 0.3": 1}


def test_round1_hard_a_in_a_order_then_bucket0(tmp_path):
    a = write_dataset(
        tmp_path / "a.parquet", ["train_5", "train_1", "train_7", "train_3", "train_9"]
    )
    zero = write_dataset(tmp_path / "z.parquet", ["train_20", "train_21", "train_1"])
    rows = (
        # (0.2 + 0.2 + 0.2) / 3 is 0.20000000000000004 in floating point: at the bound, kept
        group("train_5", "reward", [0.2, 0.2, 0.2])
        + group("train_1", "reward", [0.0, 0.0])  # kept
        + group("train_7", "reward", [0.2, 0.200002])  # mean 0.200001: above, dropped
        + group("train_3", "reward", [1.0, 0.0])  # 0.5: dropped
        # train_9 is not in the run: reported, left out
    )
    logs = tmp_path / "logs"
    write_log(logs, "cur", rows)
    res = run_focus(
        FocusConfig(
            out=tmp_path / "r1.parquet", logs=logs, runs=("cur",), bucket_a=a, bucket_0=zero
        )
    )
    # train_1 is in both inputs: kept once, as hard A (first occurrence).
    assert ids_of(res.outputs["focus"]) == ["train_5", "train_1", "train_20", "train_21"]
    assert res.summary["hard A"] == 2
    assert res.summary["bucket 0"] == 2
    assert res.summary["bucket A missing from run"] == 1
    assert res.summary["duplicate ids"] == 1
    # the threshold is a value under a fixed key, never part of a key
    assert (res.summary["hard max"], res.summary["bucket A above hard max"]) == (0.2, 2)
    m = manifest.read(res.outputs["focus"])
    assert m["notes"]["missing_ids"] == ["train_9"]
    assert m["rows"] == {
        "in": 8,
        "out": 4,
        "dropped": {
            "bucket A above 0.2": 2,
            "bucket A missing from run": 1,
            "duplicate id": 1,
        },
    }
    assert m["notes"]["contributions"] == {str(a.resolve()): 2, str(zero.resolve()): 2}


def test_round1_unifies_a_field_bucket_0_adds_and_keeps_the_rows_as_they_were(tmp_path):
    # bucket 0 carries one more extra_info field (a review's note): A's rows get it as null,
    # and every row is the input row as it was (pyarrow's permissive concatenation)
    import pyarrow.parquet as pq

    from ddai.pipelines.funnel import dataset as ds

    a = write_dataset(tmp_path / "a.parquet", ["train_1", "train_2"])
    zero = tmp_path / "z.parquet"
    z = ds.read_dataset(write_dataset(tmp_path / "z0.parquet", ["train_3", "train_1"]))
    pq.write_table(ds.with_extra_field(z, "note", ["checked", "twice"]), zero)
    logs = tmp_path / "logs"
    write_log(logs, "cur", group("train_1", "reward", [0.0]) + group("train_2", "reward", [0.0]))
    res = run_focus(
        FocusConfig(
            out=tmp_path / "r1.parquet", logs=logs, runs=("cur",), bucket_a=a, bucket_0=zero
        )
    )
    got = pq.read_table(res.outputs["focus"])
    want = [
        *(
            {**r, "extra_info": {**r["extra_info"], "note": None}}
            for r in pq.read_table(a).to_pylist()
        ),
        pq.read_table(zero).to_pylist()[0],  # train_3; train_1 is already in hard A
    ]
    assert got.to_pylist() == want
    assert got.schema.field("extra_info").type.names[-1] == "note"
    assert got.schema.metadata == pq.read_table(a).schema.metadata  # the first input's
    assert not any(f.nullable is False for f in got.schema)


def test_round_n_plus_1_low_scorers_minus_flagged_in_previous_order(tmp_path):
    prev = write_dataset(
        tmp_path / "r1.parquet", ["train_4", "train_2", "train_8", "train_6", "train_1", "train_3"]
    )
    rows = (
        # (0.2 + 0.4) / 2 is 0.30000000000000004 in floating point: at the bound, kept
        group("train_4", "reward", [0.2, 0.4])
        + group("train_2", "reward", [0.0, 0.0, 0.0, 0.0])  # kept unless flagged
        + group("train_8", "reward", [0.3, 0.31])  # 0.305: above
        + group("train_6", "reward", [0.0, 0.0])  # flagged wrong in the first review
        + group("train_1", "reward", [0.1, 0.1])  # flagged uncertain, overturned to ok later
        # train_3 missing from the run
    )
    logs = tmp_path / "logs"
    write_log(logs, "r1run", rows)
    first = _csv(
        tmp_path / "review1.csv",
        [
            ["train_6", "wrong", "GT disagrees"],
            ["train_1", "uncertain", "?"],
            ["train_99", "wrong", ""],
        ],
    )
    second = _csv(
        tmp_path / "review2.csv", [["train_1", "ok", "checked again"], ["train_2", "", ""]]
    )
    res = run_focus(
        FocusConfig(
            out=tmp_path / "r2.parquet",
            logs=logs,
            runs=("r1run",),
            prev=prev,
            decisions=(first, second),
        )
    )
    assert ids_of(res.outputs["focus"]) == ["train_4", "train_2", "train_1"]
    assert res.summary == {
        "previous round": 6,
        "score max": 0.3,
        "at or under score max": 4,
        "flagged": 1,
        "next round": 3,
        "missing from run": 1,
        "duplicate ids": 0,
    }
    m = manifest.read(res.outputs["focus"])
    assert m["rows"]["dropped"] == {"above 0.3": 1, "flagged wrong": 1, "missing from run": 1}
    assert m["notes"]["flagged_ids"] == {"flagged wrong": ["train_6"]}


def test_focus_rerun_skips_until_a_decision_changes(tmp_path):
    prev = write_dataset(tmp_path / "r1.parquet", ["train_1", "train_2"])
    logs = tmp_path / "logs"
    write_log(logs, "r", group("train_1", "reward", [0.0]) + group("train_2", "reward", [0.0]))
    review = _csv(tmp_path / "rev.csv", [])
    cfg = FocusConfig(
        out=tmp_path / "r2.parquet", logs=logs, runs=("r",), prev=prev, decisions=(review,)
    )
    assert not run_focus(cfg).skipped
    assert run_focus(cfg).skipped
    _csv(review, [["train_2", "wrong", "bad GT"]])
    res = run_focus(cfg)
    assert not res.skipped and ids_of(res.outputs["focus"]) == ["train_1"]
    # New rollouts in the run change its partition's hash: the step reruns.
    write_log(logs, "r", group("train_1", "reward", [1.0]) + group("train_2", "reward", [0.0]))
    res = run_focus(cfg)
    assert not res.skipped and ids_of(res.outputs["focus"]) == []


def test_empty_selection_writes_an_empty_dataset(tmp_path):
    prev = write_dataset(tmp_path / "r1.parquet", ["train_1"])
    logs = tmp_path / "logs"
    write_log(logs, "r", group("train_1", "reward", [1.0]))
    res = run_focus(FocusConfig(out=tmp_path / "r2.parquet", logs=logs, runs=("r",), prev=prev))
    assert ids_of(res.outputs["focus"]) == []
    assert manifest.read(res.outputs["focus"])["rows"]["out"] == 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "choose one"),
        ({"bucket_a": "a", "prev": "p"}, "choose one"),
        ({"bucket_a": "a"}, "needs both"),
        ({"bucket_a": "a", "bucket_0": "z", "decisions": ("d.csv",)}, "applies to round N"),
        ({"prev": "p", "runs": ()}, "--run"),
    ],
)
def test_config_errors(tmp_path, kw, message):
    kw = {"runs": ("r",), **kw}
    with pytest.raises(ValueError, match=message):
        FocusConfig(out=tmp_path / "o.parquet", logs=tmp_path, **kw)


def test_unknown_run_names_the_known_ones(tmp_path):
    prev = write_dataset(tmp_path / "r1.parquet", ["train_1"])
    logs = tmp_path / "logs"
    write_log(logs, "real", group("train_1", "reward", [1.0]))
    cfg = FocusConfig(out=tmp_path / "o.parquet", logs=logs, runs=("typo",), prev=prev)
    with pytest.raises(FileNotFoundError, match="known runs: real"):
        run_focus(cfg)


def test_a_run_that_scores_none_of_the_prompts_is_an_error_and_writes_nothing(tmp_path):
    # an empty next round with exit 0 looked finished: the run scored another prompt set
    logs = tmp_path / "logs"
    write_log(logs, "r", group("val_1", "reward", [0.0]))
    prev = write_dataset(tmp_path / "r1.parquet", ["train_1", "train_2"])
    out = tmp_path / "r2.parquet"
    with pytest.raises(ValueError) as e:
        run_focus(FocusConfig(out=out, logs=logs, runs=("r",), prev=prev))
    assert str(e.value).startswith(
        f"no prompt of {prev} has a score in the mean reward of run(s) r: its 2 ids "
        "(e.g. train_1, train_2) and the 1 scored ids (e.g. val_1) have none in common"
    )
    assert not out.exists()
    # round 1: bucket A unscored by the run
    zero = write_dataset(tmp_path / "z.parquet", ["train_20"])
    cfg = FocusConfig(out=out, logs=logs, runs=("r",), bucket_a=prev, bucket_0=zero)
    with pytest.raises(ValueError, match=f"no prompt of {prev} has a score"):
        run_focus(cfg)
    assert not out.exists()
