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

``LogprobRecorder`` is the last processor of the list: it keeps one step's normalized log-probs
(``[N, V]``) until the next step shows which token was drawn, then keeps that token's log-prob
only. A turn of ``n`` tokens thus holds ``N × n`` floats, not the ``N × n × V`` of
``output_logits`` (20 GB per turn at 128 rollouts × 256 tokens × 152k vocabulary).
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
    repetition_penalty: float = 1.0
    suppress_ids: tuple[int, ...] = ()
    """Tokens never sampled (a VLM's image placeholder tokens, as TRL suppresses them)."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def processors(self, pad_lengths: Sequence[int] | None = None) -> Any:
        """The ``LogitsProcessorList`` in ``generate``'s own order (penalties, suppression, then
        temperature, top-k, top-p). ``pad_lengths[i]``: left padding of row ``i``, which the
        repetition penalty must not count (``generate`` would penalize the pad token)."""
        import torch
        from transformers import (
            LogitsProcessorList,
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
        return out


class LogprobRecorder:
    """Last logits processor of a ``generate`` call: records the log-prob of each drawn token.

    Step ``k`` sees ``scores [N, V]`` (the final processed logits) and ``input_ids [N, width+k]``
    whose last column is the token drawn at step ``k-1``; it gathers that token's log-prob from
    the kept ``[N, V]`` log-probs of step ``k-1`` and keeps step ``k``'s. ``finish`` gathers the
    last drawn token. Memory: one ``[N, V]`` step plus ``[N, n]`` log-probs.
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
