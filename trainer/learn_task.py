"""A search task whose right action depends on the question, with held-out questions (bench, demo,
tests).

A deck of one page per topic (``TOPICS``); each page is the only one that names its topic. A
question names two topics, the one it asks about and a distractor it rules out (``QUESTION``:
"Which page shows the {topic} figures, not the {distractor} ones?"), and its golden page is the
asked topic's page. With one-result search (``SEARCH_K = 1``) the right first query is the asked
topic, a different word from question to question; the distractor's query finds a page that is
not golden. No fixed first query can score well: a constant query finds one page, golden for the
few questions about that topic (``fixed_query_rewards`` computes each one's mean reward exactly).

Questions are split by topic pair: every unordered pair ``{a, b}`` gives two questions (``a`` asked,
``b`` ruled out, and the reverse), and the pairs are divided once into ``train`` and
``heldout`` (``split_pairs``), so no held-out question, nor its reverse, is trained
on, while every topic is asked about and ruled out in both splits. What transfers to held-out
questions is the rule (search for the topic the question asks about), not a memorised answer.

The SFT start learns, for every train question, two trajectories that share every think and
differ only in the query (the asked topic or the distractor), so it writes the valid format
(search, then ``search_complete``) and searches the asked topic and the distractor about
equally often (about a quarter of held-out rollouts each; ``SFT_STEPS``): GRPO groups
have mixed outcomes (DDAI's Phase-1 reward, ``0.1 + 0.9·NDCG`` when the format passes: 1.0
against 0.1) and a policy that learns the rule gains reward on questions it never saw. ``start``
builds the SFT start; ``grpo_config`` the training run of one arm on the train questions
(``control`` is GRPO at learning rate 0: the same sampling, no learning); ``collect_config`` the
evaluation of a model on the held-out questions (``ddai collect``: rollouts, no training).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.records import metrics
from ddai.pipelines.records.deps import pa
from ddai.pipelines.store import io
from ddai.trainer import toy
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides

SEARCH_K = 1
TOPICS = (
    "revenue",
    "coffee",
    "rainfall",
    "students",
    "energy",
    "tourism",
    "phones",
    "salaries",
    "exports",
    "traffic",
    "housing",
    "museums",
)
QUESTION = "Which page shows the {topic} figures, not the {distractor} ones?"
HELDOUT_OFFSETS = (1, 2)
"""Held out: topic pairs 1 or 2 apart in ``TOPICS`` (24 of 66 pairs: 48 held-out questions, each
topic asked about in 4; 84 train questions)."""
SFT_STEPS = 1000
"""SFT steps of the start. Measured (seed 0, sampled at temperature 1): its first search finds the
asked topic's page in 0.32 of train and 0.25 of held-out rollouts, the distractor's in 0.30 and
0.25, another page in the rest; more SFT steps raise the train shares, not the held-out ones."""
SFT_LR = 3e-3
SYSTEM_PROMPT = "Search for the page the question asks about, then write search_complete."
"""Short, so a tiny model's context is mostly the question."""
THINK_SEARCH = "<think>I will search.</think>\n"
THINK_DONE = "<think>Done.</think>\n<search_complete>true</search_complete>"
SEARCH = "<search> {query}</search>"
"""The start's query repeats the question's word as the question writes it, space included (the
search strips it): one and the same token, so copying it is the identity map a tiny model with
tied embeddings learns from a few dozen questions (``revenue`` and `` revenue`` are two tokens)."""
ARMS = ("control", "grpo", "gspo-ddai")
SPLITS = ("train", "heldout")


def page_id(topic: str) -> str:
    """The golden page of questions asking about ``topic`` (deck = topic's 1-based index)."""
    return f"{TOPICS.index(topic) + 1}_1"


def page_records() -> list[dict[str, Any]]:
    """One page per topic; its topic word appears on no other page."""
    return [
        toy.page_record(d, 1, [f"{topic.capitalize()} figures", f"{topic} up 12"])
        for d, topic in enumerate(TOPICS, start=1)
    ]


def corpus() -> Corpus:
    return Corpus.from_records(page_records())


def split_pairs() -> dict[str, list[tuple[str, str]]]:
    """``{"train": [...], "heldout": [...]}``: ordered ``(asked, distractor)`` pairs. Held out: the
    unordered pairs of topics ``HELDOUT_OFFSETS`` apart in ``TOPICS`` (circularly), so every
    topic is in the same number of held-out pairs; every other pair is trained on."""
    n = len(TOPICS)
    held = {frozenset((TOPICS[i], TOPICS[(i + k) % n])) for i in range(n) for k in HELDOUT_OFFSETS}
    out: dict[str, list[tuple[str, str]]] = {"train": [], "heldout": []}
    for i, a in enumerate(TOPICS):
        for b in TOPICS[i + 1 :]:
            out["heldout" if {a, b} in held else "train"] += [(a, b), (b, a)]
    return out


def dataset_rows(split: str) -> list[dict[str, Any]]:
    """The split's questions in verl's RL row shape (ids ``{split}_{asked}_{distractor}``)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    rows = []
    for i, (topic, distractor) in enumerate(split_pairs()[split]):
        q = QUESTION.format(topic=topic, distractor=distractor)
        doc, page = page_id(topic).split("_")
        uid = f"{split}_{topic}_{distractor}"
        rows.append(
            toy.verl_row(
                uid, doc, int(page), "learn_task", SYSTEM_PROMPT, q, topic, index=i, split=split
            )
        )
    return rows


def sft_rows() -> list[dict[str, Any]]:
    """Two trajectories per train question (asked topic, distractor), in DDAI's ``train1`` shape."""
    c = corpus()
    rows = []
    for row, (topic, distractor) in zip(dataset_rows("train"), split_pairs()["train"], strict=True):
        for tag, q in (("right", topic), ("distractor", distractor)):
            page = page_id(q)
            msgs = [
                *row["prompt"],
                {"role": "assistant", "content": THINK_SEARCH + SEARCH.format(query=q)},
                {"role": "user", "content": f"[page {page}]\n{c.text(page)}"},
                {"role": "assistant", "content": THINK_DONE},
            ]
            rows.append(
                {"uid": f"{row['id']}__{tag}", "format_version": "v1", "messages": json.dumps(msgs)}
            )
    return rows


def fixed_query_rewards(split: str = "heldout") -> dict[str, float]:
    """Exact mean reward over ``split`` of a policy whose first query is always the same word
    (then ``search_complete``, valid format): ``0.1 + 0.9·NDCG`` of that word's one search result,
    for every word of the split's questions and the corpus. Question-independent behaviour."""
    rows = dataset_rows(split)
    search = backends().search.index
    words = {
        w.strip("?,.").lower()
        for text in [r["extra_info"]["question"] for r in rows]
        + [line["text"] for rec in page_records() for line in rec["lines"]]
        for w in text.split()
    }
    out = {}
    for w in sorted(words):
        found = [p for p, _ in search.search(w, SEARCH_K)]
        golden = [page_id(r["extra_info"]["answer"]) for r in rows]
        out[w] = sum(0.1 + 0.9 * metrics.ndcg(found, [g]) for g in golden) / len(golden)
    return out


def write_task(out: str | os.PathLike[str]) -> Path:
    """``pages.parquet``, ``train.parquet``, ``heldout.parquet`` and ``sft.parquet`` under ``out``."""
    root = Path(out)
    corpus().save(root / "pages.parquet")
    for split in SPLITS:
        io.write_parquet(root / f"{split}.parquet", pa.Table.from_pylist(dataset_rows(split)))
    io.write_parquet(root / "sft.parquet", pa.Table.from_pylist(sft_rows()))
    return root


def backends() -> Any:
    """The local search backend over the task's pages (the Phase-1 reward calls no judge)."""
    return toy.local_backends(corpus())


