"""Value-head data from the rollout log (seed 004): token sequences as the policy saw them, MC
targets for every rollout, success/failure pairs per prompt, difficulty weights, a prompt split.

A rollout becomes ``prompt_ids`` (the chat-templated prompt with the assistant header) plus a
completion of policy tokens (each turn's text and its end-of-turn token, ``mask`` 1) and
environment tokens (each observation inside the chat template's wrapper, DDAI's forced completion:
``mask`` 0), the layout ``ddai.trainer.episode.rollout`` produces while training. Turn texts come from the
log's parsed ``turns`` (think, separator, action), observations from ``turns[].observation``.

Pairs: for each prompt, successful × failed rollouts, at most ``max_pairs_per_problem`` of them
(seed 004: a few prompts with many rollouts must not dominate), sampled without replacement.
Difficulty weights generalize seed 004's bins: prompts fall into bins of their success rate and
each bin gets a share of the sampled pairs.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ddai.pipelines.records import schema, tags
from ddai.pipelines.records.schema import SUCCESS_THRESHOLD
from ddai.trainer.value.config import TARGETS, parse_bins

# Drop reasons (counted).
NO_TURNS = "no turns"
PROMPT_TOO_LONG = "prompt longer than max_length"
NO_POLICY_TOKENS = "no policy tokens"
NOT_IN_DATA = "uid not in --data"
"""A rollout whose prompt the prompt set (``--data``) lacks: its prompt cannot be rebuilt."""


@dataclass(frozen=True)
class TokenRollout:
    """One logged rollout as token ids, with where each turn's policy tokens start."""

    run_id: str
    uid: str
    rollout_idx: int
    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]
    """1 on policy tokens, 0 on environment tokens; same length as ``completion_ids``."""
    turn_starts: list[int | None]
    """Per logged turn: completion index of its first policy token (None: no policy tokens,
    e.g. a forced completion, or cut by ``max_length``)."""
    success: bool
    target: float
    """The MC target: 1/0 success, or the logged reward."""
    row: int = -1
    """Position of the source row among the rows given to ``tokenize_rollouts``."""


@dataclass
class RolloutSet:
    """Tokenized rollouts plus the drop counts by reason."""

    rollouts: list[TokenRollout]
    dropped: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------- text → tokens


def turn_text(turn: Mapping[str, Any]) -> str:
    """A logged turn as the policy wrote it: think, separator and action (invalid turns: the parts
    the log kept)."""
    action = turn.get("action") or "invalid"
    if action in tags.ACTIONS:
        t = tags.Turn(
            0, turn.get("think") or "", action, turn.get("arg") or "", turn.get("sep") or ""
        )
        return t.body()
    think = turn.get("think")
    return (f"<think>{think}</think>" if think is not None else "") + (turn.get("arg") or "")


_TRAILING_RESIDUE_RE = re.compile(f"(?:{tags.RESIDUE_RE.pattern})\\Z")


def _trim_residue(raw: str) -> str:
    start = tags.RESIDUE_RE.match(raw).end()
    end = _TRAILING_RESIDUE_RE.search(raw, start).start()
    return raw[start:end]


def turn_texts(turns: Sequence[Mapping[str, Any]], response: str | None = None) -> list[str]:
    """Each logged turn's text. Invalid turns keep only parts of their text in the log; when the
    raw ``response`` parses into the same actions, their exact text is taken from it."""
    texts = [turn_text(t) for t in turns]
    if any((t.get("action") or "invalid") == "invalid" for t in turns) and response:
        parsed = tags.parse_turns(response)
        if [p.action for p in parsed] == [t.get("action") or "invalid" for t in turns]:
            texts = [
                _trim_residue(p.raw) if not p.valid else x
                for p, x in zip(parsed, texts, strict=True)
            ]
    return texts


def completion_tokens(
    turns: Sequence[Mapping[str, Any]],
    encode: Callable[[str], list[int]],
    *,
    eos_id: int,
    obs_wrap: tuple[str, str],
    truncate: Callable[[str], str] = lambda s: s,
    texts: Sequence[str] | None = None,
) -> tuple[list[int], list[int], list[int | None]]:
    """``(completion_ids, mask, turn_starts)`` for a rollout's turns.

    Each policy turn is its text plus the end-of-turn token (``mask`` 1). An observation is shown
    between a turn and the next one (``obs_wrap = (before, after)`` from the chat template); a
    forced completion is the environment's (``mask`` 0), closed by the end-of-turn token.
    ``texts`` overrides the turns' texts (see ``turn_texts``).
    """
    ids: list[int] = []
    mask: list[int] = []
    starts: list[int | None] = []
    before, after = obs_wrap
    for i, turn in enumerate(turns):
        if turn.get("forced"):
            starts.append(None)
            env = [*encode(tags.FORCED_COMPLETION), eos_id]
            ids += env
            mask += [0] * len(env)
            continue
        starts.append(len(ids))
        pol = [*encode(texts[i] if texts is not None else turn_text(turn)), eos_id]
        ids += pol
        mask += [1] * len(pol)
        if i + 1 < len(turns):
            env = encode(before + truncate(turn.get("observation") or "") + after)
            ids += env
            mask += [0] * len(env)
    return ids, mask, starts


