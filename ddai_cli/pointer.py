"""CLI: ``ddai pointer``: the pointer selector (seed 002), from a synthetic world to evaluation.

world → embed → train --mode sft → gen → process → train --phases rce:3,clipped-group:30 → eval

Each command's flags are its config's fields (``config_flags``; the help is each field's
docstring); the logic is ``ddai.pipelines.pointer``'s and ``ddai.trainer.pointer``'s. A flag whose
text is parsed into its field (``--temps``, ``--model NAME=CHECKPOINT``) says how (``parse``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from ddai.cli.app import COMMANDS
from ddai.cli.common import (
    JsonOpt,
    ProgressOpt,
    RetryFailedOpt,
    bad_input_exits,
    exit_if_calls_failed,
    fail,
    summary,
)
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.running import device_options, maybe_relaunch, parse_floats
from ddai.pipelines.pointer.configs import EmbedConfig, PointerWorldConfig
from ddai.trainer.pointer.config import (
    EvalConfig,
    GenConfig,
    PointerTrainConfig,
    ProcessConfig,
    ProposalConfig,
    RewardConfig,
    RLConfig,
    TrainSchedule,
    parse_models,
)

pointer_app = typer.Typer(
    help=COMMANDS["pointer"].help,
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _with_vqa(run: Callable[..., Any], cfg: Any, retry_failed: bool) -> dict[str, Any]:
    """``run(cfg, vqa_model=...)``'s summary (``run_gen``, or ``run_eval``'s second value) with
    the VQA calls that failed, by reason (the command then exits 1)."""
    from ddai.pipelines.backends.usage import FAILED_CALLS, failed_calls
    from ddai.pipelines.pointer.vqa import resolve_vqa

    model = resolve_vqa(cfg.vqa, max_cost=cfg.max_cost, retry_failed=retry_failed)
    out = run(cfg, vqa_model=model)
    data = out[1] if isinstance(out, tuple) else out
    failed = failed_calls(model.usage()) if hasattr(model, "usage") else {}
    return {**data, FAILED_CALLS: failed} if failed else data


def _vqa_summary(title: str, data: dict[str, Any], *, dry_run: bool, as_json: bool) -> None:
    """The closing summary of a command that called the VQA model; exit 1 if calls failed."""
    summary(title + (" (dry run)" if dry_run else ""), data, as_json=as_json)
    exit_if_calls_failed(data)


VQA_FIELDS = ("vqa", "metric", "correct_threshold", "max_cost", "dry_run")
"""``VqaStep``'s flags, the same in ``gen`` and ``eval``."""
INPUTS = {"store": "--store", "world": "--world"}
OUT = {"decl": ("--out", "-o"), "metavar": "<file>"}

WORLD_FLAGS = config_flags(
    PointerWorldConfig,
    {
        "out": {"argument": True, "metavar": "DIR"},
        "seed": None,
        "from_file": {"decl": "--from", "metavar": "<file>"},
        "n_queries": "--queries",
        "n_demos": "--demos",
        **dict.fromkeys(("dim",)),
        "n_topics": "--topics",
        **dict.fromkeys(("test_frac", "clean_rate")),
    },
)
EMBED_FLAGS = config_flags(
    EmbedConfig,
    {
        "out": OUT,
        "world": {"argument": True, "metavar": "DIR"},
        "k": "--k",
        **dict.fromkeys(("embedder", "max_cost", "dry_run", "force")),
    },
)
GEN_FLAGS = config_flags(
    GenConfig,
    {
        "out": OUT,
        **INPUTS,
        "model": "--model",
        "split": None,
        **dict.fromkeys((*VQA_FIELDS, "force")),
    },
)
PROPOSAL_FLAGS = config_flags(
    ProposalConfig,
    {
        **dict.fromkeys(("num_beams", "n_per_temp", "num_random", "seed")),
        "temperatures": {
            "decl": "--temps",
            "type": str,
            "default": ",".join(f"{t:g}" for t in default_of(ProposalConfig, "temperatures")),
            "parse": lambda text: tuple(parse_floats(text, "--temps")),
        },
    },
)
PROCESS_FLAGS = config_flags(
    ProcessConfig, {"out": OUT, "raw": {"argument": True, "metavar": "FILE"}, "force": None}
)
REWARD_FLAGS = config_flags(
    RewardConfig,
    {
        "alpha": None,
        "beta": None,
        "correctness_mode": "--correctness",
        "quality": None,
        "use_acc_score": "--use-acc-score/--no-use-acc-score",
        "clip": "--reward-clip",
    },
)
TRAIN_FLAGS = config_flags(
    PointerTrainConfig,
    {
        "store": "--store",
        "out": {"decl": "--out-dir", "metavar": "<dir>"},
        **{name: f"--{name}" for name in ("world", "data", "init")},
        **dict.fromkeys(("split", "d_model", "scoring")),
    },
)
SCHEDULE_FLAGS = config_flags(
    TrainSchedule,
    {
        "mode": "--mode",
        "epochs": None,
        "phases": "--phases",
        **dict.fromkeys(("lr", "batch_queries", "weight_decay", "seed")),
    },
)
RL_FLAGS = config_flags(
    RLConfig,
    {
        **dict.fromkeys(("norm", "adv_clip", "clip_eps", "kl_coef", "rce_t_start", "rce_t_end")),
        "old_logp": None,
        "reinforcepp_clip": "--reinforcepp-clip/--no-reinforcepp-clip",
    },
)
EVAL_FLAGS = config_flags(
    EvalConfig,
    {
        "models": {
            "decl": "--model",
            "metavar": "<name=checkpoint>",
            "type": list[str],
            "parse": parse_models,
        },
        **INPUTS,
        **dict.fromkeys(("split", "num_beams", "seed")),
        "out": {"decl": "--out-dir", "metavar": "<dir>"},
        **dict.fromkeys(VQA_FIELDS),
    },
)


