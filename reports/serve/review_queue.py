"""The ground-truth review queue: a ``curate verify-gt`` review sheet decided prompt by prompt.

``ddai serve --review review.csv`` shows ``/review``: one prompt at a time with its question,
reference answer, reference pages (as images with ``--corpus`` / ``--image-root``), the
verifier's proposal and reason, and the prompt's rollouts in the served store; the reviewer
decides ``ok``, ``wrong`` or ``uncertain`` with one key (``o`` / ``w`` / ``u``). Each decision
is ``POST /api/review`` (JSON and the page token; ``--annotate`` only) and rewrites the decisions
file atomically: a decisions CSV (``uid, verdict, reason``, as DDAI's review sheets, plus
``annotator`` and ``decided_at``) that ``curate verify-gt --decisions`` and ``curate focus
--decisions`` read as it is. A restarted server resumes from the file; two explorers (two
reviewers) may share it: each write holds a lock and starts from the file as it is, and a page
shows the decisions made elsewhere, so the last decision on a prompt stands, once.
"""

from __future__ import annotations

import csv
import datetime as dt
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from io import StringIO
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ddai.pipelines.records import csv_cells
from ddai.pipelines.records.decisions import VERDICTS
from ddai.pipelines.store import io, locks, objstore
from ddai.reports.serve import queries
from ddai.reports.serve.config import ServeConfig
from ddai.reports.serve.explorer import Explorer
from ddai.reports.serve.guard import READ_ONLY

Render = Callable[..., Response]
COLUMNS = ("uid", "verdict", "reason", "annotator", "decided_at")
KEYS = {"o": "ok", "w": "wrong", "u": "uncertain"}


class Superseded(ValueError):
    """The prompt was decided elsewhere after the deciding page showed it (HTTP 409)."""


def seen_key(decision: dict[str, str] | None) -> str:
    """What a page shows of a prompt's decision, sent back with a verdict: ``annotator
    decided_at``, empty when undecided."""
    return f"{decision['annotator']} {decision['decided_at']}" if decision else ""


def _read_csv(path: Path) -> list[dict[str, str]]:
    if url := objstore.url_of(path):  # a review sheet on object storage (decisions stay local)
        return _rows(StringIO(objstore.read_text(url).removeprefix("\ufeff"), newline=""))
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return _rows(fh)


def _rows(fh: Iterable[str]) -> list[dict[str, str]]:
    reader = csv.DictReader(fh)
    reader.fieldnames = [csv_cells.unescape(c).strip().lower() for c in reader.fieldnames or []]
    return [
        {k: csv_cells.unescape(v) if isinstance(v, str) else "" for k, v in row.items()}
        for row in reader
    ]


class ReviewQueue:
    """The sheet's prompts in its order and the decisions made on them so far."""

    def __init__(self, sheet: Path, decisions: Path) -> None:
        rows = _read_csv(sheet)
        if rows and "uid" not in rows[0]:
            raise ValueError(f"--review {sheet}: no uid column; give the review.csv of verify-gt")
        self.sheet, self.path = sheet, decisions
        self.rows = list({r["uid"]: r for r in rows if r.get("uid")}.values())
        if not self.rows:
            raise ValueError(f"--review {sheet} lists no prompt to review")
        self.index = {r["uid"]: i for i, r in enumerate(self.rows)}
        self.decided: dict[str, dict[str, str]] = {}
        # rows of the file on prompts this sheet does not list, written back as they were
        self.others: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        # another explorer (a second reviewer) may write the same file: every write holds this
        # lock and starts from the file as it is, so no one's decision is lost
        self.file_lock = decisions.with_name(f".{decisions.name}.lock")
        self.refresh()  # a restarted review goes on where it stopped

    def _stat(self) -> tuple[int, int, int] | None:
        # each write replaces the file (a new inode), so a change shows even within one mtime tick
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def refresh(self) -> None:
        """Read the decisions file again when it changed since last read (another explorer
        decided meanwhile): its decisions are the ones in force."""
        with self.lock:
            seen = self._stat()
            if seen == self._seen:
                return
            decided, others = {}, []
            for d in _read_csv(self.path) if seen else []:
                if d.get("uid") in self.index and d.get("verdict") in VERDICTS:
                    decided[d["uid"]] = {c: d.get(c, "") for c in COLUMNS}
                elif d.get("uid"):
                    others.append({c: d.get(c, "") for c in COLUMNS})
            self.decided, self.others, self._seen = decided, others, seen

    @property
    def total(self) -> int:
        return len(self.rows)

    def counts(self) -> dict[str, int]:
        return dict(Counter(d["verdict"] for d in self.decided.values()))

    def next_undecided(self, after: str | None = None) -> str | None:
        """The first undecided uid after ``after`` in sheet order, wrapping round; None when
        every prompt is decided."""
        start = self.index[after] + 1 if after in self.index else 0
        n = self.total
        for k in range(n):
            uid = self.rows[(start + k) % n]["uid"]
            if uid not in self.decided:
                return uid
        return None

    def decide(
        self, uid: str, verdict: str, reason: str, annotator: str, seen: str | None = None
    ) -> dict[str, str]:
        """Record the decision on ``uid`` (replacing an earlier one) and rewrite the file.

        ``seen``: the decision the deciding page showed (``seen_key``); when another one was
        made since (another reviewer), ``Superseded`` is raised and nothing written, so no one
        replaces a decision they have not seen."""
        if uid not in self.index:
            raise KeyError(f"uid {uid!r} is not in the review sheet {self.sheet}")
        if verdict not in VERDICTS:
            raise ValueError(f"verdict {verdict!r}: use one of {', '.join(VERDICTS)}")
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        rec = {"uid": uid, "verdict": verdict, "reason": reason.strip(), "annotator": annotator,
               "decided_at": now}  # fmt: skip
        with locks.exclusive(self.file_lock, f"the decisions file {self.path}", on_wait=None):
            self.refresh()
            with self.lock:
                now_in_force = self.decided.get(uid)
                if seen is not None and seen_key(now_in_force) != seen:
                    d = now_in_force or {}
                    raise Superseded(
                        f"{d.get('annotator') or 'someone'} decided {uid} "
                        f"{d.get('verdict') or '(cleared)'} at {d.get('decided_at') or '?'} "
                        "after this page showed it; reload the page to see that decision, then "
                        "decide again to replace it"
                    )
                self.decided[uid] = rec
                ordered = [self.decided[r["uid"]] for r in self.rows if r["uid"] in self.decided]
                cells = ([d[c] for c in COLUMNS] for d in [*ordered, *self.others])
                io.write_text(self.path, csv_cells.rows_text(list(COLUMNS), cells))
                self._seen = self._stat()
        return rec


