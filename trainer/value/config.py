"""The value-head commands' configs (seed 004), one definition of each shared field.

``ValueRowsConfig`` is what every value command reads from the rollout log (which runs, how a
rollout becomes tokens); ``ValueFitConfig`` adds what both trainings share (pair sampling, the
hybrid value loss, optimisation); ``ValueTrainConfig`` (``ddai train value``), ``ValueSFTConfig``
(``ddai train value-sft``) and ``ValueScoreConfig`` (``ddai value score``) add their own. Each
field's docstring is its flag's help and its default the flag's default (``ddai_cli/value*.py``
read both). Torch-free, so that the CLI can read these without loading a model library.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddai.pipelines.records.success import SUCCESS_THRESHOLD

TARGETS = ("success", "reward")
"""Monte-Carlo targets of a rollout: success (1/0) or the logged reward."""
DEFAULT_SPLIT_SEED = 0
"""The held-out split's seed when none is given or recorded (both value trainings)."""
DEFAULT_VAL_FRACTION = 0.2
"""The held-out share of prompts when none is given or recorded."""


def parse_bins(edges: Sequence[float], weights: Sequence[float]) -> None:
    """Check difficulty bins: edges strictly increasing inside (0, 1), one weight per bin, ≥ 0."""
    if len(weights) != len(edges) + 1:
        raise ValueError(
            f"--bin-weights needs one weight per bin: {len(edges)} edge(s) make {len(edges) + 1} "
            f"bins, got {len(weights)} weight(s)"
        )
    if any(not 0 < e < 1 for e in edges) or any(b <= a for a, b in itertools.pairwise(edges)):
        raise ValueError(f"--bin-edges must increase strictly inside (0, 1), got {list(edges)}")
    if any(w < 0 for w in weights) or not any(w > 0 for w in weights):
        raise ValueError(f"--bin-weights must be >= 0 with one > 0, got {list(weights)}")


