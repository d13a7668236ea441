"""``ddai collect``: rollouts of a policy over a prompt set, scored and logged, with no
training: off-policy data collection and evaluation, through the episode code of ``ddai train
grpo``/``ppo`` (the same environment, lock-step turns, streamed reward and rollout-log rows).

The policy is a local model (``--model``), or any OpenAI-compatible server (``--generate-via
NAME``, ``ddai.trainer.episode.openai_sampler``), with ``--model`` then naming only the tokenizer and chat
template the server's model uses. Each prompt gets ``n_agent`` rollouts, in batches of
``batch_size`` rollouts per process; under ``accelerate launch`` the processes split every batch's
prompts and the main process writes all rows once (``sample_idx`` counts over the whole run;
``step`` is null: no training step produced them).

It refuses to run blind, as training does: the preflight of ``ddai train grpo``
(``episode.preflight``: golden pages in the corpus, searches that return them, a policy and a
generator that can read the pages, the chat template, a few sampled episodes that score) runs
first (``--skip-preflight`` skips it), and the summary counts the searches that failed, the
rollouts left unscorable and the share of turns the environment answered with an error. A run in
which every search failed or no rollout could be scored logs its rows and says so
(``CollectResult.failure``: ``ddai collect`` exits 1 naming the search service or the
reward backends). ``--observation image`` rolls out a local VLM policy over page images;
with an image corpus or ``--image-root`` the generator is sent the pages each episode gathered
(``episode.pages``), as in GRPO.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddai.pipelines.store import workspace
from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.collect_config import CollectConfig, EvalConfig


@dataclass
class CollectResult:
    run_id: str
    logs: str
    generated_by: str
    prompts: int
    rollouts_logged: int
    reward_mean: float | None
    format_ok: float | None
    preflight: str = "skipped"
    """``passed``, ``passed with warnings: …`` or ``skipped``."""
    searches: int = 0
    """``<search>`` turns the environment sent to the search backend."""
    search_errors: int = 0
    """Searches that failed (service errors, timeouts), shown as ``[System Error: …]``."""
    unscorable: int = 0
    """Rollouts that needed a judge score and got none (timeout, failure): reward null."""
    error_turns: int = 0
    """Turns the environment answered with a ``[System Error: …]`` (failed or empty search,
    failed crop, invalid action)."""
    error_turn_share: float | None = None
    """``error_turns`` over all policy turns (None: no turn)."""
    failure: str | None = None
    """Why the run collected nothing usable (every search failed, or no rollout could be
    scored), naming the backend; ``ddai collect`` then exits 1."""


@dataclass
class Tally:
    """What a collection's rows say went wrong, counted as they are logged."""

    rows: int = 0
    searches: int = 0
    search_errors: int = 0
    unscorable: int = 0
    turns: int = 0
    error_turns: int = 0

    def observe(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self.rows += 1
            self.search_errors += row["extra"].get("search_errors", 0)
            self.unscorable += "unscorable" in row["extra"]
            for turn in row["turns"] or ():
                if turn.get("forced"):  # the environment's turn, not the policy's
                    continue
                self.turns += 1
                self.searches += turn.get("action") == "search"
                obs = turn.get("observation") or ""
                self.error_turns += bool(turn.get("error")) or obs.startswith("[System Error")

    def failure(self, search: Any, generator: Any, judge: Any) -> str | None:
        """Why nothing collected is usable, naming the backend, or None."""
        from ddai.trainer.episode.preflight import backend_label

        if self.searches and self.search_errors == self.searches:
            return (
                f"every one of the {self.searches} searches failed (search backend "
                f"{backend_label(search)}): the rollouts saw only [System Error: …] observations; "
                "check that the service is up and speaks the configured protocol, and --search"
            )
        if self.rows and self.unscorable == self.rows:
            return (
                f"no rollout of {self.rows} could be scored (generator "
                f"{backend_label(generator)}, judge {backend_label(judge)}): every reward is "
                "null; check those backends (servers up, keys set) or raise --reward-timeout"
            )
        return None

    def fields(self) -> dict[str, Any]:
        """``CollectResult``'s counting fields."""
        return {
            "searches": self.searches,
            "search_errors": self.search_errors,
            "unscorable": self.unscorable,
            "error_turns": self.error_turns,
            "error_turn_share": self.error_turns / self.turns if self.turns else None,
        }


def _policy(cfg: CollectConfig, image_of: Any) -> tuple[Any, Any, Any, Any, Any]:
    """``(model or None, tokenizer, sampler or None, vision, box_convention)``."""
    from ddai.trainer.episode.openai_sampler import sampler_from_backend
    from ddai.trainer.episode.pages import observation_policy
    from ddai.trainer.modeling import load_tokenizer

    if cfg.generate_via is None:
        model, tok, vision, boxes = observation_policy(cfg, image_of)
        return model.eval(), tok, None, vision, boxes
    tok = load_tokenizer(cfg.model)
    sampler = sampler_from_backend(
        cfg.generate_via, tok, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k
    )
    return None, tok, sampler, None, None


def _preflight(
    cfg: CollectConfig, report: Any, tasks: list[Any], episodes: Any, model: Any, vision: Any
) -> None:
    """The model checks of the preflight (the chat template, sampled episodes), raising on
    errors; the static ones ran before the policy loaded."""
    from ddai.trainer.episode import preflight as pf
    from ddai.trainer.episode.preflight_steps import (
        check_policy_template,
        preflight_slots,
        sampled_episodes,
    )

    check_policy_template(report, episodes.rollout.tok, vision, tasks[0].messages)
    slots = preflight_slots(tasks, cfg.preflight_prompts, cfg.n_agent, cfg.seed)
    pf.check_episodes(
        report,
        sampled_episodes(episodes.rollout, slots, None, model, cfg.backends.reward_timeout),
    )
    report.raise_errors()


def run_collect(
    cfg: CollectConfig,
    backends: Any | None = None,
    *,
    annotate: Callable[[dict[str, Any]], None] | None = None,
) -> CollectResult:
    """Roll out every prompt ``n_agent`` times, score the episodes, log them as one run.

    ``annotate(row)``: called on every log row before it is written (``ddai eval`` adds the
    prompt's test-set categories to its ``extra``)."""
    import torch

    from ddai.pipelines.pages.corpus import Corpus
    from ddai.pipelines.records.progress import bar
    from ddai.trainer.common import hf_progress
    from ddai.trainer.episode.episodes import Episodes, default_backends
    from ddai.trainer.episode.logrows import RolloutLog, take_rows
    from ddai.trainer.episode.pages import page_images
    from ddai.trainer.episode.preflight_steps import preflight_status, run_static_preflight
    from ddai.trainer.episode.run_rules import RULES_KEY, check_append, episode_rules
    from ddai.trainer.episode.tasks import load_tasks
    from ddai.trainer.runtime import accel

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    hf_progress(cfg.progress)
    cfg.check()
    rules = episode_rules(cfg)
    command = "ddai eval" if isinstance(cfg, EvalConfig) else "ddai collect"
    note = check_append(workspace.logs_dir(cfg.logs), cfg.run_id, rules, command)
    if note is not None:
        warnings.warn(f"{command} --append: {note}", stacklevel=2)
    tasks = load_tasks(cfg.data, cfg.limit)
    if not tasks:
        raise TrainConfigError(f"--data {cfg.data}: no prompts")
    corpus = Corpus.load(cfg.corpus)
    spec = cfg.rewards.reward_spec()
    backends = backends or default_backends(cfg.backends, corpus, spec)
    image_of = page_images(cfg, corpus)
    report = run_static_preflight(cfg, tasks, corpus, backends, spec, image_of is not None)
    acc = accel.make_accelerator()
    main = acc.is_main_process
    model, tok, sampler, vision, boxes = _policy(cfg, image_of)
    if model is not None:
        model.to(acc.device)
    accel.rank_seed(cfg.seed, acc)
    episodes = Episodes(
        cfg,
        tok,
        corpus,
        backends,
        sampler=sampler,
        image_of=image_of,
        vision=vision,
        box_convention=boxes,
    )
    if not cfg.skip_preflight:
        try:
            with torch.no_grad():
                _preflight(cfg, report, tasks, episodes, model, vision)
        except BaseException:
            episodes.close()
            raise
    run_id = cfg.run_id or f"collect_{time.strftime('%Y%m%d_%H%M%S')}"
    run_id = accel.gather_rows([run_id], acc)[0]
    log = RolloutLog(
        workspace.logs_dir(cfg.logs),
        run_id,
        record={"crop_pad": cfg.episode.crop_pad, RULES_KEY: rules},
    )
    per_batch = (cfg.batch_size // cfg.n_agent) * acc.num_processes
    batches = [tasks[i : i + per_batch] for i in range(0, len(tasks), per_batch)]
    first = log.next_sample_idx() if main else 0  # --append: keys after the run's own
    logged = 0
    tally = Tally()
    rewards: list[float] = []
    format_ok: list[bool] = []
    try:
        with bar("collect", len(batches), enabled=cfg.progress and main) as advance:
            for batch in batches:
                mine = batch[acc.process_index :: acc.num_processes]
                slots = [(t, g, i) for g, t in enumerate(mine) for i in range(cfg.n_agent)]
                rows: list[dict[str, Any]] = []
                if slots:
                    with torch.no_grad():
                        trajs, _, _ = episodes.collect(slots, model)
                    keys = [t.key for t in trajs]
                    rows = take_rows(
                        episodes.store, keys, [None] * len(keys), run_id=run_id, step=None
                    )
                rows = accel.gather_rows(rows, acc)
                for i, row in enumerate(rows):
                    row["sample_idx"] = first + logged + i
                    if annotate is not None:
                        annotate(row)
                    rewards += [row["reward"]] if row["reward"] is not None else []
                    format_ok.append(bool(row["format_ok"]))
                logged += len(rows)
                tally.observe(rows)
                if main:
                    log.append(rows)
                advance(1)
    finally:
        episodes.close()
    acc.wait_for_everyone()
    return CollectResult(
        run_id=run_id,
        logs=str(log.logs),
        generated_by=cfg.generate_via or str(cfg.model),
        prompts=len(tasks),
        rollouts_logged=logged,
        reward_mean=sum(rewards) / len(rewards) if rewards else None,
        format_ok=sum(format_ok) / len(format_ok) if format_ok else None,
        preflight=preflight_status(report),
        **tally.fields(),
        failure=tally.failure(backends.search, backends.generator, backends.judge),
    )
