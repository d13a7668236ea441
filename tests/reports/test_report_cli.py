"""``ddai report`` from the command line: flags into the config, a summary, exit codes."""

from __future__ import annotations

import json

import pytest
import typer
from report_world import planted_store
from typer.testing import CliRunner

from ddai.cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return planted_store(tmp_path_factory.mktemp("planted"))


def test_report_writes_the_file_and_summarizes(logs, tmp_path):
    out = tmp_path / "r.html"
    args = ["report", "--logs", str(logs), "--out", str(out), "--compare", "base", "new"]
    res = runner.invoke(app, [*args, "--run", "base", "--run", "new", "--json", "--top", "1"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["out"] == str(out) and out.is_file()
    assert (data["runs"], data["prompts"], data["rollouts"]) == (["base", "new"], 5, 24)
    assert data["browser_rows"] == 24 and data["bytes"] == out.stat().st_size
    assert "stats" not in data


@pytest.mark.parametrize(
    "compare",
    [
        ["--compare", "base", "--compare", "new"],  # the repeatable form
        ["--compare", "base", "new"],  # the older two-value form
    ],
)
def test_compare_then_out_parses(logs, tmp_path, compare):
    # `--compare A --compare B --out x.html` once failed with "unexpected extra argument".
    out = tmp_path / "x.html"
    res = runner.invoke(
        app, ["report", "--logs", str(logs), *compare, "--out", str(out), "--json", "--top", "1"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["out"] == str(out) and out.is_file()


def test_one_compare_names_the_two_value_form(logs, tmp_path):
    res = runner.invoke(
        app, ["report", "--logs", str(logs), "--compare", "base", "--out", str(tmp_path / "x.html")]
    )
    assert res.exit_code == 2
    assert "--compare RUN_A --compare RUN_B" in " ".join(res.output.split())


def test_report_defaults_to_the_workspace(logs, tmp_path, monkeypatch):
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DDAI_LOGS", str(logs))
    res = runner.invoke(app, ["report", "--no-progress", "--browse-max", "3"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "home" / "report.html").is_file()


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--run", "zzz"], "known runs: base, new"),
        (["--compare", "base", "zzz"], "not in the log store"),
        (["--success-threshold", "1.5"], "must be in [0, 1]"),
        (["--judge-low", "0.7"], "--judge-low"),
        (["--datasets", "missing.parquet"], "--datasets file"),
        (["--max-turns", "0"], "--max-turns"),
        (["--threads", "0"], "--threads"),
    ],
)
def test_bad_input_exits_2_naming_the_fix(logs, tmp_path, args, msg):
    res = runner.invoke(
        app, ["report", "--logs", str(logs), "--out", str(tmp_path / "r.html"), *args]
    )
    assert res.exit_code == 2
    assert msg in " ".join(res.output.split())  # the console wraps long lines


@pytest.mark.parametrize(("args", "want"), [(["--threads", "1"], 1), ([], None)])
def test_threads_reaches_the_report_connection(logs, tmp_path, monkeypatch, args, want):
    # ReportConfig.threads as a flag: the report's DuckDB connection runs on that many threads
    # (the control: without the flag the connection keeps DuckDB's default)
    from ddai.pipelines.store import query

    connect, seen = query.connect, []

    def spy(*a, **kw):
        con = connect(*a, **kw)
        seen.append(
            (kw.get("threads"), con.execute("SELECT current_setting('threads')").fetchone()[0])
        )
        return con

    monkeypatch.setattr(query, "connect", spy)
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", "--logs", str(logs), "--out", str(out), "--json", *args])
    assert res.exit_code == 0, res.output
    assert seen and seen[0][0] == want
    if want is not None:
        assert seen[0][1] == want


def test_threads_help_is_the_config_fields_doc():
    from ddai.cli.fields import field_help
    from ddai.reports import ReportConfig

    doc = field_help(ReportConfig, "threads")
    assert doc.startswith("DuckDB threads")
    res = runner.invoke(app, ["report", "--help"], terminal_width=400)
    assert doc in " ".join(res.output.split())


def test_missing_log_store_exits_2(tmp_path):
    res = runner.invoke(app, ["report", "--logs", str(tmp_path / "none"), "--out", "r.html"])
    assert res.exit_code == 2 and "ingest logs first" in " ".join(res.output.split())


def test_every_flag_has_help():
    cmd = typer.main.get_command(app).commands["report"]
    options = [p for p in cmd.params if p.param_type_name == "option"]
    assert len(options) >= 18
    assert [p.name for p in options if not p.help] == []


def test_people_read_the_page_size_in_mb_under_its_own_label(logs, tmp_path):
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", "--logs", str(logs), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.strip().startswith("page size"))
    assert line.split()[-2:] == [f"{out.stat().st_size / 1e6:,.1f}", "MB"]
    assert not any(x.split()[:1] == ["bytes"] for x in res.output.splitlines())


def _loaded_in_sections(cfg: str, module: str) -> list[bool]:
    """In a fresh interpreter (where nothing has loaded ``module`` yet), whether each of two
    sections ``build._sections`` runs in its threads sees ``module`` loaded, the report's config
    being ``SimpleNamespace(threads=2, <cfg>)``."""
    import ast
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from types import SimpleNamespace\n"
        "from ddai.reports import build\n"
        f"assert {module!r} not in sys.modules, 'loaded at import: the check proves nothing'\n"
        "seen = []\n"
        "class Con:\n"
        "    def close(self): pass\n"
        f"cfg = SimpleNamespace(threads=2, {cfg})\n"
        "ctx = SimpleNamespace(cfg=cfg, on_cursor=lambda: SimpleNamespace(con=Con()))\n"
        "def section(sub):\n"
        f"    seen.append({module!r} in sys.modules)\n"
        "    return 'x'\n"
        "build._sections(ctx, (('a', section), ('b', section)), lambda: None, ())\n"
        "print(seen)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip())


@pytest.mark.parametrize(("datasets", "loaded"), [(False, False), (True, True)])
def test_sections_start_with_pyarrow_loaded_when_the_funnel_reads_datasets(datasets, loaded):
    """The sections run in threads. With datasets to trace, the funnel section reads Parquet
    footers through pyarrow, which imports numpy, while another section's plotly encoder looked
    numpy up in sys.modules and found it half-initialised (``AttributeError: partially
    initialized module 'numpy' has no attribute 'ndarray'``: about half the comparison reports
    of docs/report.md under load). ``_sections`` loads pyarrow before the pool then, and only
    then (a report without datasets imports neither)."""
    where = "d" if datasets else None
    cfg = f"datasets=[], datasets_dir={where!r}, flags=[]"
    assert _loaded_in_sections(cfg, "numpy") == [loaded, loaded]
    assert _loaded_in_sections(cfg, "pyarrow.parquet") == [loaded, loaded]


@pytest.mark.parametrize(("flags", "loaded"), [([], False), (["f.csv"], True)])
def test_sections_start_with_pandas_loaded_when_attribution_reads_flags(flags, loaded):
    """With --flags, the attribution section builds its flags table with ``pa.table``, which
    imports pandas, while another section's plotly validator looked pandas up in sys.modules and
    found it half-initialised (``AttributeError: partially initialized module 'pandas' has no
    attribute 'Series'``: two report runs in three with --flags on this machine). ``_sections``
    loads pandas before the pool then, and only then."""
    cfg = f"datasets=[], datasets_dir=None, flags={flags!r}"
    assert _loaded_in_sections(cfg, "pandas") == [loaded, loaded]
