"""Running a training command: relaunch under ``accelerate launch`` (``--launch N``), call the
trainer's one function with bad input turned into exit code 2 (``run_or_fail``), print the summary
once per run, and find the ``train`` group that several modules add commands to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.markup import escape

from ddai.cli.common import err_console, fail, summary

T = TypeVar("T")


def run_or_fail(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``; bad input (a config's ``check``, a missing or existing file, a
    ``ValueError`` of the libraries' own config checks) exits 2 with its message; a run that
    changed in the log store while this one read it (``StoreConflict``: nothing was written)
    or whose merged LoRA model failed its check (``MergeCheckFailed``: the adapter is the final
    model) exits 1."""
    from ddai.pipelines.store import StoreConflict
    from ddai.trainer.lora_merge import MergeCheckFailed

    try:
        return fn(*args, **kwargs)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        raise fail(str(e)) from e
    except (StoreConflict, MergeCheckFailed) as e:
        raise fail(str(e), 1) from e


def maybe_relaunch(launch: int | None, accelerate_config: Path | None) -> None:
    """With --launch N, run the same command line under accelerate and exit with its code."""
    if launch is None:
        if accelerate_config is not None:
            raise fail("--accelerate-config needs --launch N")
        return
    import sys

    from ddai.trainer.runtime.launch import relaunch

    code = run_or_fail(relaunch, sys.argv[1:], launch, accelerate_config)
    raise typer.Exit(code)


def main_summary(title: str, data: dict, *, as_json: bool) -> None:
    """The closing summary, printed by the main process only (one per run under a launcher);
    a run whose rewards taught nothing says so on stderr (``no_signal``)."""
    from ddai.trainer.runtime import dist

    if dist.is_main():
        summary(title, data, as_json=as_json)
        why = no_signal(data)
        if why is not None:
            err_console.print(f"[bold yellow]warning:[/] {escape(why)}", soft_wrap=True)


def no_signal(data: dict[str, Any]) -> str | None:
    """Why a GRPO/PPO run got no learning signal from its rewards, or None: no group of any step
    had reward variance (``informative_group_share`` 0), so every advantage was 0 and whatever
    changed in the weights came from other terms (KL, weight decay), not from the rewards. Each
    step warned as it went; the summary alone reads like a finished run."""
    share = data.get("informative_group_share")
    steps = data.get("steps") or 0
    if share is None or share != 0 or steps <= 0:
        return None
    return (
        f"no group of the run's {steps} step(s) had reward variance "
        f"(zero_variance_steps {data.get('zero_variance_steps', steps)}): every advantage was 0 "
        "and the policy learned nothing from its rewards. SFT the policy first, check the reward "
        "backends and --reward weights, or train on prompts with mixed outcomes "
        "(`ddai curate focus`)"
    )


TRAIN_HELP = "Train the Searcher: SFT, then GRPO over the search environment."


def with_evals(result: dict[str, Any]) -> dict[str, Any]:
    """A value-head training summary with its ``eval_before``/``eval_after`` maps spread into
    ``before KEY``/``after KEY`` entries (one flat summary, as ``train value`` and ``value-sft``
    print it)."""
    flat = {k: v for k, v in result.items() if k not in ("eval_before", "eval_after")}
    flat.update({f"before {k}": v for k, v in result["eval_before"].items()})
    flat.update({f"after {k}": v for k, v in result["eval_after"].items()})
    return flat


def sub_app(app: typer.Typer, name: str, help_text: str) -> typer.Typer:
    """The sub-app ``name`` of ``app`` (registered by its own area), else a new one."""
    for info in app.registered_groups:
        if info.name == name and info.typer_instance is not None:
            return info.typer_instance
    sub = typer.Typer(help=help_text, no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(sub, name=name)
    return sub
