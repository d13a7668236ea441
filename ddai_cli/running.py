"""Running a training command: relaunch under ``accelerate launch`` (``--launch N``), call the
trainer's one function with bad input turned into exit code 2 (``run_or_fail``), print the summary
once per run, refuse a run into an existing run id without ``--append`` (``refuse_existing_run``),
and find the ``train`` group that several modules add commands to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape

from ddai.cli.common import err_console, fail, summary

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
                f"[bold yellow]warning:[/] run {escape(run_id)!r} already holds training steps "
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
    """The closing summary, printed by the main process only (one per run under a launcher);
    a run whose rewards taught nothing (``no_signal``), whose clip never acted (``clip_inert``) or
    whose text model read images as ``[image: path]`` text (``images_flattened``) says so on
    stderr."""
    from ddai.trainer.runtime import dist

    if dist.is_main():
        summary(title, data, as_json=as_json)
        for why in (no_signal(data), clip_inert(data), images_flattened(data)):
            if why is not None:
                err_console.print(f"[bold yellow]warning:[/] {escape(why)}", soft_wrap=True)


def no_signal(data: dict[str, Any]) -> str | None:
    """Why a GRPO/PPO run got no learning signal from its rewards, or None. GRPO: no group of any
    step had reward variance (``informative_group_share`` 0), so every group advantage was 0 and
    whatever changed in the weights came from other terms (KL, weight decay), not from the
    rewards; each step warned as it went, the summary alone reads like a finished run. PPO (its
    summary has ``advantage_abs_max``): its advantages are GAE's over the critic's values, non-zero
    with equal rewards, so it warns only when every one of them was 0."""
    steps = data.get("steps") or 0
    if "advantage_abs_max" in data:  # PPO: its own GAE advantages, not the groups' variance
        top = data["advantage_abs_max"]
        if top is None or top != 0 or steps <= 0:
            return None
        return (
            f"every GAE advantage of the run's {steps} step(s) was 0 (zero_advantage_steps "
            f"{data.get('zero_advantage_steps', steps)}): the policy learned nothing from its "
            "rewards. Check the reward backends and --reward weights, the critic (--critic) and "
            "--gamma/--lam"
        )
    share = data.get("informative_group_share")
    if share is None or share != 0 or steps <= 0:
        return None
    return (
        f"no group of the run's {steps} step(s) had reward variance "
        f"(zero_variance_steps {data.get('zero_variance_steps', steps)}): every advantage was 0 "
        "and the policy learned nothing from its rewards. SFT the policy first, check the reward "
        "backends and --reward weights, or train on prompts with mixed outcomes "
        "(`ddai curate focus`)"
    )


def images_flattened(data: dict[str, Any]) -> str | None:
    """Why a text SFT run never saw the images its rows show, or None: ``image_turns_flattened``
    turns were read as ``[image: path]`` text."""
    n = data.get("image_turns_flattened") or 0
    if n <= 0:
        return None
    return (
        f"{n} turn(s) of the training rows show images, which this text model read as "
        "`[image: path]` text, never as pixels; train a VLM (a model folder with a processor, "
        "e.g. Qwen2.5-VL) with --image-root DIR to keep them images"
    )


def clip_inert(data: dict[str, Any]) -> str | None:
    """Why a GRPO/GSPO run's clip never acted, or None: no step clipped a token (a sequence, under
    GSPO), so the update was an unclipped policy gradient. Says whether the ratio moved less than
    ε (the spread it reached) or could not move at all (every mini-batch was the first trained
    after its generation, where the ratio is 1); those first mini-batches never count toward the
    spread. A PPO summary (its bounds are ``clip_low``/``clip_high``) is worded by
    ``ppo.clip_stats``, which knows PPO's epochs and mini-batches."""
    if "clip_low" in data:
        from ddai.trainer.ppo.clip_stats import clip_never_acted

        return clip_never_acted(data)
    acted = data.get("clip_acted_steps")
    steps = data.get("steps") or 0
    if acted is None or acted > 0 or steps <= 0:
        return None
    lo, hi = data.get("epsilon_low"), data.get("epsilon_high")
    first = data.get("minibatches_first") or 0
    moved = data.get("minibatches_after_update") or 0
    spread = data.get("ratio_spread")
    head = f"the clip (ε_low {lo:g}, ε_high {hi:g}) never acted in the run's {steps} step(s)"
    if moved == 0 or spread is None:
        return (
            f"{head}, and could not: each of its {first} mini-batch(es) was the first trained after "
            "its rollouts were generated, so the importance ratio was 1 and the update a plain "
            "policy gradient. --preset gspo-ddai (or --set steps_per_generation=2) trains each "
            "generation in two mini-batches, the second after an optimizer step, where it can act"
        )
    return (
        f"{head}: over the {moved} mini-batch(es) trained after an optimizer step since their "
        f"generation, the largest |ratio − 1| was {spread:.2g}, inside ε; the {first} "
        "mini-batch(es) trained first after their generation (ratio 1, no clip can act) are not "
        "counted. The update was an unclipped policy gradient: if a trust region is meant, raise "
        "--learning-rate or lower --epsilon/--epsilon-high"
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
