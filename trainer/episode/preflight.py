"""Preflight: refuse to train blind.

Before the first step of ``ddai train grpo`` / ``ddai train ppo`` (and the first batch of ``ddai
collect``), check what would make every
step worthless, and exit 2 naming the problem and its fix:

1. ``golden pages``: every golden page of the dataset is in the corpus (else search can never
   find it and NDCG stays 0);
2. ``search``: the search backend returns a golden page for at least one of a sample of
   questions (a search service indexing another corpus returns none);
   ``pages``: the policy and the frozen generator can read the corpus's observation kind: a page
   with no text (an image-only corpus) is blind to a policy shown text (``--observation text``)
   and to a text-only generator (the local extractive one answers "Cannot determine from the
   provided pages." every time), or to any generator sent no images (``--generator-max-images
   0``; ``preflight_steps.check_pages_readable``);
3. ``chat template``: the policy's chat template renders Searcher turns verbatim, and the tags
   survive decoding the way the rollout decodes (``skip_special_tokens``);
4. ``episodes``: a few sampled episodes (a sample of prompts × ``n_agent``) complete and score;
   if the generator or judge fails on all of them it is an error; if all their rewards are equal
   there is no learning signal in those groups, which is said (a warning, not an error: a small
   sample of a cold policy can be flat while the whole set is not).

``--skip-preflight`` overrides; the run's ``run_config.json`` records it and the findings. During
training, ``ddai.trainer.runtime.zero_variance.ZeroVarianceSteps`` counts the steps whose groups
all had zero reward variance (GRPO learns nothing from them) and warns about each.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.records import golden, tags
from ddai.pipelines.store import io
from ddai.trainer.common import TrainConfigError, jsonable
from ddai.trainer.episode.env import search_doc
from ddai.trainer.episode.tasks import Task
from ddai.trainer.runtime.zero_variance import zero_variance

log = logging.getLogger("ddai.trainer")

SKIP_HINT = "pass --skip-preflight to train anyway"
# Searcher turns rendered through the chat template and decoded back (check 3).
SAMPLE_TURNS = (
    "<think>I need the chart.</think>\n<search>revenue by year</search>",
    "<think>Crop the table.</think>\n<bbox>[10, 20, 300, 400]</bbox>",
    "<think>Enough evidence.</think>\n<search_complete>true</search_complete>",
)


class PreflightError(TrainConfigError):
    """The preflight found problems; the message lists each with its fix."""


@dataclass
class Finding:
    """One preflight result that is not a plain pass."""

    check: str
    level: str
    """``error`` (stops the run) or ``warning`` (said, recorded, run goes on)."""
    message: str
    fix: str = ""

    def line(self) -> str:
        return f"[{self.check}] {self.message}" + (f"; fix: {self.fix}" if self.fix else "")


@dataclass
class PreflightReport:
    """Every check run, its numbers, and its findings."""

    skipped: bool = False
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    def add(self, check: str, level: str, message: str, fix: str = "") -> None:
        self.findings.append(Finding(check, level, message, fix))

    def raise_errors(self) -> None:
        """Raise ``PreflightError`` listing the errors (and say the warnings) if any."""
        for w in self.warnings:
            log.warning("preflight: %s", w.line())
        if self.errors:
            lines = [f.line() for f in self.errors]
            raise PreflightError(
                "preflight failed before training:\n  " + "\n  ".join(lines) + f"\n({SKIP_HINT})"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample(tasks: Sequence[Task], n: int, seed: int, *, need_golden: bool = False) -> list[Task]:
    """Up to ``n`` tasks, a seeded random sample in dataset order (with golden pages if asked)."""
    pool = [t for t in tasks if t.reference_pages] if need_golden else list(tasks)
    if len(pool) <= n:
        return pool
    picked = set(random.Random(seed).sample(range(len(pool)), n))
    return [t for i, t in enumerate(pool) if i in picked]


# ---------------------------------------------------------------------------- checks


def check_golden_pages(
    report: PreflightReport, tasks: Sequence[Task], corpus: Any, corpus_name: str
) -> golden.Coverage:
    """Check 1: the dataset's golden pages are in ``corpus`` (anything supporting ``in``)."""
    cov = golden.coverage(((t.uid, t.reference_pages) for t in tasks), lambda p: p in corpus)
    report.checks["golden pages"] = cov.to_dict()
    if not cov.ok:
        report.add(
            "golden pages",
            "error",
            cov.describe(corpus_name),
            "pass --corpus with the pages of this dataset (e.g. `ddai corpus build IMAGES_DIR "
            "--out pages.parquet` over its page images), or keep only the prompts it covers",
        )
    elif cov.prompts == 0:
        report.add(
            "golden pages",
            "warning",
            "no prompt names golden pages (file_name + reference_page): NDCG is 0 for every rollout",
        )
    return cov


def backend_label(backend: Any) -> str:
    """A backend as a message names it: ```name``` and, for a service, its URL."""
    name = getattr(backend, "name", None) or type(backend).__name__
    url = getattr(backend, "url", None) or getattr(getattr(backend, "spec", None), "base_url", None)
    return f"`{name}` at {url}" if url else f"`{name}`"


