"""Capabilities per run: counted at ingest into the manifest, counted again for old manifests,
and the up-front check commands run."""

from __future__ import annotations

import json

import pytest
from oracles.capability_sql import count_table

from ddai.pipelines import store
from ddai.pipelines.funnel import scores
from ddai.pipelines.records.schema import ROLLOUT_SCHEMA
from ddai.pipelines.store import capabilities

SEARCH = "<think>look</think>\n<search>revenue 2019</search>"


def _rows() -> list[dict]:
    # 1: a trajectory whose search showed a page image; 2: judged and scored only;
    # 3: a trained rollout with reward, step and advantage but no turns.
    turn = {"idx": 0, "think": "look", "action": "search", "arg": "q", "retrieved": ["d_1"]}
    return [
        {"uid": "p", "rollout_idx": 0, "turns": [turn], "retrieved_pages": ["d_1"]},
        {"uid": "p", "rollout_idx": 1, "judge_score": 1.0, "ndcg": 0.5},
        {"uid": "q", "rollout_idx": 0, "reward": 0.2, "step": 3, "advantage": -1.0},
    ]


EXPECTED = {
    "rollouts": 3,
    "turns": 1,
    "pages": 1,
    "judge": 1,
    "ndcg": 1,
    "reward": 1,
    "step": 1,
    "advantages": 1,
    "images": 1,
}


def test_counts_each_field_over_a_table():
    import pyarrow as pa

    rows = [{c: r.get(c) for c in ROLLOUT_SCHEMA.names} | {"run_id": "r"} for r in _rows()]
    assert count_table(pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA)) == EXPECTED


def test_manifest_holds_the_counts_and_append_adds(tmp_path):
    man = store.write_run(tmp_path, "r", [dict(r, run_id="r") for r in _rows()])
    assert man["capabilities"]["judge"] == 1
    assert man["capabilities"]["rollouts"] == 3
    again = store.write_run(tmp_path, "r", [dict(_rows()[1], run_id="r")], append=True)
    assert again["capabilities"]["rollouts"] == 4
    assert again["capabilities"]["judge"] == 2
    caps = capabilities.run_capabilities(tmp_path, "r")
    assert (caps.rollouts, caps.count("judge"), caps.counted) == (4, 2, False)


def test_a_manifest_without_counts_is_counted_by_query(tmp_path):
    store.write_run(tmp_path, "r", [dict(r, run_id="r") for r in _rows()])
    written = capabilities.run_capabilities(tmp_path, "r")
    path = store.partition_dir(tmp_path, "r") / store.MANIFEST
    man = json.loads(path.read_text())
    del man["capabilities"]  # a run ingested before the counts existed
    path.write_text(json.dumps(man))
    counted = capabilities.run_capabilities(tmp_path, "r")
    assert counted.counted
    assert counted.counts == written.counts
    assert counted.rollouts == 3


def test_require_names_run_need_and_fix(tmp_path):
    rows = [{"run_id": "flash", "uid": "p", "rollout_idx": i, "judge_score": 1.0} for i in range(2)]
    store.write_run(tmp_path, "flash", rows)
    caps = capabilities.run_capabilities(tmp_path, "flash")
    assert caps.lacks() == ["turns", "pages", "ndcg", "reward", "step", "advantages", "images"]
    assert caps.compact() == "judge"
    capabilities.require(caps, "judge", needed_by="x")  # present: no error
    with pytest.raises(capabilities.MissingCapability) as e:
        capabilities.require(caps, "turns", needed_by="`ddai distill`", why="to rebuild SFT")
    msg = str(e.value)
    assert "run flash has no turns" in msg
    assert "none of its 2 rollouts" in msg
    assert "`ddai distill` needs turns to rebuild SFT" in msg
    assert "--run-id flash" in msg  # the fix names the run
    assert isinstance(e.value, ValueError)  # CLI: exit 2


def test_partial_counts_show_as_a_fraction(tmp_path):
    rows = [{"run_id": "r", "uid": "p", "rollout_idx": 0, "judge_score": 1.0}]
    rows.append({"run_id": "r", "uid": "p", "rollout_idx": 1, "response": SEARCH})
    store.write_run(tmp_path, "r", rows)
    caps = capabilities.run_capabilities(tmp_path, "r")
    assert caps.compact().startswith("turns 1/2")
    assert "judge 1/2" in caps.compact()


