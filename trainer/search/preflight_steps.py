"""The preflight steps a training run takes before its first step, shared by GRPO and PPO: the
model-free checks (golden pages, search), sampling and scoring a few prompts' episodes the way a
step does, and the one-line status a result reports (checks themselves: ``search.preflight``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ddai.trainer.search.episodes import SearchRollout
from ddai.trainer.search.preflight import (
    PreflightReport,
    SampledEpisode,
    check_golden_pages,
    check_search,
    sample,
)
from ddai.trainer.search.tasks import Task


def static_preflight(
    report: PreflightReport,
    tasks: list[Task],
    corpus: Any,
    corpus_name: str,
    search: Any,
    *,
    k: int,
    restrict_to_doc: bool,
    prompts: int,
    seed: int,
) -> None:
    """The checks that need no model: golden pages in the corpus, then search over a sample of
    questions (skipped when the pages are missing: the search could not find them anyway)."""
    cov = check_golden_pages(report, tasks, corpus, corpus_name)
    if cov.ok:
        picked = sample(tasks, 4 * prompts, seed, need_golden=True)
        check_search(report, picked, search, k=k, restrict_to_doc=restrict_to_doc)


def run_static_preflight(cfg: Any, tasks: list[Task], corpus: Any, search: Any) -> PreflightReport:
    """The run's preflight report after ``static_preflight`` (raising on its errors), or a
    skipped one; ``cfg``: a GRPO or PPO run config (``skip_preflight``, ``corpus``, ``episode``,
    ``preflight_prompts``, ``seed``)."""
    report = PreflightReport(skipped=cfg.skip_preflight)
    if not cfg.skip_preflight:
        static_preflight(
            report,
            tasks,
            corpus,
            str(cfg.corpus),
            search,
            k=cfg.episode.search_k,
            restrict_to_doc=cfg.episode.restrict_to_doc,
            prompts=cfg.preflight_prompts,
            seed=cfg.seed,
        )
        report.raise_errors()
    return report


def sampled_episodes(
    rollout: SearchRollout,
    slots: list[tuple[Task, int, int]],
    trainer: Any,
    model: Any,
    timeout: float,
) -> list[SampledEpisode]:
    """Run and score ``slots`` the way a training step does, without logging or training."""
    store = rollout.store
    trajs = rollout.run(slots, trainer, model)
    asyncio.run(store.score([t.key for t in trajs], timeout))
    out = []
    for t in trajs:
        _, judged, score = store.pop(t.key)
        fmt = t.episode.format_ok
        out.append(
            SampledEpisode(
                group=t.group,
                reward=score.reward,
                format_ok=fmt,
                needs_judge=store.spec.needs_judge and not (store.spec.gate and not fmt),
                error=judged.error if judged else None,
            )
        )
    return out


def preflight_slots(
    tasks: list[Task], prompts: int, n_agent: int, seed: int
) -> list[tuple[Task, int, int]]:
    """``n_agent`` episodes for each of a seeded sample of ``prompts`` prompts."""
    return [(t, g, i) for g, t in enumerate(sample(tasks, prompts, seed)) for i in range(n_agent)]


def preflight_status(report: PreflightReport) -> str:
    if report.skipped:
        return "skipped"
    if report.warnings:
        return "passed with warnings: " + "; ".join(w.line() for w in report.warnings)
    return "passed"
