"""``ddai distill vet``: an LLM vetter over SFT trajectories, DDAI's two criteria sets.

DDAI vetted its SFT data twice with a model (``scripts/vet_sft_rollouts_gpt.py``: pass/fail for
query collapse, repetitive actions, gibberish, evidence mismatch and format violations;
``scripts/filter_sft_queries_gpt.py``: a label per search query, a trajectory with a gibberish or
code query dropped, semantic drift labelled and kept). Here both sets go through the ``vetter``
backend role (``--vetter NAME``: an OpenAI-compatible or Gemini model; ``local``: text heuristics,
no model, said in the summary), in one batch: the engine answers repeats from the call cache and
caches each answer the moment it arrives, so a killed run resumes without paying twice.

The kept rows are the input's rows unchanged (every column, in order), written with the report
(one JSON line per trajectory: verdict, failed criteria, reason, drift label, query labels) and
the manifest as one commit. A failed call leaves its trajectory unvetted: dropped (``on_error``
``drop``, the default) or kept, counted either way, and the command exits 1 naming the failures.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.backends.base import VetRequest, VetResult
from ddai.pipelines.distill import formats
from ddai.pipelines.distill.configs import VetConfig, VetError
from ddai.pipelines.distill.findings import is_system_error
from ddai.pipelines.distill.run import record_calls, unchanged
from ddai.pipelines.distill.thinks import Message
from ddai.pipelines.records.deps import pa, pq
from ddai.pipelines.records.tags import parse_turns
from ddai.pipelines.store import io, manifest, objstore

VET_STEP = "distill.vet"
CALL_FAILED = "call-failed"
UNSPECIFIED = "unspecified"
"""The reason of a rollout-set failure whose vetter named no criterion."""
# ---------------------------------------------------------------- a trajectory's requests


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + "…"


def requests_of(messages: list[Message], sets: tuple[str, ...], max_think_chars: int = 480):
    """The vetting request of each criteria set for one trajectory (pure).

    The question is the first user text; queries, bboxes and thinks come from the tag grammar
    (``parse_turns``) over each assistant message. Counters: searches, bboxes, assistant
    messages, system-error observations, repeated adjacent queries, grammar faults (invalid turns
    and assistant messages not holding exactly one turn) and whether a search_complete came."""
    question = next(
        (m["content"].strip() for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)),
        "",
    )  # fmt: skip
    queries: list[str] = []
    bboxes: list[str] = []
    thinks: list[str] = []
    faults = assistants = system_errors = 0
    complete = False
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user":
            system_errors += is_system_error(content)
            continue
        if m.get("role") != "assistant" or not isinstance(content, str):
            continue
        assistants += 1
        turns = parse_turns(content)
        faults += len(turns) != 1
        for t in turns:
            faults += not t.valid
            if t.think and t.think.strip():
                thinks.append(_cut(t.think.strip(), max_think_chars))
            if t.action == "search" and t.arg and t.arg.strip():
                queries.append(t.arg.strip())
            elif t.action == "bbox" and t.arg:
                bboxes.append(t.arg.strip())
            complete = complete or t.action == "search_complete"
    norm = [q.casefold() for q in queries]
    counters = (
        ("num_search", len(queries)),
        ("num_bbox", len(bboxes)),
        ("num_assistant_messages", assistants),
        ("num_system_errors", system_errors),
        ("repeated_adjacent_queries", sum(a == b for a, b in itertools.pairwise(norm))),
        ("grammar_faults", faults),
        ("has_search_complete", int(complete)),
    )
    return [
        VetRequest(s, question, tuple(queries), tuple(bboxes), tuple(thinks), counters)
        if s == "rollout"
        else VetRequest(s, question, tuple(queries))
        for s in sets
    ]


# ---------------------------------------------------------------- verdicts


@dataclass
class Verdict:
    """One trajectory's decision: ``keep``, the criteria that failed, the drift label."""

    keep: bool
    failed: list[str]
    reason: str
    drift_queries: int
    labels: list[str]
    flags: dict[str, list[str]]
    errors: dict[str, str]


def failed_of(criteria: str, result: VetResult) -> list[str]:
    """The failed criteria of one set's answer: the rollout set trusts the vetter's pass/fail
    (a fail naming nothing is ``unspecified``); the queries set fails on a gibberish or code
    label whatever the vetter's own ``keep`` says (DDAI's rule)."""
    if criteria == "queries":
        return [f"query_{lb}" for lb in ("gibberish", "code") if lb in result.labels]
    if result.keep:
        return []
    return list(result.criteria) or [UNSPECIFIED]


def decide(sets: tuple[str, ...], results: list[VetResult], on_error: str) -> Verdict:
    failed: list[str] = []
    reasons, flags, errors = [], {}, {}
    labels: list[str] = []
    for s, r in zip(sets, results, strict=True):
        if not r.ok:
            errors[s] = r.error or "no answer"
            reasons.append(f"{s}: call failed ({errors[s]})")
            continue
        failed += [f for f in failed_of(s, r) if f not in failed]
        flags[s] = list(r.criteria)
        reasons.append(f"{s}: {r.reason}" if r.reason else s)
        if s == "queries":
            labels = list(r.labels)
    keep = not failed and (not errors or on_error == "keep")
    if errors and on_error == "drop" and not failed:
        failed = [CALL_FAILED]
    return Verdict(keep, failed, "; ".join(reasons), labels.count("drift"), labels, flags, errors)