def check_search(
    report: PreflightReport,
    tasks: Sequence[Task],
    search: Any,
    *,
    k: int,
    restrict_to_doc: bool = False,
) -> None:
    """Check 2: the search backend returns a golden page for at least one sampled question."""
    hits = empty = 0
    health = getattr(search, "health", None)
    if health is not None:
        state = health()
        if not state["ok"]:
            report.checks["search"] = {"questions": len(tasks), "failed": True}
            report.add(
                "search",
                "error",
                f"the search backend {backend_label(search)} is not healthy: {state['detail']}",
                "check that the search service is up and --search names the right backend",
            )
            return
    for t in tasks:
        doc = search_doc(search, t.uid, t.doc_id, restrict_to_doc)
        try:
            found = [pid for pid, _ in search.search(t.question, k, doc=doc)]
        except Exception as e:  # any backend failure is reported, not raised
            report.checks["search"] = {"questions": len(tasks), "failed": True}
            report.add(
                "search",
                "error",
                f"the search backend {backend_label(search)} failed on the question of {t.uid}: "
                f"{type(e).__name__}: {e}",
                "check that the search service is up and --search names the right backend",
            )
            return
        empty += not found
        hits += any(p in found for p in t.reference_pages)
    report.checks["search"] = {"questions": len(tasks), "with_golden_hit": hits, "empty": empty}
    if tasks and hits == 0:
        what = "returned nothing" if empty == len(tasks) else "returned no golden page"
        report.add(
            "search",
            "error",
            f"the search backend {backend_label(search)} {what} for any of {len(tasks)} sampled "
            f"questions (top {k})",
            "make the search backend index the corpus the dataset's golden pages are in",
        )


def check_chat_template(
    report: PreflightReport,
    render: Callable[[list[dict[str, Any]]], str],
    tokenizer: Any,
    prompt: Sequence[dict[str, Any]],
) -> None:
    """Check 3: ``render(messages)`` (the chat template, untokenized) keeps every Searcher turn
    verbatim, and each turn survives ``encode`` + ``decode(skip_special_tokens=True)`` with the
    same action and argument (the rollout parses turns decoded that way)."""
    msgs: list[dict[str, Any]] = [dict(m) for m in prompt]
    for i, turn in enumerate(SAMPLE_TURNS):
        msgs.append({"role": "assistant", "content": turn})
        if i < len(SAMPLE_TURNS) - 1:
            msgs.append({"role": "user", "content": "[page 1_1]"})
    problems = []
    try:
        text = render(msgs)
    except Exception as e:  # a template error is a finding
        text = ""
        problems.append(f"the chat template fails on a Searcher conversation: {e}")
    for turn in SAMPLE_TURNS if text else ():
        if turn not in text:
            problems.append(f"the chat template does not render the turn {turn!r} verbatim")
    for turn in SAMPLE_TURNS:
        ids = tokenizer.encode(turn, add_special_tokens=False)
        back = tags.parse_turn(tokenizer.decode(ids, skip_special_tokens=True))
        want = tags.parse_turn(turn)
        if (back.action, back.arg) != (want.action, want.arg):
            problems.append(
                f"the tags of {turn!r} do not survive decoding (special tokens?): parsed as "
                f"{back.action}"
            )
    report.checks["chat template"] = {"turns": len(SAMPLE_TURNS), "problems": len(problems)}
    for p in problems:
        report.add(
            "chat template",
            "error",
            p,
            "use a chat template that keeps assistant text as written, and tags that are not "
            "special tokens",
        )


@dataclass
class SampledEpisode:
    """One preflight episode's outcome."""

    group: int
    reward: float
    format_ok: bool
    needs_judge: bool
    error: str | None = None


def check_episodes(report: PreflightReport, episodes: Sequence[SampledEpisode]) -> None:
    """Check 4: the sampled episodes scored; their rewards are not all equal."""
    judged = [e for e in episodes if e.needs_judge]
    failed = [e for e in judged if e.error]
    rewards = [e.reward for e in episodes]
    groups: dict[int, list[float]] = {}
    for e in episodes:
        groups.setdefault(e.group, []).append(e.reward)
    flat = sum(zero_variance(g) for g in groups.values())
    report.checks["episodes"] = {
        "episodes": len(episodes),
        "groups": len(groups),
        "zero_variance_groups": flat,
        "format_ok": sum(e.format_ok for e in episodes),
        "score_errors": len(failed),
        "reward_mean": sum(rewards) / len(rewards) if rewards else None,
    }
    if judged and len(failed) == len(judged):
        report.add(
            "episodes",
            "error",
            f"the generator/judge failed on all {len(judged)} sampled episodes: {failed[0].error}",
            "check the --generator and --judge backends (servers up, keys set)",
        )
    elif rewards and zero_variance(rewards):
        report.add(
            "episodes",
            "warning",
            f"all {len(rewards)} sampled rewards are {rewards[0]:g}: no learning signal in "
            f"{len(groups)} sampled groups (format ok in {sum(e.format_ok for e in episodes)})",
            "SFT the policy first, or check the reward backends and --reward weights",
        )


# ---------------------------------------------------------------------------- run config


def write_run_config(
    output_dir: str | Path,
    command: str,
    config: Any,
    report: PreflightReport,
    *,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``output_dir/run_config.json``: the command, its config, the preflight, and
    ``extra`` (e.g. the world size and per-rank seeds of a distributed run)."""
    path = Path(output_dir) / "run_config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "command": command,
        "config": jsonable(config),
        "skip_preflight": report.skipped,
        "preflight": report.to_dict(),
        **(extra or {}),
    }
    io.write_json(path, body)
    return path
