"""CLI: ``ddai pointer``: the pointer selector (seed 002), from a synthetic world to evaluation.

world → embed → train --mode sft → gen → process → train --phases rce:3,grpo:30 → eval

Longer than 400 lines because it declares the flags of the six ``ddai pointer`` commands, each a
seed-002 setting with its help; the logic is ``ddai.pipelines.pointer``'s and
``ddai.trainer.pointer``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import (
    JsonOpt,
    ProgressOpt,
    RetryFailedOpt,
    bad_input_exits,
    exit_if_calls_failed,
    fail,
    summary,
)
from ddai.cli.fields import field_help, field_opt
from ddai.cli.flags import config_flags, doc_flags, with_groups
from ddai.cli.options import default_of, device_options, parse_floats
from ddai.cli.running import maybe_relaunch
from ddai.pipelines.backends.usage import FAILED_CALLS, failed_calls
from ddai.pipelines.pointer.embed import EmbedConfig
from ddai.pipelines.pointer.vqa import SCORERS
from ddai.pipelines.pointer.world import WorldConfig
from ddai.trainer.pointer.config import (
    RL_EPOCHS,
    RL_OPTIM,
    SFT_EPOCHS,
    SFT_OPTIM,
    EvalConfig,
    GenConfig,
    OptimConfig,
    PointerTrainConfig,
    ProposalConfig,
    RewardConfig,
    RLConfig,
)

pointer_app = typer.Typer(
    help="Pointer selector (seed 002): pick 2 in-context demonstrations out of K with a pointer "
    "network; RL from beam + temperature + random pointers whose VQA correctness is recorded.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

VqaOpt = Annotated[
    str | None,
    typer.Option(
        "--vqa",
        help="VQAModel backend name from ddai.toml (default: $DDAI_VQA, then [roles] vqa, then "
        "local: the world's deterministic simulator).",
    ),
]
MetricOpt = Annotated[
    str,
    typer.Option(
        "--metric",
        help=f"Answer score: {', '.join(SCORERS)} (official VQAv2 accuracy; VQAv2 with the human "
        "answers normalized like the prediction, not comparable with papers; ANLS; exact match).",
    ),
]
ThresholdOpt = Annotated[
    float,
    typer.Option(
        "--correct-threshold",
        help="vqa_correct = 1 when the answer's score >= this. Default 1.0: full VQAv2 credit, "
        "i.e. at least 4 of the 10 annotators gave the answer.",
    ),
]
MaxCostOpt = Annotated[
    float | None,
    typer.Option(
        "--max-cost",
        help="USD cap on VQA calls; calls past it fail with reason max-cost (rerun to resume: "
        "answered calls are cached).",
    ),
]
DryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", help="Count the VQA calls and their estimated cost; call nothing."),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Rerun even if inputs and parameters are unchanged.")
]
StoreOpt = Annotated[
    Path, typer.Option("--store", help="Embedding store from `ddai pointer embed`.")
]
WorldOpt = Annotated[
    Path,
    typer.Option(
        "--world", help="World folder (queries.jsonl, demos.jsonl) from `ddai pointer world`."
    ),
]


def _with_vqa(
    run: Callable[..., Any], cfg: Any, max_cost: float | None, retry_failed: bool
) -> dict[str, Any]:
    """``run(cfg, vqa_model=...)``'s summary (``run_gen``, or ``run_eval``'s second value) with
    the VQA calls that failed, by reason (the command then exits 1)."""
    from ddai.pipelines.pointer.vqa import resolve_vqa

    model = resolve_vqa(cfg.vqa, max_cost=max_cost, retry_failed=retry_failed)
    out = run(cfg, vqa_model=model)
    data = out[1] if isinstance(out, tuple) else out
    failed = failed_calls(model.usage()) if hasattr(model, "usage") else {}
    return {**data, FAILED_CALLS: failed} if failed else data


def _vqa_summary(title: str, data: dict[str, Any], *, dry_run: bool, as_json: bool) -> None:
    """The closing summary of a command that called the VQA model; exit 1 if calls failed."""
    summary(title + (" (dry run)" if dry_run else ""), data, as_json=as_json)
    exit_if_calls_failed(data)


# Short names of the configs whose fields the flags below read (help and default).
W, E, P, G, RW, PT, OC, RL, EV = (
    WorldConfig,
    EmbedConfig,
    ProposalConfig,
    GenConfig,
    RewardConfig,
    PointerTrainConfig,
    OptimConfig,
    RLConfig,
    EvalConfig,
)


def _phase_help(name: str) -> str:
    """An optimiser flag's help with its phase defaults (``SFT_OPTIM`` / ``RL_OPTIM``)."""
    return (
        f"{field_help(OC, name)} Default: sft {getattr(SFT_OPTIM, name):g}, "
        f"RL {getattr(RL_OPTIM, name):g}."
    )


