"""Flags every command takes: ``--no-progress`` (scripts pass it to all of them) and ``query``'s
``--json`` summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from test_cli_help import COMMANDS
from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LEAVES = [p for p, c in COMMANDS if not hasattr(c, "commands")]


def test_the_leaves_include_the_commands_that_refused_the_flag():
    names = {" ".join(p) for p in LEAVES}
    assert {"query", "curate bucket", "curate focus", "analyze attribution", "runs"} <= names


@pytest.mark.parametrize("path", LEAVES, ids=[" ".join(p) for p in LEAVES])
def test_every_command_accepts_no_progress(path):
    for flag in ("--no-progress", "--progress"):
        res = runner.invoke(app, [*path, flag, "--help"])
        assert res.exit_code == 0, res.output
        assert "--progress / --no-progress" in res.output


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    logs = tmp_path_factory.mktemp("q") / "logs"
    src = str(FIXTURES / "logs" / "phase1.jsonl")
    assert runner.invoke(app, ["ingest", src, "--logs", str(logs)]).exit_code == 0
    return logs


def test_commands_without_bars_run_with_no_progress(logs):
    sql = "SELECT count(*) AS n FROM rollouts"
    res = runner.invoke(app, ["query", "--no-progress", "--logs", str(logs), "--json", sql])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["data"] == [[144]]
    res = runner.invoke(app, ["runs", "--no-progress", "--logs", str(logs), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["runs"][0]["rollouts"] == 144
    # a command with its own bars keeps its own flag (passed to it, not swallowed)
    cmd = typer.main.get_command(app).commands["report"]
    flag = next(p for p in cmd.params if "--no-progress" in p.secondary_opts)
    assert flag.expose_value


def test_query_json_with_out_names_the_file_and_lists_no_rows(logs, tmp_path):
    out = tmp_path / "r.csv"
    args = ["query", "--logs", str(logs), "--out", str(out), "--json", "SELECT uid FROM rollouts"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert (data["rows"], data["columns"], data["data"]) == (144, ["uid"], [])
    assert data["out"] == str(out) and len(out.read_text().splitlines()) == 145


def test_query_json_refuses_a_second_stdout_format(logs):
    res = runner.invoke(
        app, ["query", "--logs", str(logs), "--json", "--format", "csv", "SELECT 1"]
    )
    assert res.exit_code == 2
    assert "--json and --format csv both print to stdout" in res.output
