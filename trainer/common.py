"""Plumbing shared by ``ddai train sft`` and ``ddai train grpo``: TRL config assembly from presets,
config files (TOML/YAML) and ``--set key=value`` overrides; progress and metric callbacks; resume.

Precedence for any TRL knob: built-in default < preset < config file < dedicated flag < ``--set``.
Every key is checked against the TRL config class, and an unknown one fails naming the close ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# report_to values understood here besides transformers' integrations.
FILE_REPORTERS = ("jsonl", "csv")


class TrainConfigError(ValueError):
    """A bad training input; the message names it and the fix."""


def load_config_file(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """A training config file: TOML or YAML, a flat table of knobs (a ``[trl]`` table also works)."""
    if path is None:
        return {}
    p = Path(path)
    if not p.is_file():
        raise TrainConfigError(f"config file {p} not found")
    text = p.read_text("utf-8")
    try:
        if p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            import tomllib  # a run's config file only: not loaded by the commands' --help

            data = tomllib.loads(text)
    except Exception as e:
        raise TrainConfigError(f"{p}: cannot parse ({e}); fix the file") from e
    if not isinstance(data, dict):
        raise TrainConfigError(f"{p}: expected a table of settings, got {type(data).__name__}")
    return dict(data.get("trl", {}), **{k: v for k, v in data.items() if k != "trl"})


def jsonable(value: Any) -> Any:
    """``value`` as JSON types, for a run's ``run_config.json``: dataclasses and dicts as objects
    (keys as text), lists and tuples as lists, paths as text, anything else as its ``repr``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """``["k=v", ...]`` → dict; values parse as JSON when they can (numbers, bools, lists), else text."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise TrainConfigError(
                f"--set {item!r}: expected KEY=VALUE, e.g. --set weight_decay=0.1"
            )
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def field_names(config_cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(config_cls)}


def check_keys(
    config_cls: type, keys: Mapping[str, Any], where: str, extra: set[str] = frozenset()
) -> None:
    """Fail on keys that are neither fields of ``config_cls`` nor in ``extra``."""
    known = field_names(config_cls) | set(extra)
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise TrainConfigError(
                f"{where}: unknown setting {key!r} for {config_cls.__name__}{hint}"
            )


def merge_layers(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Later layers win; None values in a layer mean "not given"."""
    out: dict[str, Any] = {}
    for layer in layers:
        for k, v in (layer or {}).items():
            if v is not None:
                out[k] = v
    return out


def user_layers(
    config_cls: type, cfg: Any, flags: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The TRL knobs a run's user set: its config file's (``cfg.config_file``) and ``--set``'s
    (``cfg.overrides``), each checked against ``config_cls``'s fields. ``flags``: ddai settings
    a user may put there by mistake (``max_turns``), each named with the flag that sets it."""
    file_layer = load_config_file(cfg.config_file)
    for layer, where in ((file_layer, str(cfg.config_file)), (cfg.overrides, "--set")):
        for key in layer:
            if key in (flags or {}) and key not in field_names(config_cls):
                raise TrainConfigError(
                    f"{where}: {key!r} is a ddai setting, not a TRL knob; use {flags[key]}"
                )
    check_keys(config_cls, file_layer, str(cfg.config_file))
    check_keys(config_cls, cfg.overrides, "--set")
    return file_layer, cfg.overrides


def trl_config(config_cls: type, merged: dict[str, Any], cfg: Any, **fixed: Any) -> Any:
    """``config_cls(**merged)`` with ``report_to``'s integrations (the metrics file is ddai's own
    callback), ``cfg``'s ``output_dir`` and ``seed``, and ``fixed`` set over the layers."""
    integrations, _ = split_report_to(merged.pop("report_to", None))
    merged.update(output_dir=str(cfg.output_dir), report_to=integrations, seed=cfg.seed, **fixed)
    return config_cls(**merged)


def checkpointing_name(merged: dict[str, Any], user: dict[str, Any]) -> None:
    """Carry a user's ``gradient_checkpointing`` (transformers' old name) over to
    ``activation_checkpointing``, which the defaults set: the old name would lose to it, and
    left alone it makes transformers warn on every run."""
    if "gradient_checkpointing" in user and "activation_checkpointing" not in user:
        merged["activation_checkpointing"] = merged.pop("gradient_checkpointing")


def hf_progress(enabled: bool) -> None:
    """Turn the Hugging Face libraries' own bars (weights loading, dataset maps, shard writes)
    on or off with ``--progress/--no-progress``; ``disable_tqdm`` covers only the trainer's."""
    import datasets
    import transformers

    if enabled:
        datasets.enable_progress_bars()
        transformers.utils.logging.enable_progress_bar()
    else:
        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()


def device_defaults() -> dict[str, Any]:
    """CPU runs in float32; a CUDA machine trains in bf16 when it supports it."""
    import torch

    if torch.cuda.is_available():
        return {"use_cpu": False, "bf16": torch.cuda.is_bf16_supported()}
    return {"use_cpu": True, "bf16": False}


def split_report_to(report_to: str | list[str] | None) -> tuple[list[str], str | None]:
    """Split ``report_to`` into transformers integrations and one of ddai's metric files."""
    if report_to is None:
        return [], "jsonl"
    items = [report_to] if isinstance(report_to, str) else list(report_to)
    items = [s.strip() for item in items for s in str(item).split(",") if s.strip()]
    files = [s for s in items if s in FILE_REPORTERS]
    integrations = [s for s in items if s not in FILE_REPORTERS and s != "none"]
    if len(files) > 1:
        raise TrainConfigError(f"report_to: pick one of {', '.join(FILE_REPORTERS)}, not both")
    return integrations, (files[0] if files else None)


def resume_checkpoint(output_dir: str | os.PathLike[str], resume: bool) -> str | None:
    """The latest ``checkpoint-N`` under ``output_dir`` when resuming (an error when none exists)."""
    if not resume:
        return None
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None
    if last is None:
        raise TrainConfigError(
            f"--resume: no checkpoint-N folder in {output_dir}; run without --resume to start fresh"
        )
    return last


def checkpoint_step(checkpoint: str | os.PathLike[str]) -> int:
    """The optimizer step a ``checkpoint-N`` folder was saved at (its ``trainer_state.json``'s
    ``global_step``, else the N of its name)."""
    state = Path(checkpoint) / "trainer_state.json"
    if state.is_file():
        return int(json.loads(state.read_text("utf-8"))["global_step"])
    return int(Path(checkpoint).name.rsplit("-", 1)[-1])


def finish_trainer_setup(trainer: Any) -> None:
    """Drop transformers' tqdm progress printer in favour of TRL's rich one."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for cb in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(cb)