def start(
    root: str | os.PathLike[str],
    *,
    seed: int = 0,
    sft_steps: int = SFT_STEPS,
    sft_lr: float = SFT_LR,
) -> Path:
    """Write the task under ``root/task``, build a tiny model and SFT it; returns the SFT model.

    The tokenizer is trained on the train trajectories only (held-out questions reuse their
    words, in pairs never seen together)."""
    from ddai.trainer.sft.train import SFTRunConfig, run_sft
    from ddai.trainer.tiny import TinySpec, build_tiny

    root = Path(root)
    data = write_task(root / "task")
    texts = [r["messages"] for r in sft_rows()]
    # Twice the default tiny width (about 0.3 M parameters): the default one does not learn to
    # copy a word of the question into its query within a few thousand steps.
    spec = TinySpec(hidden_size=128, intermediate_size=256, seed=seed)
    tiny = build_tiny(root / "tiny", texts=texts, spec=spec, overwrite=True)
    run_sft(
        SFTRunConfig(
            model=str(tiny),
            data=[data / "sft.parquet"],
            output_dir=root / "sft",
            max_steps=sft_steps,
            learning_rate=sft_lr,
            batch_size=8,
            max_length=256,
            save_steps=10_000,
            logging_steps=max(1, sft_steps // 4),
            report_to="none",
            seed=seed,
        )
    )
    return root / "sft"


EPISODE = EpisodeConfig(
    max_turns=3, search_k=SEARCH_K, max_turn_tokens=24, max_completion_tokens=96, obs_max_tokens=32
)
"""One search, then ``search_complete`` (a second search meets the forced completion); a page's
observation fits ``obs_max_tokens`` whole, as the SFT start saw it."""


GENERATIONS = 32
LEARNING_RATE = 3e-4
"""Picked once from one seed's train and held-out first-query shares (3e-4 vs 1e-3, both over
32 rollout batches): at 1e-3 the format breaks (no search at all) within 6 batches."""
N_AGENT = 8
"""Rollouts per question: with the start's 1-in-4 right queries, a group of 8 has mixed outcomes
far more often than one of 4 (the only groups GRPO learns from)."""
PROMPTS = 4


def grpo_config(
    model: str | os.PathLike[str],
    root: str | os.PathLike[str],
    *,
    arm: str,
    generations: int,
    seed: int = 0,
    learning_rate: float = LEARNING_RATE,
    logs: str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    n_agent: int = N_AGENT,
    prompts: int = PROMPTS,
    output_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """The GRPO run of one arm over ``generations`` rollout batches of ``prompts × n_agent``,
    on the train questions.

    ``grpo``: one optimizer step per rollout batch (token-level ratio); ``gspo-ddai``: the seed's
    preset (sequence-level ratio, clip 3e-4/4e-4, two optimizer steps of half the batch per
    rollout batch) at ``learning_rate`` (its own is 1e-6); ``control``: ``grpo`` at learning rate 0.
    """
    from ddai.trainer.grpo.config import TRAIN_PRESETS, GRPORunConfig

    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; use one of {', '.join(ARMS)}")
    root = Path(root)
    batch = prompts * n_agent
    per_gen = TRAIN_PRESETS["gspo-ddai"]["steps_per_generation"] if arm == "gspo-ddai" else 1
    return GRPORunConfig(
        model=str(model),
        data=root / "task" / "train.parquet",
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
        episode=EPISODE,
        rewards=RewardOverrides(reward="ddai-phase1"),
        # A constant rate: a short run's linear decay would halve the mean step for nothing.
        overrides={"lr_scheduler_type": "constant"},
    )


def collect_config(
    model: str | os.PathLike[str],
    root: str | os.PathLike[str],
    *,
    run_id: str,
    split: str = "heldout",
    n_agent: int = 4,
    seed: int = 0,
    logs: str | os.PathLike[str] | None = None,
) -> Any:
    """Rollouts of ``model`` on every question of ``split`` (``n_agent`` each), no training: the
    evaluation of a trained model or of the start, sampled as in training (temperature 1)."""
    from ddai.trainer.episode.collect import CollectConfig

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    root = Path(root)
    n_questions = len(split_pairs()[split])
    return CollectConfig(
        model=str(model),
        data=root / "task" / f"{split}.parquet",
        corpus=root / "task" / "pages.parquet",
        run_id=run_id,
        logs=Path(logs) if logs is not None else root / "logs",
        n_agent=n_agent,
        batch_size=n_questions * n_agent,
        temperature=1.0,
        seed=seed,
        progress=False,
        episode=EPISODE,
        rewards=RewardOverrides(reward="ddai-phase1"),
    )
