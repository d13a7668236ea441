"""A person's review decisions: CSV files with ``uid, verdict, reason``.

``verdict`` is ``ok`` (keep), ``wrong`` or ``uncertain`` (both flag the prompt: it is excluded);
an empty verdict means not decided yet. Several files merge in the order given, a later file's
decision on a uid replacing an earlier one, so a follow-up review can overturn a first pass.

A review sheet (``review.csv`` of ``ddai curate verify-gt``) also carries the verifier's proposals
(``proposed_verdict``, ``proposed_reason``): ``read_proposals`` reads them back, so a rerun that
does not ask the verifier keeps the record of what it said. Files without those columns (DDAI's
``uid, verdict, reason``) carry none. A sheet row whose verdict is the verifier's own
(``decided_by = verifier``, the verdict its proposal: written under ``--trust-verifier``) is no
person's decision: ``read_decisions`` leaves it to ``read_proposals``, so only ``--trust-verifier``
applies it again; a person who changes that verdict, or writes ``person`` in ``decided_by``,
decides it.

A file on object storage is read through the reader its caller passes (this floor imports no
store).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ddai.pipelines.records import csv_cells

VERDICTS = ("ok", "wrong", "uncertain")
FLAGGING = ("wrong", "uncertain")
PROPOSALS = (*VERDICTS, "error")  # a verifier's proposal; "error": its call failed


@dataclass(frozen=True)
class Decision:
    uid: str
    verdict: str
    reason: str
    source: str

    @property
    def flagged(self) -> bool:
        return self.verdict in FLAGGING


Reader = Callable[[str | os.PathLike[str]], str]
"""One file's text, FileNotFoundError when it is missing."""


def _read_local(path: str | os.PathLike[str]) -> str:
    if not Path(path).is_file():
        raise FileNotFoundError(path)
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return fh.read()


def _rows(path: str | os.PathLike[str], read_text: Reader) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row with lower-cased column names and unescaped cells) of the CSV at
    ``path``, read through ``read_text``."""
    p = os.fspath(path)
    try:
        text = read_text(path).removeprefix("\ufeff")
    except (FileNotFoundError, IsADirectoryError):
        raise FileNotFoundError(f"decisions file {p} not found") from None
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        cols = [csv_cells.unescape(c).strip().lower() for c in reader.fieldnames or []]
        if "uid" not in cols or "verdict" not in cols:
            raise ValueError(
                f"{p}: a decisions CSV needs the columns uid, verdict[, reason]; "
                f"found {', '.join(cols) or 'none'}"
            )
        reader.fieldnames = cols
        for line, row in enumerate(reader, start=2):
            yield (
                line,
                {k: csv_cells.unescape(v) if isinstance(v, str) else v for k, v in row.items()},
            )


def read_decisions(
    paths: list[str | os.PathLike[str]] | tuple, read_text: Reader = _read_local
) -> dict[str, Decision]:
    """uid → its last decision across ``paths``; undecided rows (empty verdict) and the
    verifier's own verdicts (``_verifiers``) are skipped. ``read_text``: callers pass the
    store's reader, which takes ``s3://``/``gs://`` URLs too (default: local files only)."""
    out: dict[str, Decision] = {}
    for path in paths:
        p = os.fspath(path)
        rows = decided = verifiers = 0
        for line, row in _rows(path, read_text):
            uid = (row.get("uid") or "").strip()
            verdict = (row.get("verdict") or "").strip().lower()
            rows += bool(uid)
            if not uid or not verdict:
                continue
            if _verifiers(row, verdict):
                verifiers += 1
                continue
            decided += 1
            if verdict not in VERDICTS:
                raise ValueError(
                    f"{p}:{line}: verdict {verdict!r} for {uid}; use one of "
                    f"{', '.join(VERDICTS)} (or leave it empty for undecided)"
                )
            out[uid] = Decision(uid, verdict, (row.get("reason") or "").strip(), str(p))
        if rows and not decided:
            # the review sheet as written, before a person filled it in: applying it would
            # decide nothing and look like a review that found nothing wrong
            theirs = (
                f" of a person ({verifiers:,} carry the verifier's verdict, decided_by verifier: proposals, "
                "which only --trust-verifier applies; write person in decided_by of those you "
                "confirm)"
                if verifiers
                else ""
            )
            raise ValueError(
                f"{p}: none of its {rows:,} rows has a verdict{theirs} (a review sheet "
                "not filled in yet?); write ok, wrong or uncertain in the verdict column of the "
                "rows you reviewed, or leave this file out"
            )
    return out


def _verifiers(row: dict[str, str], verdict: str) -> bool:
    """Whether a sheet row's verdict is the verifier's own: marked ``decided_by = verifier`` and
    equal to its proposal (a person who changed it decided it)."""
    by = (row.get("decided_by") or "").strip().lower()
    return by == "verifier" and verdict == (row.get("proposed_verdict") or "").strip().lower()


def read_proposals(
    paths: list[str | os.PathLike[str]] | tuple, read_text: Reader = _read_local
) -> dict[str, tuple[str, str]]:
    """uid → (proposed verdict, proposed reason) the review sheets at ``paths`` carry, a later
    file's replacing an earlier one's; rows with no proposal and files without a
    ``proposed_verdict`` column carry none."""
    out: dict[str, tuple[str, str]] = {}
    for path in paths:
        p = os.fspath(path)
        for line, row in _rows(path, read_text):
            uid = (row.get("uid") or "").strip()
            verdict = (row.get("proposed_verdict") or "").strip().lower()
            if not uid or not verdict:
                continue
            if verdict not in PROPOSALS:
                raise ValueError(
                    f"{p}:{line}: proposed_verdict {verdict!r} for {uid} is none a verifier "
                    f"gives ({', '.join(PROPOSALS)}); restore the sheet's value or empty the cell"
                )
            out[uid] = (verdict, (row.get("proposed_reason") or "").strip())
    return out


def flagged(decisions: dict[str, Decision]) -> dict[str, Decision]:
    return {u: d for u, d in decisions.items() if d.flagged}