def test_curate_scores_refuse_a_run_without_the_metric(tmp_path):
    rows = [{"run_id": "r", "uid": "p", "rollout_idx": 0, "reward": 1.0}]
    store.write_run(tmp_path, "r", rows)
    assert scores.as_dict(scores.log_scores(tmp_path, ["r"], "reward")) == {"p": 1.0}
    with pytest.raises(capabilities.MissingCapability, match="run r has no ndcg") as e:
        scores.log_scores(tmp_path, ["r"], "ndcg")
    assert "--scores" not in str(e.value)  # only `curate bucket` has that alternative
    with pytest.raises(capabilities.MissingCapability) as e:
        scores.log_scores(
            tmp_path, ["r"], "judge", needed_by="`x`", or_else="pass --scores FILE instead"
        )
    said = str(e.value)
    assert "`x` needs judge to score prompts by their mean judge" in said
    assert "score the run with a judge, or pass --scores FILE instead" in said


def test_curate_bucket_on_a_run_without_the_metric_names_its_scores_flag(tmp_path):
    from typer.testing import CliRunner

    from ddai.cli.app import app

    store.write_run(tmp_path / "logs", "r", [{"uid": "p", "rollout_idx": 0, "reward": 1.0}])
    ds = tmp_path / "ds.jsonl"
    ds.write_text('{"id": "p", "question": "q"}\n')
    res = CliRunner().invoke(
        app,
        ["curate", "bucket", "--dataset", str(ds), "--logs", str(tmp_path / "logs"), "--run",
         "r", "--metric", "ndcg", "--out-dir", str(tmp_path / "b")],
    )  # fmt: skip
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "`ddai curate bucket --run` needs ndcg" in said
    assert "or pass a per-prompt score table instead of --run (`--scores FILE --score-col" in said


def _edge_rows() -> list[dict]:
    """Rows at every edge of the counts: turns null, empty, with a null turn, with a turn whose
    ``retrieved`` is null or empty, several turns of which a later one shows a page; the scalar
    fields null or not in turn."""
    t = {"idx": 0, "think": "t", "action": "search", "arg": "q"}
    turn_lists = [
        None,
        [],
        [None],
        [dict(t, retrieved=None)],
        [dict(t, retrieved=[])],
        [dict(t, retrieved=[]), dict(t, idx=1, retrieved=["d_1", "d_2"])],
        [dict(t, retrieved=["d_1"]), None],
        [dict(t, retrieved=["d_1"])],
    ]
    rows = []
    for i, turns in enumerate(turn_lists * 3):
        rows.append(
            {
                "uid": f"u{i}",
                "rollout_idx": i,
                "turns": turns,
                "retrieved_pages": [] if i % 3 == 0 else (["d_1"] if i % 3 == 1 else None),
                "judge_score": 1.0 if i % 2 else None,
                "ndcg": 0.5 if i % 4 == 1 else None,
                "reward": None if i % 5 == 0 else 0.2,
                "step": i if i % 6 else None,
                "advantage": -1.0 if i % 7 < 3 else None,
            }
        )
    return rows


def test_arrow_counts_equal_the_sql_definition_on_the_same_rows():
    """``count_arrow`` (what the store counts each written batch with) is ``sql/capabilities.sql``
    on the same rows: the whole table, a slice (offsets into the lists), several chunks."""
    import pyarrow as pa

    from ddai.pipelines.store.capability_count import count_arrow

    rows = [{c: r.get(c) for c in ROLLOUT_SCHEMA.names} | {"run_id": "r"} for r in _edge_rows()]
    t = pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA)
    want = count_table(t)
    assert want["images"] == 9 and want["turns"] == 18 and want["pages"] == 16  # edges hit
    assert count_arrow(t) == want
    part = t.slice(5, 11)
    assert count_arrow(part) == count_table(part)
    chunked = pa.concat_tables([t.slice(0, 7), t.slice(7)])
    assert chunked.column("turns").num_chunks == 2
    assert count_arrow(chunked) == want
    one = [{c: r.get(c) for c in ROLLOUT_SCHEMA.names} | {"run_id": "r"} for r in _rows()]
    assert count_arrow(pa.Table.from_pylist(one, schema=ROLLOUT_SCHEMA)) == EXPECTED
