"""``ddai train collect``: rollouts of a policy over a prompt set, scored and logged, with no
training: off-policy data collection and evaluation, through the episode code of ``ddai train
grpo``/``ppo`` (the same environment, lock-step turns, streamed reward and rollout-log rows).

The policy is a local model (``--model``), or any OpenAI-compatible server (``--generate-via
NAME``, ``ddai.trainer.search.openai_sampler``), with ``--model`` then naming only the tokenizer and chat
template the server's model uses. Each prompt gets ``n_agent`` rollouts, in batches of
``batch_size`` rollouts per process; under ``accelerate launch`` the processes split every batch's
prompts and the main process writes all rows once (``sample_idx`` counts over the whole run;
``step`` is null: no training step produced them).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines import workspace
from ddai.trainer.common import TrainConfigError
from ddai.trainer.search.config import EpisodeSettings


@dataclass
class CollectConfig(EpisodeSettings):
    """One collection run; every field has a flag in ``ddai train collect``, the nested
    ``episode``, ``rewards`` and ``backends`` (``EpisodeSettings``) field by field."""

    model: str
    """The local policy, or with ``generate_via`` the tokenizer of the server's model."""
    data: Path
    corpus: Path
    generate_via: str | None = None
    """A ``[backends.NAME]`` of kind ``openai`` that generates the policy's turns."""
    run_id: str | None = None
    logs: Path | None = None
    n_agent: int = 1
    """Rollouts per prompt."""
    batch_size: int = 8
    """Rollouts per batch and process (a multiple of --n-agent)."""
    temperature: float = 1.0
    """Sampling temperature (0: greedy)."""
    top_p: float = 1.0
    """Nucleus sampling p."""
    top_k: int = 0
    """Top-k sampling (0: off)."""
    limit: int | None = None
    """Use only the first N prompts."""
    dtype: str = "float32"
    seed: int = 0
    progress: bool = True

    def check(self) -> None:
        if self.n_agent < 1 or self.batch_size < 1 or self.batch_size % self.n_agent:
            raise TrainConfigError(
                f"--batch-size {self.batch_size} must be a positive multiple of --n-agent "
                f"{self.n_agent} (rollouts per batch = prompts × n_agent)"
            )


@dataclass
class CollectResult:
    run_id: str
    logs: str
    generated_by: str
    prompts: int
    rollouts_logged: int
    reward_mean: float | None
    format_ok: float | None


def _policy(cfg: CollectConfig) -> tuple[Any, Any, Any]:
    """``(model or None, tokenizer, sampler or None)``."""
    from ddai.trainer.modeling import load_policy, load_tokenizer
    from ddai.trainer.search.openai_sampler import sampler_from_backend

    if cfg.generate_via is None:
        model, tok = load_policy(cfg.model, dtype=cfg.dtype)
        return model.eval(), tok, None
    tok = load_tokenizer(cfg.model)
    sampler = sampler_from_backend(
        cfg.generate_via, tok, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k
    )
    return None, tok, sampler


def run_collect(cfg: CollectConfig, backends: Any | None = None) -> CollectResult:
    """Roll out every prompt ``n_agent`` times, score the episodes, log them as one run."""
    import torch

    from ddai.pipelines.corpus import Corpus
    from ddai.pipelines.progress import bar
    from ddai.trainer.common import hf_progress
    from ddai.trainer.runtime import accel
    from ddai.trainer.search.episodes import Episodes, default_backends
    from ddai.trainer.search.logrows import RolloutLog, take_rows
    from ddai.trainer.search.tasks import load_tasks

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    hf_progress(cfg.progress)
    cfg.check()
    tasks = load_tasks(cfg.data, cfg.limit)
    if not tasks:
        raise TrainConfigError(f"--data {cfg.data}: no prompts")
    corpus = Corpus.load(cfg.corpus)
    backends = backends or default_backends(cfg.backends, corpus, cfg.rewards.reward_spec())
    acc = accel.make_accelerator()
    main = acc.is_main_process
    model, tok, sampler = _policy(cfg)
    if model is not None:
        model.to(acc.device)
    accel.rank_seed(cfg.seed, acc)
    episodes = Episodes(cfg, tok, corpus, backends, sampler=sampler)
    run_id = cfg.run_id or f"collect_{time.strftime('%Y%m%d_%H%M%S')}"
    run_id = accel.gather_rows([run_id], acc)[0]
    log = RolloutLog(workspace.logs_dir(cfg.logs), run_id)
    per_batch = (cfg.batch_size // cfg.n_agent) * acc.num_processes
    batches = [tasks[i : i + per_batch] for i in range(0, len(tasks), per_batch)]
    first = log.next_sample_idx() if main else 0  # --append: keys after the run's own
    logged = 0
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
                    rewards += [row["reward"]] if row["reward"] is not None else []
                    format_ok.append(bool(row["format_ok"]))
                logged += len(rows)
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
    )
