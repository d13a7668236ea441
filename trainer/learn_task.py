"""A search task a tiny policy can learn with GRPO, and its SFT start (bench, demo, tests).

The toy world's eight decks and questions (``ddai.trainer.toy``) with one-result search
(``SEARCH_K = 1``): the right first query is a phrase of the question (``RIGHT_QUERIES``) whose
first result is the golden page; the distractor query ``DISTRACTOR`` finds a page no question asks
about. The SFT start learns both from two trajectories per question that share every think and
differ only in the query, so it produces the valid format (search, then ``search_complete``) and
picks the right query about half the time: GRPO groups have mixed outcomes and a policy that learns
to prefer the right query gains reward (DDAI's Phase-1 reward, ``0.1 + 0.9·NDCG`` when the format
passes: about 1.0 against 0.1). ``start`` builds the SFT start; ``grpo_config`` the run of one arm
(``control`` is GRPO at learning rate 0 from the same start: the same sampling, no learning).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from ddai.pipelines import io
from ddai.trainer import toy
from ddai.trainer.search.config import EpisodeConfig, RewardOverrides

SEARCH_K = 1
# Per deck (toy order): words of its question whose first search result is the golden page.
RIGHT_QUERIES = (
    "revenue",
    "market share",
    "employees",
    "cups coffee",
    "rainfall",
    "students enrolled",
    "energy mix",
    "tourism country",
)
DISTRACTOR = "map"
DISTRACTOR_PAGE = "6_2"
"""The one page with the distractor's word (a campus map), golden for no question."""
THINK_SEARCH = "<think>I will search.</think>\n"
THINK_DONE = "<think>Done.</think>\n<search_complete>true</search_complete>"
ARMS = ("control", "grpo", "gspo-ddai")


def sft_rows() -> list[dict[str, Any]]:
    """Two trajectories per question (right query, distractor), in DDAI's ``train1`` shape."""
    c = toy.corpus()
    first = {r["id"]: r for r in toy.dataset_rows()}
    rows = []
    for d, query in enumerate(RIGHT_QUERIES, start=1):
        task = first[f"train_{d}"]
        golden = f"{d}_{task['reference_page'][0]}"
        for tag, q, page in (("right", query, golden), ("distractor", DISTRACTOR, DISTRACTOR_PAGE)):
            msgs = [
                *task["prompt"],
                {"role": "assistant", "content": f"{THINK_SEARCH}<search>{q}</search>"},
                {"role": "user", "content": f"[page {page}]\n{c.text(page)}"},
                {"role": "assistant", "content": THINK_DONE},
            ]
            rows.append(
                {"uid": f"train_{d}__{tag}", "format_version": "v1", "messages": json.dumps(msgs)}
            )
    return rows


def write_task(out: str | os.PathLike[str]) -> Path:
    """``pages.parquet``, ``dataset.parquet`` (the toy's) and ``sft.parquet`` (``sft_rows``)."""
    root = toy.write_toy(out)
    io.write_parquet(root / "sft.parquet", pa.Table.from_pylist(sft_rows()))
    return root


def start(root: str | os.PathLike[str], *, seed: int = 0, sft_steps: int = 300) -> Path:
    """Write the task under ``root/task``, build a tiny model and SFT it; returns the SFT model."""
    from ddai.trainer.sft.train import SFTRunConfig, run_sft
    from ddai.trainer.tiny import TinySpec, build_tiny

    root = Path(root)
    data = write_task(root / "task")
    texts = [r["messages"] for r in sft_rows()] + [r["messages"] for r in toy.sft_rows()]
    tiny = build_tiny(root / "tiny", texts=texts, spec=TinySpec(seed=seed), overwrite=True)
    run_sft(
        SFTRunConfig(
            model=str(tiny),
            data=[data / "sft.parquet"],
            output_dir=root / "sft",
            max_steps=sft_steps,
            learning_rate=5e-3,
            batch_size=8,
            max_length=256,
            save_steps=10_000,
            logging_steps=max(1, sft_steps // 4),
            report_to="none",
            seed=seed,
        )
    )
    return root / "sft"


def grpo_config(
    model: str | os.PathLike[str],
    root: str | os.PathLike[str],
    *,
    arm: str,
    generations: int,
    seed: int = 0,
    learning_rate: float = 1e-3,
    logs: str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    n_agent: int = 4,
    prompts: int = 8,
    output_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """The GRPO run of one arm over ``generations`` rollout batches of ``prompts × n_agent``.

    ``grpo``: one optimizer step per rollout batch (token-level ratio); ``gspo-ddai``: the seed's
    preset (sequence-level ratio, clip 3e-4/4e-4, two optimizer steps of half the batch per
    rollout batch) at this learning rate, since 1e-6 moves a tiny model nowhere in a few steps;
    ``control``: ``grpo`` at learning rate 0.
    """
    from ddai.trainer.grpo.config import TRAIN_PRESETS, GRPORunConfig

    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; use one of {', '.join(ARMS)}")
    root = Path(root)
    batch = prompts * n_agent
    per_gen = TRAIN_PRESETS["gspo-ddai"]["steps_per_generation"] if arm == "gspo-ddai" else 1
    return GRPORunConfig(
        model=str(model),
        data=root / "task" / "dataset.parquet",
        corpus=root / "task" / "pages.parquet",
        output_dir=Path(output_dir) if output_dir is not None else root / f"grpo-{arm}",
        logs=Path(logs) if logs is not None else root / "logs",
        run_id=run_id or arm,
        preset="gspo-ddai" if arm == "gspo-ddai" else "grpo",
        n_agent=n_agent,
        batch_size=batch // per_gen,
        max_steps=generations * per_gen,
        learning_rate=0.0 if arm == "control" else learning_rate,
        temperature=1.0,
        save_steps=10_000,
        logging_steps=1,
        report_to="none",
        seed=seed,
        # The task's pages and format are known good; the preflight would cost a rollout batch.
        skip_preflight=True,
        episode=EpisodeConfig(
            max_turns=3,
            search_k=SEARCH_K,
            max_turn_tokens=24,
            max_completion_tokens=120,
            obs_max_tokens=24,
        ),
        rewards=RewardOverrides(reward="ddai-phase1"),
    )
