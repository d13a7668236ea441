"""The report step of ``ddai demo``: the synthetic world's runs, its last two rounds compared."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.fixtures import RUN_SPECS
from ddai.reports.build import build_report
from ddai.reports.config import ReportConfig


def demo_report(
    logs: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    datasets_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Write the demo's report; returns the line the demo prints (the report's path first).

    Every run in ``logs``; the last two runs of the world's round order (e.g. focused round 1 vs
    round 2) compared; the funnel drawn from the curated outputs in ``datasets_dir`` if it exists.
    """
    present = set(store.list_runs(logs))
    rounds = [s.name for s in RUN_SPECS if s.name in present]
    compare = (rounds[-2], rounds[-1]) if len(rounds) >= 2 else None
    folder = Path(datasets_dir) if datasets_dir is not None else None
    res = build_report(
        ReportConfig(
            logs=Path(logs),
            out=Path(out),
            compare=compare,
            datasets_dir=folder if folder is not None and folder.is_dir() else None,
            progress=False,
        )
    )
    return {
        "report": res["out"],
        "bytes": res["bytes"],
        "runs": len(res["runs"]),
        "rollouts": res["rollouts"],
        "compared": list(compare) if compare else [],
    }
