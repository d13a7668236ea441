"""The files a ``--value-sft DIR`` of the report must hold, checked before the report reads the log.

Apart from the value section (``reports/sections/value_joint.py``, which loads plotly): the
report checks its inputs, and lists them in its manifest, before the section modules load (they
load while the report's facts build).
"""

from __future__ import annotations

from pathlib import Path

METRICS = "metrics.jsonl"
RUN_CONFIG = "run_config.json"


def check(folders: list[Path]) -> None:
    """Each folder holds a value-sft run's metrics, else a ``FileNotFoundError`` with the fix."""
    for folder in folders:
        if not (Path(folder) / METRICS).is_file():
            raise FileNotFoundError(
                f"--value-sft {folder}: no {METRICS} there; pass the --out folder of "
                "`ddai train value-sft`"
            )


def inputs(folders: list[Path]) -> list[Path]:
    """The files read, for the report's manifest."""
    out = []
    for folder in folders:
        out.append(Path(folder) / METRICS)
        if (Path(folder) / RUN_CONFIG).is_file():
            out.append(Path(folder) / RUN_CONFIG)
    return out
