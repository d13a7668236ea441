"""What `ddai serve` serves: one dataclass, validated up front so a bad flag fails before binding."""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import secrets
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ddai.pipelines.records.schema import SUCCESS_THRESHOLD

LOOPBACK_NAMES = {"localhost"}
# The names a page on this machine reaches a loopback explorer by, whatever --host is.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# A host name of RFC 1123 labels, lower case, no port (an IP address is checked apart).
HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)


def host_name(host: str) -> str:
    """``host`` as it is compared with a request's Host header: lower case, no IPv6 brackets."""
    return host.strip().lower().removeprefix("[").removesuffix("]")


def machine_memory() -> int | None:
    """Bytes of physical memory of this machine; None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


# `ddai serve`'s exit status when it cannot listen (uvicorn's own start-up failure status).
EXIT_CANNOT_LISTEN = 3


def check_port(host: str, port: int) -> None:
    """Bind ``host:port`` as uvicorn will, then let it go: OSError naming the address and the
    way out when it is taken or not this machine's, before anything slow is loaded."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family=family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            shown = f"[{host}]" if ":" in host else host
            if e.errno == errno.EADDRINUSE:
                why = "is in use: stop what listens there or pick another --port"
            else:
                why = f"cannot be bound ({e.strerror}): give an address of this machine as --host"
            raise OSError(f"{shown}:{port} {why}") from None


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
            from its text (``ddai.pipelines.pages.page_images``).
        datasets_dir: curated datasets (files with a manifest) for the live report's funnel.
        image_root: folder of page images named ``{page_id}.png|jpg|jpeg|webp``; None shows pages
            as their ids.
        host, port: where to listen. A host other than loopback requires ``token``.
        allow_hosts: names besides the bound address and 127.0.0.1 / localhost / ::1 that a
            request's Host header may carry (a name this machine is reached by); any other is
            refused, so a page on another site cannot reach the explorer by DNS rebinding.
        token: the access token (a ``?token=`` once, then a cookie, or ``Authorization: Bearer``);
            None on loopback means no token.
        page_size: rows per page of the rollout table (a request may ask for up to 500).
        sql_max_rows: rows the SQL box returns at most.
        success_threshold, judge_high, ndcg_low, judge_low, ndcg_high, max_turns: as in the report.
        threads: DuckDB threads (None: DuckDB's default).
        memory_share: share of the machine's memory the explorer's DuckDB (its table, every page
            and the SQL box together) may hold; beyond it a query spills to a private temp
            folder or fails with an out-of-memory error, never the machine.
        sql_timeout_s: seconds a SQL box query may run before it is stopped.
        annotate: accept writes (labels, review decisions); without it every write is refused.
        annotator: who writes them (``--annotator``, else ``$USER``), recorded with each.
        review: a ``curate verify-gt`` review sheet (``review.csv``) to decide prompt by prompt
            (``/review``).
        decisions_out: the decisions file the review queue writes (``uid, verdict, reason``
            plus who and when, as ``--decisions`` reads it); default ``review_decisions.csv``
            beside ``review``.
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
    success_threshold: float = SUCCESS_THRESHOLD
    judge_high: float = 0.5
    ndcg_low: float = 0.0
    judge_low: float = 0.0
    ndcg_high: float = 1.0
    max_turns: int | None = None
    threads: int | None = None
    allow_hosts: list[str] = field(default_factory=list)
    memory_share: float = 0.25
    sql_timeout_s: float = 30.0
    annotate: bool = False
    annotator: str | None = None
    review: Path | None = None
    decisions_out: Path | None = None

    def __post_init__(self) -> None:
        self.logs = Path(self.logs)
        self.allow_hosts = [host_name(h) for h in self.allow_hosts]
        for name in self.allow_hosts:
            if not _is_address(name) and not HOST_NAME.match(name):
                raise ValueError(
                    f"--allow-host {name!r} is not a host name or IP address (no scheme, port "
                    "or path): e.g. --allow-host myhost.lan"
                )
        if not 0 < self.memory_share <= 0.9:
            raise ValueError(
                f"--memory-share must be in (0, 0.9], got {self.memory_share:g}: a share of the "
                "machine's memory such as 0.25"
            )
        if not 0 < self.sql_timeout_s <= 3600:
            raise ValueError(
                f"--sql-timeout must be in (0, 3600] seconds, got {self.sql_timeout_s:g}"
            )
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
        self._check_review()
        if self.token is not None and len(self.token) < 16:
            raise ValueError("--token must be at least 16 characters (or leave it out to get one)")

    def _check_review(self) -> None:
        if self.annotate:
            from ddai.pipelines.store.annotations import annotator_name

            self.annotator = annotator_name(self.annotator)
        if self.review is None:
            if self.decisions_out is not None:
                raise ValueError("--decisions-out is where --review's decisions go: add --review")
            return
        self.review = Path(self.review)
        if not self.review.is_file():
            raise FileNotFoundError(
                f"--review {self.review} is not a file; give the review.csv `ddai curate "
                "verify-gt` wrote"
            )
        if self.decisions_out is None:
            self.decisions_out = self.review.with_name("review_decisions.csv")
        self.decisions_out = Path(self.decisions_out)
        if self.decisions_out.resolve() == self.review.resolve():
            raise ValueError(
                "--decisions-out must not be the review sheet itself (verify-gt rewrites it); "
                "name another file"
            )

    @property
    def shows_images(self) -> bool:
        """Whether transcripts show page images (from files or drawn from the corpus)."""
        return self.image_root is not None or self.corpus is not None

    def hosts(self) -> list[str]:
        """The names a request's Host header may carry: loopback, the bound address (unless it
        is 0.0.0.0 / ::, which name no host) and ``allow_hosts``."""
        names = [*LOOPBACK_HOSTS, host_name(self.host), *self.allow_hosts]
        return [n for n in dict.fromkeys(names) if n not in ("0.0.0.0", "::", "")]

    def memory_limit(self) -> int | None:
        """``memory_share`` of the machine in bytes; None where its memory is unknown."""
        total = machine_memory()
        return None if total is None else int(total * self.memory_share)

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


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
