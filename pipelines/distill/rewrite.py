"""Think-only rewrite: a trajectory's thinks go to a ``ThinkRewriter`` backend, its actions never.

All of one trajectory's thinks go in one request (chunked when long: ``Chunking``), except the
think of a forced max-turn completion, which the environment wrote and which stays as it is. The
same count must come back for every chunk, else the rewrite of the whole trajectory is discarded
(``rewrite-count-mismatch``); a failed call discards it too (``rewrite-failed``). All requests go
to the backend in one batch, so its engine runs them concurrently, answers repeats from its cache
and resumes an interrupted run without paying twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ddai.pipelines.backends import RewriteRequest, RewriteResult, ThinkRewriter, run_sync
from ddai.pipelines.distill.configs import Chunking
from ddai.pipelines.distill.safety import Candidate, Event
from ddai.pipelines.distill.thinks import Message, think_slots

REWRITE_FAILED = "rewrite-failed"
REWRITE_COUNT_MISMATCH = "rewrite-count-mismatch"
# Failure reasons of the backend layer that mean "stopped by --max-cost" / "wrong think count".
_MAX_COST = "max-cost"
_THINK_COUNT = "think-count"


def chunk(texts: Sequence[str], chunking: Chunking) -> list[tuple[int, int]]:
    """Greedy ``[start, end)`` ranges over ``texts`` within the chunking limits."""
    ranges: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, t in enumerate(texts):
        if i > start and (i - start >= chunking.max_thinks or size + len(t) > chunking.max_chars):
            ranges.append((start, i))
            start, size = i, 0
        size += len(t)
    if start < len(texts):
        ranges.append((start, len(texts)))
    return ranges


def question_of(messages: Sequence[Message]) -> str | None:
    """The question (the first user message), the context a rewriter gets."""
    if len(messages) > 1 and isinstance(messages[1].get("content"), str):
        return messages[1]["content"]
    return None


@dataclass
class Plan:
    """The requests of one rewrite pass; ``owners[r]`` = (candidate index, slot indices)."""

    requests: list[RewriteRequest]
    owners: list[tuple[int, list[int]]]


def plan(candidates: Sequence[Candidate], chunking: Chunking = Chunking()) -> Plan:
    reqs, owners = [], []
    for ci, c in enumerate(candidates):
        slots = think_slots(c.messages)
        send = [k for k, s in enumerate(slots) if not s.forced]
        texts = [slots[k].text for k in send]
        for a, b in chunk(texts, chunking):
            reqs.append(RewriteRequest(tuple(texts[a:b]), question_of(c.messages)))
            owners.append((ci, send[a:b]))
    return Plan(reqs, owners)


@dataclass
class Applied:
    """What a rewrite pass did: trajectories rewritten, discarded by reason, stopped by the cap."""

    rewritten: int = 0
    """Trajectories at least one of whose thinks came back changed."""
    over_budget: int = 0
    unchanged: int = 0
    """Trajectories whose thinks all came back as they were (the identity rewriter: all)."""


def apply(candidates: Sequence[Candidate], p: Plan, results: Sequence[RewriteResult]) -> Applied:
    """Set each candidate's proposed thinks from ``results`` (aligned with ``p.requests``), or
    record why its rewrite was discarded."""
    if len(results) != len(p.requests):
        raise ValueError(f"rewriter answered {len(results)} requests for {len(p.requests)}")
    proposals: dict[int, list[str]] = {}
    originals: dict[int, list[str]] = {}
    failed: dict[int, Event] = {}
    over: set[int] = set()
    for (ci, ks), req, res in zip(p.owners, p.requests, results, strict=True):
        c = candidates[ci]
        if ci not in proposals:
            originals[ci] = [s.text for s in think_slots(c.messages)]
            proposals[ci] = list(originals[ci])
        if ci in failed:
            continue
        error, got = res.error, res.thinks
        if error is not None and error.startswith(_MAX_COST):
            over.add(ci)
        if error is not None and error.startswith(_THINK_COUNT):
            failed[ci] = Event(c.uid, "discard", REWRITE_COUNT_MISMATCH, detail=error)
        elif error is not None or got is None:
            failed[ci] = Event(c.uid, "discard", REWRITE_FAILED, detail=error or "no thinks")
        elif len(got) != len(ks):
            failed[ci] = Event(
                c.uid,
                "discard",
                REWRITE_COUNT_MISMATCH,
                detail=f"{len(got)} thinks came back for {len(req.thinks)}",
            )
        else:
            for k, text in zip(ks, got, strict=True):
                proposals[ci][k] = str(text)
    out = Applied(over_budget=len(over))
    for ci, thinks in proposals.items():
        if ci in failed:
            candidates[ci].events.append(failed[ci])
        else:
            candidates[ci].thinks = thinks
            if thinks == originals[ci]:
                out.unchanged += 1
            else:
                out.rewritten += 1
    return out


def run(rewriter: ThinkRewriter, candidates: Sequence[Candidate], chunking: Chunking) -> Applied:
    """Rewrite the candidates' thinks in one batch through ``rewriter``."""
    p = plan(candidates, chunking)
    results = run_sync(rewriter.rewrite(p.requests)) if p.requests else []
    return apply(candidates, p, results)
