"""Output for people and for scripts: summaries and tables at 80 and 120 columns never cut a path
or a value (no ``…``), numbers are rounded for people and exact in ``--json``, one JSON shape,
old flag spellings rewritten with a notice, "did you mean" for a missing value."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddai.cli import common
from ddai.cli.app import app, rewrite_args

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The committed small world ingested, bucketed and distilled (the demo's first steps)."""
    root = tmp_path_factory.mktemp("out")
    # A long folder name: the paths printed below are longer than 80 columns.
    deep = root / ("a_rather_long_folder_name_for_the_outputs_of_this_round" + "_x" * 10)
    logs = deep / "logs"
    sources = [str(p) for p in sorted((FIXTURES / "logs").glob("*.jsonl"))]
    res = runner.invoke(app, ["ingest", *sources, "--logs", str(logs), "--json"])
    assert res.exit_code == 0, res.output
    funnel = deep / "funnel"
    args = ["curate", "bucket", "--dataset", str(FIXTURES / "dataset.parquet"), "--logs",
            str(logs), "--run", "phase1", "--out-dir", str(funnel), "--json"]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return {"logs": logs, "funnel": funnel, "deep": deep, "bucket_args": args[:-1]}


@pytest.fixture(params=[80, 120])
def width(request, monkeypatch):
    monkeypatch.setattr(common.console, "_width", request.param)
    return request.param


