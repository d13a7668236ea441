"""CLI: ``ddai pointer``: the pointer selector (seed 002), from a synthetic world to evaluation.

world → embed → train --mode sft → gen → process → train --phases rce:3,grpo:30 → eval

Longer than 400 lines because it declares the flags of the six ``ddai pointer`` commands, each a
seed-002 setting with its help; the logic is ``ddai.pipelines.pointer``'s and
``ddai.trainer.pointer``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import JsonOpt, RetryFailedOpt, exit_if_calls_failed, fail, summary
from ddai.cli.options import (
    AccelerateConfigOpt,
    LaunchOpt,
)
from ddai.cli.running import maybe_relaunch
from ddai.pipelines.backends.usage import FAILED_CALLS, failed_calls
from ddai.pipelines.pointer.vqa import DEFAULT_THRESHOLD, SCORERS

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
ProgressOpt = Annotated[bool, typer.Option(help="Show a progress bar.")]
StoreOpt = Annotated[
    Path, typer.Option("--store", help="Embedding store from `ddai pointer embed`.")
]
WorldOpt = Annotated[
    Path,
    typer.Option(
        "--world", help="World folder (queries.jsonl, demos.jsonl) from `ddai pointer world`."
    ),
]


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise fail(f"{flag} {text!r}: give comma-separated numbers, e.g. 0.7,1.0,1.3") from None


def _vqa_backend(name: str | None, max_cost: float | None, retry_failed: bool):
    from ddai.pipelines.pointer.vqa import resolve_vqa

    return resolve_vqa(name, max_cost=max_cost, retry_failed=retry_failed)


def _with_failures(data: dict[str, Any], model: Any) -> dict[str, Any]:
    """``data`` plus the VQA calls that failed, by reason (the command then exits 1)."""
    failed = failed_calls(model.usage()) if hasattr(model, "usage") else {}
    return {**data, FAILED_CALLS: failed} if failed else data


@pointer_app.command("world")
def world_cmd(
    out: Annotated[Path, typer.Argument(metavar="DIR", help="Folder to write the world into.")],
    seed: Annotated[
        int, typer.Option(help="Random seed; the world is a pure function of its settings.")
    ] = 0,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from",
            metavar="FILE",
            help="Build the world from your VQA set instead: .parquet or .jsonl with image (a "
            "path, relative to the file), question, answers (the 10 human answers), optional "
            "question_id and split (train, test, demo = the demonstration pool).",
        ),
    ] = None,
    queries: Annotated[
        int, typer.Option("--queries", help="Number of queries (synthetic world).")
    ] = 400,
    demos: Annotated[
        int | None,
        typer.Option(
            "--demos",
            help="Demonstration pool size (default 600; with --from and no split column: half "
            "the rows).",
        ),
    ] = None,
    dim: Annotated[int, typer.Option(help="Embedding width (synthetic world).")] = 32,
    topics: Annotated[int, typer.Option(help="Scene topics, 1-8 (synthetic world).")] = 8,
    test_frac: Annotated[
        float, typer.Option(help="Share of queries held out (split 'test').")
    ] = 0.3,
    clean_rate: Annotated[
        float,
        typer.Option(help="Share of demonstrations with a right answer (synthetic world)."),
    ] = 0.4,
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

        try:
            data = build_world(
                UserSetConfig(
                    path=from_file, out=out, seed=seed, n_demos=demos, test_frac=test_frac
                )
            )
        except (FileNotFoundError, ValueError) as e:
            raise fail(str(e)) from e
        summary("ddai pointer world", data, as_json=as_json)
        return
    from ddai.pipelines.pointer.world import WorldConfig, make_world, write_world

    try:
        cfg = WorldConfig(
            seed=seed,
            n_queries=queries,
            n_demos=600 if demos is None else demos,
            dim=dim,
            n_topics=topics,
            test_frac=test_frac,
            clean_rate=clean_rate,
        )
    except ValueError as e:
        raise fail(str(e)) from e
    w = make_world(cfg)
    paths = write_world(w, out)
    n_test = sum(q["split"] == "test" for q in w.queries)
    data = {
        "out": str(out),
        "queries": len(w.queries),
        "train queries": len(w.queries) - n_test,
        "test queries": n_test,
        "demos": len(w.demos),
        "clean demos": sum(d["clean"] for d in w.demos),
        "dim": cfg.dim,
        "files": [p.name for p in paths.values()],
    }
    summary("ddai pointer world", data, as_json=as_json)


@pointer_app.command("embed")
def embed_cmd(
    world: Annotated[
        Path, typer.Argument(metavar="DIR", help="World folder (queries.jsonl, demos.jsonl).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", metavar="FILE", help="Store to write: .safetensors or .parquet."
        ),
    ],
    k: Annotated[
        int, typer.Option("--k", help="Candidate pool size: each query's K most similar demos.")
    ] = 16,
    embedder: Annotated[
        str,
        typer.Option(
            "--embedder",
            help="'world' (the world's own embeddings) or an Embedder backend name: local (no "
            "key), hash, or a [backends.NAME] table (kind openai: an OpenAI-compatible embedding "
            "server). Rows with images are embedded as image + question when the backend can.",
        ),
    ] = "world",
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            help="USD cap on a paid embedder's calls; past it calls fail with reason max-cost and "
            "nothing is written (rerun to resume: embedded rows are cached).",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Count the embedder's calls and their cost; call nothing."),
    ] = False,
    force: ForceOpt = False,
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Export each query's embedding and its K candidates' embeddings to a store."""
    from ddai.pipelines.backends.base import EmbedError
    from ddai.pipelines.pointer.embed import EmbedConfig, run_embed

    try:
        data = run_embed(
            EmbedConfig(
                world=world,
                out=out,
                k=k,
                embedder=embedder,
                force=force,
                progress=progress and not as_json,
                dry_run=dry_run,
                max_cost=max_cost,
            )
        )
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    except EmbedError as e:  # remote calls failed: exit 1 with the reasons, write nothing
        raise fail(str(e), code=1) from e
    summary("ddai pointer embed" + (" (dry run)" if dry_run else ""), data, as_json=as_json)


