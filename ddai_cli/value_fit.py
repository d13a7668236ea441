"""CLI: what ``ddai train value`` and ``ddai train value-sft`` share (``ValueFitConfig``'s flags,
the difficulty bins, ``--launch``): ``value_training`` makes a value-head training command."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ddai.cli.common import JsonOpt, ProgressOpt
from ddai.cli.common import summary as print_summary
from ddai.cli.flags import default_of, with_groups
from ddai.cli.run_specs import POLICY
from ddai.cli.running import device_options, maybe_relaunch, parse_floats, run_or_fail
from ddai.cli.value import ROWS, rows_read

BINS = {name: {"type": str | None, "default": None} for name in ("bin_edges", "bin_weights")}
"""``--bin-edges``/``--bin-weights`` as comma-separated text (``bins`` parses them)."""
FIT = {
    **POLICY,
    **ROWS,
    **dict.fromkeys(("trunk_lr", "head_lr", "weight_decay", "pairwise_coef", "mc_coef", "target")),
    **dict.fromkeys(("max_pairs_per_problem", "val_fraction", "split_seed", "batch_size")),
    **dict.fromkeys(("max_steps", "eval_steps", "grad_accum", "include_incomplete")),
    **BINS,
}  # fmt: skip
"""The flags both value trainings have (``ValueFitConfig`` and the run fields)."""


def bins(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with ``--bin-edges``/``--bin-weights`` parsed into numbers (bad text exits 2)."""
    return cfg | {k: parse_floats(cfg[k], f"--{k.replace('_', '-')}") for k in BINS}


def value_training(config_class: type, flags: Callable[..., Any], title: str) -> Callable[..., Any]:
    """Make ``trainer()`` (its docstring the help; it imports and gives the training function) a
    value-head training command: after ``--launch``, the ``config_class`` built from ``flags``
    (the bins parsed) and the rows read is trained (bad input exits 2) and the summary printed
    flat, the ``eval_before``/``eval_after`` maps spread into ``before KEY``/``after KEY``."""

    def decorate(trainer: Callable[[], Callable[[Any], Any]]) -> Callable[..., None]:
        def command(
            *,
            cfg: dict[str, Any],
            rows: dict[str, Any],
            device: dict[str, Any],
            progress: ProgressOpt = default_of(config_class, "progress"),
            as_json: JsonOpt = False,
        ) -> None:
            maybe_relaunch(**device)
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            config = config_class(**bins(cfg), **rows, progress=progress and not as_json)
            result = asdict(run_or_fail(trainer(), config))
            flat = {k: v for k, v in result.items() if k not in ("eval_before", "eval_after")}
            flat |= {f"before {k}": v for k, v in result["eval_before"].items()}
            flat |= {f"after {k}": v for k, v in result["eval_after"].items()}
            print_summary(title, flat, as_json=as_json)

        command.__doc__ = trainer.__doc__
        return with_groups({"cfg": flags, "rows": rows_read, "device": device_options})(command)

    return decorate
