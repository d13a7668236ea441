"""Sampling that is the policy: every logits processor explicit, the same one in sampling and in
any recomputation, and only the sampled tokens' log-probs kept.

``model.generate`` silently applies whatever the checkpoint's ``generation_config`` ships
(Qwen2.5's ``repetition_penalty=1.05``, ``top_k``, ``top_p``, suppressed tokens): the tokens then
come from a distribution the returned log-probs do not describe. ``HFSampler`` instead runs
``generate`` with a bare generation config (no processor of the checkpoint's) and the explicit
``SamplingConfig.processors`` list, so the distribution sampled from is exactly
``log_softmax(processors(context, logits))``; the tests recompute that same distribution
teacher-forced (``tests/support/sampling_reference.py``) and check the sampler's log-probs
against it.

``teacher_forced_logprobs`` is the training side of the same rule: the loss's log-probs (old,
reference and current) of a sampled sequence under the very processors it was sampled with, so
a run with a repetition penalty, top-k, top-p or min-p trains the distribution it sampled from
(TRL's own log-prob pass divides by the temperature and nothing else).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SamplingConfig:
    """The policy's sampling distribution; each non-neutral field is one logits processor."""

    temperature: float = 1.0
    """``<= 0``: greedy (log-probs then reported at temperature 1)."""
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    """Tokens below ``min_p`` × the top token's probability are never sampled (0: off)."""
    repetition_penalty: float = 1.0
    suppress_ids: tuple[int, ...] = ()
    """Tokens never sampled (a VLM's image placeholder tokens, as TRL suppresses them)."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def temperature_only(self) -> bool:
        """No processor but the temperature: the distribution is ``log_softmax(logits / T)``,
        which TRL's fused log-prob pass computes exactly."""
        return (
            self.repetition_penalty == 1.0
            and not self.suppress_ids
            and (self.greedy or (not self.top_k and self.top_p >= 1.0 and not self.min_p))
        )

    def processors(self, pad_lengths: Sequence[int] | None = None) -> Any:
        """The ``LogitsProcessorList`` in ``generate``'s own order (penalties, suppression, then
        temperature, top-k, top-p, min-p). ``pad_lengths[i]``: left padding of row ``i``, which the
        repetition penalty must not count (``generate`` would penalize the pad token)."""
        import torch
        from transformers import (
            LogitsProcessorList,
            MinPLogitsWarper,
            RepetitionPenaltyLogitsProcessor,
            SuppressTokensLogitsProcessor,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        out = LogitsProcessorList()
        if self.repetition_penalty != 1.0:
            ignore = None if pad_lengths is None else torch.tensor(list(pad_lengths))
            out.append(
                RepetitionPenaltyLogitsProcessor(
                    float(self.repetition_penalty), prompt_ignore_length=ignore
                )
            )
        if self.suppress_ids:
            out.append(SuppressTokensLogitsProcessor(list(self.suppress_ids)))
        if not self.greedy:
            if self.temperature != 1.0:
                out.append(TemperatureLogitsWarper(float(self.temperature)))
            if self.top_k:
                out.append(TopKLogitsWarper(int(self.top_k)))
            if self.top_p < 1.0:
                out.append(TopPLogitsWarper(float(self.top_p)))
            if self.min_p:
                out.append(MinPLogitsWarper(float(self.min_p)))
        return out


class LogprobRecorder:
    """Last logits processor of a ``generate`` call: records the log-prob of each drawn token.

    Step ``k`` sees ``scores [N, V]`` (the final processed logits) and ``input_ids [N, width+k]``
    whose last column is the token drawn at step ``k-1``; it gathers that token's log-prob from
    the kept ``[N, V]`` log-probs of step ``k-1`` and keeps step ``k``'s. ``finish`` gathers the
    last drawn token. Memory: one ``[N, V]`` step plus ``[N, n]`` log-probs, not the ``[N, n, V]``
    of ``output_logits`` (20 GB per turn at 128 rollouts × 256 tokens × 152k vocabulary).
    """

    def __init__(self) -> None:
        self.kept: Any = None
        self.columns: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.kept is not None:
            self.columns.append(self.kept.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.kept = torch.log_softmax(scores.float(), -1)
        return scores

    def finish(self, new_tokens: Any) -> Any:
        """``[N, n]`` log-probs of the ``[N, n]`` drawn tokens (on the tokens' device)."""
        import torch

        if self.kept is not None and len(self.columns) < new_tokens.shape[1]:
            last = new_tokens[:, len(self.columns) : len(self.columns) + 1].to(self.kept.device)
            self.columns.append(self.kept.gather(-1, last).squeeze(-1))
        self.kept = None
        if not self.columns:
            return torch.zeros(new_tokens.shape, dtype=torch.float32)
        return torch.stack(self.columns, dim=1)


def bare_generation_config(
    *, greedy: bool, eos_ids: Sequence[int], pad_id: int, max_new_tokens: int
) -> Any:
    """A ``GenerationConfig`` that adds no logits processor: every sampling knob neutral and
    explicit (``generate`` fills unset ones from the model's config, so set them all)."""
    from transformers import GenerationConfig

    knobs: dict[str, Any] = {}
    if not greedy:
        knobs = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "typical_p": 1.0, "min_p": None}
    return GenerationConfig(
        do_sample=not greedy,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        eos_token_id=list(eos_ids),
        pad_token_id=pad_id,
        max_new_tokens=max_new_tokens,
        **knobs,
    )


LOGP_FLOOR = -1e4
"""Log-prob given to a token outside the processed distribution's support (a token top-p, top-k
or min-p cut, or a suppressed one): finite, so a masked observation token or padding never turns
a masked sum into NaN, and ``exp`` of it is 0. A sampled token is always inside the support it
was sampled from."""


def teacher_forced_logprobs(
    logits: Any,
    input_ids: Any,
    pad_lengths: Sequence[int],
    config: SamplingConfig,
    *,
    entropy: bool = False,
) -> tuple[Any, Any]:
    """Log-probs of the last ``T`` tokens of ``input_ids`` under ``config``'s processors, as
    ``generate`` saw each one when it was drawn: ``(logps [N, T], entropies [N, T] or None)``.

    ``logits [N, T, V]``: the model's logits predicting ``input_ids[:, L-T:]`` (``input_ids
    [N, L]``); ``pad_lengths[i]``: the left padding of row ``i``, which the repetition penalty does
    not count (as the sampler passes it). Token ``k`` of row ``i`` is scored after the context
    ``input_ids[i, :L-T+k]``: all ``T`` positions of a row go through the processors at once, as
    ``T`` rows of a ``[T, L-1]`` context matrix (each context right-aligned, its left part ignored
    through the repetition penalty's per-row ``prompt_ignore_length``), so the processors are
    ``transformers``' own and run once per row. Differentiable in ``logits``; each row's
    ``[T, V]`` float32 work is recomputed in the backward pass (``torch.utils.checkpoint``)
    instead of kept. Entropies are of the processed distribution."""
    import torch
    from torch.utils.checkpoint import checkpoint

    N, T, _ = logits.shape
    L = input_ids.shape[1]
    W = L - 1  # the longest context (the last token's)
    lengths = torch.arange(L - T, L, device=input_ids.device)  # [T] context length of token k
    src = torch.arange(W, device=input_ids.device)[None, :] - (W - lengths)[:, None]  # [T, W]
    valid = src >= 0
    targets = input_ids[:, L - T :]  # [N, T]
    logps, ents = [], []
    for i in range(N):
        ctx = torch.where(valid, input_ids[i][src.clamp(min=0)], input_ids[i, 0])  # [T, W]
        ignore = (W - lengths) + int(pad_lengths[i])  # [T]
        procs = config.processors(ignore.tolist())

        def row(x, procs=procs, ctx=ctx, tgt=targets[i]):
            scores = procs(ctx, x.float())  # [T, V]
            lp = torch.log_softmax(scores, -1)
            out = lp.gather(-1, tgt[:, None])[:, 0].clamp(min=LOGP_FLOOR)
            if not entropy:
                return out, None
            return out, torch.distributions.Categorical(logits=scores).entropy()

        if torch.is_grad_enabled() and logits.requires_grad:
            lp, ent = checkpoint(row, logits[i], use_reentrant=False)
        else:
            lp, ent = row(logits[i])
        logps.append(lp)
        ents.append(ent)
    stacked = torch.stack(ents) if entropy else None
    return torch.stack(logps), stacked
