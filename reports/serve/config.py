"""What `ddai serve` serves: one dataclass, validated up front so a bad flag fails before binding."""

from __future__ import annotations

import errno
import ipaddress
import os
import re
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
    import socket  # here, not at the top: ``ddai serve --help`` reads this module's config

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
    """Inputs of one explorer; the fields a person sets are the flags of ``ddai serve``."""

    logs: Path
    """The log store folder."""
    runs: list[str] | None = None
    """Run ids to serve; None serves every run in the store."""
    datasets_dir: Path | None = None
    """Folder of curated datasets (files with a manifest) for the live report's funnel."""
    image_root: Path | None = None
    """Folder of page images named {page_id}.png or .jpg; transcripts show the pages and <bbox>
    crops inline. Without it pages show as their ids."""
    corpus: Path | None = None
    """Page corpus (pages.parquet or its folder): a page with no image under --image-root shows
    the corpus's image (ddai corpus build) or is drawn from its text, so the synthetic world
    shows pages too."""
    host: str = "127.0.0.1"
    """Address to listen on. Anything but loopback (127.0.0.1, ::1, localhost) needs a token."""
    port: int = 8765
    """Port to listen on."""
    token: str | None = None
    """Access token (16+ characters; also $DDAI_SERVE_TOKEN). On a non-loopback host a random
    one is made when none is given; the printed URL carries it."""
    # a request shows it as ``?token=`` once (then a cookie) or ``Authorization: Bearer``
    page_size: int = 50
    """Rows per page of the rollout table (1-500)."""
    sql_max_rows: int = 1_000
    """Rows the SQL box returns at most."""
    success_threshold: float = SUCCESS_THRESHOLD
    """The success rule's threshold on judge_score (the flag: the commands' shared
    ``--success-threshold``)."""
    judge_high: float = 0.5
    """As in the report (``ReportConfig``)."""
    ndcg_low: float = 0.0
    """As in the report (``ReportConfig``)."""
    judge_low: float = 0.0
    """As in the report (``ReportConfig``)."""
    ndcg_high: float = 1.0
    """As in the report (``ReportConfig``)."""
    max_turns: int | None = None
    """As in the report (``ReportConfig``)."""
    threads: int | None = None
    """DuckDB threads. Default: one per core."""
    allow_hosts: list[str] = field(default_factory=list)
    """A name this machine is reached by (repeatable), accepted in a request's Host header
    besides 127.0.0.1, localhost, ::1 and --host; any other name is refused, so a web page
    cannot reach the explorer by DNS rebinding."""
    memory_share: float = 0.25
    """Share of the machine's memory the explorer's DuckDB may hold (its table, the pages and the
    SQL box together; beyond it a query spills or fails), in (0, 0.9]."""
    sql_timeout_s: float = 30.0
    """Seconds a SQL box query may run before it stops."""
    annotate: bool = False
    """Accept writes: labels on prompts, rollouts and turns (stored in the log store's side table
    annotations) and review decisions. Without it every write is refused."""
    annotator: str | None = None
    """Who writes the labels and decisions. Default: $USER."""
    review: Path | None = None
    """A review.csv of `ddai curate verify-gt` to decide prompt by prompt at /review (ok / wrong
    / uncertain, one key each)."""
    decisions_out: Path | None = None
    """Where /review's decisions go (uid, verdict, reason, annotator, decided_at: what verify-gt
    and focus --decisions read), a local file. Default: review_decisions.csv beside --review
    (a --review on object storage needs one named)."""

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
        if self.datasets_dir is not None:
            from ddai.pipelines.store import objstore  # the standard library only, at import

            self.datasets_dir = Path(self.datasets_dir)
            if not objstore.any_isdir(self.datasets_dir):
                where = objstore.display(self.datasets_dir)
                raise FileNotFoundError(f"--datasets-dir {where} is not a folder")
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
        elif self.annotator is not None:
            raise ValueError(
                "--annotator names who writes labels and decisions; without --annotate the "
                "explorer writes nothing: add --annotate"
            )
        if self.review is None:
            if self.decisions_out is not None:
                raise ValueError("--decisions-out is where --review's decisions go: add --review")
            return
        from ddai.pipelines.store import objstore  # the standard library only, at import

        self.review = Path(self.review)
        if not objstore.any_isfile(self.review):
            raise FileNotFoundError(
                f"--review {objstore.display(self.review)} is not a file; give the review.csv "
                "`ddai curate verify-gt` wrote"
            )
        if self.decisions_out is None:
            self.decisions_out = self.review.with_name("review_decisions.csv")
        self.decisions_out = Path(self.decisions_out)
        if objstore.is_url(self.decisions_out):
            # each decision rewrites the file under a lock shared with other reviewers, which
            # object storage cannot hold (pathlib would write a local folder named "s3:")
            given = "" if objstore.is_url(self.review) else "--decisions-out "
            raise ValueError(
                f"{given}{objstore.display(self.decisions_out)}: /review's decisions are "
                "written to a local file; give a local --decisions-out FILE"
                + (" for a --review sheet on object storage" if not given else "")
            )
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
            import secrets  # with hmac, hashlib, random: only when a token is drawn

            self.token = secrets.token_urlsafe(24)
        return self.token


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
