"""Log-probs recomputed by one teacher-forced pass under a ``SamplingConfig``'s processors: the
reference ``HFSampler``'s recorded log-probs are checked against (the sampler is the policy)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddai.trainer.episode.sampling import SamplingConfig


def recompute_logprobs(
    model: Any, context: Sequence[int], tokens: Sequence[int], config: SamplingConfig
) -> Any:
    """``[len(tokens)]`` log-probs of ``tokens`` after ``context`` under ``config``'s processors:
    one teacher-forced forward pass, each position's logits processed with the ids before it."""
    import torch

    device = next(model.parameters()).device
    ids = torch.tensor([list(context) + list(tokens)], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(context) - 1 : -1].float()  # [n, V]
    procs = config.processors()
    out = []
    for t, tok in enumerate(tokens):
        scores = procs(ids[:, : len(context) + t], logits[t : t + 1].clone())
        out.append(torch.log_softmax(scores, -1)[0, tok])
    return torch.stack(out) if out else torch.zeros(0)
