"""The explorer's writing side over the planted store: labels, the review queue, the diff, and the
read-only explorer refusing every write."""

from __future__ import annotations

import csv
from html import unescape

import pytest
from report_world import planted_store
from serve_world import local, page_token, post_sql

from ddai.pipelines import store
from ddai.pipelines.funnel import review
from ddai.pipelines.records.decisions import read_decisions
from ddai.pipelines.store import annotations, side_log
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app


@pytest.fixture
def logs(tmp_path):
    return planted_store(tmp_path)


def _sheet(path, uids):
    rows = [
        review.ReviewRow(
            uid=u, verdict="", reason="", decided_by="", proposed_verdict="wrong",
            proposed_reason=f"page contradicts {u}", rules="all", score=None, ndcg=None,
            question=f"question of {u}?", reference=f"=ref {u}", pages="1_3; 1_5",
        )
        for u in uids
    ]  # fmt: skip
    path.write_text(review.sheet_csv(rows), encoding="utf-8")
    return path


def _post(client, url, body, token=None):
    return client.post(url, json=body, headers={"X-DDAI-Token": token or page_token(client)})


def test_without_annotate_every_write_is_refused_with_a_sentence(logs, tmp_path):
    client = local(create_app(ServeConfig(logs, review=_sheet(tmp_path / "review.csv", ["u1"]))))
    label = {"run_id": "base", "uid": "u1", "label": "search failure"}
    for url, body in (("/api/annotations", label), ("/api/review", {"uid": "u1", "verdict": "ok"})):
        r = _post(client, url, body)
        assert r.status_code == 403
        assert "read-only" in r.json()["error"] and "--annotate" in r.json()["error"]
    for method in ("PUT", "DELETE", "PATCH"):
        r = client.request(method, "/api/annotations", json=label,
                           headers={"X-DDAI-Token": page_token(client)})  # fmt: skip
        assert r.status_code == 403 and "read-only" in r.text
    assert client.get("/api/sql").status_code == 405  # a POST-only route
    assert post_sql(client, json={"sql": "SELECT 1 AS x"}).status_code == 200  # reads still go
    page = client.get("/annotate?run=base&uid=u1&step=1&idx=2")
    assert page.status_code == 200 and "read-only" in page.text and 'id="annotate"' not in page.text
    assert annotations.TABLE not in (store.run_manifest(logs, "base").get("side_tables") or {})
    assert not (tmp_path / "review_decisions.csv").exists()


def test_labels_go_through_the_store_with_who_and_when(logs):
    client = local(create_app(ServeConfig(logs, annotate=True, annotator="kim")))
    body = {"run_id": "base", "uid": "u1", "step": 1, "rollout_idx": 2, "turn": 0,
            "label": "search failure", "note": "never searched the chart"}  # fmt: skip
    assert _post(client, "/api/annotations", body, token="x" * 43).status_code == 403
    r = _post(client, "/api/annotations", body)
    assert r.status_code == 201, r.text
    row = r.json()
    assert (row["target"], row["annotator"], row["turn"]) == ("turn", "kim", 0)
    assert row["created_at"].endswith("Z")
    rec = store.run_manifest(logs, "base")["side_tables"][annotations.TABLE]
    assert rec["rows"] == 1
    assert store.verify_partition(store.partition_dir(logs, "base")) is None
    assert side_log.read_rows(logs, annotations.TABLE, "base") == [row]
    listed = client.get("/api/annotations?run=base&uid=u1").json()["annotations"]
    assert [a["annotation_id"] for a in listed] == [row["annotation_id"]]
    page = unescape(client.get("/annotate?run=base&uid=u1&step=1&idx=2").text)
    assert "never searched the chart" in page and "kim" in page
    client.app.state.explorer.refresh(force=True)  # what the next request does within 2 s
    got = post_sql(client, json={"sql": "SELECT uid, turn, label, annotator FROM annotations"})
    assert got.json()["rows"] == [["u1", 0, "search failure", "kim"]], got.text
    # a retraction withdraws it; the SQL box reads the view once the explorer rebuilt
    gone = _post(client, "/api/annotations", {"run_id": "base", "uid": "u1",
                                              "retracts": row["annotation_id"]})  # fmt: skip
    assert gone.status_code == 201
    assert client.get("/api/annotations?run=base&uid=u1").json()["annotations"] == []


@pytest.mark.parametrize(
    ("body", "status", "msg"),
    [
        ({"run_id": "base", "uid": "u1", "label": "meh"}, 400, "is not one of"),
        ({"run_id": "base", "uid": "nope", "label": "search failure"}, 404, "no rollouts"),
        ({"run_id": "nope", "uid": "u1", "label": "search failure"}, 404, "no rollouts"),
        ({"run_id": "base", "uid": "u1", "label": "search failure", "who": "x"}, 400, "unknown"),
        ({"run_id": "base", "uid": "u1", "retracts": "abc"}, 404, "to retract"),
        (["not", "an", "object"], 400, "JSON object"),
    ],
)
def test_bad_labels_are_refused(logs, body, status, msg):
    client = local(create_app(ServeConfig(logs, annotate=True, annotator="kim")))
    r = _post(client, "/api/annotations", body)
    assert r.status_code == status and msg in r.json()["error"], r.text


