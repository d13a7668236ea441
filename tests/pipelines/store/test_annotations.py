"""Annotations are data: rows of a run's side table through the store's commit (listed with their
hash, so ``lineage --check`` sees an edit), read by the ``annotations`` view and ``ddai query``."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.store import annotations, query, side_log


def _rows(run: str) -> list[dict]:
    return [
        {"uid": f"u{i}", "rollout_idx": k, "step": 1, "question": "q", "reference_answer": "a",
         "answer": "a", "judge_score": 0.5, "reward": 1.0, "extra": {}}
        for i in range(2) for k in range(2)
    ]  # fmt: skip


@pytest.fixture
def logs(tmp_path):
    logs = tmp_path / "logs"
    store.write_run(logs, "r1", _rows("r1"))
    store.write_run(logs, "r2", _rows("r2"))
    return logs


NOW = dt.datetime(2026, 3, 1, 12, 0, 5, tzinfo=dt.UTC)


def test_rows_land_in_the_side_table_listed_with_their_hash(logs):
    a = annotations.add(
        logs,
        annotations.make_row(
            run_id="r1", uid="u0", rollout_idx=1, label="search failure", annotator="ann", now=NOW
        ),
    )
    b = annotations.add(
        logs,
        annotations.make_row(
            run_id="r1", uid="u1", label="wrong ground truth", note="page says 7", annotator="bo"
        ),
    )
    assert (a["target"], b["target"]) == ("rollout", "prompt")
    rec = store.run_manifest(logs, "r1")["side_tables"][annotations.TABLE]
    path = side_log.side_path(logs, annotations.TABLE, "r1")
    from ddai.pipelines.store import io as dio

    assert rec == {"rows": 2, "sha256": dio.sha256_file(path)}
    assert store.verify_partition(store.partition_dir(logs, "r1")) is None
    # an edit of the stored labels is seen by lineage --check's partition check
    path.write_text(path.read_text().replace("search failure", "good demonstration"))
    assert "side table annotations changed" in store.verify_partition(
        store.partition_dir(logs, "r1")
    )


def test_the_view_reads_rows_in_force_with_ids_who_and_when(logs):
    turn = annotations.add(
        logs,
        annotations.make_row(
            run_id="r2", uid="u1", step=1, rollout_idx=0, turn=2, label="format failure",
            annotator="ann", now=NOW,
        ),
    )  # fmt: skip
    gone = annotations.add(
        logs, annotations.make_row(run_id="r1", uid="u0", note="look again", annotator="ann")
    )
    annotations.add(
        logs,
        annotations.make_row(
            run_id="r1", uid="u0", retracts=gone["annotation_id"], annotator="ann"
        ),
    )
    con = query.connect(logs)
    got = con.sql(
        "SELECT run_id, uid, step, rollout_idx, turn, target, label, annotator, created_at "
        "FROM annotations"
    ).fetchall()
    assert got == [
        ("r2", "u1", 1, 0, 2, "turn", "format failure", "ann", dt.datetime(2026, 3, 1, 12, 0, 5))
    ]
    assert con.sql("SELECT annotation_id FROM annotations").fetchall() == [(turn["annotation_id"],)]
    # a selection of runs reads only their labels; a store without any reads none
    assert query.connect(logs, ["r1"]).sql("SELECT count(*) FROM annotations").fetchall() == [(0,)]


def test_ddai_query_exports_the_labels_with_their_ids(logs):
    annotations.add(
        logs,
        annotations.make_row(
            run_id="r1", uid="u1", rollout_idx=0, label="good demonstration", annotator="ann"
        ),
    )
    sql = "SELECT run_id, uid, rollout_idx, label, annotator FROM annotations"
    assert query.views_for(sql)[-1] == "annotations"
    res = CliRunner().invoke(app, ["query", sql, "--logs", str(logs), "--format", "csv"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert rows == [
        {"run_id": "r1", "uid": "u1", "rollout_idx": "0", "label": "good demonstration",
         "annotator": "ann"}
    ]  # fmt: skip


def test_an_append_not_listed_yet_is_not_read(logs):
    annotations.add(
        logs, annotations.make_row(run_id="r1", uid="u0", label="search failure", annotator="a")
    )
    path = side_log.side_path(logs, annotations.TABLE, "r1")
    extra = annotations.make_row(run_id="r1", uid="u1", label="search failure", annotator="a")
    with open(path, "a") as f:  # a writer killed between its append and its manifest delta
        f.write(json.dumps(extra) + "\n")
    con = query.connect(logs)
    assert con.sql("SELECT uid FROM annotations").fetchall() == [("u0",)]


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"label": "bad vibes"}, "is not one of"),
        ({}, "needs a label"),
        ({"label": "search failure", "turn": 1}, "needs its rollout"),
        ({"label": "search failure", "rollout_idx": -1}, "0 or more"),
        ({"label": "search failure", "step": "x"}, "whole number"),
        ({"label": "search failure", "run_id": "../x"}, "not usable as a folder name"),
    ],
)
def test_bad_rows_are_refused_naming_the_field(kw, msg):
    args = {"run_id": "r1", "uid": "u0", "annotator": "ann", **kw}
    with pytest.raises(ValueError, match=msg):
        annotations.make_row(**args)


def test_a_run_not_in_the_store_is_refused(logs):
    row = annotations.make_row(run_id="r9", uid="u0", label="search failure", annotator="a")
    with pytest.raises(FileNotFoundError, match="r9"):
        annotations.add(logs, row)
    assert not side_log.side_path(logs, annotations.TABLE, "r9").exists()


def test_annotator_comes_from_user_when_not_given(monkeypatch):
    monkeypatch.setenv("USER", "kim")
    assert annotations.annotator_name(None) == "kim"
    assert annotations.annotator_name("lee") == "lee"
    monkeypatch.delenv("USER")
    with pytest.raises(ValueError, match="--annotator"):
        annotations.annotator_name("")
