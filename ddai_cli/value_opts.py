"""Flags and the summary shared by the value-head commands (``ddai train value``,
``train value-sft``, ``value score``): help and default from the fields every value config shares
(``ValueRowsConfig``, ``ValueFitConfig``). The two training commands take their run and fit flags
as groups (``value_run_flags``, ``value_fit_flags``) over their own config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from ddai.cli.common import summary
from ddai.cli.fields import field_help, field_opt
from ddai.cli.flags import config_flags, doc_flags
from ddai.cli.options import run_flags
from ddai.cli.running import run_or_fail, with_evals
from ddai.trainer.value.config import ValueFitConfig, ValueRowsConfig

R, F = ValueRowsConfig, ValueFitConfig
PromptsOpt = Annotated[Path | None, field_opt(R, "data")]
SystemOpt = Annotated[Path | None, field_opt(R, "system_prompt")]
MaxLenOpt = Annotated[int, field_opt(R, "max_length")]
ObsOpt = Annotated[int, field_opt(R, "obs_max_tokens")]
DtypeOpt = Annotated[str, field_opt(R, "dtype")]
BinEdgesOpt = Annotated[str | None, field_opt(F, "bin_edges")]
BinWeightsOpt = Annotated[str | None, field_opt(F, "bin_weights")]


FIT_FIELDS = (
    "trunk_lr",
    "head_lr",
    "weight_decay",
    "pairwise_coef",
    "mc_coef",
    "target",
    "max_pairs_per_problem",
    "val_fraction",
    "split_seed",
    "batch_size",
    "max_steps",
    "eval_steps",
    "max_length",
    "obs_max_tokens",
    "grad_accum",
    "include_incomplete",
)
"""The fitting flags ``ddai train value`` and ``train value-sft`` share (``ValueFitConfig``'s
fields and the rows' token budgets)."""


def value_run_flags(config_cls: type) -> Callable[..., dict[str, Any]]:
    """``--model``, ``--out-dir``, ``--dtype`` and ``--seed`` of a value training command, each
    help the field's docstring as it reads (as ``field_opt`` shows it)."""
    helps = {"model": "model", "out": "output_dir", "dtype": "dtype", "seed": "seed"}
    return run_flags(config_cls, **{k: field_help(config_cls, f) for k, f in helps.items()})


def value_fit_flags(config_cls: type) -> Callable[..., dict[str, Any]]:
    """The ``FIT_FIELDS`` flags over ``config_cls`` (type and default from it, help its field
    docstrings as they read)."""
    return config_flags(config_cls, doc_flags(config_cls, *FIT_FIELDS))


def value_summary(title: str, train: Callable[[Any], Any], cfg: Any, *, as_json: bool) -> None:
    """Run a value-head training (bad input exits 2) and print its flat summary."""
    summary(title, with_evals(asdict(run_or_fail(train, cfg))), as_json=as_json)