RL_FLAGS = config_flags(
    RL,
    doc_flags(
        RL,
        *("norm", "adv_clip", "clip_eps", "kl_coef", "rce_t_start", "rce_t_end", "old_logp"),
        reinforcepp_clip="--reinforcepp-clip/--no-reinforcepp-clip",
    ),
)
"""The RL phases' flags of ``ddai pointer train``: ``RLConfig``'s fields, help their docstrings
as they read."""


@pointer_app.command(
    "world", short_help="Make (or load) a synthetic VQA world for the pointer selector."
)
def world_cmd(
    out: Annotated[Path, typer.Argument(metavar="DIR", help="Folder to write the world into.")],
    seed: Annotated[
        int, typer.Option(help="Random seed; the world is a pure function of its settings.")
    ] = default_of(W, "seed"),
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from",
            metavar="<file>",
            help="Build the world from your VQA set instead: .parquet or .jsonl with image (a "
            "path, relative to the file), question, answers (the 10 human answers), optional "
            "question_id and split (train, test, demo = the demonstration pool).",
        ),
    ] = None,
    queries: Annotated[
        int, typer.Option("--queries", help="Number of queries (synthetic world).")
    ] = default_of(W, "n_queries"),
    demos: Annotated[
        int | None,
        typer.Option(
            "--demos",
            help=f"Demonstration pool size (default {default_of(W, 'n_demos')}; with --from and "
            "no split column: half the rows).",
        ),
    ] = None,
    dim: Annotated[int, typer.Option(help="Embedding width (synthetic world).")] = default_of(
        W, "dim"
    ),
    topics: Annotated[int, typer.Option(help="Scene topics, 1-8 (synthetic world).")] = default_of(
        W, "n_topics"
    ),
    test_frac: Annotated[
        float, typer.Option(help="Share of queries held out (split 'test').")
    ] = default_of(W, "test_frac"),
    clean_rate: Annotated[
        float,
        typer.Option(help="Share of demonstrations with a right answer (synthetic world)."),
    ] = default_of(W, "clean_rate"),
    as_json: JsonOpt = False,
) -> None:
    """Make a synthetic VQA world with deliberately suboptimal SFT labels, or load yours (--from).

    Queries with 10 human answers, a demonstration pool, embeddings, and labels that pick the two
    most similar demonstrations (blind to whether their answers are right). With --from, your
    rows become queries and demonstrations (--seed, --demos, --test-frac split them when the file
    has no split column); embed them with --embedder local.
    """
    if from_file is not None:
        from ddai.pipelines.pointer.user_set import UserSetConfig, build_world

        with bad_input_exits():
            data = build_world(
                UserSetConfig(
                    path=from_file, out=out, seed=seed, n_demos=demos, test_frac=test_frac
                )
            )
        summary("ddai pointer world", data, as_json=as_json)
        return
    from ddai.pipelines.pointer.world import run_world

    with bad_input_exits():
        cfg = WorldConfig(
            seed=seed,
            n_queries=queries,
            n_demos=default_of(W, "n_demos") if demos is None else demos,
            dim=dim,
            n_topics=topics,
            test_frac=test_frac,
            clean_rate=clean_rate,
        )
    summary("ddai pointer world", run_world(cfg, out), as_json=as_json)