def test_review_queue_decides_writes_the_decisions_file_and_resumes(logs, tmp_path):
    sheet = _sheet(tmp_path / "review.csv", ["u1", "u2", "u3"])
    cfg = ServeConfig(logs, annotate=True, annotator="kim", review=sheet)
    client = local(create_app(cfg))
    page = unescape(client.get("/review").text)
    assert "0 of 3 decided" in page and "prompt 1 of 3" in page
    assert "=ref u1" in page and "page contradicts u1" in page  # the sheet's cells unescaped
    assert "The served store holds no rollouts" not in page  # u1 has 4 rollouts in base
    r = _post(client, "/api/review", {"uid": "u1", "verdict": "wrong", "reason": "chart says 3"})
    assert r.status_code == 200 and r.json()["next"] == "u2" and r.json()["decided"] == 1
    assert _post(client, "/api/review", {"uid": "u3", "verdict": "ok"}).json()["next"] == "u2"
    assert _post(client, "/api/review", {"uid": "u2", "verdict": "maybe"}).status_code == 400
    assert _post(client, "/api/review", {"uid": "u9", "verdict": "ok"}).status_code == 404
    got = read_decisions([tmp_path / "review_decisions.csv"])
    assert {u: (d.verdict, d.reason) for u, d in got.items()} == {
        "u1": ("wrong", "chart says 3"),
        "u3": ("ok", ""),
    }
    with open(tmp_path / "review_decisions.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["annotator"] for r in rows] == ["kim", "kim"] and rows[0]["decided_at"]
    # a new server resumes: the next undecided prompt, progress counted from the file
    client = local(create_app(cfg))
    page = unescape(client.get("/review").text)
    assert "2 of 3 decided" in page and 'id="review-uid">u2<' in page
    assert (
        _post(client, "/api/review", {"uid": "u2", "verdict": "uncertain"}).json()["next"] is None
    )
    done = unescape(client.get("/review").text)
    assert "3 of 3 decided" in done and "Every prompt" in done


def test_review_refuses_a_sheet_without_prompts_or_itself_as_output(logs, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("uid,verdict,reason\n")
    with pytest.raises(ValueError, match="lists no prompt"):
        create_app(ServeConfig(logs, review=empty))
    sheet = _sheet(tmp_path / "review.csv", ["u1"])
    with pytest.raises(ValueError, match="must not be the review sheet"):
        ServeConfig(logs, review=sheet, decisions_out=sheet)
    with pytest.raises(FileNotFoundError, match="--review"):
        ServeConfig(logs, review=tmp_path / "missing.csv")
    client = local(create_app(ServeConfig(logs)))
    assert "--review" in client.get("/review").text


def test_diff_aligns_turns_and_the_group_links_to_the_best_rollout(logs):
    client = local(create_app(ServeConfig(logs)))
    group = unescape(client.get("/group?uid=u1&run=base").text)
    # u1's rewards are 1, 1, 0, 0: the best is rollout 0 (highest reward, lowest index)
    assert "/diff?uid=u1&run=base&step=1&a=2&b=0" in group
    assert group.count("compare with the best rollout") == 3
    page = client.get("/diff?uid=u1&run=base&step=1&a=2&b=0")
    assert page.status_code == 200
    html = unescape(page.text)
    assert "A: " in html and "#2" in html and "#0" in html
    assert 'class="score differs"><th>reward' in html  # 0 against 1
    assert "turn 0" in html
    assert client.get("/diff?uid=u1&run=base&step=1&a=2&b=9").status_code == 404
    assert client.get("/diff?uid=u1&run=base").status_code == 400


def test_review_of_a_sheet_with_only_uid_verdict_reason_shows_the_prompt_from_the_store(
    logs, tmp_path
):
    """DDAI's published review sheets (gt_review_bucket0.csv) carry uid, verdict and reason only:
    the page takes the question, reference answer and pages from the store's rollouts (it
    answered 500 on them), and says so where the store has no rollout of the prompt either."""
    sheet = tmp_path / "gt_review.csv"
    sheet.write_text("uid,verdict,reason\nu1,wrong,chart disagrees\nnowhere,,\n", encoding="utf-8")
    client = local(create_app(ServeConfig(logs, annotate=True, annotator="kim", review=sheet)))
    res = client.get("/review?uid=u1")
    assert res.status_code == 200, res.text
    page = unescape(res.text)
    assert "What does deck u1 say?" in page and "answer u1" in page and "1_3" in page
    res = client.get("/review?uid=nowhere")
    assert res.status_code == 200, res.text
    assert "not in the sheet and no rollout of it in the store" in unescape(res.text)


def test_two_reviewers_on_one_decisions_file_keep_each_others_decisions(logs, tmp_path):
    """Two researchers, each with an explorer of their own (--annotator kim, --annotator lee) over
    one sheet and one decisions file: before, each server rewrote the file from what it had
    decided itself, so lee's first decision erased every one of kim's."""
    sheet = _sheet(tmp_path / "review.csv", ["u1", "u2", "u3", "u4"])
    kim = local(create_app(ServeConfig(logs, annotate=True, annotator="kim", review=sheet)))
    lee = local(create_app(ServeConfig(logs, annotate=True, annotator="lee", review=sheet)))
    assert _post(kim, "/api/review", {"uid": "u1", "verdict": "wrong", "reason": "a"}).is_success
    r = _post(lee, "/api/review", {"uid": "u2", "verdict": "ok"})
    assert r.json()["decided"] == 2 and r.json()["next"] == "u3"  # kim's u1 counts
    assert _post(kim, "/api/review", {"uid": "u3", "verdict": "uncertain"}).json()["decided"] == 3
    # lee re-decides kim's u1: the last decision stands, once, attributed to lee
    assert _post(lee, "/api/review", {"uid": "u1", "verdict": "ok", "reason": "b"}).is_success
    with open(tmp_path / "review_decisions.csv", newline="") as fh:
        rows = [(r["uid"], r["verdict"], r["reason"], r["annotator"]) for r in csv.DictReader(fh)]
    assert rows == [
        ("u1", "ok", "b", "lee"),
        ("u2", "ok", "", "lee"),
        ("u3", "uncertain", "", "kim"),
    ]
    # each page shows the other's decisions (progress and the next undecided prompt)
    page = unescape(kim.get("/review").text)
    assert "3 of 4 decided" in page and 'id="review-uid">u4<' in page


def test_a_decision_made_elsewhere_since_the_page_loaded_is_not_overwritten_unseen(logs, tmp_path):
    """Both reviewers' pages open on the first undecided prompt; kim decides it, then lee (whose
    page still says undecided) presses a key: before, lee's verdict silently replaced kim's.
    The page sends the decision it showed (``seen``); one made since is refused (409) naming who
    decided what, and lee, having seen it, can still overturn it."""
    sheet = _sheet(tmp_path / "review.csv", ["u1", "u2"])
    kim = local(create_app(ServeConfig(logs, annotate=True, annotator="kim", review=sheet)))
    lee = local(create_app(ServeConfig(logs, annotate=True, annotator="lee", review=sheet)))
    shown = unescape(lee.get("/review").text)
    assert 'data-seen=""' in shown  # lee's page: u1 undecided
    assert _post(kim, "/api/review", {"uid": "u1", "verdict": "wrong", "seen": ""}).is_success
    r = _post(lee, "/api/review", {"uid": "u1", "verdict": "ok", "seen": ""})
    assert r.status_code == 409, r.text
    assert "kim decided u1 wrong" in r.json()["error"] and "reload" in r.json()["error"]
    assert read_decisions([tmp_path / "review_decisions.csv"])["u1"].verdict == "wrong"
    # the reloaded page shows kim's decision; deciding from it overturns it, attributed to lee
    page = lee.get("/review?uid=u1").text
    seen = page.split('data-seen="', 1)[1].split('"', 1)[0]
    assert seen.startswith("kim ")
    assert _post(
        lee, "/api/review", {"uid": "u1", "verdict": "ok", "seen": unescape(seen)}
    ).is_success
    got = read_decisions([tmp_path / "review_decisions.csv"])
    assert got["u1"].verdict == "ok"


def test_decisions_on_prompts_outside_the_sheet_are_kept_in_the_file(logs, tmp_path):
    # a decisions file shared with another sheet's review (or extended by hand): before, the
    # first decision here rewrote it with this sheet's prompts only, dropping the rest
    sheet = _sheet(tmp_path / "review.csv", ["u1", "u2"])
    out = tmp_path / "review_decisions.csv"
    out.write_text("uid,verdict,reason,annotator,decided_at\nzz,wrong,other sheet,ann,T\n")
    client = local(create_app(ServeConfig(logs, annotate=True, annotator="kim", review=sheet)))
    assert "0 of 2 decided" in unescape(client.get("/review").text)
    assert _post(client, "/api/review", {"uid": "u1", "verdict": "ok"}).is_success
    got = read_decisions([out])
    assert {u: d.verdict for u, d in got.items()} == {"u1": "ok", "zz": "wrong"}
    assert got["zz"].reason == "other sheet"
