"""A person's review decisions: CSV files with ``uid, verdict, reason``.

``verdict`` is ``ok`` (keep), ``wrong`` or ``uncertain`` (both flag the prompt: it is excluded);
an empty verdict means not decided yet. Several files merge in the order given, a later file's
decision on a uid replacing an earlier one, so a follow-up review can overturn a first pass.
A file on object storage is read through the reader its caller passes (this floor imports no
store).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ddai.pipelines.records import csv_cells

VERDICTS = ("ok", "wrong", "uncertain")
FLAGGING = ("wrong", "uncertain")


@dataclass(frozen=True)
class Decision:
    uid: str
    verdict: str
    reason: str
    source: str

    @property
    def flagged(self) -> bool:
        return self.verdict in FLAGGING


def _read_local(path: str | os.PathLike[str]) -> str:
    if not Path(path).is_file():
        raise FileNotFoundError(path)
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return fh.read()


def read_decisions(
    paths: list[str | os.PathLike[str]] | tuple,
    read_text: Callable[[str | os.PathLike[str]], str] = _read_local,
) -> dict[str, Decision]:
    """uid → its last decision across ``paths``; undecided rows (empty verdict) are skipped.
    ``read_text``: one file's text, FileNotFoundError when it is missing (callers pass the
    store's reader, which takes ``s3://``/``gs://`` URLs too; default: local files only)."""
    out: dict[str, Decision] = {}
    for path in paths:
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
            rows = decided = 0
            for line, row in enumerate(reader, start=2):
                row = {
                    k: csv_cells.unescape(v) if isinstance(v, str) else v for k, v in row.items()
                }
                uid = (row.get("uid") or "").strip()
                verdict = (row.get("verdict") or "").strip().lower()
                rows += bool(uid)
                if not uid or not verdict:
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
            raise ValueError(
                f"{p}: none of its {rows:,} rows has a verdict (a review sheet not filled in "
                "yet?); write ok, wrong or uncertain in the verdict column of the rows you "
                "reviewed, or leave this file out"
            )
    return out


def flagged(decisions: dict[str, Decision]) -> dict[str, Decision]:
    return {u: d for u, d in decisions.items() if d.flagged}
