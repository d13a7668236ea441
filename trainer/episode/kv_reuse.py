"""KV cache reuse across the turns of multi-turn rollouts (``HFSampler``).

Each turn of a rollout batch used to re-encode every live context whole (prompt, all earlier turns,
all observations). ``TurnCache`` keeps the KV cache ``generate`` leaves behind and, next turn, runs
only what is new through the model: the last sampled token (``generate`` never forwards it) and
the environment's observation tokens.

Layouts. ``generate`` takes a left-padded batch: row ``j`` holds its ``L_j`` context tokens at the
right of a width ``W``, positions ``0 … L_j - 1`` (``cumsum`` of the attention mask). After the
turn, row ``j``'s cached tokens (context, then the sampled tokens that were kept) sit in one
contiguous column range; rows that stopped early are followed by junk (pad tokens ``generate``
appended). Next turn, for each new context (episodes are matched by content: the cached tokens
must be a prefix of the context, so a wrong match is impossible):

1. its cached range is gathered, right-aligned, into a fresh cache (``[N, H, R, D]`` per layer);
2. the rest of the context except its last token is run through the model in one batched forward
   pass (right-padded suffix block, explicit positions; padding columns masked out);
3. the prefix and the suffix are gathered, right-aligned, into width ``W - 1``: exactly the layout
   ``generate`` would have built from the left-padded contexts, so ``generate`` is called with the
   same ``input_ids`` and attention mask as without reuse (the logits processors, the repetition
   penalty included, see the same ids) and prefills only the last column.

Masked columns are zeroed, so no stale value (NaN included) can leak through a zero attention
weight. The result equals re-encoding up to float rounding (the cached keys were computed
incrementally); the tests check tokens and log-probs against the re-encoding path.

Where the model does not allow it, each turn re-encodes (said once): vision-language policies
(M-RoPE positions depend on the images in the whole context), caches other than plain ``DynamicCache``
layers (sliding windows, linear attention, quantized, static), and several processes (a sharded
model's extra forward pass would need every rank to take part).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("ddai.trainer")
_SAID: set[str] = set()
"""Fallback reasons already logged: once per process (GRPO builds a sampler per rollout batch)."""


@dataclass
class _Row:
    """One row of the stored cache: which batch row, where its tokens start, which tokens."""

    row: int
    start: int
    tokens: list[int]


class TurnCache:
    """The KV cache of one rollout batch's last turn, and the logic to reuse it next turn.

    ``prepare`` gives ``generate`` a cache (or None: re-encode), ``store`` keeps what ``generate``
    left, ``release`` drops it (the weights are about to change, or the rollouts are done).
    ``reused_tokens`` / ``encoded_tokens`` count context tokens served from the cache and run
    through the model, over the sampler's life.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.cache: Any = None
        self.rows: list[_Row] = []
        self.reused_tokens = 0
        self.encoded_tokens = 0

    def _off(self, reason: str, *, for_good: bool) -> None:
        if reason not in _SAID:
            _SAID.add(reason)
            log.warning("KV cache reuse across turns is off (%s): each turn re-encodes", reason)
        if for_good:
            self.enabled = False
        self.release()

    def release(self) -> None:
        self.cache, self.rows = None, []

    def usable(self, *, vision: bool) -> bool:
        """Whether this turn may reuse or store a cache (``vision``: the policy is a VLM)."""
        if not self.enabled:
            return False
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self._off("several processes: a sharded forward needs every rank", for_good=True)
            return False
        if vision:
            self._off(
                "a vision-language policy: M-RoPE positions depend on the images", for_good=True
            )
            return False
        return True

    def prepare(self, model: Any, contexts: Sequence[Sequence[int]], width: int) -> Any:
        """A cache of width ``width - 1`` holding every context but its last token, laid out as
        the left-padded batch ``generate`` gets; None when some context has no cached prefix."""
        import torch

        if self.cache is None:
            self._count(contexts, [0] * len(contexts))
            return None
        matches = self._match(contexts)
        # Reused prefix of each context: at most all but its last token (generate needs one).
        reuse = [
            min(len(m.tokens), len(c) - 1) for m, c in zip(matches or [], contexts, strict=False)
        ]
        if matches is None or min(reuse) < 1:  # a row with nothing cached: re-encode this turn
            self.release()
            self._count(contexts, [0] * len(contexts))
            return None
        device = self.cache.layers[0].keys.device
        rows = torch.tensor([m.row for m in matches], device=device)
        prefix_w = max(reuse)
        kv = _gather(self.cache, rows, [m.start for m in matches], reuse, prefix_w)
        self.release()
        suffix = [list(c[r : len(c) - 1]) for c, r in zip(contexts, reuse, strict=True)]
        block = max(len(s) for s in suffix)
        starts = [prefix_w - r for r in reuse]
        if block:
            kv = self._extend(model, kv, suffix, reuse, prefix_w, block, device)
        lengths = [r + len(s) for r, s in zip(reuse, suffix, strict=True)]
        self._count(contexts, reuse)
        same = torch.arange(len(contexts), device=device)
        return _gather(kv, same, starts, lengths, width - 1)

    def store(
        self,
        cache: Any,
        contexts: Sequence[Sequence[int]],
        kept: Sequence[Sequence[int]],
        width: int,
        steps: int,
    ) -> None:
        """Keep ``generate``'s cache: row ``j`` holds ``contexts[j]`` right-aligned to ``width``,
        then the ``kept[j]`` tokens it sampled, of which the cache holds the first ``steps - 1``
        (the last sampled token is never forwarded)."""
        if not _plain(cache):
            self._off(
                f"the model's cache is {_kind(cache)}, not plain full attention", for_good=True
            )
            return
        self.cache = cache
        self.rows = [
            _Row(j, width - len(c), list(c) + list(k[: max(steps - 1, 0)]))
            for j, (c, k) in enumerate(zip(contexts, kept, strict=True))
        ]

    def _match(self, contexts: Sequence[Sequence[int]]) -> list[_Row] | None:
        """For each context, a stored row whose tokens are a prefix of it (in order first: the
        live episodes of a turn are a subsequence of the last turn's), else None."""
        out: list[_Row] = []
        k = 0
        for c in contexts:
            found = None
            for i in [*range(k, len(self.rows)), *range(k)]:
                toks = self.rows[i].tokens
                if len(toks) <= len(c) and list(c[: len(toks)]) == toks:
                    found, k = self.rows[i], i + 1
                    break
            if found is None:
                return None
            out.append(found)
        return out

    def _extend(
        self,
        model: Any,
        kv: Any,
        suffix: list[list[int]],
        reuse: list[int],
        prefix_w: int,
        block: int,
        device: Any,
    ) -> Any:
        """Run each row's ``suffix`` after its cached prefix: one forward pass over a
        right-padded ``[N, block]`` block; returns the cache, now ``prefix_w + block`` wide."""
        import torch

        n = len(suffix)
        ids = torch.zeros((n, block), dtype=torch.long)
        mask = torch.zeros((n, prefix_w + block), dtype=torch.long)
        for j, (s, r) in enumerate(zip(suffix, reuse, strict=True)):
            ids[j, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[j, prefix_w - r : prefix_w + len(s)] = 1
        # Positions continue each row's own count; padding columns get later ones (masked).
        pos = torch.tensor(reuse)[:, None] + torch.arange(block)[None, :]
        # Only the cache is wanted: skip the [N, block, V] logits where the model allows.
        extra = {"logits_to_keep": 1} if _keeps_logits(model) else {}
        with torch.no_grad():
            model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                position_ids=pos.to(device),
                use_cache=True,
                **extra,
                **{cache_key(): kv},
            )
        return kv

    def _count(self, contexts: Sequence[Sequence[int]], reuse: Sequence[int]) -> None:
        self.reused_tokens += sum(reuse)
        self.encoded_tokens += sum(len(c) - r for c, r in zip(contexts, reuse, strict=True))