def _at_least_one(cfg: object, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(cfg, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")


@dataclass(frozen=True)
class TDWeightConfig:
    """Seed 004's token weights (``sft_math``): the defaults ``ValueSFTConfig``'s flags take."""

    beta: float = 1.0
    weight_clip_min: float = 0.1
    weight_clip_max: float = 2.0
    gamma: float = 1.0
    lam: float = 1.0

    def check(self) -> None:
        """Fail on settings the formula cannot use; messages name the flag."""
        if self.beta <= 0:
            raise ValueError(f"--beta {self.beta}: the temperature must be > 0")
        if not 0 <= self.weight_clip_min <= self.weight_clip_max:
            raise ValueError(
                f"--weight-clip-min {self.weight_clip_min} / --weight-clip-max "
                f"{self.weight_clip_max}: need 0 <= min <= max"
            )
        for name in ("gamma", "lam"):
            v = getattr(self, name)
            if not 0 <= v <= 1:
                raise ValueError(f"--{name} {v}: must lie in [0, 1]")


@dataclass(kw_only=True)
class ValueRowsConfig:
    """Rollouts from the log store as the value head reads them."""

    logs: Path | None = None
    """Log store folder (default: the workspace's)."""
    runs: list[str] | None = None
    """Runs to read (default: every run in the store)."""
    data: Path | None = None
    """Prompt set (verl RL parquet) to rebuild each rollout's prompt exactly. Default: the bundled
    Searcher system prompt and the logged question."""
    system_prompt: Path | None = None
    """Text file of the Searcher system prompt the policy saw (without --data). Default: the
    bundled DDAI prompt."""
    success_threshold: float = SUCCESS_THRESHOLD
    """A rollout succeeds when judge_score >= this and format_ok is not false."""
    max_length: int = 2048
    """Tokens per rollout (prompt + completion); longer ones are cut."""
    obs_max_tokens: int = 256
    """Observation text budget in tokens (as in training)."""
    dtype: str = "float32"
    """Weight dtype: float32, bfloat16, float16 or auto."""
    progress: bool = True
    """Show progress bars (on stderr)."""

    def check(self) -> None:
        """Fail on bad settings before any model is loaded; messages name the flag."""
        if self.data is not None and not Path(self.data).exists():
            raise FileNotFoundError(f"--data {self.data}: no such prompt set (a verl RL parquet)")
        if self.system_prompt is not None and not Path(self.system_prompt).is_file():
            raise FileNotFoundError(f"--system-prompt {self.system_prompt}: no such text file")
        _at_least_one(self, ("max_length",))
        from ddai.trainer.modeling import DTYPES  # torch-free

        if self.dtype not in DTYPES:  # before the log is read and a model loads
            raise ValueError(f"--dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")


@dataclass(kw_only=True)
class ValueFitConfig(ValueRowsConfig):
    """What ``train value`` and ``train value-sft`` share: success/failure pairs of one prompt
    (by difficulty-bin weight when bins are given), the hybrid value loss, the optimiser."""

    trunk_lr: float = 1e-5
    """Learning rate of the trained trunk layers."""
    head_lr: float = 1e-4
    """Learning rate of the value head."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    pairwise_coef: float = 1.0
    """Weight of the pairwise ranking loss (0: MC targets alone); seed 004's hybrid: 1.0."""
    mc_coef: float = 0.5
    """Weight of the Monte-Carlo tokenwise MSE; seed 004's hybrid: 0.5."""
    target: str = "success"
    """MC target: success (1/0) or the logged reward."""
    max_pairs_per_problem: int = 25
    """Most success/failure pairs drawn per prompt."""
    bin_edges: list[float] = field(default_factory=list)
    """Success-rate bin edges for difficulty weighting, e.g. 0.25,0.75 (default: uniform pairs)."""
    bin_weights: list[float] = field(default_factory=list)
    """Share of sampled pairs per bin, one per bin, e.g. 0.4,0.3,0.3."""
    val_fraction: float = DEFAULT_VAL_FRACTION
    """Share of prompts held out for evaluation."""
    split_seed: int = DEFAULT_SPLIT_SEED
    """Seed of the held-out prompt split, apart from --seed: `train value` and `value-sft` hold
    out the same prompts for the same rows and split seed (recorded in split.json)."""
    batch_size: int = 8
    """Pairs per step and process (rollouts with --pairwise-coef 0)."""
    max_steps: int = 200
    """Optimizer steps."""
    eval_steps: int = 50
    """Evaluate the held-out prompts every N steps."""
    eval_batch_size: int = 16
    """Rollouts per forward pass of an evaluation."""
    grad_accum: int = 1
    """Micro-batches of --batch-size pairs accumulated per optimizer step."""
    seed: int = 0
    """Random seed (pair draws, head init); the held-out split has its own (--split-seed)."""
    include_incomplete: bool = False
    """Train on rollouts flagged turns_incomplete too (a turn lost from the log: their tokens are
    not what the policy saw, their outcome is). Default: left out; counted either way."""

    def check(self) -> None:
        super().check()
        if self.target not in TARGETS:
            raise ValueError(f"--target {self.target!r}: use one of {', '.join(TARGETS)}")
        if self.pairwise_coef < 0 or self.mc_coef < 0 or not (self.pairwise_coef or self.mc_coef):
            raise ValueError("--pairwise-coef and --mc-coef must be >= 0 and not both 0")
        if self.val_fraction is not None and not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"--val-fraction must be in [0, 1), got {self.val_fraction}")
        _at_least_one(
            self,
            ("batch_size", "max_steps", "eval_steps", "eval_batch_size", "grad_accum"),
        )
        if self.bin_edges or self.bin_weights:
            parse_bins(self.bin_edges, self.bin_weights)


@dataclass
class ValueTrainConfig(ValueFitConfig):
    """One value-head run; every field has a flag in ``ddai train value``."""

    model: str
    """Causal LM folder or hub id (a fresh head on its trunk), or a value checkpoint to continue."""
    output_dir: Path
    """Output folder: the checkpoint and metrics.jsonl."""
    head: str | None = None
    """Value head: linear (hidden → 1) or mlp (hidden → 512 → 256 → 1, dropout). Default: linear,
    or the checkpoint's."""
    unfreeze: int | None = None
    """Top trunk layers that train; 0: the head alone, on detached hidden states. Default: 2, or
    the checkpoint's."""
    dropout: float | None = None
    """Dropout of the mlp head (a linear head has none). Default: 0.1, or the checkpoint's."""
    grad_clip: float = 1.0
    """Max gradient norm (0: off)."""

    def check(self) -> None:
        super().check()
        if self.head is not None and self.head not in ("linear", "mlp"):
            raise ValueError(f"--head {self.head!r}: use linear or mlp")
        if self.unfreeze is not None and self.unfreeze < 0:
            raise ValueError(f"--unfreeze {self.unfreeze}: must be >= 0")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ValueError(f"--dropout {self.dropout}: must be in [0, 1)")


@dataclass
class ValueSFTConfig(ValueFitConfig):
    """One joint-stage run; every field has a flag in ``ddai train value-sft``.

    Seed 004's ``verifiable_mc_hybrid.yaml`` gives the defaults of the loss and the optimiser:
    the TD weights (β, clip bounds, γ, λ), ``value_loss_coef``, the hybrid's coefficients, the
    learning rates, ``max_grad_norm``, ``seed`` and ``max_pairs_per_problem``. Its run length and
    sampling sizes are not taken over, because they describe one CodeContests run on a multi-GPU
    node and not a search log: ``batch_size`` is 8 pairs per process (the seed's 32),
    ``max_steps`` counts optimizer steps (the seed's ``n_epochs: 2.0`` over ``n_samples:
    100000`` drawn pairs), the held-out set is a share of prompts (``val_fraction``; the seed's
    ``val_n_samples: 500``), and difficulty bins are by success rate (the seed's are
    CodeContests levels).

    The seed labels ``value_loss_coef: 0.05`` "CE loss 계수" (CE coefficient) while its name
    says value loss; ddai reads it by its name: ``weighted_ce + value_loss_coef · value_loss``
    (``sft_math.joint_loss``), so the CE keeps weight 1 and the critic's loss is scaled down."""

    model: str
    """The policy: a causal LM folder or hub id."""
    critic: str
    """A value checkpoint from `ddai train value` on this policy's trunk; its head type
    (linear/mlp) is read from it, and a trunk it trained replaces the policy's."""
    output_dir: Path
    """Output folder: the policy, critic/ and metrics.jsonl."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm (0: off); seed 004's joint stage clips at 0.5 where `train value`
    clips at 1.0."""
    value_loss_coef: float = 0.05
    """Scale of the value loss added to the weighted CE."""
    beta: float = TDWeightConfig.beta
    """Temperature β of w = exp(δ/β)."""
    weight_clip_min: float = TDWeightConfig.weight_clip_min
    """Lower clip of the token weights."""
    weight_clip_max: float = TDWeightConfig.weight_clip_max
    """Upper clip of the token weights."""
    gamma: float = TDWeightConfig.gamma
    """Discount γ of the TD error."""
    lam: float = TDWeightConfig.lam
    """GAE λ of the TD error (1: Monte-Carlo, R − V)."""
    value_trunk_grad: bool = True
    """Let the value loss train the trunk, or only the head (detached hidden states). Seed:
    ``num_unfrozen_layers: 2`` > 0, so the value loss reaches the trunk."""
    seed: int = field(default=42, kw_only=True)
    """Random seed (pair draws); 42 is seed 004's ``data_sampling.seed`` for the joint stage
    (`train value` keeps 0). The held-out split has its own seed (--split-seed)."""
    val_fraction: float | None = field(default=None, kw_only=True)  # type: ignore[assignment]
    """Share of prompts held out for evaluation. Default: the critic's recorded split
    (split.json), so that value-sft evaluates on prompts the critic never trained on; 0.2 for a
    critic without one."""
    split_seed: int | None = field(default=None, kw_only=True)  # type: ignore[assignment]
    """Seed of the held-out split. Default: the critic's recorded split (split.json); 0 for a
    critic without one (`train value`'s default, so both stages hold out the same prompts)."""

    @property
    def weights_cfg(self) -> TDWeightConfig:
        return TDWeightConfig(
            self.beta, self.weight_clip_min, self.weight_clip_max, self.gamma, self.lam
        )

    def check(self) -> None:
        self.weights_cfg.check()
        super().check()
        if self.value_loss_coef < 0:
            raise ValueError("--value-loss-coef, --pairwise-coef and --mc-coef must be >= 0")


@dataclass
class ValueScoreConfig(ValueRowsConfig):
    """One scoring pass; every field has a flag in ``ddai value score``."""

    checkpoint: Path
    """A value checkpoint (the --out-dir of ddai train value)."""
    out_run: str | None = None
    """Write the scored rollouts as this new run (one --run only). Default: a new version of each
    run's partition."""
    batch_size: int = 16
    """Rollouts per forward pass."""

    def check(self) -> None:
        super().check()
        if not Path(self.checkpoint).is_dir():
            raise FileNotFoundError(
                f"--checkpoint {self.checkpoint} not found; train one with "
                "`ddai train value --out-dir DIR`"
            )
        if self.out_run is not None:
            from ddai.pipelines import store

            store.check_run_id(self.out_run)
            if not self.runs or len(self.runs) != 1:
                raise ValueError("--out-run writes one run: name exactly one --run to score")
        if self.batch_size < 1 or self.max_length < 1:
            raise ValueError("--batch-size and --max-length must be >= 1")
