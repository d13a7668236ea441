"""Deprecated alias, kept for one release: ``ddai.trainer.search`` is now ``ddai.trainer.episode``.

``import ddai.trainer.search.X`` warns once (``DeprecationWarning``) and hands back the module
``ddai.trainer.episode.X`` itself (the same object, so its classes and state are shared), through
a meta path finder that maps the old dotted prefix onto the new one. This package holds no code of
its own: the import walks of ``tests/support/package.py`` leave it out (no room, no arrows).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

_NEW = "ddai.trainer.episode"

warnings.warn(
    f"{__name__} is deprecated and will be removed in the next release: import {_NEW}",
    DeprecationWarning,
    stacklevel=2,
)


class _Redirect(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``ddai.trainer.search.X`` and loads it as the module ``ddai.trainer.episode.X``."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if not fullname.startswith(f"{__name__}."):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(_NEW + spec.name[len(__name__) :])
        # importlib sets the returned module's __spec__ to this alias spec; keep the real one
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state


sys.meta_path.insert(0, _Redirect())


def __getattr__(name: str) -> object:
    return getattr(importlib.import_module(_NEW), name)
