"""``ddai distill vet``: DDAI's two vetting criteria sets over SFT trajectories, through the
vetter backend role (the local heuristics, and an OpenAI-compatible fake server on 127.0.0.1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.backends.base import VetRequest, VetResult
from ddai.pipelines.backends.local_vetter import query_label, text_label, vet_one
from ddai.pipelines.distill.vet import (
    UNSPECIFIED,
    VetConfig,
    decide,
    requests_of,
    run_vet,
)

runner = CliRunner()
GARBAGE = "ẞ뷁ç░▒▓蠻 ¶§ зщ"  # a collapsed query: mixed scripts and block characters


def turn(think: str, action: str) -> str:
    return f"<think>{think}</think>\n{action}"


def trajectory(question: str, queries: list[str]) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a search agent."}, {"role": "user", "content": question}]  # fmt: skip
    for q in queries:
        msgs.append(
            {
                "role": "assistant",
                "content": turn("I will search the slides", f"<search>{q}</search>"),
            }
        )
        msgs.append({"role": "user", "content": [{"image": f"/pages/{len(msgs)}.jpg"}]})
    msgs.append({"role": "assistant", "content": turn("done", "<search_complete>true</search_complete>")})  # fmt: skip
    return msgs


def train1(
    path: Path, rows: list[tuple[str, list[dict]]], extra: list[float] | None = None
) -> Path:
    cols = {
        "uid": [u for u, _ in rows],
        "format_version": ["v1"] * len(rows),
        "messages": [json.dumps(m, ensure_ascii=False) for _, m in rows],
    }
    if extra is not None:
        cols["ndcg"] = extra
    pq.write_table(pa.table(cols), path)
    return path


# ---------------------------------------------------------------- requests and rules (pure)


def test_requests_hold_the_trajectory_as_the_grammar_reads_it():
    msgs = trajectory("How many users in 2013?", ["users 2013", "users 2013", "chart"])
    msgs.insert(5, {"role": "user", "content": "[System Error: Search did not return an image.]"})
    # text after the action: the last turn is invalid, so no search_complete came
    msgs[-1]["content"] += "<search>extra</search>"
    rollout, queries = requests_of(msgs, ("rollout", "queries"), max_think_chars=6)
    assert queries == VetRequest("queries", "How many users in 2013?", ("users 2013", "users 2013", "chart"))  # fmt: skip
    assert rollout.queries == queries.queries and rollout.bboxes == ()
    assert rollout.thinks == ("I will…", "I will…", "I will…", "done")
    assert dict(rollout.counters) == {
        "num_search": 3,
        "num_bbox": 0,
        "num_assistant_messages": 4,
        "num_system_errors": 1,
        "repeated_adjacent_queries": 1,
        "grammar_faults": 1,
        "has_search_complete": 0,
    }


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("India online retail share 2013", "ok"),
        ("인도 온라인 소매 점유율", "ok"),
        (GARBAGE, "gibberish"),
        ("retail \ufffd share", "gibberish"),
        ("?? -- ** ##", "gibberish"),
        ("https://x.org/?q=a%20b", "code"),
        ("Traceback (most recent call last)", "code"),
    ],
)
def test_local_text_labels(text, label):
    assert text_label(text) == label


def test_local_drift_is_word_overlap_with_the_question():
    assert query_label("retail share India", "What share of retail did India have?") == "ok"
    assert query_label("football scores", "What share of retail did India have?") == "drift"


def test_local_vetter_fails_each_rollout_criterion_it_can_see():
    ok = VetRequest("rollout", "q users", ("users",), (), ("fine think",), (("grammar_faults", 0),))
    assert vet_one(ok) == VetResult(True, (), (), "local heuristics: no severe problem found")
    bad = VetRequest(
        "rollout",
        "q",
        ("a", "a", "a", GARBAGE),
        (),
        ("fine", "░▒▓ ¶§ ░▒▓ ¶§"),
        (("grammar_faults", 2), ("has_search_complete", 1)),
    )
    got = vet_one(bad)
    assert got.keep is False
    assert got.criteria == ("query_collapse", "repetitive_actions", "gibberish", "format_violation")
    q = vet_one(VetRequest("queries", "users in 2013", ("users 2013", "https://a.b/c", "cats")))
    assert (q.keep, q.labels) == (False, ("ok", "code", "drift"))


def test_decide_follows_ddai_rules():
    sets = ("rollout", "queries")
    # the queries set fails on a gibberish label whatever the model's own keep says
    v = decide(
        sets, [VetResult(True), VetResult(True, labels=("ok", "gibberish", "drift"))], "drop"
    )
    assert (v.keep, v.failed, v.drift_queries) == (False, ["query_gibberish"], 1)
    # a rollout fail naming no criterion is 'unspecified'; flags on a pass do not drop
    v = decide(sets, [VetResult(False), VetResult(True, labels=("drift",))], "drop")
    assert (v.keep, v.failed) == (False, [UNSPECIFIED])
    v = decide(("rollout",), [VetResult(True, criteria=("gibberish",))], "drop")
    assert (v.keep, v.failed, v.flags) == (True, [], {"rollout": ["gibberish"]})
    # a failed call: dropped as call-failed, or kept with on_error keep, noted either way
    failed = [VetResult(None, error="http-500: boom"), VetResult(True, labels=("ok",))]
    d, k = decide(sets, failed, "drop"), decide(sets, failed, "keep")
    assert (d.keep, d.failed, k.keep, k.failed) == (False, ["call-failed"], True, [])
    assert d.errors == k.errors == {"rollout": "http-500: boom"}


# ---------------------------------------------------------------- the step, local vetter


def test_local_vet_keeps_rows_unchanged_and_reports_each(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ddai.toml: the vetter is the local one
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DDAI_VETTER", raising=False)
    rows = [
        ("a", trajectory("users of Weibo", ["Weibo users"])),
        ("b", trajectory("users of Weibo", ["Weibo users", GARBAGE])),
        ("c", trajectory("users of Weibo", ["Weibo", "Weibo", "Weibo"])),
    ]
    src = train1(tmp_path / "in.parquet", rows, extra=[0.5, 0.25, 1.0])
    out = tmp_path / "kept.parquet"
    s = run_vet(VetConfig(src, out, progress=False))
    assert (s["rows in"], s["rows kept"], s["rows dropped"]) == (3, 1, 2)
    assert s["dropped by reason"] == {"query_collapse": 1, "query_gibberish": 1, "repetitive_actions": 1}  # fmt: skip
    assert "no model" in s["note"] and s["vetter"] == "local"
    kept = pq.read_table(out)
    assert kept.column_names == ["uid", "format_version", "messages", "ndcg"]
    assert kept.to_pylist() == pq.read_table(src).slice(0, 1).to_pylist()
    report = [
        json.loads(x) for x in (tmp_path / "kept.parquet.report.jsonl").read_text().splitlines()
    ]
    assert [(r["uid"], r["verdict"], r["criteria"]) for r in report] == [
        ("a", "keep", []),
        ("b", "drop", ["query_collapse", "query_gibberish"]),
        ("c", "drop", ["repetitive_actions"]),
    ]
    assert json.loads((tmp_path / "kept.parquet.manifest.json").read_text())["rows"] == {
        "in": 3,
        "out": 1,
        "dropped": {"query_collapse": 1, "query_gibberish": 1, "repetitive_actions": 1},
    }
    assert "skipped" in run_vet(VetConfig(src, out, progress=False))


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--criteria", "all"], "--criteria 'all'"),
        (["--on-error", "ignore"], "--on-error 'ignore'"),
        (["--out", "x.csv"], "name it \\*.parquet"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path, monkeypatch, args, msg):
    monkeypatch.chdir(tmp_path)
    src = train1(tmp_path / "in.parquet", [("a", trajectory("q", ["x"]))])
    res = runner.invoke(app, ["distill", "vet", str(src), "--out", "o.parquet", *args])
    assert res.exit_code == 2 and re.search(msg, res.output), res.output


# ---------------------------------------------------------------- a fake OpenAI vetter


def fake_vetter(prompt: str) -> str:
    """A vetter that finds a query corrupted when it holds a non-ASCII symbol or block
    character (``GARBAGE``); it answers whichever set the prompt asks about."""
    payload = json.loads(prompt[prompt.index("\n{") + 1 :])
    bad = [bool(re.search(r"[░▒▓¶§\ufffd]", q["query"])) for q in payload["queries"]]
    if "Label every query" in prompt:
        labels = ["gibberish" if b else "ok" for b in bad]
        return json.dumps({"keep": not any(bad), "criteria": [], "labels": labels, "reason": "r"})
    crit = ["query_collapse"] if any(bad) else []
    return json.dumps({"keep": not crit, "criteria": crit, "labels": [], "reason": "x"})


def _toml(tmp_path: Path, url: str) -> None:
    (tmp_path / "ddai.toml").write_text(
        f'[backends.gpt]\nkind = "openai"\nmodel = "vet-model"\nbase_url = "{url}"\n'
        "max_retries = 0\n",
        encoding="utf-8",
    )


def test_fake_openai_vetter_drops_exactly_the_corrupted_trajectories(tmp_path, monkeypatch, shared):
    from support.fakes import FakeModelServer

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    real = pq.read_table(shared / "ddai-data" / "train1.parquet").slice(0, 6).to_pylist()
    corrupt = {1, 4}
    for i in corrupt:  # replace one search query of these trajectories with garbage
        msgs = json.loads(real[i]["messages"])
        k = next(
            j for j, m in enumerate(msgs) if m["role"] == "assistant" and "<search>" in m["content"]
        )
        msgs[k]["content"] = re.sub(r"<search>.*?</search>", f"<search>{GARBAGE}</search>", msgs[k]["content"])  # fmt: skip
        real[i]["messages"] = json.dumps(msgs, ensure_ascii=False)
    src = tmp_path / "sft.parquet"
    pq.write_table(pa.Table.from_pylist(real), src)
    uids = [r["uid"] for r in real]
    with FakeModelServer(responder=fake_vetter) as server:
        _toml(tmp_path, server.openai_base_url)
        # resumable: vet the first three rows, then all six; only the new three are paid for
        head = tmp_path / "head.parquet"
        pq.write_table(pq.read_table(src).slice(0, 3), head)
        cmd = ["distill", "vet", "--vetter", "gpt", "--no-progress", "--json"]
        res = runner.invoke(app, [*cmd, str(head), "--out", str(tmp_path / "h.parquet")])
        assert res.exit_code == 0, res.output
        assert server.requests == 6  # two criteria sets x three rows
        res = runner.invoke(app, [*cmd, str(src), "--out", str(tmp_path / "kept.parquet")])
        assert res.exit_code == 0, res.output
        assert server.requests == 12
        s = json.loads(res.stdout)
        assert (s["rows_in"], s["rows_kept"], s["rows_dropped"]) == (6, 4, 2)
        assert s["dropped_by_reason"] == {"query_collapse": 2, "query_gibberish": 2}
        assert "note" not in s and s["vetter"] == "gpt"
        kept = pq.read_table(tmp_path / "kept.parquet").to_pylist()
        assert kept == [r for i, r in enumerate(real) if i not in corrupt]
        lines = (tmp_path / "kept.parquet.report.jsonl").read_text(encoding="utf-8").splitlines()
        report = [json.loads(x) for x in lines]
        assert [r["uid"] for r in report] == uids
        assert [r["verdict"] for r in report] == ["drop" if i in corrupt else "keep" for i in range(6)]  # fmt: skip
        for i in corrupt:
            assert report[i]["criteria"] == ["query_collapse", "query_gibberish"]
            assert "gibberish" in report[i]["labels"] and report[i]["drift"] == "none"
        # a forced rerun is answered from the cache: no request reaches the server
        res = runner.invoke(app, [*cmd, str(src), "--out", str(tmp_path / "kept.parquet"), "--force"])  # fmt: skip
        assert res.exit_code == 0 and server.requests == 12, res.output
        # the dry run counts what a fresh file would cost (everything here is cached)
        res = runner.invoke(app, [*cmd, str(src), "--out", str(tmp_path / "d.parquet"), "--dry-run"])  # fmt: skip
        plan = json.loads(res.stdout)
        assert plan["vet_requests"] == 12 and plan["vetter_plan"]["to_call"] == 0


def test_failed_calls_exit_1_and_leave_rows_unvetted(tmp_path, monkeypatch):
    from support.fakes import FakeModelServer

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    rows = [("a", trajectory("users", ["users"])), ("b", trajectory("users", ["[[fault:500]]"]))]
    src = train1(tmp_path / "in.parquet", rows)
    with FakeModelServer(responder=fake_vetter) as server:
        _toml(tmp_path, server.openai_base_url)
        cmd = ["distill", "vet", str(src), "--vetter", "gpt", "--no-progress", "--json"]
        res = runner.invoke(app, [*cmd, "--out", str(tmp_path / "d.parquet")])
        assert res.exit_code == 1
        s = json.loads(res.stdout)
        assert s["unvetted_rows"] == 1 and s["dropped_by_reason"] == {"call-failed": 1}
        assert s["failed_calls"] == {"http-500": 2}
        res = runner.invoke(app, [*cmd, "--out", str(tmp_path / "k.parquet"), "--on-error", "keep"])
        assert res.exit_code == 1 and json.loads(res.stdout)["rows_kept"] == 2