def cache_key() -> str:
    """The keyword ``forward``/``generate`` take the cache by (and the output's field): ``cache``
    in recent transformers, ``past_key_values`` before."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    return (
        "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"
    )


def _keeps_logits(model: Any) -> bool:
    """Whether the (peft-unwrapped) model's ``forward`` takes ``logits_to_keep``."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def _plain(cache: Any) -> bool:
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    return (
        type(cache) is DynamicCache
        and bool(cache.layers)
        and all(type(layer) is DynamicLayer for layer in cache.layers)
    )


def _kind(cache: Any) -> str:
    layers = {type(layer).__name__ for layer in getattr(cache, "layers", [])}
    return f"{type(cache).__name__}({', '.join(sorted(layers))})"


def _gather(
    cache: Any, rows: Any, starts: Sequence[int], lengths: Sequence[int], width: int
) -> Any:
    """A new ``DynamicCache`` of ``[len(rows), H, width, D]`` per layer: new row ``j`` holds the
    ``lengths[j]`` columns from ``starts[j]`` of batch row ``rows[j]``, right-aligned; the
    columns before them are zero (masked by the caller's attention mask).

    ``cache`` is consumed: each layer is dropped once copied, so the peak is one cache and one
    layer, not two caches (15 GiB each for a 7B model's 128 × 2048-token batch)."""
    import torch
    from transformers import DynamicCache

    device = rows.device
    start = torch.tensor(list(starts), device=device)[:, None]
    length = torch.tensor(list(lengths), device=device)[:, None]
    t = torch.arange(width, device=device)[None, :]
    src = start + length - width + t  # [N, width]: source column of each target column
    valid = src >= start
    src = torch.where(valid, src, torch.zeros_like(src))
    keep = valid[:, None, :, None]

    def take(x: Any) -> Any:
        x = x.index_select(0, rows)  # [N, H, T, D]
        idx = src[:, None, :, None].expand(x.shape[0], x.shape[1], width, x.shape[3])
        # ``where``, not a product: 0 × NaN would be NaN.
        return torch.where(keep, torch.gather(x, 2, idx), 0.0)

    out = []
    for layer in cache.layers:
        out.append((take(layer.keys), take(layer.values)))
        layer.keys = layer.values = None
    return DynamicCache(out)