# What the page shows of a prompt; DDAI's published sheets carry only uid, verdict and reason
SHEET_FIELDS = ("question", "reference", "pages", "proposed_verdict", "proposed_reason", "rules",
                "score", "ndcg")  # fmt: skip


def sheet_item(row: dict[str, str], prompt: dict | None) -> dict[str, str]:
    """A sheet row with every field the page shows: the question, reference answer and pages a
    sheet lacks are taken from the store's rollouts of the prompt, else left empty (said so)."""
    item = {f: "" for f in SHEET_FIELDS} | row
    if prompt:
        item["question"] = item["question"] or (prompt.get("question") or "")
        item["reference"] = item["reference"] or (prompt.get("reference_answer") or "")
        item["pages"] = item["pages"] or ";".join(prompt.get("reference_pages") or [])
    return item


def routes(cfg: ServeConfig, ex: Explorer, html: Render, error: Render) -> list[Route]:
    """``/review`` and ``/api/review`` over ``cfg.review`` (a sentence when none was given)."""
    queue = ReviewQueue(cfg.review, cfg.decisions_out) if cfg.review and cfg.decisions_out else None
    none = "no review sheet: start ddai serve with --review review.csv (of curate verify-gt)"

    def page(request: Request) -> Response:
        if queue is None:
            return error(404, none, request)
        queue.refresh()
        uid = request.query_params.get("uid") or queue.next_undecided()
        if uid is None:  # every prompt decided
            return html("review.html", title="GT review", nav="review", q=queue, item=None,
                        cfg=cfg, groups=[], pos=queue.total, keys=KEYS)  # fmt: skip
        if uid not in queue.index:
            return error(404, f"uid {uid!r} is not in the review sheet {queue.sheet}", request)
        with ex.connection() as con:
            found = queries.group(con, uid)
        groups = found["groups"]
        item = sheet_item(queue.rows[queue.index[uid]], found["prompt"])
        pos = queue.index[uid]
        return html(
            "review.html",
            title=f"GT review {uid}",
            nav="review",
            q=queue,
            item=item,
            pages=[p.strip() for p in (item.get("pages") or "").split(";") if p.strip()],
            decision=queue.decided.get(uid),
            seen=seen_key(queue.decided.get(uid)),
            groups=groups,
            pos=pos,
            prev_uid=queue.rows[pos - 1]["uid"] if pos > 0 else None,
            next_uid=queue.rows[pos + 1]["uid"] if pos + 1 < queue.total else None,
            cfg=cfg,
            keys=KEYS,
        )

    async def post(request: Request) -> Response:
        if not cfg.annotate:  # the guard refuses it first
            return JSONResponse({"error": READ_ONLY}, status_code=403)
        if queue is None:
            return error(404, none, request)
        try:
            body = await request.json()
            uid, verdict = body["uid"], body["verdict"]
            reason = body.get("reason") or ""
            seen = body.get("seen")  # the decision the page showed; absent: not checked
            if not all(isinstance(v, str) for v in (uid, verdict, reason)):
                raise TypeError
            if seen is not None and not isinstance(seen, str):
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError):
            return error(400, 'send JSON {"uid": UID, "verdict": "ok|wrong|uncertain"}', request)
        try:
            rec = queue.decide(uid, verdict, reason, cfg.annotator or "", seen)
        except KeyError as e:
            return error(404, str(e.args[0]), request)
        except Superseded as e:
            return error(409, str(e), request)
        except ValueError as e:
            return error(400, str(e), request)
        return JSONResponse(
            {
                "decision": rec,
                "decided": len(queue.decided),
                "total": queue.total,
                "next": queue.next_undecided(uid),
            }
        )

    return [Route("/review", page), Route("/api/review", post, methods=["POST"])]
