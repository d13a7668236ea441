"""The lazy command registry: ``ddai --help`` and ``ddai runs`` import no heavy module, and every
command still loads, runs and explains itself with ``--help``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from ddai.cli import app as app_module
from ddai.cli.app import COMMANDS, app, load_command
from ddai.pipelines.store import run_stats

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "pandas", "pyarrow.dataset")
# What `ddai runs` and `ddai query` start without (DuckDB reads and writes; flags are converted
# without Typer's pydantic adapters): pyarrow ~0.3 s, pydantic ~0.1-0.25 s.
LIGHT_PATH_FREE = ("pyarrow", "polars", "pydantic", "numpy", "ddai.pipelines.store.partitions")
runner = CliRunner()


def _modules_after(*argv: str) -> tuple[int, set[str]]:
    """Run ``ddai ARGV`` in a fresh interpreter; its exit code and the modules it imported."""
    code = (
        "import json, sys\n"
        f"sys.argv = ['ddai', *{list(argv)!r}]\n"
        "from ddai.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code or 0\nelse:\n    rc = 0\n"
        "print('\\nMODULES ' + json.dumps([rc, sorted(sys.modules)]))\n"
    )
    rc, mods = fresh_json(code, "", "MODULES")
    return rc, set(mods)


def test_help_imports_no_heavy_module():
    rc, mods = _modules_after("--help")
    assert rc == 0
    assert [
        m for m in (*HEAVY, "pyarrow", "duckdb", "polars", "typer.rich_utils") if m in mods
    ] == []
    # no command module either: the listing comes from the registry alone
    command_modules = {f"ddai.cli.{m}" for e in COMMANDS.values() for m in e.modules}
    assert sorted(mods & command_modules) == []


def test_runs_imports_no_heavy_module(tmp_path):
    logs = tmp_path / "logs"
    res = runner.invoke(app, ["ingest", str(ROOT / "fixtures/logs/phase1.jsonl"), "--logs", str(logs), "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    # the ingest kept the run's row: the first listing after the commit reads it, no DuckDB
    rc, mods = _modules_after("runs", "--logs", str(logs))
    assert rc == 0
    assert [m for m in (*HEAVY, *LIGHT_PATH_FREE, "duckdb") if m in mods] == []
    assert "ddai.cli.runs" in mods and "ddai.cli.train" not in mods
    # ... and right after an append (the ingest kept the run's new row)
    more = tmp_path / "more.jsonl"
    line = json.loads((ROOT / "fixtures/logs/phase1.jsonl").read_text().splitlines()[0])
    more.write_text(json.dumps({**line, "uid": "appended", "rollout_idx": 0}) + "\n")
    res = runner.invoke(app, ["ingest", str(more), "--logs", str(logs), "--append", "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    rc, mods = _modules_after("runs", "--logs", str(logs))
    assert rc == 0 and "duckdb" not in mods
    # without the kept rows the listing computes them with DuckDB (and still no pyarrow)
    shutil.rmtree(logs / run_stats.STATS_DIR)
    rc, mods = _modules_after("runs", "--logs", str(logs))
    assert rc == 0
    assert [m for m in (*HEAVY, *LIGHT_PATH_FREE) if m in mods] == []
    assert "duckdb" in mods
    # the model backends (numpy, asyncio: ~0.3 s) stay out of the query commands
    assert "ddai.pipelines.backends" not in mods
    for fmt in ("table", "csv", "json", "parquet"):
        out = tmp_path / f"n.{fmt}"
        rc, mods = _modules_after(
            "query", "SELECT count(*) AS n FROM rollouts", "--logs", str(logs), "--format", fmt, "--out", str(out)
        )  # fmt: skip
        assert rc == 0 and out.is_file()
        bad = [
            m for m in (*HEAVY, *LIGHT_PATH_FREE, "ddai.pipelines.backends", "asyncio") if m in mods
        ]
        assert bad == [], fmt


def test_store_commands_run_without_pandas_and_write_the_same_store(tmp_path):
    # pyarrow imports pandas at its first array when pandas is installed (0.3 s); the store's
    # commands never use it, so they run as if it were absent, and write what they wrote before
    src = tmp_path / "in.parquet"
    seed = tmp_path / "seed"
    assert runner.invoke(app, ["ingest", str(ROOT / "fixtures/logs/phase1.jsonl"), "--logs", str(seed), "--no-progress"]).exit_code == 0  # fmt: skip
    import duckdb

    duckdb.sql(f"COPY (SELECT * FROM read_parquet('{seed}/**/*.parquet')) TO '{src}'")
    rc, mods = _modules_after("ingest", str(src), "--logs", str(tmp_path / "a"), "--no-progress")
    assert rc == 0 and "pyarrow" in mods and "pandas" not in mods
    with_pandas = runner.invoke(app, ["ingest", str(src), "--logs", str(tmp_path / "b"), "--no-progress"])  # fmt: skip
    assert with_pandas.exit_code == 0, with_pandas.output
    rows = [
        duckdb.sql(
            f"SELECT * EXCLUDE (filename) FROM read_parquet('{tmp_path / d}/**/*.parquet', "
            "filename = true) ORDER BY ALL"
        ).fetchall()
        for d in ("a", "b")
    ]
    assert rows[0] == rows[1] and len(rows[0]) > 10
    # the training commands keep pandas: `datasets` needs it
    assert "train" not in app_module.PANDAS_FREE and "collect" not in app_module.PANDAS_FREE


def test_help_lists_every_registry_command_with_its_short_help():
    res = runner.invoke(app, ["--help"], terminal_width=200)
    assert res.exit_code == 0
    section = res.output.split("Commands:", 1)[1].splitlines()
    # A command's line starts two spaces in; wrapped help lines are indented further.
    listed = [line.split()[0] for line in section if line.startswith("  ") and line[2] != " "]
    assert [n for n in COMMANDS if n not in listed] == []
    assert "Run SQL over the rollout-log views" in res.output


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_loads_and_has_help(name):
    command = load_command(name)
    assert command.name == name
    res = runner.invoke(app, [name, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert f"ddai {name}" in res.output  # the real command's usage line, not the stub's
    # a group lists its sub-commands; a command explains its flags
    if isinstance(command, typer.core.TyperGroup):
        assert command.commands and all(c in res.output for c in command.commands)
    else:
        assert [
            p.name for p in command.params if p.param_type_name == "option" and not p.help
        ] == []


def test_every_module_with_register_is_in_the_registry():
    defined = {
        p.stem
        for p in (ROOT / "ddai_cli").glob("*.py")
        if any(d in p.read_text(encoding="utf-8") for d in ("\ndef register(", "\nregister = "))
    }
    used = {m for e in COMMANDS.values() for m in e.modules}
    assert defined == used


def test_group_commands_are_the_real_ones_when_looked_up():
    group = typer.main.get_command(app)
    assert isinstance(group.commands.peek("report"), app_module._Stub)
    report = group.commands["report"]  # looked up by name: loaded
    assert not isinstance(report, app_module._Stub)
    assert any(p.name == "browse_max" for p in report.params)


def test_unknown_command_exits_2_with_a_suggestion():
    res = runner.invoke(app, ["curat"])
    assert res.exit_code == 2
    assert "Did you mean 'curate'" in res.output


def test_two_modules_fill_the_train_group():
    train = load_command("train")
    assert {"sft", "grpo", "value", "ppo"} <= set(train.commands)


def test_collect_is_top_level_and_its_old_train_path_is_listed_nowhere():
    top = runner.invoke(app, ["--help"], terminal_width=200)
    train = runner.invoke(app, ["train", "--help"], terminal_width=200)
    assert top.exit_code == 0 and train.exit_code == 0
    listed = {
        line.split()[0]
        for res in (top, train)
        for line in res.output.split("Commands:", 1)[1].splitlines()
        if line.startswith("  ") and line[2] != " "
    }
    assert "collect" in COMMANDS and "collect" not in load_command("train").commands
    assert "collect" in top.output.split("Commands:", 1)[1]
    assert "collect" not in train.output.split("Commands:", 1)[1]
    assert {"sft", "grpo", "ppo", "collect"} <= listed
    old = runner.invoke(app, ["train", "collect", "--help"], terminal_width=200)
    assert old.exit_code == 0, old.output
    assert old.stdout.startswith("Usage: ddai collect [OPTIONS]")
    assert old.stderr == "`ddai train collect` is deprecated: use `ddai collect`\n"


# What no command's ``--help`` may load: the data and model libraries (50-700 ms each), the
# backends' pydantic and asyncio, the report's plotly. `ddai X --help` reads X's configs only.
HELP_FREE = (
    *HEAVY,
    *("pyarrow", "polars", "duckdb", "numpy", "pydantic", "asyncio", "plotly", "PIL", "jinja2"),
    *("scipy", "sklearn", "safetensors", "peft", "trl", "accelerate"),
)


def _command_paths() -> list[list[str]]:
    """Every command and sub-command of the registry, as words: ``["curate", "bucket"]``."""
    paths: list[list[str]] = []

    def walk(command: typer.core.click.Command, words: list[str]) -> None:
        paths.append(words)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*words, name])

    for name in COMMANDS:
        walk(load_command(name), [name])
    return paths


# ``ddai WORDS --help``, output swallowed, exit 0 asserted: for a fresh interpreter's loop over paths
HELP_ONE = (
    "def ddai_help(words):\n"
    "    sys.argv = ['ddai', *words, '--help']\n"
    "    try:\n"
    "        with contextlib.redirect_stdout(io.StringIO()):\n"
    "            main()\n"
    "    except SystemExit as e:\n"
    "        assert not e.code, (words, e.code)\n"
)


def fresh_json(code: str, arg: str, tag: str) -> Any:
    """Run ``code`` in a fresh interpreter with ``arg`` as ``sys.argv[1]`` (exit 0 asserted); the
    JSON it printed on its line starting ``TAG``."""
    p = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith(f"{tag} "))
    return json.loads(line[len(tag) + 1 :])


def _help_imports(paths: list[list[str]], prelude: str = "") -> dict[str, list[str]]:
    """Run ``ddai P --help`` for each path P, one after the other in one fresh interpreter; what
    each pulled in of ``HELP_FREE`` (a module already loaded by an earlier path counts for that
    one, so a clean result holds for every path run alone)."""
    code = (
        "import contextlib, io, json, sys\n"
        "from ddai.cli.app import main\n"
        f"{prelude}"
        f"free = {HELP_FREE!r}\n"
        f"{HELP_ONE}"
        "out = {}\n"
        "for words in json.loads(sys.argv[1]):\n"
        "    before = set(sys.modules)\n"
        "    ddai_help(words)\n"
        "    new = set(sys.modules) - before\n"
        "    out[' '.join(words)] = sorted(m for m in new if m.split('.')[0] in free or m in free)\n"
        "print('HELP ' + json.dumps(out))\n"
    )
    return fresh_json(code, json.dumps(paths), "HELP")


def test_every_commands_help_imports_no_heavy_module():
    paths = _command_paths()
    assert ["curate", "focus"] in paths and ["train", "grpo"] in paths and len(paths) > 30
    pulled = _help_imports(paths)
    assert sorted(pulled) == sorted(" ".join(p) for p in paths)
    assert {name: mods for name, mods in pulled.items() if mods} == {}


def test_help_import_check_names_the_command_that_loads_a_heavy_module():
    """The check above can fail: a command whose module loads numpy is named with it."""
    prelude = (
        "import ddai.cli.runs as runs\n"
        "def register(app, _register=runs.register):\n"
        "    import numpy\n"
        "    return _register(app)\n"
        "runs.register = register\n"
    )
    pulled = _help_imports([["query"], ["runs"]], prelude=prelude)
    assert pulled["query"] == []
    assert "numpy" in pulled["runs"]
