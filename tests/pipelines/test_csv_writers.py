"""Every CSV ddai writes escapes formula cells: each writer through its real entry point over a
store whose uids, questions and answers are spreadsheet formulas, and a grep of the package that
fails when a module writes CSV without ``csv_cells`` or a writer is missing from ``WRITERS``."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient
from support.lazy import heavy
from support.metrics_file import read_metrics
from support.package import ROOT, modules
from support.page_data import downloads
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines import store
from ddai.pipelines.fixtures import make
from ddai.pipelines.funnel import review
from ddai.pipelines.funnel.scores import read_score_table
from ddai.pipelines.pages.image_corpus import read_text_table
from ddai.pipelines.records.decisions import read_decisions
from ddai.reports import ReportConfig, build_report
from ddai.reports.serve import ServeConfig
from ddai.reports.serve.app import create_app

metrics_file = heavy("ddai.trainer.runtime.metrics_file")

EVIL = ('=HYPERLINK("x")', "+cmd", "@SUM(1)", "-1+2", "\tlead", "\rcr")
runner = CliRunner()
# a cell a spreadsheet could run: a formula start that is not a plain decimal number (written
# here independently of csv_cells, so a loosened rule there fails this test)
PLAIN_NUMBER = re.compile(r"[+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?")


def _runs_formula(cell: str) -> bool:
    return cell[:1] in ("=", "+", "-", "@", "\t", "\r") and not PLAIN_NUMBER.fullmatch(cell)


def _rollout(uid: str, idx: int, text: str) -> dict:
    # judge 0 everywhere: every prompt is low-scoring (attribution lists it) and every group is
    # constant (drop-keep lists it); a negative reward checks that numbers stay numbers
    return {
        "uid": uid,
        "rollout_idx": idx,
        "step": 1,
        "question": text,
        "reference_answer": text,
        "reference_pages": ["1_1"],
        "retrieved_pages": ["1_2"],
        "answer": text,
        "judge_score": 0.0,
        "ndcg": 0.0,
        "format_ok": True,
        "reward": -1.5,
    }


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    logs = tmp_path_factory.mktemp("evil") / "logs"
    store.write_run(logs, "r", [_rollout(e, i, e) for e in EVIL for i in range(2)])
    return logs


def _read(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8")  # read_text would turn a quoted "\r" into "\n"


def _cli(*args) -> None:
    res = runner.invoke(app, [*map(str, args)])
    assert res.exit_code == 0, res.output


def query_cli(logs: Path, tmp: Path) -> list[str]:
    out = tmp / "q.csv"
    _cli(
        "query",
        "SELECT uid, question, reward FROM rollouts",
        "--logs",
        logs,
        "--format",
        "csv",
        "--out",
        out,
    )
    return [_text(out)]


def analyze_attribution_cli(logs: Path, tmp: Path) -> list[str]:
    out = tmp / "a.csv"
    _cli("analyze", "attribution", "--logs", logs, "--out", out)
    return [_text(out)]


def analyze_drop_keep_cli(logs: Path, tmp: Path) -> list[str]:
    out, groups = tmp / "dk.csv", tmp / "zv.csv"
    _cli("analyze", "drop-keep", "--logs", logs, "--out", out, "--groups-out", groups)
    return [_text(out), _text(groups)]


def report_downloads(logs: Path, tmp: Path) -> list[str]:
    out = tmp / "r.html"
    build_report(ReportConfig(logs=logs, out=out, progress=False, runs=["r"]))
    texts = downloads(out.read_text())
    assert len(texts) >= 4, texts  # the attribution list and the three drop/keep lists
    return list(texts.values())


def serve_export(logs: Path, tmp: Path) -> list[str]:
    app = create_app(ServeConfig(logs=logs))
    res = TestClient(app, base_url="http://127.0.0.1").get("/export.csv")  # the Host it allows
    assert res.status_code == 200, res.text
    return [res.text]


def serve_sql_export(logs: Path, tmp: Path) -> list[str]:
    client = TestClient(create_app(ServeConfig(logs=logs)), base_url="http://127.0.0.1")
    # the page token the SQL page carries in its <meta name="ddai-token">
    token = client.get("/sql").text.split('<meta name="ddai-token" content="')[1].split('"')[0]
    sql = " UNION ALL ".join(f"SELECT {_sql_str(e)} AS cell" for e in EVIL)
    res = client.post("/api/sql/export.csv", headers={"X-DDAI-Token": token}, json={"sql": sql})
    assert res.status_code == 200, res.text
    return [res.text]


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def serve_review_decisions(logs: Path, tmp: Path) -> list[str]:
    from ddai.reports.serve.review_queue import ReviewQueue

    sheet, out = tmp / "review.csv", tmp / "decisions.csv"
    sheet.write_text("uid,verdict,reason\n" + "".join(f"u{i},,\n" for i in range(len(EVIL))))
    queue = ReviewQueue(sheet, out)
    for i, e in enumerate(EVIL):
        queue.decide(f"u{i}", "wrong", e, annotator=e)
    return [_text(out)]


def verify_gt_review_sheet(logs: Path, tmp: Path) -> list[str]:
    rows = [
        review.ReviewRow(
            uid=e,
            verdict="",
            reason=e,
            decided_by="",
            proposed_verdict="wrong",
            proposed_reason=e,
            rules=e,
            score=-1.5,
            ndcg=None,
            question=e,
            reference=e,
            pages=e,
        )
        for e in EVIL
    ]
    return [review.sheet_csv(rows)]


def trainer_metrics_file(logs: Path, tmp: Path) -> list[str]:
    path = tmp / "metrics.csv"
    cb = metrics_file.MetricsFileCallback(path, "csv")
    state = SimpleNamespace(global_step=1, epoch=0.5, is_world_process_zero=True)
    for e in EVIL:
        cb.on_log(None, state, None, logs={"loss": -1.5, "note": e, e: 1.0})
    return [_text(path)]


def fixture_review(logs: Path, tmp: Path) -> list[str]:
    path = tmp / "gt_review.csv"
    make._write_review(path, [(e, "wrong", e) for e in EVIL])
    return [_text(path)]


# every CSV writer of the package: its entry point, and the module that calls csv_cells for it
WRITERS = {
    "ddai query --format csv": (query_cli, "pipelines/store/query_out.py"),
    "ddai analyze attribution --out": (analyze_attribution_cli, "pipelines/analyses/export.py"),
    "ddai analyze drop-keep --out --groups-out": (
        analyze_drop_keep_cli,
        "pipelines/analyses/export.py",
    ),
    "report CSV downloads": (report_downloads, "reports/downloads.py"),
    "ddai serve /export.csv": (serve_export, "reports/serve/sqlbox.py"),
    "ddai serve SQL box CSV export": (serve_sql_export, "reports/serve/sqlbox.py"),
    "ddai serve review decisions": (serve_review_decisions, "reports/serve/review_queue.py"),
    "curate verify-gt review.csv": (verify_gt_review_sheet, "pipelines/funnel/review.py"),
    "train --report-to csv metrics": (trainer_metrics_file, "trainer/runtime/metrics_file.py"),
    "fixtures make reviews": (fixture_review, "pipelines/fixtures/make.py"),
}


@pytest.mark.parametrize("name", WRITERS)
def test_every_writer_escapes_formula_cells(name, logs, tmp_path):
    write, _ = WRITERS[name]
    texts = write(logs, tmp_path)
    cells = [c for t in texts for row in _read(t) for c in row]
    runnable = [c for c in cells if _runs_formula(c)]
    assert not runnable, f"{name} wrote cells a spreadsheet runs: {runnable}"
    # the formulas reached the file, escaped (so the check above is not vacuous)
    for e in EVIL:
        assert "'" + e in cells, f"{name}: {e!r} not written escaped"


def test_numbers_stay_numbers_in_a_query_csv(logs, tmp_path):
    (text,) = query_cli(logs, tmp_path)
    rows = _read(text)
    assert rows[0] == ["uid", "question", "reward"]
    assert {r[2] for r in rows[1:]} == {"-1.5"}  # a typed number is not quoted


def test_the_csvs_ddai_reads_back_come_back_exactly(logs, tmp_path):
    # a query's CSV as a --scores table and as a corpus's --text-from; a review sheet as
    # --decisions; a metrics file as the tests read it
    scores = tmp_path / "scores.csv"
    _cli(
        "query",
        "SELECT DISTINCT uid AS id, reward AS score FROM rollouts",
        "--logs",
        logs,
        "--format",
        "csv",
        "--out",
        scores,
    )
    table = read_score_table(scores, "score")
    assert sorted(table["uid"].to_pylist()) == sorted(EVIL)
    assert set(table["score"].to_pylist()) == {-1.5}
    pages = tmp_path / "pages.csv"
    _cli(
        "query",
        "SELECT DISTINCT uid AS page_id, question AS text FROM rollouts",
        "--logs",
        logs,
        "--format",
        "csv",
        "--out",
        pages,
    )
    assert {k: r["text"] for k, r in read_text_table(pages).items()} == {e: e for e in EVIL}
    fixture_review(logs, tmp_path)
    got = read_decisions([tmp_path / "gt_review.csv"])
    # (decisions strip the blanks around a uid and a reason, as a person's sheet may add them)
    assert {u: d.reason for u, d in got.items()} == {e.strip(): e.strip() for e in EVIL}
    trainer_metrics_file(logs, tmp_path)
    rows = read_metrics(tmp_path / "metrics.csv")
    assert [r["note"] for r in rows] == list(EVIL) and rows[0][EVIL[0]] == "1.0"


# A call that writes CSV without csv_cells: the csv module's writers, polars' / DuckDB's
# write_csv and sink_csv, pandas' to_csv, pyarrow.csv, and SQL COPY … TO 'x.csv' / (FORMAT csv).
RAW_CSV = re.compile(
    r"csv\.(?:writer|DictWriter)\(|\.write_csv\(|\bsink_csv\(|\.to_csv\(|pyarrow\.csv|"
    r"pyarrow import csv|\(\s*FORMAT\s*'?csv|\bTO\s+'[^']*\.csv'",
    re.IGNORECASE,
)
SHARED = re.compile(r"csv_cells\.(?:write_rows|rows_text|write_frame)\(")


def _sources() -> dict[str, str]:
    return {
        p.relative_to(ROOT).as_posix(): _text(p) for p in modules().values() if p.suffix == ".py"
    } | {p.relative_to(ROOT).as_posix(): _text(p) for p in (ROOT / "sql").rglob("*.sql")}


def test_no_module_writes_csv_but_through_csv_cells():
    raw = {
        f"{path}: {m.group(0)}"
        for path, text in _sources().items()
        if path != "pipelines/records/csv_cells.py"
        for m in RAW_CSV.finditer(text)
    }
    assert not raw, (
        f"write CSV through ddai.pipelines.records.csv_cells, not directly: {sorted(raw)}"
    )


def test_every_csv_writer_is_in_the_escape_test():
    writers = {path for path, text in _sources().items() if SHARED.search(text)}
    tested = {module for _, module in WRITERS.values()}
    assert writers == tested, (
        f"add each new CSV writer to WRITERS (not tested: {sorted(writers - tested)}; "
        f"no longer writing: {sorted(tested - writers)})"
    )
