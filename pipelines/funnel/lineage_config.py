"""``ddai lineage``'s config (its fields are the command's flags)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LineageConfig:
    """Flags of ``ddai lineage``: the files whose manifests are walked back to the raw logs."""

    files: list[Path]
    """Funnel output file(s) to trace."""
    check: bool = False
    """Re-hash every input and mark the ones changed since they were used; re-hash every output
    and log partition against its manifest and exit 1 when one differs (an interrupted write or
    an edit)."""
