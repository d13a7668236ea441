"""Heavy modules (torch, transformers, trl, peft, the trainer's modules that import them) bound at
a test module's import and loaded by the first test that uses them, so that collecting the suite
(``pytest --collect-only``) loads none of them.

``torch = heavy("torch")`` in place of ``import torch``: the library's ``lazy_module`` stand-in,
except that what pytest's collection probes on every module global (``_mock_name``,
``__wrapped__``, ``__test__``, ``__bases__``: dunder names and mock's marker) is answered as
these modules answer it (they define none), without loading the module.
"""

from __future__ import annotations

from typing import Any

from ddai.pipelines.records.lazy import LazyModule


class _HeavyModule(LazyModule):
    __slots__ = ()

    def __getattr__(self, attr: str) -> Any:
        if self._module is None and (attr == "_mock_name" or attr.startswith("__")):
            raise AttributeError(attr)
        return super().__getattr__(attr)


def heavy(name: str) -> Any:
    """``name``'s stand-in (typed ``Any``: it reads as the module it stands for)."""
    return _HeavyModule(name)


# the heavy libraries most test modules use, bound once (``from support.lazy import torch``)
torch = heavy("torch")
transformers = heavy("transformers")
safetensors_torch = heavy("safetensors.torch")
