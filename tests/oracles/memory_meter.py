"""Peak tensor memory of a block of code, on any device, the CPU included.

``torch.cuda.max_memory_allocated`` exists only on GPUs; the CPU allocator keeps no statistics.
``TensorMemoryMeter`` is a ``TorchDispatchMode``: every tensor an operation returns inside the
block has its storage counted once, until the storage is freed (a weak-reference finalizer on the
storage object, which torch keeps alive exactly as long as the storage). Storages that existed
before the block (the model's weights) are not counted: the peak is what the block added.
Backward passes are seen too (autograd dispatches through the same mode on the CPU).
"""

from __future__ import annotations

import weakref
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class TensorMemoryMeter(TorchDispatchMode):
    """``with TensorMemoryMeter() as m: ...`` then ``m.peak`` (bytes) and ``m.live`` (bytes still
    held by storages the block created)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()

    def _free(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes

    def _track(self, out: Any) -> None:
        import torch

        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key = id(storage)
            if key in self._seen:
                continue
            nbytes = storage.nbytes()
            self._seen.add(key)
            self.live += nbytes
            weakref.finalize(storage, self._free, key, nbytes)
        self.peak = max(self.peak, self.live)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._track(out)
        return out
