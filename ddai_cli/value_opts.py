"""Flags and the summary shared by the value-head commands (``ddai train value``,
``train value-sft``, ``value score``): help and default from the fields every value config shares
(``ValueRowsConfig``, ``ValueFitConfig``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from ddai.cli.common import summary
from ddai.cli.fields import field_opt
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


def value_summary(title: str, train: Callable[[Any], Any], cfg: Any, *, as_json: bool) -> None:
    """Run a value-head training (bad input exits 2) and print its flat summary."""
    summary(title, with_evals(asdict(run_or_fail(train, cfg))), as_json=as_json)