def mc_target(row: Mapping[str, Any], *, target: str, threshold: float) -> tuple[bool, float]:
    """``(success, MC target)``: target ``success`` is 1/0, ``reward`` the logged reward (0 if null)."""
    ok = schema.is_success(row.get("judge_score"), row.get("format_ok"), threshold)
    if target == "success":
        return ok, float(ok)
    if target == "reward":
        return ok, float(row.get("reward") or 0.0)
    raise ValueError(f"unknown value target {target!r}; known: {', '.join(TARGETS)}")


def tokenize_rollouts(
    rows: Iterable[Mapping[str, Any]],
    tokenizer: Any,
    *,
    prompts: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    system_prompt: str | None = None,
    target: str = "success",
    success_threshold: float = SUCCESS_THRESHOLD,
    max_length: int = 2048,
    obs_max_tokens: int = 256,
    progress: Callable[[int], None] | None = None,
) -> RolloutSet:
    """Tokenize rollout-log rows as the policy saw them.

    The prompt is ``prompts[uid]`` (chat messages, e.g. from the training dataset) when given (a
    uid it lacks is dropped, ``NOT_IN_DATA``), else ``system_prompt`` (default: the bundled
    Searcher prompt) and the row's question.
    Completions longer than ``max_length − len(prompt)`` are cut; turns past the cut get no start.
    """
    from ddai.pipelines.distill.rebuild import default_system_prompt
    from ddai.trainer.episode.rollout import ObservationFormat, prompt_ids, token_truncator

    system = default_system_prompt() if system_prompt is None else system_prompt
    fmt = ObservationFormat.from_tokenizer(tokenizer)
    truncate = token_truncator(tokenizer, obs_max_tokens)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    out: list[TokenRollout] = []
    dropped: dict[str, int] = {}

    def drop(reason: str) -> None:
        dropped[reason] = dropped.get(reason, 0) + 1

    for row_i, row in enumerate(rows):
        if progress is not None:
            progress(1)
        turns = row.get("turns") or []
        if not turns:
            drop(NO_TURNS)
            continue
        uid = str(row["uid"])
        if prompts is not None and uid not in prompts:
            drop(NOT_IN_DATA)  # the bundled prompt in its place is not what the policy saw
            continue
        messages = (prompts or {}).get(uid) or [
            {"role": "system", "content": system},
            {"role": "user", "content": row.get("question") or ""},
        ]
        p_ids = prompt_ids(tokenizer, messages)
        room = max_length - len(p_ids)
        if room <= 0:
            drop(PROMPT_TOO_LONG)
            continue
        ids, mask, starts = completion_tokens(
            turns,
            encode,
            eos_id=tokenizer.eos_token_id,
            obs_wrap=(fmt.before, fmt.after),
            truncate=truncate,
            texts=turn_texts(turns, row.get("response")),
        )
        ids, mask = ids[:room], mask[:room]
        starts = [s if s is not None and s < room else None for s in starts]
        if not any(mask):
            drop(NO_POLICY_TOKENS)
            continue
        ok, tgt = mc_target(row, target=target, threshold=success_threshold)
        out.append(
            TokenRollout(
                run_id=str(row["run_id"]),
                uid=uid,
                rollout_idx=int(row["rollout_idx"]),
                prompt_ids=p_ids,
                completion_ids=ids,
                mask=mask,
                turn_starts=starts,
                success=ok,
                target=tgt,
                row=row_i,
            )
        )
    return RolloutSet(out, dropped)


# ---------------------------------------------------------------------------- batches


@dataclass(frozen=True)
class Batch:
    """Rollouts padded for one forward pass: prompts left-padded to a common width ``prompt_len``,
    completions right-padded, so completion token ``t`` sits at column ``prompt_len + t``."""

    input_ids: Tensor
    """``[B, P + T]``"""
    attention_mask: Tensor
    """``[B, P + T]``"""
    mask: Tensor
    """``[B, T]`` 1 on policy tokens (0 on environment tokens and padding)."""
    prompt_len: int
    images: dict[str, Any] | None = None
    """The rows' page images for a VLM (``episode.vision.vision_batch``'s layout: ``pixel_values``
    ``[sum patches, D]``, ``image_grid_thw`` ``[n_images, 3]``, ``num_images`` per row), kept where
    they were made and moved with each pass's rows (``vlm_inputs``); None: no row shows one."""

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.mask.to(device),
            self.prompt_len,
            self.images,
        )