@pointer_app.command(
    "world", short_help="Make (or load) a synthetic VQA world for the pointer selector."
)
@with_groups({"settings": WORLD_FLAGS})
def world_cmd(*, settings: dict[str, Any], as_json: JsonOpt = False) -> None:
    """Make a synthetic VQA world with deliberately suboptimal SFT labels, or load yours (--from).

    Queries with 10 human answers, a demonstration pool, embeddings, and labels that pick the two
    most similar demonstrations (blind to whether their answers are right). With --from, your
    rows become queries and demonstrations (--seed, --demos, --test-frac split them when the file
    has no split column); embed them with --embedder local.
    """
    from ddai.pipelines.pointer.user_set import run_pointer_world

    with bad_input_exits():
        data = run_pointer_world(PointerWorldConfig(**settings))
    summary("ddai pointer world", data, as_json=as_json)


@pointer_app.command("embed", short_help="Export query and candidate embeddings to a store.")
@with_groups({"settings": EMBED_FLAGS})
def embed_cmd(
    *,
    settings: dict[str, Any],
    progress: ProgressOpt = default_of(EmbedConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Export each query's embedding and its K candidates' embeddings to a store."""
    from ddai.pipelines.backends.base import EmbedError
    from ddai.pipelines.pointer.embed import run_embed

    with bad_input_exits():
        cfg = EmbedConfig(**settings, progress=progress and not as_json)
        try:
            data = run_embed(cfg)
        except EmbedError as e:  # remote calls failed: exit 1 with the reasons, write nothing
            raise fail(str(e), code=1) from e
    summary("ddai pointer embed" + (" (dry run)" if cfg.dry_run else ""), data, as_json=as_json)


@pointer_app.command("gen", short_help="Generate pointer candidates and record their VQA answers.")
@with_groups({"settings": GEN_FLAGS, "proposal": PROPOSAL_FLAGS})
def gen_cmd(
    *,
    settings: dict[str, Any],
    proposal: dict[str, Any],
    retry_failed: RetryFailedOpt = False,
    progress: ProgressOpt = default_of(GenConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Generate pointer candidates and record every one's VQA answer and correctness.

    Beam search, temperature sampling and random pairs, de-duplicated by unordered pair with
    priority beam > sample > random; raw JSONL, one line per query.
    """
    from ddai.trainer.pointer.generate import run_gen

    with bad_input_exits():
        cfg = GenConfig(
            **settings,
            proposal=ProposalConfig(**proposal),
            progress=progress and not as_json,
        )
        data = _with_vqa(run_gen, cfg, retry_failed)
    _vqa_summary("ddai pointer gen", data, dry_run=cfg.dry_run, as_json=as_json)


@pointer_app.command(
    "process", short_help="Flatten raw records into per-pointer rows with a reward."
)
@with_groups({"settings": PROCESS_FLAGS, "reward": REWARD_FLAGS})
def process_cmd(
    *,
    settings: dict[str, Any],
    reward: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Flatten raw records into per-pointer rows with a reward, plus per-method statistics.

    The statistics table (beside --out) has mean correctness and index-selection bias per
    gen_method.
    """
    from ddai.trainer.pointer.data import run_process

    with bad_input_exits():
        cfg = ProcessConfig(**settings, reward=RewardConfig(**reward))
        data = run_process(cfg)
    summary("ddai pointer process", data, as_json=as_json)


@pointer_app.command("train", short_help="Train the pointer selector.")
@with_groups(
    {
        "settings": TRAIN_FLAGS,
        "schedule": SCHEDULE_FLAGS,
        "rl": RL_FLAGS,
        "device": device_options,
    }
)
def train_cmd(
    *,
    settings: dict[str, Any],
    schedule: dict[str, Any],
    rl: dict[str, Any],
    progress: ProgressOpt = default_of(PointerTrainConfig, "progress"),
    device: dict[str, Any],
    as_json: JsonOpt = False,
) -> None:
    """Train the pointer selector: SFT from labels, or RL phases on generated data.

    --mode sft learns the labels; --phases rce:3,clipped-group:30 runs an RCE warm-up, then the
    clipped group advantage (or REINFORCE++) from the SFT checkpoint given with --init.
    """
    maybe_relaunch(**device)
    from ddai.trainer.pointer.train import run_train

    with bad_input_exits():
        plan = TrainSchedule(**schedule)
        phases = plan.plan()
        cfg = PointerTrainConfig(
            **settings,
            phases=phases,
            optim=plan.optim(phases),
            rl=RLConfig(**rl),
            progress=progress and not as_json,
        )
        result = run_train(cfg)
    summary("ddai pointer train", result, as_json=as_json)


@pointer_app.command("eval", short_help="Held-out VQA accuracy of each selector's pairs.")
@with_groups({"settings": EVAL_FLAGS})
def eval_cmd(
    *,
    settings: dict[str, Any],
    retry_failed: RetryFailedOpt = False,
    progress: ProgressOpt = default_of(EvalConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Held-out VQA accuracy of each selector's pairs, and how the picked indices moved.

    Selectors: each --model's greedy pick, the first model's top beam, the two nearest
    demonstrations, and a random pair.
    """
    from ddai.trainer.pointer.evaluate import run_eval

    with bad_input_exits():
        cfg = EvalConfig(**settings, progress=progress and not as_json)
        data = _with_vqa(run_eval, cfg, retry_failed)
    _vqa_summary("ddai pointer eval", data, dry_run=cfg.dry_run, as_json=as_json)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(pointer_app, name="pointer")
