"""The preflight steps a training run takes before its first step, shared by GRPO, PPO and
collect: the model-free checks (golden pages, search, pages the policy and the generator can
read: ``check_pages_readable``), sampling and scoring a few prompts' episodes the way a
step does, and the one-line status a result reports (checks themselves: ``episode.preflight``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ddai.trainer.episode.episodes import SearchRollout
from ddai.trainer.episode.preflight import (
    PreflightReport,
    SampledEpisode,
    check_chat_template,
    check_golden_pages,
    check_search,
    sample,
)
from ddai.trainer.episode.tasks import Task


def check_pages_readable(
    report: PreflightReport,
    tasks: Sequence[Task],
    corpus: Any,
    corpus_name: str,
    *,
    observation: str,
    generator: Any = None,
    max_images: int,
    has_images: bool,
) -> None:
    """The policy and the generator can read what the corpus's pages are: when none of the
    dataset's golden pages in ``corpus`` (else its first 50 pages) has text, a text policy sees
    bare page labels and a text-only generator (``reads_images`` False: the local extractive
    one), or a generator sent no images, never sees the evidence. ``generator``: None when the
    reward calls none."""
    pages = list(dict.fromkeys(p for t in tasks for p in t.reference_pages if p in corpus))
    if not pages:
        pages = corpus.pages()[:50]
    with_text = sum(bool(corpus.text(p).strip()) for p in pages)
    images = "page images" if has_images else "no page images either"
    report.checks["pages"] = {
        "pages": len(pages),
        "with_text": with_text,
        "images": has_images,
        "observation": observation,
    }
    if not pages or with_text:
        return
    blind = f"none of {len(pages)} pages of --corpus {corpus_name} has text ({images})"
    text_fix = (
        "or build the corpus with page text (`ddai corpus build IMAGES_DIR --text-from "
        "pages.parquet --out pages.parquet`)"
    )
    if observation == "text":
        report.add(
            "pages",
            "error",
            f"{blind}: the policy is shown pages as text (--observation text) and would see "
            "bare page labels",
            f"pass --observation image with a VLM --model (the page images), {text_fix}",
        )
    if generator is None:
        return
    name = getattr(generator, "name", type(generator).__name__)
    if getattr(generator, "reads_images", True) is False:
        report.add(
            "pages",
            "error",
            f"{blind}: the generator `{name}` reads page text only and would answer without "
            "evidence every time (the local one: 'Cannot determine from the provided pages.')",
            "pass --generator NAME naming a multimodal backend in ddai.toml (kind openai or "
            f"gemini, a VLM model) that is sent the page images, {text_fix}",
        )
    elif not has_images or max_images == 0:
        why = "--generator-max-images is 0" if has_images else "the run has no page images"
        report.add(
            "pages",
            "error",
            f"{blind}, and {why}: the generator `{name}` would be sent no evidence",
            "pass --generator-max-images N (N > 0) with an image corpus or --image-root DIR, "
            + text_fix,
        )


def run_static_preflight(
    cfg: Any, tasks: list[Task], corpus: Any, backends: Any, spec: Any, has_images: bool
) -> PreflightReport:
    """The run's preflight report after the checks that need no model (raising on their errors),
    or a skipped one: ``check_pages_readable``, golden pages in the corpus, then search over a
    sample of questions (skipped when the pages are missing: the search could not find them
    anyway). ``cfg``: a GRPO, PPO or collect run config (``skip_preflight``, ``corpus``,
    ``episode``, ``preflight_prompts``, ``seed`` and ``PageSettings``); ``backends``: the run's
    (its search, and its generator when ``spec``, the reward, needs a judge); ``has_images``: the
    run has page images (``page_images``)."""
    search, generator = backends.search, backends.generator if spec.needs_judge else None
    report = PreflightReport(skipped=cfg.skip_preflight)
    if not cfg.skip_preflight:
        check_pages_readable(
            report,
            tasks,
            corpus,
            str(cfg.corpus),
            observation=cfg.observation,
            generator=generator,
            max_images=cfg.generator_max_images,
            has_images=has_images,
        )
        if check_golden_pages(report, tasks, corpus, str(cfg.corpus)).ok:
            picked = sample(tasks, 4 * cfg.preflight_prompts, cfg.seed, need_golden=True)
            ep = cfg.episode
            check_search(report, picked, search, k=ep.search_k, restrict_to_doc=ep.restrict_to_doc)
        report.raise_errors()
    return report


def check_policy_template(
    report: PreflightReport, tok: Any, vision: Any, prompt: Sequence[dict[str, Any]]
) -> None:
    """``check_chat_template`` on the policy's template (a VLM's processor's with ``vision``),
    raising on its errors; nothing when the preflight is skipped."""
    if report.skipped:
        return
    templater = vision.processor if vision is not None else tok
    check_chat_template(
        report, lambda m: templater.apply_chat_template(m, tokenize=False), tok, prompt
    )
    report.raise_errors()


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
