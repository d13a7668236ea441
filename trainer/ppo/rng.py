"""Every random state a PPO run draws from, so that ``--resume`` continues the very streams a run
without a stop would have drawn (2 steps + 2 resumed steps = 4 steps, bit for bit):

- torch's CPU generator (sampling on the CPU, ``torch.randperm`` anywhere) and CUDA's (sampling on
  a GPU), python's ``random`` and numpy's global generators;
- the update's shuffling generator (``ppo_update``'s ``gen``, one per rank);
- the prompt order (``PromptOrder``: its ``random.Random`` and the rest of the current pass).

``rng_state`` captures them as plain tensors, ints and lists (``torch.load(weights_only=True)``
reads them back); ``restore_rng`` puts them back. Each rank has its own states: the checkpoint
keeps one per rank, in rank order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import torch

T = TypeVar("T")


class PromptOrder(Generic[T]):
    """Endless batches of ``per_step`` items: shuffled passes over ``items`` (seeded), a pass's
    rest carried into the next batch. Its state (the generator's and the rest of the pass) is
    part of ``rng_state``."""

    def __init__(self, items: Sequence[T], per_step: int, seed: int) -> None:
        self.items, self.per_step = list(items), per_step
        self.rng = random.Random(seed)
        self.order: list[int] = []
        """Indices into ``items`` still to come in this pass."""

    def __iter__(self) -> PromptOrder[T]:
        return self

    def __next__(self) -> list[T]:
        if len(self.order) < self.per_step:
            fresh = list(range(len(self.items)))
            self.rng.shuffle(fresh)
            self.order += fresh
        batch, self.order = self.order[: self.per_step], self.order[self.per_step :]
        return [self.items[i] for i in batch]

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "order": list(self.order)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.order = list(state["order"])


def _numpy_state() -> Any:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with torch's wheels
        return None
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def _set_numpy_state(state: Any) -> None:
    if state is None:
        return
    import numpy as np

    kind, keys, pos, has_gauss, cached = state
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def rng_state(*, gen: torch.Generator, order: PromptOrder[Any]) -> dict[str, Any]:
    """This process's random states: the global generators, the update's ``gen`` and the prompt
    ``order``."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "python": random.getstate(),
        "numpy": _numpy_state(),
        "update": gen.get_state(),
        "prompts": order.state_dict(),
    }


def restore_rng(state: dict[str, Any], *, gen: torch.Generator, order: PromptOrder[Any]) -> None:
    """Put back what ``rng_state`` captured (a state loaded with ``weights_only=True`` holds
    lists where python's had tuples)."""
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    _set_numpy_state(state.get("numpy"))
    gen.set_state(state["update"])
    order.load_state_dict(state["prompts"])
