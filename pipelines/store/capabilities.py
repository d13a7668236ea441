"""What a run's rollouts carry, and the up-front check of commands that need it.

A run's ``_manifest.json`` holds ``capabilities``: how many of its rollouts carry parsed turns,
retrieved pages, a judge score, NDCG, a reward, a step, an advantage and page images, counted at
ingest (``ddai.pipelines.store.capability_count``). ``run_capabilities`` reads them (counting the
partition by a DuckDB query when its manifest predates the counts); ``require`` raises
``MissingCapability`` (a ``ValueError``: exit 2 at the CLI) naming the run, what is missing and
what would supply it, so no command writes an empty output because its input lacked a field.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.store import objstore, store_read
from ddai.pipelines.store.capability_count import NAMES, count_relation, empty

__all__ = [
    "NAMES",
    "Capabilities",
    "MissingCapability",
    "for_runs",
    "require",
    "require_runs",
    "run_capabilities",
]

MEANING = {
    "turns": "parsed turns (the Searcher's trajectory)",
    "pages": "retrieved pages",
    "judge": "a judge score",
    "ndcg": "NDCG",
    "reward": "a reward",
    "step": "a training step",
    "advantages": "an advantage",
    "images": "page images in its observations",
}

SUPPLY = {
    "turns": "ingest DDAI's unified log of the same round (`ddai ingest unified_trajectory.jsonl "
    "--run-id RUN`) or its extracted trajectories (ddai JSONL/Parquet with `response` or `turns` "
    "per uid and rollout_idx)",
    "pages": "ingest a log that names the retrieved pages (DDAI's unified or flash_rm_detail log, "
    "or a `retrieved_pages` column)",
    "judge": "ingest a log with judge scores (DDAI's unified or flash_rm_detail log, or a "
    "`judge_score` column), or score the run with a judge",
    "ndcg": "ingest a log with NDCG (DDAI's flash_rm_detail, gspo_phase1.json or unified log, or "
    "an `ndcg` column)",
    "reward": "ingest a log with the trained reward (DDAI's `final_score`, or a `reward` column)",
    "step": "ingest a log with training steps (DDAI's unified log, verl dumps, or a `step` column)",
    "advantages": "ingest a log with the trainer's advantages (an `advantage` column)",
    "images": "ingest a log whose observations name page images (DDAI's unified log)",
}
# Each entry fits wherever a run lacks the field (a report note, `ddai runs`, any command);
# an alternative that only one command has (`curate bucket --scores`) is added by that command.

# What each source format is, for messages ("its source is ...").
FORMAT_NOTES = {
    "ddai-flash": "DDAI's flash_rm_detail reward log, which holds scores and pages but no "
    "trajectories",
    "ddai-phase1": "DDAI's gspo_phase1.json",
    "verl": "a verl rollout dump",
    "ddai-unified": "DDAI's unified trajectory log",
    "ddai": "ddai's own rollout log",
}


class MissingCapability(ValueError):
    """A command needs something a run's rollouts do not carry (CLI exit 2)."""


@dataclass(frozen=True)
class Capabilities:
    """Counts of a run's rollouts that carry each capability in ``NAMES``.

    ``formats``: the source formats the run was ingested from; ``counted``: True when the counts
    came from a query over the partition rather than from its manifest.
    """

    run: str
    rollouts: int
    counts: dict[str, int] = field(default_factory=dict)
    formats: tuple[str, ...] = ()
    counted: bool = False

    @classmethod
    def of(cls, run: str, counts: dict[str, Any], **kw: Any) -> Capabilities:
        full = {**empty(), **{k: int(v) for k, v in counts.items()}}
        return cls(run, full.pop("rollouts"), full, **kw)

    def count(self, name: str) -> int:
        if name not in NAMES:
            raise KeyError(f"unknown capability {name!r}; known: {', '.join(NAMES)}")
        return self.counts.get(name, 0)

    def has(self, name: str) -> bool:
        return self.count(name) > 0

    def carries(self) -> list[str]:
        return [n for n in NAMES if self.has(n)]

    def lacks(self) -> list[str]:
        return [n for n in NAMES if not self.has(n)]

    def compact(self) -> str:
        """One line: what the run carries (with ``k/n`` where only some rollouts do)."""
        parts = [
            n if self.count(n) >= self.rollouts else f"{n} {self.count(n):,}/{self.rollouts:,}"
            for n in self.carries()
        ]
        return ", ".join(parts) or "nothing"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollouts": self.rollouts,
            **self.counts,
            "lacks": self.lacks(),
            "formats": list(self.formats),
        }


