"""Option groups of the training commands, declared once: ``ddai train sft``/``grpo``/``ppo``/
``collect``/``value``/``value-sft`` and ``ddai pointer train`` build their signatures from these.

Every default is read from a config dataclass (``default_of``), so a flag's default has one
definition; ``tests/cli/test_cli_train_defaults.py`` checks that every training command's defaults
equal its dataclass's. The episode, reward and backend flags of ``train grpo``/``ppo``/``collect``
are three groups (``episode_options``, ``reward_options``, ``backend_options``) that build the
nested configs of ``ddai.trainer.episode.config``, and ``lora_flags`` the LoRA fields of a run
config; ``run_flags`` (``--model``, ``--out-dir``, ``--dtype``, ``--seed``), ``device_options``
(``--launch``, ``--accelerate-config``), ``trl_flags`` (``train sft``/``grpo``'s TRL knobs) and
``preflight_flags`` are the flags several training commands spell the same, declared once.
``ddai_cli/flags.py``'s ``with_groups`` puts a group's flags into a command's signature and hands
the command what it builds, and its ``config_flags`` makes the flags a command reads straight
from its config (type, default, and help from the field's docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ddai.cli.common import check_run_ids, fail
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.trainer.episode.config import EpisodeBackends, EpisodeConfig, RewardOverrides

MODEL_HELP = "Starting model: a local folder or a hub id (loaded with from_pretrained)."
OUT_HELP = "Output folder: checkpoints, metrics and the final model."
DTYPE_HELP = (
    "Weight dtype: float32 (default; a GPU still computes in bf16 autocast), bfloat16, float16 "
    "or auto. `train grpo` / `train ppo` refuse half-precision weights that --lr is too small to "
    "change (pure bf16 at lr 1e-6); add --lora to train a float32 adapter."
)
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="<key=value>",
        help="Any TRL config knob as KEY=VALUE (JSON values); repeatable; wins over all.",
    ),
]
RepetitionPenaltyOpt = Annotated[
    float | None,
    typer.Option(
        "--repetition-penalty",
        help="Sampling repetition penalty (default 1: none). Applied explicitly, and the sampled "
        "log-probs and the loss's are both of the penalized distribution (on-policy); the "
        "checkpoint's own generation_config never applies.",
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
        "--reward-timeout",
        help="Seconds to wait for a group's streamed judge results; a late group's rollouts are "
        "unscorable: reward null in the log, left out of the advantages (counted as unscorable).",
    ),
]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Use only the first N prompts.")]

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


# The inputs of the episode commands (`ddai train grpo`, `ppo`, `collect`).
PromptDataOpt = Annotated[
    Path,
    typer.Option(
        "--data",
        help="Prompts in verl's RL parquet shape (id, prompt, file_name, reference_page, "
        "reward_model, extra_info).",
    ),
]
GenerateViaOpt = Annotated[
    str | None,
    typer.Option(
        "--generate-via",
        help="Generate the policy's turns through this OpenAI-compatible server: a "
        "[backends.NAME] table of kind openai in ddai.toml (base_url, model). Default: the "
        "local --model.",
    ),
]
PolicyDtypeOpt = Annotated[
    str, typer.Option("--dtype", help="Local policy dtype: float32 (CPU), bfloat16, ...")
]
CorpusOpt = Annotated[
    Path, typer.Option("--corpus", help="pages.parquet (or its folder) to search and crop.")
]


def require_inputs(data: Path, corpus: Path) -> None:
    """Exit 2 naming ``--data`` or ``--corpus`` when it does not exist."""
    for name, path in (("--data", data), ("--corpus", corpus)):
        if not path.exists():
            raise fail(f"{name} {path} not found; make fixture data with `ddai fixtures make OUT`")


# ---------------------------------------------------------------- the nested configs' groups


def episode_options(
    max_turns: MaxTurnsOpt = default_of(EpisodeConfig, "max_turns"),
    search_k: SearchKOpt = default_of(EpisodeConfig, "search_k"),
    force_completion: ForceCompletionOpt = default_of(EpisodeConfig, "force_completion"),
    restrict_to_doc: RestrictToDocOpt = default_of(EpisodeConfig, "restrict_to_doc"),
    max_turn_tokens: MaxTurnTokensOpt = default_of(EpisodeConfig, "max_turn_tokens"),
    max_completion_tokens: MaxCompletionTokensOpt = default_of(
        EpisodeConfig, "max_completion_tokens"
    ),
    obs_max_tokens: ObsMaxTokensOpt = default_of(EpisodeConfig, "obs_max_tokens"),
) -> EpisodeConfig:
    """The episode flags, as a command's ``episode`` (``EpisodeConfig``)."""
    return EpisodeConfig(
        max_turns=max_turns,
        search_k=search_k,
        force_completion=force_completion,
        restrict_to_doc=restrict_to_doc,
        max_turn_tokens=max_turn_tokens,
        max_completion_tokens=max_completion_tokens,
        obs_max_tokens=obs_max_tokens,
    )


def reward_options(
    reward: RewardOpt = default_of(RewardOverrides, "reward"),
    w_judge: WJudgeOpt = default_of(RewardOverrides, "w_judge"),
    w_ndcg: WNdcgOpt = default_of(RewardOverrides, "w_ndcg"),
    w_format: WFormatOpt = default_of(RewardOverrides, "w_format"),
    bias: BiasOpt = default_of(RewardOverrides, "bias"),
    gate: GateOpt = default_of(RewardOverrides, "gate"),
) -> RewardOverrides:
    """The reward flags, as a command's ``rewards`` (``RewardOverrides``)."""
    return RewardOverrides(
        reward=reward, w_judge=w_judge, w_ndcg=w_ndcg, w_format=w_format, bias=bias, gate=gate
    )


