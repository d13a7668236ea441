"""``ddai collect`` refuses to run blind: against a dead search service its preflight exits 2
naming the service; with ``--skip-preflight`` it logs what it collected, counts every failed
search and error turn in its summary and exits 1 naming the service; a judge that fails every
call leaves every rollout unscorable and exits 1 naming it.

The policy is an OpenAI-compatible fake server (``--generate-via``) that searches once and then
completes, so every rollout makes exactly one search."""

from __future__ import annotations

import json
import socket

from cli_schemas import check
from support.fake_vllm import FakeVLLMServer
from support.fakes import FakeModelServer
from test_collect import collect_args
from test_collect import world as world  # its fixture, shared
from test_vllm_server import responder
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts

runner = CliRunner()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_toml(tmp_path, policy_url: str, *tables: str) -> None:
    policy = (
        f'[backends.pol]\nkind = "openai"\nmodel = "served-policy"\nbase_url = "{policy_url}/v1"\n'
    )
    (tmp_path / "ddai.toml").write_text("\n".join([policy, *tables]), encoding="utf-8")


def dead_search(url: str) -> str:
    return (
        f'[backends.dead]\nkind = "search-http"\nurl = "{url}"\nprotocol = "ddai"\n'
        "max_retries = 0\ntimeout_s = 5\n"
    )


def _collect_blind(world, tmp_path, monkeypatch, run_id: str, *flags: str):
    """``ddai collect`` through a search service that is down: result, url, requests to the policy."""
    root, data, tiny, tok = world
    url = f"http://127.0.0.1:{closed_port()}/search"
    with FakeVLLMServer(responder(tok), model="served-policy", decode=tok.decode) as server:
        monkeypatch.chdir(tmp_path)
        write_toml(tmp_path, server.url, dead_search(url))
        args = [*collect_args(root, data, tiny, run_id), "--generate-via", "pol", *flags]
        res = runner.invoke(app, [*args, "--search", "dead"], env={"COLUMNS": "300"})
        return res, url, len(server.requests)


def test_a_dead_search_service_stops_collection_at_the_preflight(world, tmp_path, monkeypatch):
    root = world[0]
    res, url, policy_calls = _collect_blind(world, tmp_path, monkeypatch, "dead_pf")
    assert policy_calls == 0  # refused before any rollout
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "preflight failed" in text and "[search]" in text
    assert f"`dead` at {url}" in text and "--skip-preflight" in text
    assert "dead_pf" not in {p.name.split("=")[-1] for p in (root / "logs").glob("run_id=*")}


def test_every_search_failing_is_counted_and_exits_1_naming_the_service(
    world, tmp_path, monkeypatch
):
    root = world[0]
    res, url, _ = _collect_blind(world, tmp_path, monkeypatch, "dead", "--skip-preflight")
    assert res.exit_code == 1, res.output
    summary = json.loads(res.stdout)
    check("collect", summary)
    # 3 prompts × 2 rollouts, each: one search (failed) then search_complete
    assert summary["rollouts_logged"] == 6 and summary["preflight"] == "skipped"
    assert summary["searches"] == 6 and summary["search_errors"] == 6
    assert summary["error_turns"] == 6 and summary["error_turn_share"] == 0.5
    assert summary["unscorable"] == 0  # ddai-phase1 needs no judge: NDCG 0, reward 0.1
    assert summary["failure"].startswith("every one of the 6 searches failed")
    assert f"`dead` at {url}" in summary["failure"]
    assert f"`dead` at {url}" in " ".join(res.stderr.split())
    rows = read_rollouts(root / "logs", ["dead"]).to_pylist()  # what was collected is kept
    assert len(rows) == 6 and all(r["ndcg"] == 0.0 for r in rows)


def test_a_judge_failing_every_call_leaves_nothing_scorable_and_exits_1(
    world, tmp_path, monkeypatch
):
    root, data, tiny, tok = world
    with (
        FakeVLLMServer(responder(tok), model="served-policy", decode=tok.decode) as server,
        FakeModelServer(script=["500"] * 50) as judge,
    ):
        monkeypatch.chdir(tmp_path)
        table = (
            f'[backends.j]\nkind = "openai"\nmodel = "judge-m"\nbase_url = "{judge.openai_base_url}"'
            "\nmax_retries = 0\ncache = false\n"
        )
        write_toml(tmp_path, server.url, table)
        args = [*collect_args(root, data, tiny, "nojudge"), "--generate-via", "pol"]
        args[args.index("ddai-phase1")] = "curriculum"  # 0.8 judge + 0.2 NDCG
        refused = runner.invoke(app, [*args, "--judge", "j"], env={"COLUMNS": "300"})
        res = runner.invoke(app, [*args, "--judge", "j", "--skip-preflight"])
    assert refused.exit_code == 2, refused.output  # the preflight's sampled episodes
    assert "[episodes]" in " ".join(refused.output.split())
    assert res.exit_code == 1, res.output
    summary = json.loads(res.stdout)
    assert summary["unscorable"] == 6 and summary["reward_mean"] is None
    assert summary["search_errors"] == 0
    assert summary["failure"].startswith("no rollout of 6 could be scored")
    assert f"judge `j` at {judge.openai_base_url}" in summary["failure"]
