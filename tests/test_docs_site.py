"""The user documentation builds as a site with ``mkdocs build --strict``: a broken link, a
missing anchor or a page left out of the nav fails the suite (mkdocs.yml turns each into a
warning, and --strict turns warnings into a failed build)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )


def test_docs_build_strict(tmp_path: Path) -> None:
    proc = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for page in _nav_pages():
        html = "index.html" if page == "index.md" else f"{page[: -len('.md')]}/index.html"
        assert (tmp_path / "site" / html).is_file(), html


README_MAX_CHARS = 15_000


def _nav_pages() -> list[str]:
    """The markdown files mkdocs.yml's nav names (one level: ``- Title: page.md``)."""
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return [page for entry in config["nav"] for page in entry.values()]


def test_every_docs_page_is_in_the_nav() -> None:
    """A page under docs/ that the nav does not name is unreachable from the site's menu."""
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert pages == sorted(_nav_pages())


def test_readme_is_short_and_links_into_the_docs() -> None:
    """The README is for newcomers (what ddai is, the two commands, the first commands, links); the
    manual lies in docs/. Every docs/ page it links exists (mkdocs does not read the README)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text) <= README_MAX_CHARS, f"README.md has {len(text)} characters"
    for command in ("make demo   # 1.", "make test   # 2."):
        assert command in text, command
    linked = re.findall(r"\]\((docs/[^)#]+)", text)
    assert linked, "README.md links no docs/ page"
    assert [p for p in linked if not (ROOT / p).is_file()] == []
    assert {f"docs/{p}" for p in _nav_pages() if p != "index.md"} <= set(linked)


def test_docs_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    """The check is live: the same config over a copy of the docs with one dead link fails."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\nSee [nowhere](missing.md).\n", encoding="utf-8")
    (docs / "cli.md").write_text("# cli\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config.write_text(text.replace("docs_dir: docs", f"docs_dir: {docs}"), encoding="utf-8")
    proc = _build(config, tmp_path / "site")
    assert proc.returncode != 0
    assert "missing.md" in proc.stderr