def backend_options(
    search: SearchOpt = default_of(EpisodeBackends, "search"),
    generator: GeneratorOpt = default_of(EpisodeBackends, "generator"),
    judge: JudgeOpt = default_of(EpisodeBackends, "judge"),
    reward_timeout: RewardTimeoutOpt = default_of(EpisodeBackends, "reward_timeout"),
) -> EpisodeBackends:
    """The backend flags, as a command's ``backends`` (``EpisodeBackends``)."""
    return EpisodeBackends(
        search=search, generator=generator, judge=judge, reward_timeout=reward_timeout
    )


EPISODE_GROUPS: dict[str, Callable[..., Any]] = {
    "rewards": reward_options,
    "episode": episode_options,
    "backends": backend_options,
}
"""The groups of the episode commands, by the parameter (and run-config field) they fill."""


@with_groups(EPISODE_GROUPS)
def episode_settings(
    *, rewards: RewardOverrides, episode: EpisodeConfig, backends: EpisodeBackends
) -> dict[str, Any]:
    """The three groups as one: a run config's nested settings, as keywords (``**nested``)."""
    return {"episode": episode, "rewards": rewards, "backends": backends}


def lora_flags(config_cls: type) -> Callable[..., dict[str, Any]]:
    """The LoRA flags of ``ddai train sft``/``grpo``/``ppo`` as a group over ``config_cls``'s
    ``lora``, ``lora_r``, ``lora_alpha`` and ``lora_target`` (defaults from that config)."""
    return config_flags(
        config_cls,
        {
            "lora": {
                "help": "Train a float32 LoRA adapter (peft) on frozen weights, under every "
                "accelerate config (ZeRO-3 included), e.g. a 7B policy in bfloat16 on one 80 GB "
                "GPU; the adapter goes to <out>/adapter, the merged model to <out>: merged in "
                "float32 (a bfloat16 merge at lr 1e-6 would round the update away) and checked "
                "against the trained model's logits."
            },
            "lora_r": {"help": "LoRA rank."},
            "lora_alpha": {"help": "LoRA alpha."},
            "lora_target": {"help": "LoRA target modules (peft syntax)."},
        },
    )


def run_id_option(prefix: str) -> Any:
    """``--run-id`` of a training command whose default run id is ``<prefix>_<timestamp>``."""
    return Annotated[
        str | None,
        typer.Option(
            "--run-id",
            callback=check_run_ids,
            help=f"Run id of the rollout log. Default: {prefix}_<timestamp>.",
        ),
    ]


# ---------------------------------------------------------------- the run configs' groups


def device_options(launch: LaunchOpt = None, accelerate_config: AccelerateConfigOpt = None) -> dict:
    """The device flags of the training commands, as a command's ``device``: where the run goes
    (``maybe_relaunch(**device)`` reruns the command under ``accelerate launch``)."""
    return {"launch": launch, "accelerate_config": accelerate_config}


def run_flags(
    config_cls: type,
    *,
    model: str | None = MODEL_HELP,
    out: str | None = OUT_HELP,
    dtype: str | None = DTYPE_HELP,
    seed: str | None = "Random seed.",
) -> Callable[..., dict[str, Any]]:
    """``--model``, ``--out-dir``, ``--dtype`` and ``--seed`` as a group over ``config_cls``'s
    ``model``, ``output_dir``, ``dtype`` and ``seed`` (type and default from the config): each
    help as given, None for the field's docstring."""
    helps = {"model": model, "output_dir": out, "dtype": dtype, "seed": seed}
    return config_flags(
        config_cls,
        {
            name: {"help": text} | ({"decl": "--out-dir"} if name == "output_dir" else {})
            for name, text in helps.items()
        },
    )


def trl_flags(config_cls: type) -> Callable[..., dict[str, Any]]:
    """The TRL run knobs of ``ddai train sft``/``grpo`` as a group over ``config_cls``'s fields:
    steps, learning rate, the TRL config file, metric sinks, checkpointing and resuming."""
    return config_flags(
        config_cls,
        {
            "max_steps": {"help": "Stop after this many optimizer steps."},
            "learning_rate": {"decl": "--lr", "help": "Learning rate."},
            "config_file": {
                "decl": "--config",
                "help": "TOML/YAML file of TRL config knobs (flat, or under a [trl] table).",
            },
            "report_to": {
                "help": "Metric sinks, comma-separated: jsonl (default) or csv file, plus "
                "integrations such as tensorboard; `none` for nothing."
            },
            "save_steps": {"help": "Checkpoint every N steps."},
            "logging_steps": {"help": "Log metrics every N steps."},
            "resume": {"help": "Continue from the last checkpoint in --out-dir."},
        },
    )


def preflight_flags(config_cls: type) -> Callable[..., dict[str, Any]]:
    """``--skip-preflight`` and ``--preflight-prompts`` of ``ddai train grpo``/``ppo``/``collect`` as a group
    over ``config_cls``'s ``skip_preflight`` and ``preflight_prompts``."""
    return config_flags(
        config_cls,
        {
            "skip_preflight": {
                "help": "Run without the preflight (golden pages in the corpus and returned by "
                "search, pages the policy and the generator can read, chat template renders the "
                "tags, sampled episodes complete and score); a training run records it in its "
                "run_config.json."
            },
            "preflight_prompts": {
                "min": 1,
                "help": "Prompts whose n_agent episodes the preflight samples (4x as many "
                "questions are searched).",
            },
        },
    )
