"""What `ddai serve` serves: one dataclass, validated up front so a bad flag fails before binding."""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (127.0.0.0/8, ::1, localhost)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ServeConfig:
    """Inputs of one explorer.

    Attributes:
        logs: the log store folder.
        runs: run ids to serve; None serves every run in the store.
        corpus: a page corpus (``pages.parquet`` or its folder); a page without an image under
            ``image_root`` shows the corpus's image file (``ddai corpus build``), else is drawn
            from its text (``ddai.pipelines.page_images``).
        datasets_dir: curated datasets (files with a manifest) for the live report's funnel.
        image_root: folder of page images named ``{page_id}.png|jpg|jpeg|webp``; None shows pages
            as their ids.
        host, port: where to listen. A host other than loopback requires ``token``.
        token: the access token (a ``?token=`` once, then a cookie, or ``Authorization: Bearer``);
            None on loopback means no token.
        page_size: rows per page of the rollout table (a request may ask for up to 500).
        sql_max_rows: rows the SQL box returns at most.
        success_threshold, judge_high, ndcg_low, judge_low, ndcg_high, max_turns: as in the report.
        threads: DuckDB threads (None: DuckDB's default).
    """

    logs: Path
    runs: list[str] | None = None
    datasets_dir: Path | None = None
    image_root: Path | None = None
    corpus: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    page_size: int = 50
    sql_max_rows: int = 1_000
    success_threshold: float = 1.0
    judge_high: float = 0.5
    ndcg_low: float = 0.0
    judge_low: float = 0.0
    ndcg_high: float = 1.0
    max_turns: int | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        self.logs = Path(self.logs)
        if self.image_root is not None:
            self.image_root = Path(self.image_root)
            if not self.image_root.is_dir():
                raise FileNotFoundError(
                    f"--image-root {self.image_root} is not a folder; point it at the page images "
                    "({page_id}.png or .jpg)"
                )
        if self.corpus is not None:
            self.corpus = Path(self.corpus)
            if not (self.corpus.is_file() or (self.corpus / "pages.parquet").is_file()):
                raise FileNotFoundError(
                    f"--corpus {self.corpus}: no pages.parquet there; give the corpus file "
                    "(ddai fixtures make writes one) or its folder"
                )
        if self.datasets_dir is not None and not Path(self.datasets_dir).is_dir():
            raise FileNotFoundError(f"--datasets-dir {self.datasets_dir} is not a folder")
        if not 0 < self.port < 65536:
            raise ValueError(f"--port must be in 1..65535, got {self.port}")
        if not 1 <= self.page_size <= 500:
            raise ValueError(f"--page-size must be in 1..500, got {self.page_size}")
        if self.token is not None and len(self.token) < 16:
            raise ValueError("--token must be at least 16 characters (or leave it out to get one)")

    @property
    def shows_images(self) -> bool:
        """Whether transcripts show page images (from files or drawn from the corpus)."""
        return self.image_root is not None or self.corpus is not None

    def report_fields(self) -> dict[str, Any]:
        """The fields this config shares with ``ReportConfig`` (the store, runs, datasets and
        thresholds), so ``/report`` builds the report ``ddai report`` would with the same flags."""
        from ddai.reports.config import ReportConfig

        report = {f.name for f in fields(ReportConfig)}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in report}

    def require_token(self) -> str | None:
        """The token in force: a new random one when the host is not loopback and none was given."""
        if self.token is None and not is_loopback(self.host):
            self.token = secrets.token_urlsafe(24)
        return self.token