def pad_batch(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    masks: Sequence[Sequence[int]],
    pad_id: int,
) -> Batch:
    """Pad prompt/completion pairs into a ``Batch``."""
    B = len(prompts)
    P = max(len(p) for p in prompts)
    T = max(max(len(c) for c in completions), 1)
    ids = torch.full((B, P + T), pad_id, dtype=torch.long)
    att = torch.zeros((B, P + T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    for i, (p, c, m) in enumerate(zip(prompts, completions, masks, strict=True)):
        ids[i, P - len(p) : P] = torch.tensor(list(p), dtype=torch.long)
        att[i, P - len(p) : P + len(c)] = 1
        if c:
            ids[i, P : P + len(c)] = torch.tensor(list(c), dtype=torch.long)
            mask[i, : len(c)] = torch.tensor(list(m), dtype=torch.long)
    return Batch(ids, att, mask, P)


def collate(items: Sequence[TokenRollout], pad_id: int) -> Batch:
    return pad_batch(
        [r.prompt_ids for r in items],
        [r.completion_ids for r in items],
        [r.mask for r in items],
        pad_id,
    )


# ---------------------------------------------------------------------------- pairs and splits


def make_pairs(
    uids: Sequence[str], success: Sequence[bool], *, max_pairs_per_problem: int = 25, seed: int = 0
) -> list[tuple[int, int]]:
    """``(positive index, negative index)`` pairs of rollouts of the same prompt.

    Per prompt, all successful × failed combinations when there are at most
    ``max_pairs_per_problem``, else that many sampled without replacement (a per-prompt seeded
    draw, so a prompt's pairs do not depend on the other prompts). Prompts in first-seen order.
    """
    if max_pairs_per_problem < 1:
        raise ValueError(f"--max-pairs-per-problem must be >= 1, got {max_pairs_per_problem}")
    groups: dict[str, tuple[list[int], list[int]]] = {}
    for i, (u, ok) in enumerate(zip(uids, success, strict=True)):
        groups.setdefault(u, ([], []))[0 if ok else 1].append(i)
    pairs: list[tuple[int, int]] = []
    for uid, (pos, neg) in groups.items():
        n = len(pos) * len(neg)
        if n <= max_pairs_per_problem:
            chosen = range(n)
        else:
            chosen = sorted(random.Random(f"{seed}:{uid}").sample(range(n), max_pairs_per_problem))
        pairs.extend((pos[k // len(neg)], neg[k % len(neg)]) for k in chosen)
    return pairs


def success_rates(uids: Sequence[str], success: Sequence[bool]) -> dict[str, float]:
    """Per prompt: the share of its rollouts that succeeded."""
    n: dict[str, int] = {}
    s: dict[str, int] = {}
    for u, ok in zip(uids, success, strict=True):
        n[u] = n.get(u, 0) + 1
        s[u] = s.get(u, 0) + int(ok)
    return {u: s[u] / n[u] for u in n}


def bin_weights(
    rates: Sequence[float], edges: Sequence[float], weights: Sequence[float]
) -> list[float]:
    """Sampling weight per pair from its prompt's success rate (seed 004's difficulty bins,
    generalized): bin ``k`` holds rates in ``[edges[k−1], edges[k])``; each non-empty bin gets
    ``weights[k]`` of the probability mass, shared equally by its pairs. Sums to 1."""
    parse_bins(edges, weights)
    bins = [bisect.bisect_right(list(edges), r) for r in rates]
    counts: dict[int, int] = {}
    for b in bins:
        counts[b] = counts.get(b, 0) + 1
    mass = sum(weights[b] for b in counts)
    if mass <= 0:
        raise ValueError(
            f"--bin-weights {list(weights)} give zero weight to every bin that has pairs "
            f"(bins with pairs: {sorted(counts)})"
        )
    return [weights[b] / counts[b] / mass for b in bins]


def split_prompts(
    uids: Sequence[str],
    val_fraction: float,
    *,
    seed: int = 0,
    strata: Mapping[str, Any] | None = None,
) -> set[str]:
    """The held-out prompts: ``round(val_fraction · n)`` of each stratum's prompts, chosen by a
    seeded hash (stable under reordering). ``strata`` maps uid → stratum key (default: one)."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"--val-fraction must be in [0, 1), got {val_fraction}")
    by: dict[Any, list[str]] = {}
    for u in dict.fromkeys(uids):
        by.setdefault((strata or {}).get(u), []).append(u)
    held: set[str] = set()
    for members in by.values():
        k = round(val_fraction * len(members))
        if val_fraction > 0 and len(members) >= 2:
            k = max(k, 1)
        ranked = sorted(members, key=lambda u: hashlib.sha1(f"{seed}:{u}".encode()).hexdigest())
        held.update(ranked[:k])
    return held