def _formats(man: dict[str, Any]) -> tuple[str, ...]:
    seen: list[str] = []
    for m in [*man.get("history", []), man]:
        for s in m.get("sources", []):
            f = s.get("format")
            if f and f not in seen:
                seen.append(f)
    return tuple(seen)


def run_capabilities(logs: str | os.PathLike[str], run: str) -> Capabilities:
    """What ``run``'s rollouts carry: its manifest's counts, else counted over its partition.

    Raises FileNotFoundError (naming the known runs) when the store has no such run.
    """
    files = store_read.parquet_files(logs, [run])
    man = store_read.run_manifest(logs, run) or {}
    if "capabilities" in man:
        return Capabilities.of(run, man["capabilities"], formats=_formats(man))
    if not files:
        return Capabilities.of(run, empty(), formats=_formats(man), counted=True)
    import duckdb  # only a manifest from before the counts: `ddai runs` needs no DuckDB

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # no bar drawn over the command's
    try:
        objstore.register(con, files)  # a store on object storage: read through fsspec
        con.read_parquet([str(f) for f in files], hive_partitioning=False).create_view(
            "rollouts_src"
        )
        counts = count_relation(con)
    finally:
        con.close()
    return Capabilities.of(run, counts, formats=_formats(man), counted=True)


def for_runs(logs: str | os.PathLike[str], runs: Iterable[str]) -> dict[str, Capabilities]:
    return {r: run_capabilities(logs, r) for r in runs}


def _source(caps: Capabilities) -> str:
    notes = [FORMAT_NOTES.get(f, f) for f in caps.formats]
    return f"; it was ingested from {' and '.join(notes)}" if notes else ""


def missing_message(
    caps: Capabilities, name: str, *, needed_by: str, why: str = "", fix: str | None = None
) -> str:
    """``run R has no NAME: …; NEEDED_BY needs NAME WHY. Fix: …, then rerun.``"""
    return (
        f"run {caps.run} has no {name}: none of its {caps.rollouts:,} rollouts carries "
        f"{MEANING[name]}{_source(caps)}. {needed_by} needs {name}{' ' + why if why else ''}. "
        f"Fix: {(fix or SUPPLY[name]).replace('RUN', caps.run)}, then rerun."
    )


def require(
    caps: Capabilities | Iterable[Capabilities],
    *needs: str,
    needed_by: str,
    why: str = "",
    fix: str | None = None,
) -> None:
    """Raise ``MissingCapability`` when a run has no rollout carrying one of ``needs``.

    ``needed_by`` names the command or section (``ddai distill``), ``why`` says what for (``to
    rebuild SFT messages``); ``fix`` replaces the default
    remedy (``SUPPLY``; ``RUN`` in it becomes the run id). Every lacking run and need is named.
    """
    for n in needs:
        if n not in NAMES:
            raise KeyError(f"unknown capability {n!r}; known: {', '.join(NAMES)}")
    runs = [caps] if isinstance(caps, Capabilities) else list(caps)
    problems = [
        missing_message(c, n, needed_by=needed_by, why=why, fix=fix)
        for c in runs
        for n in needs
        if not c.has(n)
    ]
    if problems:
        raise MissingCapability(" ".join(problems))


def require_runs(
    logs: str | os.PathLike[str] | Path,
    runs: Iterable[str],
    *needs: str,
    needed_by: str,
    why: str = "",
    fix: str | None = None,
) -> dict[str, Capabilities]:
    """``require`` over the named runs of a store; returns their capabilities."""
    caps = for_runs(logs, runs)
    require(caps.values(), *needs, needed_by=needed_by, why=why, fix=fix)
    return caps