@pointer_app.command("gen")
def gen_cmd(
    store: StoreOpt,
    world: WorldOpt,
    model: Annotated[
        Path, typer.Option("--model", help="Pointer checkpoint (usually the SFT one).")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", metavar="FILE", help="Raw records to write (JSONL, one line per query)."
        ),
    ],
    split: Annotated[
        str, typer.Option(help="Queries of this split ('all' for every query).")
    ] = "train",
    num_beams: Annotated[int, typer.Option(help="Beam-search sequences per query.")] = 5,
    temps: Annotated[
        str, typer.Option("--temps", help="Sampling temperatures, comma-separated.")
    ] = "0.7,1.0,1.3",
    n_per_temp: Annotated[int, typer.Option(help="Samples per temperature per query.")] = 2,
    num_random: Annotated[int, typer.Option(help="Uniform random pairs per query.")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of sampling and random pairs.")] = 0,
    vqa: VqaOpt = None,
    metric: MetricOpt = "vqa",
    correct_threshold: ThresholdOpt = DEFAULT_THRESHOLD,
    max_cost: MaxCostOpt = None,
    retry_failed: RetryFailedOpt = False,
    dry_run: DryRunOpt = False,
    force: ForceOpt = False,
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Generate pointer candidates and record every one's VQA answer and correctness.

    Beam search, temperature sampling and random pairs, de-duplicated by unordered pair with
    priority beam > sample > random; raw JSONL, one line per query.
    """
    from ddai.trainer.pointer.generate import GenConfig, ProposalConfig, run_gen

    try:
        cfg = GenConfig(
            store=store,
            world=world,
            model=model,
            out=out,
            proposal=ProposalConfig(
                num_beams=num_beams,
                temperatures=_floats(temps, "--temps"),
                n_per_temp=n_per_temp,
                num_random=num_random,
                seed=seed,
            ),
            split=None if split == "all" else split,
            vqa=vqa,
            metric=metric,
            correct_threshold=correct_threshold,
            force=force,
            progress=progress and not as_json,
            dry_run=dry_run,
        )
        model = _vqa_backend(vqa, max_cost, retry_failed)
        data = _with_failures(run_gen(cfg, vqa_model=model), model)
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    summary("ddai pointer gen" + (" (dry run)" if dry_run else ""), data, as_json=as_json)
    exit_if_calls_failed(data)


@pointer_app.command("process")
def process_cmd(
    raw: Annotated[
        Path, typer.Argument(metavar="FILE", help="Raw records from `ddai pointer gen`.")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            metavar="FILE",
            help="Processed rows to write (.parquet); statistics go beside it.",
        ),
    ],
    alpha: Annotated[float, typer.Option(help="Weight of the quality term.")] = 0.2,
    beta: Annotated[float, typer.Option(help="Weight of the correctness term.")] = 1.0,
    correctness: Annotated[
        str, typer.Option(help="Correctness as '01' (0/1) or 'pm1' (-1/+1).")
    ] = "pm1",
    quality: Annotated[
        str, typer.Option(help="Quality term: none, beam (beam_score) or logprob (logprob_score).")
    ] = "none",
    use_acc_score: Annotated[
        bool, typer.Option(help="Correctness from vqa_acc_score (soft) instead of vqa_correct.")
    ] = False,
    reward_clip: Annotated[float, typer.Option(help="Rewards are clipped to [-clip, clip].")] = 5.0,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Flatten raw records into per-pointer rows with a reward, plus per-method statistics.

    The statistics table (beside --out) has mean correctness and index-selection bias per
    gen_method.
    """
    from ddai.trainer.pointer.data import ProcessConfig, RewardConfig, run_process

    try:
        reward = RewardConfig(
            alpha=alpha,
            beta=beta,
            correctness_mode=correctness,
            quality=quality,
            use_acc_score=use_acc_score,
            clip=reward_clip,
        )
        data = run_process(ProcessConfig(raw=raw, out=out, reward=reward, force=force))
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    summary("ddai pointer process", data, as_json=as_json)


@pointer_app.command("train")
def train_cmd(
    store: StoreOpt,
    out: Annotated[
        Path, typer.Option("--out-dir", metavar="DIR", help="Checkpoint folder to write.")
    ],
    mode: Annotated[
        str | None,
        typer.Option("--mode", help="One phase: sft, rce, grpo or reinforcepp (with --epochs)."),
    ] = None,
    epochs: Annotated[
        int | None, typer.Option(help="Epochs of --mode (default: sft 20, RL 30).")
    ] = None,
    phases: Annotated[
        str | None,
        typer.Option(
            "--phases", help="RL phases in order, e.g. rce:3,grpo:30 (instead of --mode)."
        ),
    ] = None,
    world: Annotated[
        Path | None, typer.Option("--world", help="sft: world folder with sft_labels.jsonl.")
    ] = None,
    data: Annotated[
        Path | None, typer.Option("--data", help="RL: processed rows from `ddai pointer process`.")
    ] = None,
    init: Annotated[
        Path | None, typer.Option("--init", help="Start from this checkpoint (RL: the SFT one).")
    ] = None,
    split: Annotated[
        str, typer.Option(help="sft: train on labeled queries of this split.")
    ] = "train",
    lr: Annotated[
        float | None, typer.Option(help="Adam learning rate (default: sft 3e-3, RL 1e-3).")
    ] = None,
    batch_queries: Annotated[
        int | None, typer.Option(help="Query groups per step (default: sft 32, RL 8).")
    ] = None,
    weight_decay: Annotated[
        float | None, typer.Option(help="L2 weight decay (default: sft 0, RL 1e-2).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of initialization and batch order.")] = 0,
    d_model: Annotated[int, typer.Option(help="Hidden width of a new model.")] = 64,
    scoring: Annotated[
        str, typer.Option(help="Scoring of a new model: bilinear or attention.")
    ] = "bilinear",
    norm: Annotated[
        str, typer.Option(help="Reward normalization within a query: zscore, minmax or none.")
    ] = "zscore",
    adv_clip: Annotated[float, typer.Option(help="Advantages are clipped to [-clip, clip].")] = 5.0,
    clip_eps: Annotated[float, typer.Option(help="PPO ratio clip (grpo, reinforcepp).")] = 0.2,
    kl_coef: Annotated[
        float, typer.Option(help="Weight of the KL penalty against the old policy.")
    ] = 0.0,
    rce_t_start: Annotated[
        float, typer.Option(help="RCE temperature at the phase's first step.")
    ] = 2.0,
    rce_t_end: Annotated[
        float, typer.Option(help="RCE temperature at the phase's last step.")
    ] = 0.5,
    old_logp: Annotated[
        str,
        typer.Option(
            help="π_old of the ratio: stored (logprob_score of the generating model, fixed), or the "
            "policy recomputed at each phase or epoch start (iterated PPO over the fixed data).",
        ),
    ] = "epoch",
    reinforcepp_clip: Annotated[
        bool, typer.Option(help="REINFORCE++ with the clipped ratio (else plain -A·log π).")
    ] = True,
    progress: ProgressOpt = True,
    launch: LaunchOpt = None,
    accelerate_config: AccelerateConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train the pointer selector: SFT from labels, or RL phases on generated data.

    --mode sft learns the labels; --phases rce:3,grpo:30 runs an RCE warm-up, then GRPO (or
    REINFORCE++) from the SFT checkpoint given with --init.
    """
    maybe_relaunch(launch, accelerate_config)
    from ddai.trainer.pointer.train import (
        OptimConfig,
        PointerTrainConfig,
        RLConfig,
        parse_phases,
        run_train,
    )

    if (mode is None) == (phases is None):
        raise fail(
            "give exactly one of --mode (with --epochs) or --phases, e.g. --phases rce:3,grpo:30"
        )
    try:
        plan = (
            parse_phases(phases)
            if phases
            else parse_phases(f"{mode}:{epochs or (20 if mode == 'sft' else 30)}")
        )
        sft = plan[0][0] == "sft"
        cfg = PointerTrainConfig(
            store=store,
            out=out,
            phases=tuple(plan),
            world=world,
            data=data,
            init=init,
            split=split,
            d_model=d_model,
            scoring=scoring,
            optim=OptimConfig(
                lr=lr if lr is not None else (3e-3 if sft else 1e-3),
                batch_queries=batch_queries or (32 if sft else 8),
                weight_decay=weight_decay if weight_decay is not None else (0.0 if sft else 1e-2),
                seed=seed,
            ),
            rl=RLConfig(
                norm=norm,
                adv_clip=adv_clip,
                clip_eps=clip_eps,
                kl_coef=kl_coef,
                rce_t_start=rce_t_start,
                rce_t_end=rce_t_end,
                old_logp=old_logp,
                reinforcepp_clip=reinforcepp_clip,
            ),
            progress=progress and not as_json,
        )
        result = run_train(cfg)
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    summary("ddai pointer train", result, as_json=as_json)


@pointer_app.command("eval")
def eval_cmd(
    store: StoreOpt,
    world: WorldOpt,
    model: Annotated[
        list[str],
        typer.Option(
            "--model",
            metavar="NAME=CHECKPOINT",
            help="NAME=CHECKPOINT, repeatable; the first is the reference (usually sft=...).",
        ),
    ],
    split: Annotated[str, typer.Option(help="Held-out split to evaluate.")] = "test",
    num_beams: Annotated[
        int, typer.Option(help="Beam width of the reference's beam-top-1 selector.")
    ] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the random-pair baseline.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out-dir", metavar="DIR", help="Folder for selections.parquet and summary.parquet."
        ),
    ] = None,
    vqa: VqaOpt = None,
    metric: MetricOpt = "vqa",
    correct_threshold: ThresholdOpt = DEFAULT_THRESHOLD,
    max_cost: MaxCostOpt = None,
    retry_failed: RetryFailedOpt = False,
    dry_run: DryRunOpt = False,
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
) -> None:
    """Held-out VQA accuracy of each selector's pairs, and how the picked indices moved.

    Selectors: each --model's greedy pick, the first model's top beam, the two nearest
    demonstrations, and a random pair.
    """
    from ddai.trainer.pointer.evaluate import EvalConfig, run_eval

    models = []
    for spec in model:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise fail(f"--model {spec!r}: write NAME=CHECKPOINT, e.g. --model sft=runs/sft")
        models.append((name, Path(path)))
    try:
        cfg = EvalConfig(
            store=store,
            world=world,
            models=tuple(models),
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
        model = _vqa_backend(vqa, max_cost, retry_failed)
        _, data = run_eval(cfg, vqa_model=model)
        data = _with_failures(data, model)
    except (FileNotFoundError, ValueError) as e:
        raise fail(str(e)) from e
    summary("ddai pointer eval" + (" (dry run)" if dry_run else ""), data, as_json=as_json)
    exit_if_calls_failed(data)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(pointer_app, name="pointer")
