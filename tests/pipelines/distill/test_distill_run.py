"""``ddai distill`` end to end on a small synthetic world: selection, rebuild, rewrite with a
misbehaving rewriter, the post-pass, outputs, manifest, report, reruns and the CLI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.turns import render_turns
from test_distill_stream import RUN, stored
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.backends import RewriteResult
from ddai.pipelines.distill import DistillConfig, DistillError, formats, rules, run_distill
from ddai.pipelines.distill.rebuild import UNAVAILABLE, default_system_prompt
from ddai.pipelines.distill.rewrite import REWRITE_COUNT_MISMATCH, REWRITE_FAILED
from ddai.pipelines.distill.thinks import split_thinks
from ddai.pipelines.records.tags import FORCED_COMPLETION, parse_turns

TAG = "abcdef12"
IM_END = "<|im_end|>"


def search(think: str, q: str, sep: str = "\n") -> str:
    return f"<think>{think}</think>{sep}<search>{q}</search>"


def bbox(think: str) -> str:
    return f"<think>{think}</think>\n<bbox>[10, 20, 300, 400]</bbox>"


def done(think: str) -> str:
    return f"<think>{think}</think>\n<search_complete>true</search_complete>"


def rollout(
    p: int, uid: str, i: int, bodies: Sequence[str], obs: Sequence[dict], judge: float, **kw
):
    """One native rollout: ``bodies`` are the turns' texts, ``obs`` each turn's environment fields."""
    response = "".join(b + IM_END for b in bodies)
    turns = [t.to_record() for t in parse_turns(response)]
    for t, o in zip(turns, obs, strict=True):
        t.update(o)
    return {
        "step": 3,
        "uid": uid,
        "rollout_idx": i,
        "sample_idx": 10 * p + i,
        "question": f"What is the value for {uid}?",
        "response": response,
        "turns": turns,
        "judge_score": judge,
        "ndcg": 1.0 if judge else 0.0,
        "reward": judge,
        **kw,
    }


IMG = {"observation": "corpus/img/3_4.jpg", "retrieved": ["3_4"]}
CROP = {"observation": "agent_crops/c1.jpg"}
PLAIN = [search("look for the chart", "value chart"), bbox("crop the row"), done("the value is 7")]
PLAIN_OBS = [IMG, CROP, {}]


def fail(p, uid, i):
    return rollout(p, uid, i, PLAIN, PLAIN_OBS, 0.0)


def world_rows() -> list[dict]:
    rows = []
    # train_1: 2/4 successes (rate exactly 0.5): kept; r0 and r2 carry misbehaviour markers.
    rows += [
        rollout(
            0,
            "train_1",
            0,
            [
                search("[A] find the chart", "value chart"),
                bbox("[C] crop the table"),
                done("it is 42"),
            ],
            PLAIN_OBS,
            1.0,
        ),
        fail(0, "train_1", 1),
        rollout(
            0,
            "train_1",
            2,
            [search("[B] search again", "value table"), bbox("[T] crop"), done("42")],
            PLAIN_OBS,
            1.0,
            ndcg=0.5,
        ),
        fail(0, "train_1", 3),
    ]
    # train_2: no success; train_3: 3/4 = 0.75 > 0.5: both dropped.
    rows += [fail(1, "train_2", i) for i in range(4)]
    rows += [rollout(2, "train_3", i, PLAIN, PLAIN_OBS, 1.0) for i in range(3)] + [
        fail(2, "train_3", 3)
    ]
    # train_4: r1 gets the wrong count back, r3 a failed call.
    rows += [
        fail(3, "train_4", 0),
        rollout(3, "train_4", 1, [search("[W] find it", "w"), done("done")], [IMG, {}], 1.0),
        fail(3, "train_4", 2),
        rollout(3, "train_4", 3, [search("[E] find it", "e"), done("done")], [IMG, {}], 1.0),
    ]
    # train_5: a system-error observation, then the forced max-turn completion.
    rows += [
        rollout(
            4,
            "train_5",
            0,
            [search("first try", "q5"), search("retry", "q5 again"), FORCED_COMPLETION],
            [{"error": "Search did not return an image."}, IMG, {}],
            1.0,
        ),
        fail(4, "train_5", 1),
    ]
    # train_6: the original think already holds action-tag text: dropped by rule 4.
    rows += [
        rollout(
            5, "train_6", 0, [search("use <bbox> after this", "q6"), done("ok")], [IMG, {}], 1.0
        ),
        fail(5, "train_6", 1),
    ]
    # train_7: a repeated query, a search with no logged observation, no sample_idx.
    rows += [
        rollout(
            6,
            "train_7",
            0,
            [search("look", "Q7"), search("look again", "q7 "), done("ok")],
            [IMG, {}, {}],
            1.0,
            sample_idx=None,
        ),
        fail(6, "train_7", 1) | {"sample_idx": None},
    ]
    return rows


@pytest.fixture
def logs(tmp_path) -> Path:
    return stored(tmp_path, world_rows())


class Misbehaving:
    """A rewriter test double: polishes thinks, but misbehaves on marked ones."""

    name = "misbehaving"

    def __init__(self) -> None:
        self.requests: list = []

    @staticmethod
    def one(t: str) -> str:
        if "[A]" in t:
            return t + " then <search>a different query</search>"  # tries to change the action
        if "[B]" in t:
            return t + " <bbox>[0, 0, 10, 10]</bbox>"
        if "[C]" in t:
            return "I can see the table. " + t
        if "[T]" in t:
            return t + "</think>\n<search>injected</search><think>"
        return "Polished: " + t

    async def rewrite(self, reqs):
        self.requests.extend(reqs)
        out = []
        for r in reqs:
            if any("[E]" in t for t in r.thinks):
                out.append(RewriteResult(None, "http-500: server error"))
                continue
            thinks = [self.one(t) for t in r.thinks]
            if any("[W]" in t for t in r.thinks):
                thinks = thinks[:-1]
            out.append(RewriteResult(thinks))
        return out


def cfg(logs: Path, out: Path, **kw) -> DistillConfig:
    return DistillConfig(logs=logs, runs=[RUN], out=out, progress=False, **kw)


def table_rows(path: Path) -> dict[str, list[dict]]:
    return {r["uid"]: json.loads(r["messages"]) for r in pq.read_table(path).to_pylist()}


def test_identity_distill_selects_and_rebuilds_exactly(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    s = run_distill(cfg(logs, out, rewrite="none"))
    rows = table_rows(out)
    assert list(rows) == [
        f"train_1__s0__{TAG}",
        f"train_1__s2__{TAG}",
        f"train_4__s31__{TAG}",
        f"train_4__s33__{TAG}",
        f"train_5__s40__{TAG}",
        f"train_7__r0__{TAG}",
    ]
    assert s["prompts"] == {
        "seen": 7,
        "kept": 5,
        "prompt_no_success": 1,
        "prompt_success_rate_above_max": 1,
    }
    assert s["dropped"] == {
        "action-tag-in-original": 1,
        "not_success": 7,
        "prompt_no_success": 4,
        "prompt_success_rate_above_max": 4,
    }
    assert s["rollouts read"] == 22 == s["samples written"] + sum(s["dropped"].values())
    m = rows[f"train_1__s0__{TAG}"]
    assert m[0] == {"role": "system", "content": default_system_prompt()}
    assert m[1] == {"role": "user", "content": "What is the value for train_1?"}
    assert m[3] == {"role": "user", "content": [{"image": "corpus/img/3_4.jpg"}]}
    assert m[5] == {"role": "user", "content": [{"image": "agent_crops/c1.jpg"}]}
    forced = rows[f"train_5__s40__{TAG}"]
    assert forced[3]["content"] == "[System Error: Search did not return an image.]"
    assert forced[-1]["content"] == FORCED_COMPLETION
    assert rows[f"train_7__r0__{TAG}"][5]["content"] == UNAVAILABLE
    assert s["observations unavailable"] == 1
    assert s["findings (rows)"]["rows ending in the exact forced completion"] == 1


def test_the_default_local_rewriter_is_not_counted_as_a_rewrite(logs, tmp_path, monkeypatch):
    # Before: 'rewriter local, trajectories rewritten 6' for a file whose thinks were the
    # rollouts' own, byte for byte (the local rewriter is the identity).
    monkeypatch.chdir(tmp_path)  # no ddai.toml naming a rewriter
    monkeypatch.delenv("DDAI_REWRITER", raising=False)
    s = run_distill(cfg(logs, tmp_path / "sft.parquet"))
    assert s["rewriter"] == "local" and s["trajectories rewritten"] == 0
    assert s["trajectories returned unchanged"] == 6 == s["samples written"]
    assert "the rewriter changed no think" in s["note"] and "--rewriter NAME" in s["note"]
    run_distill(cfg(logs, tmp_path / "plain.parquet", rewrite="none"))
    assert table_rows(tmp_path / "sft.parquet") == table_rows(tmp_path / "plain.parquet")


def test_messages_round_trip_through_the_tag_parser(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    run_distill(cfg(logs, out, rewrite="none"))
    source = {(r["uid"], r["rollout_idx"]): r["response"] for r in world_rows()}
    for uid, msgs in table_rows(out).items():
        assistant = [m["content"] for m in msgs if m["role"] == "assistant"]
        for text in assistant:
            turns = parse_turns(text)
            assert len(turns) == 1 and turns[0].valid
            assert render_turns(turns) == text and turns[0].body() == text
        prompt, key = uid.split("__")[0], uid.split("__")[1]
        i = int(key[1:]) % 10
        # The assistant turns are the response's turns, minus the chat residue, byte for byte.
        assert "".join(t + IM_END for t in assistant) == source[(prompt, i)]


def test_misbehaving_rewriter_is_caught_and_counted(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    double = Misbehaving()
    s = run_distill(cfg(logs, out), rewriter=double)
    assert s["rollbacks"] == {
        rules.ACTION_TAG_IN_REWRITE: 2,
        rules.NEW_OBSERVATION_CLAIM: 1,
        rules.THINK_TAG_IN_REWRITE: 1,
    }
    assert s["rewrites discarded"] == {REWRITE_COUNT_MISMATCH: 1, REWRITE_FAILED: 1}
    assert s["trajectories rewritten"] == 4
    assert s["samples written"] == 6

    rewritten = table_rows(out)
    run_distill(cfg(logs, tmp_path / "plain.parquet", rewrite="none"))
    plain = table_rows(tmp_path / "plain.parquet")
    assert list(rewritten) == list(plain)
    for uid, msgs in rewritten.items():
        for m, o in zip(msgs, plain[uid], strict=True):
            if m["role"] != "assistant":
                assert m == o
                continue
            # Rule 1: outside the thinks, byte-identical; every rolled-back think is the original.
            assert split_thinks(m["content"]).skeleton == split_thinks(o["content"]).skeleton
            (new,), (old,) = split_thinks(m["content"]).thinks, split_thinks(o["content"]).thinks
            marked = any(k in old for k in ("[A]", "[B]", "[C]", "[T]"))
            discarded = uid.startswith("train_4")  # [W] and [E]: the whole trajectory is kept
            if marked or discarded or "Maximum turn limit" in old:
                assert new == old
            else:
                assert new == "Polished: " + old
    # The forced completion was never sent; every request carried its question.
    sent = [t for r in double.requests for t in r.thinks]
    assert not any("Maximum turn limit" in t for t in sent)
    assert all(r.context.startswith("What is the value for train_") for r in double.requests)
    assert not any("use <bbox> after this" in t for t in sent)  # dropped before the rewrite

    report = [json.loads(x) for x in Path(f"{out}.report.jsonl").read_text().splitlines()]
    by_rule = {}
    for r in report:
        by_rule.setdefault(r["rule"], []).append(r)
    claim = by_rule[rules.NEW_OBSERVATION_CLAIM][0]
    assert claim["action"] == "rollback"
    assert claim["before"] == "[C] crop the table"
    assert claim["after"] == "I can see the table. [C] crop the table"
    assert by_rule[rules.ACTION_TAG_IN_ORIGINAL][0]["action"] == "drop"
    assert by_rule[REWRITE_COUNT_MISMATCH][0]["detail"] == "1 thinks came back for 2"

    man = json.loads(Path(f"{out}.manifest.json").read_text())
    assert man["step"] == "distill"
    assert man["rows"]["in"] == 22 and man["rows"]["out"] == 6
    assert man["rows"]["in"] == man["rows"]["out"] + sum(man["rows"]["dropped"].values())
    assert man["notes"]["rollbacks"] == s["rollbacks"]
    assert man["params"]["rewriter"] == "misbehaving"
    assert man["inputs"][0]["path"].endswith(f"run_id={RUN}")


def test_optional_drops(logs, tmp_path):
    s = run_distill(
        cfg(
            logs,
            tmp_path / "o.parquet",
            rewrite="none",
            drop_forced=True,
            drop_repeated_queries=True,
        )
    )
    assert s["dropped"]["forced-completion"] == 1
    assert s["dropped"]["repeated-query"] == 1
    assert s["samples written"] == 4
    s = run_distill(cfg(logs, tmp_path / "e.parquet", rewrite="none", drop_system_errors=True))
    assert s["dropped"]["system-error"] == 1


def test_messages_format_converts_to_the_train1_output(logs, tmp_path):
    run_distill(cfg(logs, tmp_path / "m.parquet", rewrite="none", fmt="messages"))
    run_distill(cfg(logs, tmp_path / "t.parquet", rewrite="none"))
    samples, fmt = formats.read(tmp_path / "m.parquet")
    assert fmt == "messages"
    formats.write(tmp_path / "back.parquet", samples, "train1")
    assert pq.read_table(tmp_path / "back.parquet").equals(pq.read_table(tmp_path / "t.parquet"))


def test_rerun_is_skipped_unless_forced_or_changed(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    first = run_distill(cfg(logs, out, rewrite="none"))
    assert "skipped" not in first
    assert "skipped" in run_distill(cfg(logs, out, rewrite="none"))
    assert "skipped" not in run_distill(cfg(logs, out, rewrite="none", force=True))
    assert "skipped" not in run_distill(cfg(logs, out, rewrite="none", top_k=1))


class Capped:
    name = "capped"

    async def rewrite(self, reqs):
        return [
            RewriteResult(None, "max-cost: the $0 cap would be exceeded; rerun to resume")
        ] * len(reqs)


def test_max_cost_stops_before_writing(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    with pytest.raises(DistillError, match="--max-cost"):
        run_distill(cfg(logs, out, max_cost=0.0), rewriter=Capped())
    assert not out.exists() and not Path(f"{out}.manifest.json").exists()


def test_dry_run_plans_and_writes_nothing(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    s = run_distill(cfg(logs, out, dry_run=True, rewriter="identity"))
    assert s["dry run"] is True
    assert s["samples to rewrite"] == 6
    # 6 trajectories, one request each (the forced completion's think is not sent).
    assert s["rewrite requests"] == 6
    assert s["rewriter plan"]["items"] == 6 and s["rewriter plan"]["est_cost_usd"] == 0.0
    assert not out.exists()


def test_chunking_splits_long_trajectories(logs, tmp_path):
    double = Misbehaving()
    run_distill(cfg(logs, tmp_path / "o.parquet", max_thinks_per_call=1), rewriter=double)
    assert all(len(r.thinks) == 1 for r in double.requests)


def test_uid_collision_is_an_error(tmp_path):
    logs = tmp_path / "logs"
    rows = world_rows()[:4]
    store.write_run(logs, RUN, rows)
    store.write_run(logs, RUN, rows, append=True)  # the same rollouts twice
    with pytest.raises(ValueError, match="repeat"):
        run_distill(cfg(logs, tmp_path / "o.parquet", rewrite="none", success_rate_max=1.0))


def test_config_errors_name_the_fix(logs, tmp_path):
    with pytest.raises(ValueError, match="--rewrite"):
        cfg(logs, tmp_path / "o.parquet", rewrite="all")
    with pytest.raises(ValueError, match="--format"):
        cfg(logs, tmp_path / "o.parquet", fmt="csv")
    with pytest.raises(ValueError, match=r"\*\.parquet"):
        cfg(logs, tmp_path / "o.jsonl")
    with pytest.raises(FileNotFoundError, match="known runs"):
        run_distill(DistillConfig(logs=logs, runs=["nope"], out=tmp_path / "o.parquet"))


runner = CliRunner()


def test_cli_distill_check_convert(logs, tmp_path):
    out = tmp_path / "sft.parquet"
    args = [
        "distill",
        "--logs",
        str(logs),
        "--run",
        RUN,
        "--out",
        str(out),
        "--no-progress",
        "--json",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["samples_written"] == 6
    res = runner.invoke(
        app,
        [
            "distill",
            "check",
            str(out),
            "--report",
            str(tmp_path / "r.jsonl"),
            "--json",
            "--drop-forced",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["dropped"] == {"forced-completion": 1}
    # without --out or --report the report goes to the workspace, never beside the file read
    home = tmp_path / "home"
    before = sorted(tmp_path.iterdir())
    res = runner.invoke(app, ["distill", "check", str(out), "--json"], env={"DDAI_HOME": str(home)})
    assert res.exit_code == 0, res.output
    report = home / "checks" / "sft.parquet.report.jsonl"
    assert json.loads(res.output)["report"] == str(report) and report.is_file()
    assert sorted(tmp_path.iterdir()) == sorted([*before, home])  # nothing new beside sft.parquet
    m = tmp_path / "m.parquet"
    res = runner.invoke(
        app, ["distill", "convert", str(out), "--to", "messages", "--out", str(m), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert formats.read(m)[1] == "messages"


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--out", "o.parquet"], "--run is required"),
        (["--run", RUN], "--out is required"),
        (["--run", "nope", "--out", "o.parquet"], "known runs"),
        (["--run", RUN, "--out", "o.parquet", "--top-k", "0"], "--top-k"),
        (["--run", RUN, "--out", "o.parquet", "--rewriter", "no-such-backend"], "no backend named"),
    ],
)
def test_cli_bad_input_exits_2(logs, tmp_path, monkeypatch, args, msg):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["distill", "--logs", str(logs), *args])
    assert res.exit_code == 2
    assert msg in res.output


def test_cli_max_cost_failure_exits_1(logs, tmp_path, monkeypatch):
    import ddai.pipelines.distill.run as run_mod

    monkeypatch.setattr(run_mod, "build_rewriter", lambda cfg: Capped())
    out = tmp_path / "o.parquet"
    res = runner.invoke(
        app, ["distill", "--logs", str(logs), "--run", RUN, "--out", str(out), "--max-cost", "0"]
    )
    assert res.exit_code == 1
    assert "rerun with a higher" in res.output


def test_openai_compatible_rewriter_through_the_sdk(logs, tmp_path, monkeypatch):
    """``--rewriter NAME`` naming an OpenAI-compatible backend, served by the local fake server
    (its default model prefixes every think with "Plan: ")."""
    from support.backends import backend_toml
    from support.fakes import FakeModelServer

    with FakeModelServer() as server:
        monkeypatch.chdir(tmp_path)
        backend_toml(
            tmp_path, "fake", server.openai_base_url,
            model="fake-rewriter", price_in_per_mtok=1.0, price_out_per_mtok=1.0,
        )  # fmt: skip
        out = tmp_path / "sft.parquet"
        with pytest.raises(DistillError, match="--max-cost"):
            run_distill(cfg(logs, out, rewriter="fake", max_cost=0.0))
        assert server.requests == 0 and not out.exists()

        s = run_distill(cfg(logs, out, rewriter="fake"))
        assert s["rewriter"] == "fake" and s["trajectories rewritten"] == 6
        assert s["rollbacks"] == {} and s["rewrites discarded"] == {}
        assert server.requests == 6
        for msgs in table_rows(out).values():
            for m in msgs[2::2]:
                (think,) = split_thinks(m["content"]).thinks
                assert think.startswith("Plan: ") or think.startswith("Maximum turn limit")
        man = json.loads(Path(f"{out}.manifest.json").read_text())
        (usage,) = man["backend_calls"].values()
        assert usage["calls"] == 6 and usage["cost_usd"] > 0

        # A rerun pays for nothing: every call is answered from the cache.
        again = run_distill(cfg(logs, tmp_path / "again.parquet", rewriter="fake"))
        assert server.requests == 6
        assert table_rows(tmp_path / "again.parquet") == table_rows(out)
        assert again["samples written"] == 6
        plan = run_distill(cfg(logs, out, rewriter="fake", dry_run=True))["rewriter plan"]
        assert (plan["cached"], plan["to_call"]) == (6, 0)


def _ddai_key(r: dict) -> tuple:
    """DDAI's finalize order over a rollout's text (its spec's fields; bboxes counted with the
    regex it meant): NDCG desc, searches, boxes, assistant characters; ties keep log order."""
    import re

    bodies = [t.body() for t in parse_turns(r["response"])]
    text = "".join(bodies)
    searches = [q for q in re.findall(r"<search>(.*?)</search>", text, re.S) if q.strip()]
    boxes = re.findall(r"<bbox>\s*\[(.*?)\]\s*</bbox>", text, re.S)
    return (-r["ndcg"], len(searches), len(boxes), sum(map(len, bodies)))


@pytest.mark.parametrize("rank", ["reward", "ddai"])
def test_distill_on_the_synthetic_world(tmp_path, rank):
    """The fixtures' world (``ddai demo``'s data): selection equals a plain-Python reference
    under either ranking, and every assistant message round-trips through the tag parser."""
    from ddai.pipelines.fixtures.make import make_world
    from ddai.pipelines.ingest import IngestConfig, ingest

    make_world(tmp_path / "world", seed=0, size="small")
    src = tmp_path / "world" / "logs" / "focused_r1.jsonl"
    ingest(IngestConfig([src], tmp_path / "logs", progress=False))
    out = tmp_path / "sft.parquet"
    s = run_distill(
        DistillConfig(
            logs=tmp_path / "logs", runs=["focused_r1"], out=out, progress=False, rank=rank
        )
    )

    rows = [json.loads(x) for x in src.read_text().splitlines()]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["uid"], []).append(r)
    expected = []
    for uid, rs in groups.items():
        ok = [
            r
            for r in rs
            if r["judge_score"] is not None
            and r["judge_score"] >= 1.0
            and r["format_ok"] is not False
        ]
        judged = [r for r in rs if r["judge_score"] is not None]
        if not ok or len(ok) / len(judged) > 0.5:
            continue
        if rank == "reward":
            ok.sort(key=lambda r: (-r["reward"], -r["ndcg"], r["num_turns"], r["rollout_idx"]))
        else:
            ok.sort(key=_ddai_key)  # stable: ties keep log order
        expected += [f"{uid}__s{r['sample_idx']}" for r in ok[:4]]
    got = pq.read_table(out)["uid"].to_pylist()
    assert [u.rsplit("__", 1)[0] for u in got] == expected
    assert s["samples written"] == len(expected) > 0
    for msgs in table_rows(out).values():
        for m in msgs[2::2]:
            turns = parse_turns(m["content"])
            assert len(turns) == 1 and turns[0].body() == m["content"]


def test_an_empty_selection_is_an_error_that_writes_nothing(logs, tmp_path):
    out = tmp_path / "o.parquet"
    # A threshold no judge score reaches: no prompt has a success, so nothing can be selected.
    with pytest.raises(ValueError, match=r"no rollout of .* was selected") as err:
        run_distill(cfg(logs, out, rewrite="none", success_threshold=2.0))
    assert "--success-rate-max" in str(err.value) and "dropped by reason" in str(err.value)
    assert not out.exists()


def test_a_run_without_judge_scores_is_refused(tmp_path):
    logs = stored(tmp_path, [{**r, "judge_score": None} for r in world_rows()[:8]])
    with pytest.raises(ValueError, match="has no judge") as err:
        run_distill(cfg(logs, tmp_path / "o.parquet", rewrite="none"))
    assert "select successes" in str(err.value)
    assert not (tmp_path / "o.parquet").exists()
