"""The funnel section: curated datasets' manifests drawn as a Sankey with counts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from report_world import planted_store

from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import manifest
from ddai.reports import ReportConfig, build_report
from ddai.reports.sections.funnel import columns, sankey


def _dataset(path: Path, n: int) -> Path:
    pq.write_table(pa.table({"id": [f"train_{i}" for i in range(n)]}), path)
    return path


def _step(out: Path, n: int, step: str, inputs: dict[Path, int | None]) -> Path:
    """A curated output of ``n`` rows whose manifest says how many rows each input gave."""
    _dataset(out, n)
    rec = manifest.start(step, {"rule": step}, list(inputs))
    rec.rows_in = sum(v or 0 for v in inputs.values())
    rec.rows_out = n
    rec.notes = {"contributions": {str(p): v for p, v in inputs.items() if v is not None}}
    manifest.write(out, rec)
    return out


@pytest.fixture
def chain(tmp_path):
    """10 prompts → buckets B 3 / A 5 / 0 2 → round 1 (2 hard A + 2 from bucket 0) → round 2 (1).

    A score table shapes the buckets and a log partition (ingested from a JSONL file) scores
    round 1, neither contributing prompts (no count on their edges)."""
    d = tmp_path / "curated"
    d.mkdir()
    src = _dataset(d / "train.parquet", 10)
    scores = _dataset(d / "scores.parquet", 10)
    raw = d / "run.jsonl"
    raw.write_text('{"run_id": "r", "uid": "train_0", "rollout_idx": 0}\n', encoding="utf-8")
    ingest(IngestConfig([raw], tmp_path / "logs", progress=False))
    part = tmp_path / "logs" / "run_id=r"
    b = _step(d / "bucket_B.parquet", 3, "curate.bucket", {src: 3, scores: None})
    a = _step(d / "bucket_A.parquet", 5, "curate.bucket", {src: 5, scores: None})
    z = _step(d / "bucket_0.parquet", 2, "curate.bucket", {src: 2, scores: None})
    r1 = _step(d / "round1.parquet", 4, "curate.focus", {a: 2, z: 2, part: None})
    r2 = _step(d / "round2.parquet", 1, "curate.focus", {r1: 1})
    return {"dir": d, "B": b, "round2": r2}


def _funnel(tmp_path, **kw):
    logs = planted_store(tmp_path / "w")
    out = tmp_path / "r.html"
    res = build_report(ReportConfig(logs=logs, out=out, progress=False, browse_max=0, **kw))
    return res["stats"]["funnel"], out.read_text(encoding="utf-8")


def test_sankey_links_carry_the_counts(chain, tmp_path):
    st, html = _funnel(tmp_path, datasets=[chain["round2"], chain["B"]])
    assert st["datasets"] == 2
    links = {(x["source"], x["target"]): x["rows"] for x in st["links"]}
    assert links == {
        ("train.parquet", "bucket_A.parquet"): 5,
        ("train.parquet", "bucket_0.parquet"): 2,
        ("bucket_A.parquet", "round1.parquet"): 2,
        ("bucket_0.parquet", "round1.parquet"): 2,
        ("round1.parquet", "round2.parquet"): 1,
        ("train.parquet", "bucket_B.parquet"): 3,
    }
    rows = {n["name"]: n["rows"] for n in st["nodes"]}
    assert rows["train.parquet"] == 10 and rows["round1.parquet"] == 4
    # listed in the table, not drawn as flows: the score table, and the log partition with the
    # raw file it was ingested from (1 rollout: a count of rollouts, not of prompts)
    assert rows["scores.parquet"] == 10 and rows["run_id=r"] == 1 and "run.jsonl" in rows
    assert 'id="fig-funnel-sankey"' in html and '"type":"sankey"' in html


def test_datasets_dir_finds_every_curated_output(chain, tmp_path):
    st, _ = _funnel(tmp_path, datasets_dir=chain["dir"])
    # the five outputs with manifests; train.parquet and scores.parquet have none
    assert st["datasets"] == 5
    assert len(st["links"]) == 6


def test_no_datasets_leaves_a_note(tmp_path):
    st, html = _funnel(tmp_path)
    assert st == {"datasets": 0}
    assert "No curated datasets given: pass --datasets FILE" in html


def test_a_dataset_ddai_did_not_write_is_named_not_drawn_as_an_empty_funnel(chain, tmp_path):
    # Before: "goes through 0 recorded steps" and a one-row table, no word why.
    train = chain["dir"] / "train.parquet"
    st, html = _funnel(tmp_path, datasets=[train])
    assert st == {"datasets": 0} and 'id="fig-funnel-sankey"' not in html
    assert "train.parquet has no manifest (&lt;file&gt;.manifest.json)" in html
    # beside a curated output: drawn from the output, the plain file named
    st, html = _funnel(tmp_path / "two", datasets=[train, chain["round2"]])
    assert st["datasets"] == 2 and 'id="fig-funnel-sankey"' in html
    assert "train.parquet has no manifest" in html


def test_a_datasets_dir_without_curated_outputs_says_so(tmp_path):
    # Before: "No curated datasets given", although --datasets-dir was given.
    folder = tmp_path / "plain"
    folder.mkdir()
    _dataset(folder / "train.parquet", 3)
    st, html = _funnel(tmp_path, datasets_dir=folder)
    assert st == {"datasets": 0} and "No curated datasets given" not in html
    assert f"--datasets-dir {folder} holds no curated dataset" in html


def test_sankey_needs_a_counted_edge():
    graph = {
        "nodes": [{"id": "a", "name": "a", "rows": None, "step": None, "kind": "file"}],
        "edges": [{"source": "a", "target": "a", "rows": None}],
    }
    assert sankey(graph) is None


def test_columns_follow_funnel_depth():
    # train → A → round 1 → round 2 and train → B: B sits in A's column, not at the right edge
    nodes = [{"id": k} for k in ("train", "A", "B", "r1", "r2")]
    links = [
        {"source": "train", "target": "A"},
        {"source": "train", "target": "B"},
        {"source": "A", "target": "r1"},
        {"source": "r1", "target": "r2"},
    ]
    xy = dict(zip("tABxy", columns(nodes, links), strict=True))
    assert [round(xy[k][0], 4) for k in "tABxy"] == [0.001, 0.3337, 0.3337, 0.6663, 0.999]
    # two nodes share the column: equal sizes (no counts), 0.12 apart, each 0.44 tall
    assert (xy["A"][1], xy["B"][1]) == pytest.approx((0.22, 0.78))


def test_columns_stack_nodes_by_size():
    # 10 rows → 7 and 1: the column's 0.88 is shared 7:1, so the big node cannot cover the small
    nodes = [{"id": k} for k in ("s", "big", "small")]
    links = [
        {"source": "s", "target": "big", "rows": 7},
        {"source": "s", "target": "small", "rows": 1},
    ]
    (_, ys), (_, yb), (_, yl) = columns(nodes, links)
    assert ys == pytest.approx(0.5)
    assert yb == pytest.approx(0.88 * 7 / 8 / 2)  # 0.385: top half of its 0.77
    assert yl == pytest.approx(0.77 + 0.12 + 0.11 / 2)  # after the gap, 0.11 tall
