"""Option groups of the training commands, declared once: ``ddai train sft``/``grpo``/``ppo``/
``collect``/``value``/``value-sft`` and ``ddai pointer train`` build their signatures from these.

Episode, reward and backend defaults are read from the trainer's shared bases
(``ddai.trainer.search.config``: ``EPISODE``, ``REWARD``, ``BACKENDS`` below) and every other
default from its command's config dataclass (``default_of``), so a flag's default has one
definition; ``tests/cli/test_cli_train_defaults.py`` checks that every training command's defaults
equal its dataclass's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import fail
from ddai.trainer.search.config import EpisodeBackends, EpisodeConfig, RewardOverrides

EPISODE = EpisodeConfig()
REWARD = RewardOverrides()
BACKENDS = EpisodeBackends()


def default_of(config_cls: type, name: str) -> Any:
    """The default of ``config_cls``'s field ``name`` (a dataclass), for a flag's default."""
    for f in dataclasses.fields(config_cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{config_cls.__name__} has no field {name!r} with a default")


ModelOpt = Annotated[
    str,
    typer.Option(
        "--model", help="Starting model: a local folder or a hub id (loaded with from_pretrained)."
    ),
]
OutOpt = Annotated[
    Path, typer.Option("--out-dir", help="Output folder: checkpoints, metrics and the final model.")
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", help="TOML/YAML file of TRL config knobs (flat, or under a [trl] table)."
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Any TRL config knob as KEY=VALUE (JSON values); repeatable; wins over all.",
    ),
]
ReportOpt = Annotated[
    str | None,
    typer.Option(
        "--report-to",
        help="Metric sinks, comma-separated: jsonl (default) or csv file, plus integrations such as "
        "tensorboard; `none` for nothing.",
    ),
]
ResumeOpt = Annotated[
    bool, typer.Option("--resume", help="Continue from the last checkpoint in --out-dir.")
]
StepsOpt = Annotated[
    int | None, typer.Option("--max-steps", help="Stop after this many optimizer steps.")
]
LrOpt = Annotated[float | None, typer.Option("--lr", help="Learning rate.")]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype",
        help="Weight dtype: float32 (default; a GPU still computes in bf16 autocast), bfloat16, "
        "float16 or auto. `train grpo` / `train ppo` refuse half-precision weights that --lr is "
        "too small to change (pure bf16 at lr 1e-6); add --lora to train a float32 adapter.",
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed.")]
SaveOpt = Annotated[int | None, typer.Option("--save-steps", help="Checkpoint every N steps.")]
LogStepsOpt = Annotated[
    int | None, typer.Option("--logging-steps", help="Log metrics every N steps.")
]

# LoRA options shared by `ddai train grpo` and `ddai train ppo`.
LoraOpt = Annotated[
    bool,
    typer.Option(
        "--lora",
        help="Train a LoRA adapter (peft, float32) on frozen weights, e.g. a 7B policy in bfloat16 "
        "on one 80 GB GPU; the adapter goes to <out>/adapter, the merged model to <out>.",
    ),
]
LoraROpt = Annotated[int, typer.Option("--lora-r", help="LoRA rank.")]
LoraAlphaOpt = Annotated[int, typer.Option("--lora-alpha", help="LoRA alpha.")]
LoraTargetOpt = Annotated[
    str, typer.Option("--lora-target", help="LoRA target modules (peft syntax).")
]
RepetitionPenaltyOpt = Annotated[
    float | None,
    typer.Option(
        "--repetition-penalty",
        help="Sampling repetition penalty (default 1: none). Applied explicitly, and the returned "
        "log-probs are of the penalized distribution; the checkpoint's own generation_config "
        "never applies.",
    ),
]

# Reward and episode options shared by `ddai train grpo` and `ddai train ppo`.
RewardOpt = Annotated[
    str,
    typer.Option(
        "--reward",
        help="Reward preset: curriculum (0.8 judge + 0.2 NDCG, gated), ddai-phase1 (0.1 + 0.9 NDCG if format passes) or judge-only.",
    ),
]
WJudgeOpt = Annotated[
    float | None, typer.Option("--w-judge", help="Judge weight (overrides the preset).")
]
WNdcgOpt = Annotated[float | None, typer.Option("--w-ndcg", help="NDCG weight.")]
WFormatOpt = Annotated[float | None, typer.Option("--w-format", help="Format weight.")]
BiasOpt = Annotated[
    float | None, typer.Option("--reward-bias", help="Constant added before the gate.")
]
GateOpt = Annotated[
    bool | None,
    typer.Option("--gate/--no-gate", help="Zero the reward when the format check fails."),
]
MaxTurnsOpt = Annotated[int, typer.Option("--max-turns", help="Turns per episode.")]
SearchKOpt = Annotated[int, typer.Option("--search-k", help="Search results fetched per query.")]
ForceCompletionOpt = Annotated[
    bool, typer.Option(help="Inject DDAI's forced completion at --max-turns.")
]
RestrictToDocOpt = Annotated[bool, typer.Option(help="Search only the question's own document.")]
SkipPreflightOpt = Annotated[
    bool,
    typer.Option(
        "--skip-preflight",
        help="Train without the preflight (golden pages in the corpus and returned by search, chat "
        "template renders the tags, sampled episodes complete and score); recorded in the run's "
        "run_config.json.",
    ),
]
PreflightPromptsOpt = Annotated[
    int,
    typer.Option(
        "--preflight-prompts",
        min=1,
        help="Prompts whose n_agent episodes the preflight samples (4x as many questions are "
        "searched).",
    ),
]
MaxTurnTokensOpt = Annotated[
    int, typer.Option("--max-turn-tokens", help="New tokens per policy turn.")
]
LaunchOpt = Annotated[
    int | None,
    typer.Option(
        "--launch",
        help="Run this command on N processes under `accelerate launch` (GPUs, or gloo on CPU); "
        "--batch-size stays per process, so the global batch is N × --batch-size.",
    ),
]
AccelerateConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--accelerate-config",
        help="accelerate config file for --launch (configs/accelerate/{ddp,zero2,zero3,fsdp}.yaml "
        "or your own). Default: plain data parallel.",
    ),
]

# Episode budgets and backends shared by `ddai train grpo`, `ppo` and `collect`.
MaxCompletionTokensOpt = Annotated[
    int, typer.Option("--max-completion-tokens", help="Token budget of a whole rollout.")
]
ObsMaxTokensOpt = Annotated[
    int, typer.Option("--obs-max-tokens", help="Observation text budget in tokens.")
]
GeneratorOpt = Annotated[
    str | None, typer.Option("--generator", help="Frozen generator backend name.")
]
JudgeOpt = Annotated[str | None, typer.Option("--judge", help="Judge backend name.")]
SearchOpt = Annotated[
    str | None,
    typer.Option(
        "--search",
        help="Search backend name from ddai.toml (default: local BM25 over --corpus); a "
        "`search-http` backend queries a retrieval service, one batched request per turn.",
    ),
]
RewardTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--reward-timeout", help="Seconds to wait for streamed judge results; late groups score 0."
    ),
]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Use only the first N prompts.")]

# Value-head options `ddai train ppo` shares (the value commands read theirs from
# ``ddai.trainer.value.config``).
ValueSeedOpt = Annotated[
    int, typer.Option("--seed", help="Random seed (sampling, split, head init).")
]
ObsOpt = Annotated[
    int,
    typer.Option("--obs-max-tokens", help="Observation text budget in tokens (as in training)."),
]


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
