"""``ddai serve --logs s3://…``: the explorer over a store on object storage (moto's S3 server)
answers as it does over the same rows in a local store, read-only SQL box included."""

from __future__ import annotations

from pathlib import Path

import pytest
from serve_world import local, page_token, post_sql

from ddai.pipelines.ingest import IngestConfig, ingest
from ddai.pipelines.store import objstore
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "focused_r1.jsonl"
PAGES = ("/", "/sections", "/live", "/sql", "/group?uid=train_328")
ROLLOUT = "/rollout?run=focused_r1&uid=train_328&step=1&idx=0"
SQL = "SELECT run_id, uid, step, rollout_idx, reward FROM rollouts ORDER BY ALL"


def _client(logs, **kw):
    return local(create_app(ServeConfig(logs=Path(logs), **kw)))


@pytest.fixture
def stores(s3_env, tmp_path):
    """(local client, s3 client) over the fixture run ingested into each store."""
    s3 = f"{s3_env}/logs"
    for logs in (tmp_path / "logs", s3):
        ingest(IngestConfig([FIX], Path(logs), progress=False))
    return _client(tmp_path / "logs"), _client(s3)


@pytest.mark.parametrize("scan", ["arrow", "fsspec"])
def test_serve_over_s3_answers_as_over_a_local_store(stores, monkeypatch, scan):
    # was: AttributeError 'str' object has no attribute 'stat' at start-up (the fingerprint
    # stat'ed local files); with the fsspec scan the SQL box was refused its own store's files
    monkeypatch.setenv(objstore.SCAN_ENV, scan)
    here, s3 = stores
    s3.app.state.explorer.refresh(force=True)  # built again under this scan
    for url in (*PAGES, ROLLOUT):
        assert s3.get(url).status_code == 200, url
    for url in ("/export.csv?outcome=failure", "/export.csv", "/api/rollouts?sort=reward"):
        a, b = here.get(url), s3.get(url)
        assert a.status_code == b.status_code == 200
        assert a.content == b.content, url
    got = post_sql(s3, json={"sql": SQL}).json()
    assert len(got["rows"]) == 144
    assert got == post_sql(here, json={"sql": SQL}).json()
    # read-only still: a local file is refused
    bad = post_sql(s3, json={"sql": "SELECT * FROM read_csv('/etc/passwd')"})
    assert bad.status_code == 400 and "disabled" in bad.json()["error"]


def test_serve_over_s3_sees_a_new_commit(stores, tmp_path):
    _, s3 = stores
    ex = s3.app.state.explorer
    builds = ex.builds
    assert not ex.refresh(now=True)  # nothing committed since: no rebuild
    url = objstore.url_of(ex.cfg.logs)
    ingest(IngestConfig([FIX], Path(url), run_id="again", progress=False))
    assert ex.refresh(now=True) and ex.builds == builds + 1
    assert ex.meta["runs"] == ["again", "focused_r1"]


def test_labels_over_s3_go_through_the_store(s3_env):
    s3 = f"{s3_env}/logs"
    ingest(IngestConfig([FIX], Path(s3), progress=False))
    client = _client(s3, annotate=True, annotator="kim")
    body = {"run_id": "focused_r1", "uid": "train_328", "label": "search failure"}
    r = client.post("/api/annotations", json=body, headers={"X-DDAI-Token": page_token(client)})
    assert r.status_code == 201, r.text
    client.app.state.explorer.refresh(force=True)
    got = post_sql(client, json={"sql": "SELECT uid, label, annotator FROM annotations"})
    assert got.json()["rows"] == [["train_328", "search failure", "kim"]]


def test_the_empty_store_notice_names_the_url(s3_env):
    from ddai.reports.serve.app import empty_store_notice

    s3 = f"{s3_env}/logs"
    notice = empty_store_notice(ServeConfig(logs=Path(s3)))  # the CLI hands a Path
    assert f"The log store {s3} holds" in notice and f"--logs {s3}`" in notice  # was s3:/…


def test_the_live_page_follows_the_run_committed_last_on_s3(s3_env):
    # was: the run whose name sorts last (no file times on object storage), here "zz"
    import time

    from ddai.reports.serve.live import newest_run

    s3 = f"{s3_env}/logs"
    ingest(IngestConfig([FIX], Path(s3), run_id="zz", progress=False))
    time.sleep(1.1)  # S3 keeps modification times to the second
    ingest(IngestConfig([FIX], Path(s3), run_id="aa", progress=False))
    assert newest_run(Path(s3), ["aa", "zz"]) == "aa"
    assert 'data-run="aa"' in _client(s3).get("/live").text


def _review_sheet(path: Path) -> Path:
    from ddai.pipelines.funnel import review

    row = review.ReviewRow(
        uid="train_328", verdict="", reason="", decided_by="", proposed_verdict="wrong",
        proposed_reason="page contradicts", rules="all", score=None, ndcg=None,
        question="q?", reference="a", pages="1_3",
    )  # fmt: skip
    path.write_text(review.sheet_csv([row]), encoding="utf-8")
    return path


def test_a_review_sheet_on_s3_is_decided_into_a_local_file(s3_env, tmp_path, monkeypatch):
    # was: "--review s3:/… is not a file"; and --decisions-out s3://… was taken as a local path,
    # each decision written under a folder named "s3:" in the working directory
    monkeypatch.chdir(tmp_path)
    s3 = f"{s3_env}/logs"
    ingest(IngestConfig([FIX], Path(s3), progress=False))
    sheet = f"{s3_env}/review.csv"
    objstore.put_file(_review_sheet(tmp_path / "review.csv"), sheet)
    for out in (None, f"{s3_env}/decisions.csv"):
        with pytest.raises(ValueError, match="local --decisions-out") as e:
            ServeConfig(
                logs=Path(s3), review=Path(sheet), decisions_out=out, annotate=True, annotator="kim"
            )
        assert "s3:/" not in str(e.value).replace("s3://", "")
    assert not (tmp_path / "s3:").exists()
    decided = tmp_path / "decided.csv"
    cfg = ServeConfig(
        logs=Path(s3), review=Path(sheet), decisions_out=decided, annotate=True, annotator="kim"
    )
    client = local(create_app(cfg))
    body = {"uid": "train_328", "verdict": "wrong", "reason": "chart says 3"}
    r = client.post("/api/review", json=body, headers={"X-DDAI-Token": page_token(client)})
    assert r.status_code == 200, r.text
    assert "train_328,wrong,chart says 3" in decided.read_text(encoding="utf-8")