def _people(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "…" not in res.stdout
    return res.stdout


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_runs_fit_the_terminal_with_every_run_and_rounded_numbers(world, width):
    out = _people(["runs", "--logs", str(world["logs"])])
    runs = {r["run_id"]: r for r in _json(["runs", "--logs", str(world["logs"])])["runs"]}
    assert set(runs) == {"curriculum", "focused_r1", "focused_r2", "phase1"}
    assert all(len(line) <= width for line in out.splitlines())  # a table that fits, or blocks
    for run, r in runs.items():
        assert run in out
        # 3 decimals for people; --json keeps every digit (0.4781… is 0.478 on screen).
        assert f"{round(r['mean_ndcg'], 3):g}" in out
        assert repr(r["mean_ndcg"]) not in out and len(repr(r["mean_ndcg"])) > 6
    assert "lacks" in out and "judge, advantages" in out  # phase1 has no judge scores


def test_runs_table_fits_80_columns_with_long_run_names(tmp_path, width):
    logs = tmp_path / "logs"
    for name, src in (("synthetic_world_focused_r1", "focused_r1"), ("phase1", "phase1")):
        path = str(FIXTURES / "logs" / f"{src}.jsonl")
        res = runner.invoke(app, ["ingest", path, "--run-id", name, "--logs", str(logs)])
        assert res.exit_code == 0, res.output
    out = _people(["runs", "--logs", str(logs)])
    assert all(len(line) <= width for line in out.splitlines())
    lines = out.splitlines()
    # a table, not one block per run: the header and each run on one line
    assert any(line.split() == HEADER for line in lines), out
    row = next(line for line in lines if line.startswith("phase1 "))
    # phase1 has no judge scores: its success rate and judge mean are unknown, not blank or 0
    assert row.split()[:6] == ["phase1", "144", "36", "—", "—", "0.478"]


HEADER = ["run", "rollouts", "prompts", "success", "judge", "ndcg", "reward"]


def test_lineage_shows_every_step_and_full_file_names(world, width):
    target = world["funnel"] / "curriculum_bucket_a.parquet"
    out = _people(["lineage", str(target)])
    graph = _json(["lineage", str(target)])
    text = " ".join(out.split())
    for node in graph["nodes"]:
        assert node["name"] in text  # whole names, never `curriculum_…`
    assert "curate.bucket" in text and "ingest (phase1)" in text
    assert text.count("curriculum_bucket_a.parquet") >= 1


def test_summary_paths_are_printed_whole_at_any_width(world, width):
    # The rerun is skipped (unchanged); its summary still names every output in full.
    out = _people(world["bucket_args"])
    data = _json(world["bucket_args"])
    assert data["skipped_unchanged"] is True
    for path in data["outputs"].values():
        assert len(path) > width  # longer than the terminal, yet on one line, uncut
        assert any(line.endswith(path) for line in out.splitlines())
    sft = world["deep"] / "sft.parquet"
    distill = ["distill", "--logs", str(world["logs"]), "--run", "focused_r1", "--out", str(sft)]
    out = _people([*distill, "--no-progress"])
    assert any(line.split()[-1] == str(sft) for line in out.splitlines() if line.strip())


def test_json_has_one_shape():
    data = {
        "rows in": 3,
        "skipped (unchanged)": False,
        "buckets": ("a", "b"),
        "out": Path("/x/y z.parquet"),
        "quarantined by reason": {"missing required key": 2},
        "failed calls": {"http-429": 1},
        "score": float("nan"),
        "runs": {"focused_r1": {"mean reward": 0.30761217948}},
    }
    assert common.json_shape(data) == {
        "rows_in": 3,
        "skipped_unchanged": False,
        "buckets": ["a", "b"],
        "out": "/x/y z.parquet",
        # reasons are values from the data: kept as the quarantine file writes them
        "quarantined_by_reason": {"missing required key": 2},
        "failed_calls": {"http-429": 1},
        "score": None,
        "runs": {"focused_r1": {"mean_reward": 0.30761217948}},  # run ids kept, full precision
    }


def test_people_get_rounded_numbers_and_indented_maps():
    lines = common.kv_lines(
        {"rows in": 12480, "mean": 0.30761217948, "bytes": 2_150_000, "by": {"a": 1}, "l": []}
    )
    assert lines == [
        "  rows in  12,480",
        "  mean     0.3076",
        "  size     2.1 MB",  # a byte count shown in MB is labelled a size, not bytes
        "  by",
        "    a  1",
        "  l        none",
    ]


def test_old_flag_spellings_are_rewritten_with_one_notice():
    told: list[str] = []
    args = ["curate", "bucket", "--dataset", "d", "--out", "o", "--out=p"]
    assert rewrite_args(args, told.append) == [
        "curate", "bucket", "--dataset", "d", "--out-dir", "o", "--out-dir=p",
    ]  # fmt: skip
    assert told == ["note: `ddai curate bucket --out` is now --out-dir; the old spelling will go."]
    # --out stays a file where it is one; words after -- are never flags.
    assert rewrite_args(["distill", "--out", "x.parquet"]) == ["distill", "--out", "x.parquet"]
    assert rewrite_args(["ingest", "f", "--", "--format"]) == ["ingest", "f", "--", "--format"]
    assert rewrite_args(["report", "--compare", "a", "b", "--out", "x.html"]) == [
        "report", "--compare", "a", "--compare", "b", "--out", "x.html",
    ]  # fmt: skip


def test_an_old_command_path_is_rewritten_with_one_notice():
    told: list[str] = []
    args = ["train", "collect", "--model", "m", "--", "train", "collect"]
    assert rewrite_args(args, told.append) == ["collect", "--model", "m", "--", "train", "collect"]
    assert told == ["`ddai train collect` is deprecated: use `ddai collect`"]
    told.clear()
    for current in (["collect", "--model", "m"], ["train", "grpo"], ["train"], []):
        assert rewrite_args(current, told.append) == current
    assert told == []


def test_old_out_spelling_still_runs_with_the_notice_on_stderr(world, tmp_path):
    args = [*world["bucket_args"][:-2], "--out", str(tmp_path / "b"), "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["bucket_a"] > 0
    assert res.stderr.startswith("note: `ddai curate bucket --out` is now --out-dir")


def test_a_missing_value_says_what_to_give(world, monkeypatch):
    monkeypatch.setenv("DDAI_LOGS", str(world["logs"]))
    res = runner.invoke(app, ["report", "--run"])
    assert res.exit_code == 2
    assert "Did you mean --run <run>, one of: curriculum, focused_r1, focused_r2, phase1?" in (
        " ".join(res.output.split())
    )
    res = runner.invoke(app, ["query", "SELECT 1", "--format"])
    assert res.exit_code == 2 and "Did you mean --format table or csv or parquet or json?" in (
        " ".join(res.output.split())
    )
    res = runner.invoke(app, ["curate", "bucket", "--out-dir"])
    assert res.exit_code == 2 and "Give it a value: --out-dir <dir>." in res.output


def test_a_missing_run_lists_the_runs_of_the_store_the_command_would_read(world, tmp_path):
    """`--run` with no value names the runs of the store the command reads: the one its own
    `--logs` names, or, for a command that falls back to the demo's store (report, serve, query,
    runs), the demo's while `<home>/logs` does not exist; not the runs of the default store only."""
    runs = "Did you mean --run <run>, one of: curriculum, focused_r1, focused_r2, phase1?"
    for args in (["distill", "--logs", str(world["logs"]), "--run"],
                 ["report", f"--logs={world['logs']}", "--run"]):  # fmt: skip
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and runs in " ".join(res.output.split()), (args, res.output)
    demo = Path(os.environ["DDAI_HOME"]) / "demo"
    demo.mkdir(parents=True)
    (demo / "logs").symlink_to(world["logs"], target_is_directory=True)
    res = runner.invoke(app, ["report", "--run"])
    assert res.exit_code == 2 and runs in " ".join(res.output.split()), res.output
    # a writer keeps <home>/logs (it would not find the demo's runs without --logs)
    res = runner.invoke(app, ["distill", "--out", "x.parquet", "--run"])
    assert res.exit_code == 2 and "Give it a value: --run <run>." in res.output, res.output


def test_table_values_and_headers_print_as_they_are(world):
    """A query's values and column names are data, not rich markup or emoji codes (as markup,
    ``[/x]`` raised MarkupError and ``[bold]`` vanished)."""
    sql = """SELECT '[/x] :smile: [bold]b' AS s, 2 AS "[/h]" """
    out = _people(["query", sql, "--logs", str(world["logs"])])
    assert "[/x] :smile: [bold]b" in out and "[/h]" in out and "😄" not in out


@pytest.mark.parametrize(
    "rows",
    [
        [{"run": "a", "rollouts": 1, "success": 0.5}],
        [
            {"run": "a-long-run-name", "n": None, "note": "中文 wide cells"},
            {"run": "b", "n": 12345, "note": ""},
        ],
        [{"x": "[/x] :smile:", "yy": 1.23456789, "z": True}, {"x": "", "yy": None, "z": False}],
        [{"only": "v" * 50}],
    ],
)
def test_the_width_bound_is_never_below_the_tables_width(rows):
    """``print_rows`` skips rich's measure when the bound fits: it must never be narrower than
    the table rich draws (else a table would be drawn cut), and stays close to it."""
    table = common.rows_table("t", rows)
    natural = common.console.measure(table, options=common.console.options.update_width(10**6))
    assert natural.maximum <= common.width_bound(rows) <= natural.maximum + 3 * len(rows[0])


def test_a_narrow_table_keeps_its_title_on_one_line(world, width):
    # a one-column result once printed its title "1 rows" one character per line
    out = _people(["query", "--logs", str(world["logs"]), "SELECT 1 AS x"])
    assert out.splitlines()[0].strip() == "1 rows"
