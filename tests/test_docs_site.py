"""The user documentation builds as a site with ``mkdocs build --strict``: a broken link, a
missing anchor or a page left out of the nav fails the suite (mkdocs.yml turns each into a
warning, and --strict turns warnings into a failed build)."""

from __future__ import annotations

import os
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
    for page in ("index.html", "cli/index.html", "scale/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


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