def report_row(row: int, uid: str, v: Verdict) -> dict[str, Any]:
    out: dict[str, Any] = {
        "row": row,
        "uid": uid,
        "verdict": "keep" if v.keep else "drop",
        "criteria": v.failed,
        "reason": v.reason,
        "drift": "drift" if v.drift_queries else "none",
        "drift_queries": v.drift_queries,
        "labels": v.labels,
        "flags": v.flags,
    }
    if v.errors:
        out["errors"] = v.errors
    return out


# ---------------------------------------------------------------- the step


def build_vetter(cfg: VetConfig):
    from ddai.pipelines.backends import step_backend

    return step_backend("vetter", cfg.vetter, cfg, "distill.vet")


def _read(path: Path) -> tuple[pa.Table, list[tuple[str, list[Message]]], str]:
    samples, fmt = formats.read(path)  # checks the shape and parses every row's messages
    return pq.read_table(path), [(s.uid, s.messages) for s in samples], fmt


def _is_local(backend: Any) -> bool:
    return getattr(getattr(backend, "spec", None), "kind", "") == "local-vetter"


def run_vet(cfg: VetConfig, *, vetter: Any = None) -> dict[str, Any]:
    """Vet ``cfg.file`` into ``cfg.out`` (+ report, manifest); returns the summary.

    ``vetter``: a ``Vetter`` to use instead of the backend ``cfg.vetter`` names. Raises
    ``ValueError``/``FileNotFoundError`` for bad input, ``VetError`` when ``max_cost`` stopped
    calls (nothing written; finished calls are cached)."""
    from ddai.pipelines.backends import run_sync

    table, rows, fmt = _read(Path(cfg.file))
    backend = vetter if vetter is not None else build_vetter(cfg)
    params = cfg.params(getattr(backend, "name", None))
    if (skipped := unchanged(cfg, VET_STEP, params, [cfg.file], "input")) is not None:
        return skipped
    sets = cfg.sets
    reqs = [r for _, msgs in rows for r in requests_of(msgs, sets, cfg.max_think_chars)]
    if cfg.dry_run:
        return {
            "dry run": True,
            "file": str(cfg.file),
            "rows in": len(rows),
            "criteria": list(sets),
            "vetter": getattr(backend, "name", None),
            "vet requests": len(reqs),
            "vetter plan": backend.plan(reqs) if hasattr(backend, "plan") else None,
        }
    record = manifest.start(VET_STEP, params, [cfg.file])
    results = run_sync(backend.vet(reqs)) if reqs else []
    over = sum(1 for r in results if r.error and r.error.startswith("max-cost"))
    if over:
        raise VetError(
            f"--max-cost {cfg.max_cost:g} USD stopped {over} vetting calls; nothing was written. "
            "Finished calls are cached: rerun with a higher --max-cost to resume without paying "
            "for them again"
        )
    n = len(sets)
    verdicts = [decide(sets, results[i * n : (i + 1) * n], cfg.on_error) for i in range(len(rows))]
    report = [
        report_row(i, uid, v) for i, ((uid, _), v) in enumerate(zip(rows, verdicts, strict=True))
    ]
    kept = table.filter(pa.array([v.keep for v in verdicts], type=pa.bool_()))
    by_reason: Counter[str] = Counter(f for v in verdicts if not v.keep for f in v.failed)
    summary: dict[str, Any] = {
        "file": str(cfg.file),
        "format": fmt,
        "vetter": getattr(backend, "name", None),
        "criteria": list(sets),
        "rows in": len(rows),
        "rows kept": kept.num_rows,
        "rows dropped": len(rows) - kept.num_rows,
        "dropped by reason": dict(sorted(by_reason.items())),
        "drift rows": sum(v.drift_queries > 0 for v in verdicts),
        "unvetted rows": sum(bool(v.errors) for v in verdicts),
        "report": objstore.display(cfg.report),
        "output": objstore.display(cfg.out),
    }
    if vetter is None and _is_local(backend):
        summary["note"] = (
            "local vetter: text heuristics, no model (evidence_mismatch is never judged, drift "
            "is word overlap with the question); name an LLM with --vetter NAME (ddai.toml "
            "[backends])"
        )
    record_calls(record, backend, summary)
    record.rows_in, record.rows_out = len(rows), kept.num_rows
    for reason, k in by_reason.items():
        record.drop(reason, k)
    record.notes = {k: v for k, v in summary.items() if k not in ("output", "dropped by reason")}
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in report)
    manifest.commit_set(  # the kept rows, the report and the manifest, visible together
        [
            manifest.Member(cfg.out, lambda tmp: io.parquet_into(tmp, kept), record),
            manifest.Member(cfg.report, lambda tmp: tmp.write_text(lines, encoding="utf-8"), None),
        ]
    )
    return summary
