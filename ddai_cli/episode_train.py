"""The command ``train grpo`` and ``train ppo`` share: a run config (its flags, the nested episode
settings, ``--launch``), the run refused into an existing run id, relaunched under accelerate, its
inputs and config checked before the trainer loads, the trainer's one function, the summary."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ddai.cli.common import JsonOpt, LogsOpt, ProgressOpt
from ddai.cli.flags import default_of, with_groups
from ddai.cli.options import episode_settings, require_inputs
from ddai.cli.running import (
    AppendRunOpt,
    device_options,
    main_summary,
    maybe_relaunch,
    refuse_existing_run,
    run_or_fail,
)


def parsed_sets(cfg: dict[str, Any]) -> dict[str, Any]:
    """``--set``'s ``KEY=VALUE`` texts, taken out of ``cfg`` and parsed (a bad one exits 2)."""
    from ddai.trainer.common import parse_set

    return run_or_fail(parse_set, cfg.pop("overrides"))


def episode_training(
    config_class: type, flags: Callable[..., dict[str, Any]], title: str, runner: str, doc: str
) -> Callable[..., None]:
    """The command that runs ``runner`` (``module:function``, imported when the command runs) on
    a ``config_class`` built from ``flags`` (``config_flags`` over it; a ``--set`` among them is
    parsed into ``overrides``), the episode settings and ``--logs``; ``doc`` is its help."""

    @with_groups({"cfg": flags, "nested": episode_settings, "device": device_options})
    def command(
        *,
        cfg: dict[str, Any],
        nested: dict[str, Any],
        logs: LogsOpt = default_of(config_class, "logs"),
        append: AppendRunOpt = False,
        device: dict[str, Any],
        progress: ProgressOpt = default_of(config_class, "progress"),
        as_json: JsonOpt = False,
    ) -> None:
        refuse_existing_run(title, logs, cfg["run_id"], append=append, resume=cfg["resume"])
        maybe_relaunch(**device)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        module, name = runner.split(":")
        run = getattr(importlib.import_module(module), name)

        sets = {"overrides": parsed_sets(cfg)} if "overrides" in cfg else {}
        config = config_class(**cfg, **nested, **sets, logs=logs, progress=progress and not as_json)
        require_inputs(config.data, config.corpus)
        run_or_fail(config.check)  # bad settings exit 2 before the trainer loads its libraries
        main_summary(title, asdict(run_or_fail(run, config)), as_json=as_json)

    command.__doc__ = doc
    return command