@pointer_app.command("embed", short_help="Export query and candidate embeddings to a store.")
def embed_cmd(
    world: Annotated[
        Path, typer.Argument(metavar="DIR", help="World folder (queries.jsonl, demos.jsonl).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", metavar="<file>", help="Store to write: .safetensors or .parquet."
        ),
    ],
    k: Annotated[
        int, typer.Option("--k", help="Candidate pool size: each query's K most similar demos.")
    ] = default_of(E, "k"),
    embedder: Annotated[
        str,
        typer.Option(
            "--embedder",
            help="'world' (the world's own embeddings) or an Embedder backend name: local (no "
            "key), hash, or a [backends.NAME] table (kind openai: an OpenAI-compatible embedding "
            "server). Rows with images are embedded as image + question when the backend can.",
        ),
    ] = default_of(E, "embedder"),
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            help="USD cap on a paid embedder's calls; past it calls fail with reason max-cost and "
            "nothing is written (rerun to resume: embedded rows are cached).",
        ),
    ] = default_of(E, "max_cost"),
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Count the embedder's calls and their cost; call nothing."),
    ] = default_of(E, "dry_run"),
    force: ForceOpt = default_of(E, "force"),
    progress: ProgressOpt = default_of(E, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Export each query's embedding and its K candidates' embeddings to a store."""
    from ddai.pipelines.backends.base import EmbedError
    from ddai.pipelines.pointer.embed import run_embed

    with bad_input_exits():
        cfg = EmbedConfig(
            world=world,
            out=out,
            k=k,
            embedder=embedder,
            force=force,
            progress=progress and not as_json,
            dry_run=dry_run,
            max_cost=max_cost,
        )
        try:
            data = run_embed(cfg)
        except EmbedError as e:  # remote calls failed: exit 1 with the reasons, write nothing
            raise fail(str(e), code=1) from e
    summary("ddai pointer embed" + (" (dry run)" if dry_run else ""), data, as_json=as_json)


@pointer_app.command("gen", short_help="Generate pointer candidates and record their VQA answers.")
def gen_cmd(
    store: StoreOpt,
    world: WorldOpt,
    model: Annotated[
        Path, typer.Option("--model", help="Pointer checkpoint (usually the SFT one).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            metavar="<file>",
            help="Raw records to write (JSONL, one line per query).",
        ),
    ],
    split: Annotated[str, field_opt(G, "split")] = default_of(G, "split"),
    num_beams: Annotated[int, field_opt(P, "num_beams")] = default_of(P, "num_beams"),
    temps: Annotated[str, field_opt(P, "temperatures", "--temps")] = ",".join(
        f"{t:g}" for t in default_of(P, "temperatures")
    ),
    n_per_temp: Annotated[int, field_opt(P, "n_per_temp")] = default_of(P, "n_per_temp"),
    num_random: Annotated[int, field_opt(P, "num_random")] = default_of(P, "num_random"),
    seed: Annotated[int, field_opt(P, "seed")] = default_of(P, "seed"),
    vqa: VqaOpt = default_of(G, "vqa"),
    metric: MetricOpt = default_of(G, "metric"),
    correct_threshold: ThresholdOpt = default_of(G, "correct_threshold"),
    max_cost: MaxCostOpt = None,
    retry_failed: RetryFailedOpt = False,
    dry_run: DryRunOpt = default_of(G, "dry_run"),
    force: ForceOpt = default_of(G, "force"),
    progress: ProgressOpt = default_of(G, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Generate pointer candidates and record every one's VQA answer and correctness.

    Beam search, temperature sampling and random pairs, de-duplicated by unordered pair with
    priority beam > sample > random; raw JSONL, one line per query.
    """
    from ddai.trainer.pointer.generate import run_gen

    with bad_input_exits():
        proposal = ProposalConfig(
            num_beams=num_beams,
            temperatures=tuple(parse_floats(temps, "--temps")),
            n_per_temp=n_per_temp,
            num_random=num_random,
            seed=seed,
        )
        cfg = GenConfig(
            store=store,
            world=world,
            model=model,
            out=out,
            proposal=proposal,
            split=None if split == "all" else split,
            vqa=vqa,
            metric=metric,
            correct_threshold=correct_threshold,
            force=force,
            progress=progress and not as_json,
            dry_run=dry_run,
        )
        data = _with_vqa(run_gen, cfg, max_cost, retry_failed)
    _vqa_summary("ddai pointer gen", data, dry_run=dry_run, as_json=as_json)


@pointer_app.command(
    "process", short_help="Flatten raw records into per-pointer rows with a reward."
)
def process_cmd(
    raw: Annotated[
        Path, typer.Argument(metavar="FILE", help="Raw records from `ddai pointer gen`.")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            metavar="<file>",
            help="Processed rows to write (.parquet); statistics go beside it.",
        ),
    ],
    alpha: Annotated[float, field_opt(RW, "alpha")] = default_of(RW, "alpha"),
    beta: Annotated[float, field_opt(RW, "beta")] = default_of(RW, "beta"),
    correctness: Annotated[str, field_opt(RW, "correctness_mode", "--correctness")] = default_of(
        RW, "correctness_mode"
    ),
    quality: Annotated[str, field_opt(RW, "quality")] = default_of(RW, "quality"),
    use_acc_score: Annotated[
        bool, field_opt(RW, "use_acc_score", "--use-acc-score/--no-use-acc-score")
    ] = default_of(RW, "use_acc_score"),
    reward_clip: Annotated[float, field_opt(RW, "clip", "--reward-clip")] = default_of(RW, "clip"),
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Flatten raw records into per-pointer rows with a reward, plus per-method statistics.

    The statistics table (beside --out) has mean correctness and index-selection bias per
    gen_method.
    """
    from ddai.trainer.pointer.data import ProcessConfig, run_process

    with bad_input_exits():
        reward = RewardConfig(
            alpha=alpha,
            beta=beta,
            correctness_mode=correctness,
            quality=quality,
            use_acc_score=use_acc_score,
            clip=reward_clip,
        )
        data = run_process(ProcessConfig(raw=raw, out=out, reward=reward, force=force))
    summary("ddai pointer process", data, as_json=as_json)


@pointer_app.command("train", short_help="Train the pointer selector.")
@with_groups({"rl": RL_FLAGS, "device": device_options})
def train_cmd(
    *,
    store: StoreOpt,
    out: Annotated[
        Path, typer.Option("--out-dir", metavar="<dir>", help="Checkpoint folder to write.")
    ],
    mode: Annotated[
        str | None,
        typer.Option("--mode", help="One phase: sft, rce, grpo or reinforcepp (with --epochs)."),
    ] = None,
    epochs: Annotated[
        int | None,
        typer.Option(help=f"Epochs of --mode (default: sft {SFT_EPOCHS}, RL {RL_EPOCHS})."),
    ] = None,
    phases: Annotated[
        str | None,
        typer.Option(
            "--phases", help="RL phases in order, e.g. rce:3,grpo:30 (instead of --mode)."
        ),
    ] = None,
    world: Annotated[
        Path | None, typer.Option("--world", help="sft: world folder with sft_labels.jsonl.")
    ] = default_of(PT, "world"),
    data: Annotated[
        Path | None, typer.Option("--data", help="RL: processed rows from `ddai pointer process`.")
    ] = default_of(PT, "data"),
    init: Annotated[
        Path | None, typer.Option("--init", help="Start from this checkpoint (RL: the SFT one).")
    ] = default_of(PT, "init"),
    split: Annotated[str, field_opt(PT, "split")] = default_of(PT, "split"),
    lr: Annotated[float | None, typer.Option(help=_phase_help("lr"))] = None,
    batch_queries: Annotated[int | None, typer.Option(help=_phase_help("batch_queries"))] = None,
    weight_decay: Annotated[float | None, typer.Option(help=_phase_help("weight_decay"))] = None,
    seed: Annotated[int, field_opt(OC, "seed")] = default_of(OC, "seed"),
    d_model: Annotated[int, field_opt(PT, "d_model")] = default_of(PT, "d_model"),
    scoring: Annotated[str, field_opt(PT, "scoring")] = default_of(PT, "scoring"),
    rl: dict[str, Any],
    progress: ProgressOpt = default_of(PT, "progress"),
    device: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Train the pointer selector: SFT from labels, or RL phases on generated data.

    --mode sft learns the labels; --phases rce:3,grpo:30 runs an RCE warm-up, then GRPO (or
    REINFORCE++) from the SFT checkpoint given with --init.
    """
    maybe_relaunch(**device)
    from ddai.trainer.pointer.config import optim_for, plan_phases
    from ddai.trainer.pointer.train import run_train

    with bad_input_exits():
        plan = plan_phases(mode, epochs, phases)
        optim = optim_for(
            plan, lr=lr, weight_decay=weight_decay, batch_queries=batch_queries, seed=seed
        )
        cfg = PointerTrainConfig(
            store=store,
            out=out,
            phases=plan,
            world=world,
            data=data,
            init=init,
            split=split,
            d_model=d_model,
            scoring=scoring,
            optim=optim,
            rl=RLConfig(**rl),
            progress=progress and not as_json,
        )
        result = run_train(cfg)
    summary("ddai pointer train", result, as_json=as_json)


@pointer_app.command("eval", short_help="Held-out VQA accuracy of each selector's pairs.")
def eval_cmd(
    store: StoreOpt,
    world: WorldOpt,
    model: Annotated[
        list[str],
        typer.Option(
            "--model",
            metavar="<name=checkpoint>",
            help="NAME=CHECKPOINT, repeatable; the first is the reference (usually sft=...).",
        ),
    ],
    split: Annotated[str, field_opt(EV, "split")] = default_of(EV, "split"),
    num_beams: Annotated[int, field_opt(EV, "num_beams")] = default_of(EV, "num_beams"),
    seed: Annotated[int, field_opt(EV, "seed")] = default_of(EV, "seed"),
    out: Annotated[
        Path | None,
        typer.Option(
            "--out-dir", metavar="<dir>", help="Folder for selections.parquet and summary.parquet."
        ),
    ] = default_of(EV, "out"),
    vqa: VqaOpt = default_of(EV, "vqa"),
    metric: MetricOpt = default_of(EV, "metric"),
    correct_threshold: ThresholdOpt = default_of(EV, "correct_threshold"),
    max_cost: MaxCostOpt = None,
    retry_failed: RetryFailedOpt = False,
    dry_run: DryRunOpt = default_of(EV, "dry_run"),
    progress: ProgressOpt = default_of(EV, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Held-out VQA accuracy of each selector's pairs, and how the picked indices moved.

    Selectors: each --model's greedy pick, the first model's top beam, the two nearest
    demonstrations, and a random pair.
    """
    from ddai.trainer.pointer.config import parse_models
    from ddai.trainer.pointer.evaluate import run_eval

    with bad_input_exits():
        cfg = EvalConfig(
            store=store,
            world=world,
            models=parse_models(model),
            split=split,
            num_beams=num_beams,
            vqa=vqa,
            metric=metric,
            correct_threshold=correct_threshold,
            seed=seed,
            out=out,
            progress=progress and not as_json,
            dry_run=dry_run,
        )
        data = _with_vqa(run_eval, cfg, max_cost, retry_failed)
    _vqa_summary("ddai pointer eval", data, dry_run=dry_run, as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(pointer_app, name="pointer")
