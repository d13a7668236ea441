"""The report builds its sections concurrently, one DuckDB cursor each (``reports/build.py``):
they really overlap, and the page is the one a build of one section at a time writes."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from report_world import planted_store, random_store

from ddai.reports import ReportConfig, build_report
from ddai.reports.blocks import Section, SectionBuilder
from ddai.reports.context import ReportContext
from ddai.reports.sections import LONGEST, SECTIONS


def test_sections_overlap_on_two_threads(tmp_path: Path) -> None:
    """Two sections that each wait for the other to start finish only if they run at once, each
    on its own cursor reading the database-wide facts."""
    meet = threading.Barrier(2, timeout=10)
    seen: list[tuple[str, int]] = []

    def section(name: str) -> SectionBuilder:
        def build(ctx: ReportContext) -> Section:
            meet.wait()
            n = ctx.con.execute("SELECT count(*) FROM report_facts").fetchone()[0]
            seen.append((threading.current_thread().name, n))
            return Section(id=name, title=name, reading="", blocks=[], stats={"rows": n})

        return build

    cfg = ReportConfig(logs=planted_store(tmp_path), out=tmp_path / "r.html", progress=False)
    res = build_report(cfg, sections=(("a", section("a")), ("b", section("b"))))
    assert res["sections"] == ["a", "b"]
    assert [n for _, n in seen] == [24, 24]  # the planted world's 16 + 8 rollouts
    assert len({t for t, _ in seen}) == 2


def test_prompts_built_while_the_facts_build(tmp_path: Path, monkeypatch) -> None:
    """The per-prompt outcomes (read from the log) and the facts table are built at once, on two
    cursors: each waits for the other to start; with ``--threads 1`` one after the other."""
    meet = threading.Barrier(2, timeout=10)
    order: list[str] = []
    execute = ReportContext.execute
    facts = ReportContext._facts

    def meeting(self: ReportContext, name: str, **extra: object) -> None:
        if name == "report_prompts" and self.cfg.threads != 1:
            meet.wait()
        if name != "report_facts":  # counted by ``facts_meeting`` (kept or computed)
            order.append(name)
        execute(self, name, **extra)

    def facts_meeting(self: ReportContext, kept: list[str] | None) -> None:
        if self.cfg.threads != 1:
            meet.wait()
        order.append("report_facts")
        facts(self, kept)

    monkeypatch.setattr(ReportContext, "execute", meeting)
    monkeypatch.setattr(ReportContext, "_facts", facts_meeting)
    logs = planted_store(tmp_path)
    for threads in (2, 1):
        order.clear()
        cfg = ReportConfig(logs=logs, out=tmp_path / "r.html", progress=False, threads=threads)
        res = build_report(cfg, sections=())
        assert res["rollouts"] is None  # no overview section built
        assert sorted(order[:2]) == ["report_facts", "report_prompts"]
        assert order[2] == "report_analysis_sources"
    assert order[:2] == ["report_facts", "report_prompts"]  # --threads 1: in order


def _page(logs: Path, out: Path, threads: int) -> str:
    build_report(ReportConfig(logs=logs, out=out, progress=False, threads=threads))
    # the page says when it was made, to the minute
    return re.sub(r"generated \S+ \S+ UTC", "", out.read_text(encoding="utf-8"))


def test_concurrent_page_is_the_serial_one(tmp_path: Path) -> None:
    """Every section, built two at a time, gives the page byte for byte as built one at a time."""
    logs = random_store(tmp_path)
    serial = _page(logs, tmp_path / "one.html", threads=1)
    assert _page(logs, tmp_path / "two.html", threads=2) == serial
    assert all(f'id="{sid}"' in serial for sid in ("overview", "browser", "attribution"))
    assert len(SECTIONS) == 14


def test_longest_sections_start_first(tmp_path: Path) -> None:
    """The sections named in ``LONGEST`` (real labels of the page) start before the others, and
    the page still lists every section in page order."""
    assert set(LONGEST) <= {label for label, _ in SECTIONS}
    started: list[str] = []

    def section(name: str) -> SectionBuilder:
        def build(ctx: ReportContext) -> Section:
            started.append(name)
            return Section(id=name, title=name, reading="", blocks=[], stats={})

        return build

    labels = ("overview", "failure attribution", "funnel", "trajectory browser")
    cfg = ReportConfig(
        logs=planted_store(tmp_path), out=tmp_path / "r.html", progress=False, threads=1
    )
    res = build_report(cfg, sections=tuple((name, section(name)) for name in labels))
    assert started == ["failure attribution", "trajectory browser", "overview", "funnel"]
    assert res["sections"] == list(labels)


def test_section_modules_load_while_the_facts_build(tmp_path: Path, monkeypatch) -> None:
    """The section modules (plotly, polars) are loaded by the build, not by importing it, and
    while DuckDB builds the facts table: the load and the facts each wait for the other."""
    import subprocess
    import sys

    from ddai.reports import build

    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, ddai.reports.build; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "'ddai.reports.build'" in loaded and "'ddai.reports.sections'" not in loaded
    assert "'plotly.graph_objects'" not in loaded

    meet = threading.Barrier(2, timeout=10)
    registered = build._registered
    build_facts = ReportContext._facts

    def loading() -> tuple:
        meet.wait()
        return registered()

    def facts(self: ReportContext, kept: list[str] | None) -> None:
        meet.wait()  # the table kept or computed
        build_facts(self, kept)

    monkeypatch.setattr(build, "_registered", loading)
    monkeypatch.setattr(ReportContext, "_facts", facts)
    cfg = ReportConfig(logs=planted_store(tmp_path), out=tmp_path / "r.html", progress=False)
    res = build_report(cfg)
    # every registered section built, over the planted world's 16 + 8 rollouts
    assert len(res["sections"]) == len(SECTIONS) and res["rollouts"] == 24
