"""References for ``ddai.pipelines.funnel.plan``'s closed forms: the binomial mixed-group
probability and a Monte-Carlo share of mixed groups, which its tests compare against."""

from __future__ import annotations

import numpy as np


def mixed_prob(p: np.ndarray, n: int) -> np.ndarray:
    """P(a group of ``n`` has both outcomes) for success probabilities ``p`` ``[P]`` → ``[P]``."""
    p = np.asarray(p, dtype=np.float64)
    return 1.0 - p**n - (1.0 - p) ** n


def simulate_mixed_share(
    p: np.ndarray, n: int, *, groups_per_prompt: int = 1, rng: np.random.Generator
) -> float:
    """Monte-Carlo share of mixed groups: ``groups_per_prompt`` groups of ``n`` Bernoulli(p_i)
    rollouts for each prompt's true probability ``p`` ``[P]``."""
    k = rng.binomial(n, np.repeat(np.asarray(p, dtype=np.float64), groups_per_prompt))
    return float(np.mean((k > 0) & (k < n)))
