"""Local staging folders of object-storage writes: the store's staged Parquet, a funnel step's
files before their put. Each lives under the workspace (``<home>/stage/.tmp-stage-<id>``) and is
claimed while it lives, so a kill leaves it abandoned and the next write removes it
(``clean_stages``): nothing staged piles up in ``/tmp``."""

from __future__ import annotations

import shutil
import uuid
from typing import IO

from ddai.pipelines.store import locks, workspace

STAGE_DIR = "stage"
_STAGE_PREFIX = ".tmp-stage-"


class Stage:
    """The staging folder of one object-storage write (see the module docstring); a context
    manager yielding its path."""

    def __init__(self) -> None:
        root = workspace.home() / STAGE_DIR
        root.mkdir(parents=True, exist_ok=True)
        clean_stages()
        self.name = str(root / f"{_STAGE_PREFIX}{uuid.uuid4().hex[:12]}")
        self._claim: IO[str] | None = locks.claimed_dir(self.name)

    def cleanup(self) -> None:
        shutil.rmtree(self.name, ignore_errors=True)
        if self._claim is not None:
            self._claim.close()
            self._claim = None

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def stage_dir() -> Stage:
    return Stage()


def clean_stages() -> list[str]:
    """Remove the workspace's staging folders whose write died (their claim is free)."""
    root = workspace.home() / STAGE_DIR
    removed = []
    for entry in root.iterdir() if root.is_dir() else []:
        if entry.name.startswith(locks.CLAIMING):
            if locks.remove_claiming(entry):
                removed.append(entry.name)
        elif entry.name.startswith(_STAGE_PREFIX) and locks.is_abandoned(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed
