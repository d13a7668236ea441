"""Running a training command: relaunch under ``accelerate launch`` (``--launch N``), call the
trainer's one function with bad input turned into exit code 2 (``run_or_fail``), print the summary
once per run, refuse a run into an existing run id without ``--append`` (``refuse_existing_run``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from ddai.cli.common import err_console, fail, markup, summary
from ddai.cli.flags import config_flags
from ddai.trainer.run_settings import LaunchSettings

T = TypeVar("T")

AppendRunOpt = Annotated[
    bool,
    typer.Option(
        "--append",
        help="Add this run's rollouts to an existing --run-id (without it, an existing run id is "
        "refused: its prompts would be counted twice).",
    ),
]


def refuse_existing_run(
    command: str,
    logs: str | Path | None,
    run_id: str | None,
    *,
    append: bool,
    resume: bool = False,
) -> None:
    """Exit 2 when ``run_id`` is already a committed run of the log store and neither ``--append``
    nor ``--resume`` says to add to it: a second run into it would log every prompt's rollouts
    again (each key twice, n per prompt doubled), skewing every per-prompt mean downstream."""
    if run_id is None or resume:
        return
    from ddai.pipelines.store import workspace
    from ddai.pipelines.store.store_read import list_runs, run_manifest

    store = workspace.logs_dir(logs)
    if run_id not in list_runs(store):
        return
    if append:
        from ddai.trainer.episode.logrows import logged_steps

        steps = logged_steps(run_manifest(store, run_id))
        if steps and command != "ddai collect":
            err_console.print(
                f"[bold yellow]warning:[/] run {markup.escape(run_id)!r} already holds training steps "
                f"{min(steps)}..{max(steps)}; the appended run counts its steps from 1 again, so "
                "its rows share step numbers with the earlier ones",
                soft_wrap=True,
            )
        return
    raise fail(
        f"{command}: run {run_id!r} already exists in {store}; pass --append to add this "
        f"run's rollouts to it, --resume to continue it from a checkpoint, or a new --run-id"
    )


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
    """The closing summary, printed by the main process only (one per run under a launcher),
    then on stderr what went wrong (``ddai.trainer.runtime.run_warnings``: no learning signal, a
    clip that never acted, images read as text)."""
    from ddai.trainer.ppo.clip_stats import clip_never_acted
    from ddai.trainer.runtime import dist
    from ddai.trainer.runtime.run_warnings import clip_inert, images_flattened, no_signal

    if dist.is_main():
        summary(title, data, as_json=as_json)
        clip = clip_never_acted(data) if "clip_low" in data else clip_inert(data)  # PPO's own
        for why in (no_signal(data), clip, images_flattened(data)):
            if why is not None:
                err_console.print(f"[bold yellow]warning:[/] {markup.escape(why)}", soft_wrap=True)


def parse_floats(text: str | None, flag: str) -> list[float]:
    """Comma-separated numbers of a flag (``[]`` when not given); bad text exits 2."""
    if not text:
        return []
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise fail(
            f"{flag} {text!r}: expected comma-separated numbers, e.g. {flag} 0.25,0.75"
        ) from None


device_options = config_flags(
    LaunchSettings, {"launch": None, "accelerate_config": None}
)  # fmt: skip
"""``--launch``, ``--accelerate-config`` as a command's ``device`` (``maybe_relaunch(**device)``)."""
