"""The pointer selector's configs (seed 002): generation, processing, training, evaluation.

One definition of each setting: each field's docstring is its ``ddai pointer`` flag's help and
its default the flag's default (``ddai_cli/pointer.py`` reads both), and every check of a
setting lives in its config (``__post_init__`` or ``check``), so the library refuses what the CLI
refuses. The phase-dependent optimiser defaults (SFT learns faster than the RL phases) are
``SFT_OPTIM`` / ``RL_OPTIM``, resolved by ``TrainSchedule.optim``. Torch-free, so that the CLI
can read these without loading torch. Which RL settings each phase reads is ``PHASE_READS``.
Longer than 400 lines because every pointer step's settings live here, the one torch-free place
the CLI reads them from.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ddai.pipelines.pointer import DEFAULT_THRESHOLD, Rerun, one_of
from ddai.pipelines.records.defaults import changed

CORRECTNESS_MODES = ("01", "pm1")
QUALITY_SOURCES = ("none", "beam", "logprob")
NORMALIZERS = ("zscore", "minmax", "none")
"""Reward normalizations within a query (``losses.NORMALIZERS`` implements each one)."""
CLIPPED_GROUP = "clipped-group"
"""The pointer's clipped group advantage with the PPO ratio clip (seed 002 §4.4.1, which calls it
GRPO: not the Searcher's GRPO of ``ddai train grpo``, hence its own name)."""
RL_MODES = ("rce", CLIPPED_GROUP, "reinforcepp")
MODES = ("sft", *RL_MODES)
DEPRECATED_MODES = {"grpo": CLIPPED_GROUP}
"""Old mode names still read, with a note on stderr (for one release)."""
OLD_LOGP_SOURCES = ("stored", "phase", "epoch")
DEFAULT_TEMPERATURES = (0.7, 1.0, 1.3)


def mode_name(mode: str) -> str:
    """``mode`` as it is now called: a deprecated name (``DEPRECATED_MODES``) becomes its new one,
    with a one-line note on stderr."""
    new = DEPRECATED_MODES.get(mode)
    if new is None:
        return mode
    print(
        f"note: pointer mode {mode!r} is now {new!r} (the pointer's clipped group advantage, not "
        f"the Searcher's GRPO); {mode!r} is read until the next release",
        file=sys.stderr,
    )
    return new


# ------------------------------------------------------- what ddai pointer gen and eval share


@dataclass(frozen=True, kw_only=True)
class StoreInput:
    """The embedding store every pointer step after ``embed`` reads."""

    store: Path
    """Embedding store from `ddai pointer embed`."""


@dataclass(frozen=True, kw_only=True)
class VqaStep(StoreInput):
    """The inputs and the VQA model of the commands that ask it (``ddai pointer gen``, ``eval``)."""

    world: Path
    """World folder (queries.jsonl, demos.jsonl) from `ddai pointer world`."""
    vqa: str | None = None
    """VQAModel backend name from ddai.toml (default: $DDAI_VQA, then [roles] vqa, then local: the
    world's deterministic simulator)."""
    metric: str = "vqa"
    """Answer score: vqa, vqa-sym, anls, em (official VQAv2 accuracy; VQAv2 with the human answers
    normalized like the prediction, not comparable with papers; ANLS; exact match)."""
    correct_threshold: float = DEFAULT_THRESHOLD
    """vqa_correct = 1 when the answer's score >= this. Default 1.0: full VQAv2 credit, i.e. at
    least 4 of the 10 annotators gave the answer."""
    max_cost: float | None = None
    """USD cap on VQA calls; calls past it fail with reason max-cost (rerun to resume: answered
    calls are cached)."""
    dry_run: bool = False
    """Count the VQA calls and their estimated cost; call nothing."""
    progress: bool = True


# ---------------------------------------------------------------- ddai pointer gen


@dataclass(frozen=True)
class ProposalConfig:
    """How many pointers of each kind to draw per query (before de-duplication). The defaults
    draw 12, within seed 002 §1.4's 8~12 a query: 5 beams, 2 samples at each of τ 0.7, 1.0, 1.3
    (§1.2.1; §3.2's call samples only 1.0 and 1.3), 1 random pair (§3.2)."""

    num_beams: int = 5
    """Beam-search sequences per query."""
    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    """Sampling temperatures, comma-separated."""
    n_per_temp: int = 2
    """Samples per temperature per query."""
    num_random: int = 1
    """Uniform random pairs per query."""
    seed: int = 0
    """Seed of sampling and random pairs."""

    def __post_init__(self) -> None:
        if self.num_beams < 0 or self.n_per_temp < 0 or self.num_random < 0:
            raise ValueError("num_beams, n_per_temp and num_random must be >= 0")
        if any(t <= 0 for t in self.temperatures):
            raise ValueError(f"temperatures must be > 0, got {self.temperatures}")


@dataclass(frozen=True)
class GenConfig(VqaStep, Rerun):
    model: Path
    """Pointer checkpoint (usually the SFT one)."""
    out: Path
    """Raw records to write (JSONL, one line per query)."""
    proposal: ProposalConfig = ProposalConfig()
    split: str | None = "train"
    """Queries of this split ('all' for every query)."""

    def __post_init__(self) -> None:
        if self.split == "all":
            object.__setattr__(self, "split", None)


# ---------------------------------------------------------------- ddai pointer process


@dataclass(frozen=True)
class RewardConfig:
    """Seed 002 §3.4: reward = clip(alpha·quality + beta·correctness, ±clip)."""

    alpha: float = 0.2
    """Weight of the quality term."""
    beta: float = 1.0
    """Weight of the correctness term."""
    correctness_mode: str = "pm1"
    """Correctness as '01' (0/1) or 'pm1' (-1/+1)."""
    quality: str = "none"
    """Quality term: none, beam (beam_score) or logprob (logprob_score, higher is better). Seed
    002's default is beam where a row has one (docs/pointer.md says why ddai's is none)."""
    use_acc_score: bool = False
    """Correctness from vqa_acc_score (soft) instead of vqa_correct."""
    clip: float = 5.0
    """Rewards are clipped to [-clip, clip]."""

    def __post_init__(self) -> None:
        one_of(self.correctness_mode, CORRECTNESS_MODES, "correctness mode")
        one_of(self.quality, QUALITY_SOURCES, "quality source")
        if self.clip <= 0:
            raise ValueError(f"reward clip must be > 0, got {self.clip}")


@dataclass(frozen=True)
class ProcessConfig(Rerun):
    raw: Path
    """Raw records from `ddai pointer gen`."""
    out: Path
    """Processed rows to write (.parquet); statistics go beside it."""
    reward: RewardConfig = RewardConfig()


# ---------------------------------------------------------------- ddai pointer train


def parse_phases(text: str) -> list[tuple[str, int]]:
    """``"rce:1,clipped-group:3"`` → ``[("rce", 1), ("clipped-group", 3)]`` (a bare mode means 1
    epoch; a deprecated name is read as its new one)."""
    phases = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        mode, _, epochs = part.partition(":")
        mode = mode_name(mode)
        if mode not in MODES:
            raise ValueError(
                f"unknown training mode {mode!r} in phases {text!r}; known: {', '.join(MODES)}"
            )
        try:
            n = int(epochs) if epochs else 1
        except ValueError:
            raise ValueError(f"phase {part!r}: epochs must be an integer, e.g. {mode}:2") from None
        if n < 1:
            raise ValueError(f"phase {part!r}: epochs must be >= 1")
        phases.append((mode, n))
    if not phases:
        raise ValueError("no phases given; e.g. --phases rce:1,clipped-group:3")
    if ("sft" in {m for m, _ in phases}) and len(phases) > 1:
        raise ValueError("sft trains from labels and cannot share a run with RL phases")
    return phases


SFT_EPOCHS, RCE_EPOCHS, RL_EPOCHS = 20, 2, 30
"""Epochs of a single ``--mode`` run without ``--epochs``: sft, rce (seed 002 §4.3's warm-up,
``rce_epochs = 1~2``), the other RL modes."""


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    """Adam learning rate (seed 002: RL 3-10x below SFT)."""
    weight_decay: float = 0.0
    """L2 weight decay."""
    batch_queries: int = 32
    """Query groups per step."""
    grad_clip: float = 1.0  # max grad norm (0: off)
    seed: int = 0
    """Seed of initialization and batch order."""


SFT_OPTIM = OptimConfig(lr=3e-3, weight_decay=0.0, batch_queries=32)
RL_OPTIM = OptimConfig(lr=1e-3, weight_decay=1e-2, batch_queries=8)


@dataclass(frozen=True)
class RLConfig:
    norm: str = "zscore"
    """Reward normalization within a query: zscore, minmax or none."""
    adv_clip: float = 5.0
    """Advantages are clipped to [-clip, clip]."""
    clip_eps: float = 0.2
    """PPO ratio clip (clipped-group, reinforcepp)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty against the old policy."""
    rce_t_start: float = 2.0
    """RCE temperature at the phase's first step."""
    rce_t_end: float = 0.5
    """RCE temperature at the phase's last step."""
    # π_old of the ratio: "stored" logprob_score (the generating model, fixed for the run, seed
    # §4.4.2) or the policy itself at the start of each "phase" / "epoch" (iterated PPO over the
    # fixed candidates; on the fixtures "stored" keeps the policy within one clip width of SFT)
    old_logp: str = "epoch"
    """π_old of the ratio: stored (logprob_score of the generating model, fixed), or the policy
    recomputed at each phase or epoch start (iterated PPO over the fixed data)."""
    reinforcepp_clip: bool = True
    """REINFORCE++ with the clipped ratio (else plain -A·log π)."""

    def __post_init__(self) -> None:
        one_of(self.norm, NORMALIZERS, "normalization")
        one_of(self.old_logp, OLD_LOGP_SOURCES, "old_logp source")


PHASE_READS: dict[str, tuple[str, ...]] = {
    "rce": ("norm", "rce_t_start", "rce_t_end"),
    CLIPPED_GROUP: ("norm", "adv_clip", "clip_eps", "kl_coef", "old_logp"),
    "reinforcepp": ("norm", "adv_clip", "reinforcepp_clip", "clip_eps", "kl_coef", "old_logp"),
}
"""The ``RLConfig`` settings each RL phase reads (``train.fit_rl``); ``sft`` reads none. A setting
set away from its default that no chosen phase reads is refused (``PointerTrainConfig.check``)."""
RATIO_SETTINGS = ("clip_eps", "kl_coef", "old_logp")
"""Settings of the clipped ratio, which reinforcepp reads only with ``reinforcepp_clip``."""


def phase_reads(mode: str, rl: RLConfig) -> tuple[str, ...]:
    """The ``RLConfig`` settings phase ``mode`` reads under ``rl`` (``PHASE_READS``, less
    ``RATIO_SETTINGS`` for a reinforcepp without its clipped ratio)."""
    reads = PHASE_READS.get(mode, ())
    if mode == "reinforcepp" and not rl.reinforcepp_clip:
        reads = tuple(n for n in reads if n not in RATIO_SETTINGS)
    return reads


def unread_rl_settings(phases: tuple[tuple[str, int], ...], rl: RLConfig) -> list[str]:
    """Each ``RLConfig`` setting away from its default that none of ``phases`` reads, as its flag
    and the phases that would read it, e.g. ``--clip-eps (read by clipped-group, reinforcepp)``."""
    read = {n for m, _ in phases for n in phase_reads(m, rl)}
    unread = []
    for name in changed(rl):
        if name not in read:
            flag = ("--no-" if getattr(rl, name) is False else "--") + name.replace("_", "-")
            by = [m for m, reads in PHASE_READS.items() if name in reads]
            clip = " with --reinforcepp-clip" if name in RATIO_SETTINGS else ""
            unread.append(f"{flag} (read by {', '.join(by)}{clip})")
    return unread


@dataclass(frozen=True)
class PointerTrainConfig(StoreInput):
    out: Path
    """Checkpoint folder to write."""
    phases: tuple[tuple[str, int], ...]  # e.g. (("sft", 30),) or (("rce", 1), ("clipped-group", 3))
    world: Path | None = None
    """sft: world folder with sft_labels.jsonl."""
    data: Path | None = None
    """RL: processed rows from `ddai pointer process`."""
    init: Path | None = None
    """Start from this checkpoint (RL: the SFT one)."""
    split: str = "train"
    """sft: train on labeled queries of this split."""
    d_model: int = 64
    """Hidden width of a new model."""
    scoring: str = "bilinear"
    """Scoring of a new model: bilinear or attention."""
    optim: OptimConfig = OptimConfig()
    rl: RLConfig = field(default_factory=RLConfig)
    progress: bool = True

    def __post_init__(self) -> None:
        phases = tuple((mode_name(mode), n) for mode, n in self.phases)
        object.__setattr__(self, "phases", phases)

    @property
    def is_sft(self) -> bool:
        return self.phases[0][0] == "sft"

    def check(self) -> None:
        if self.is_sft and self.world is None:
            raise ValueError("--mode sft needs --world (the folder with sft_labels.jsonl)")
        if not self.is_sft and (self.data is None or self.init is None):
            raise ValueError(
                "RL phases need --data (from `ddai pointer process`) and --init (the SFT checkpoint)"
            )
        # settings this run would not read: refused rather than ignored (and kept in the manifest)
        if self.init is not None and changed(self, ("d_model", "scoring")):
            raise ValueError(
                "--d-model and --scoring shape a new model; --init loads one with its own: drop them"
            )
        if self.is_sft and self.rl != RLConfig():
            raise ValueError(
                "--norm, --adv-clip, --clip-eps, --kl-coef, --rce-t-*, --old-logp and "
                "--reinforcepp-clip are RL settings; --mode sft does not read them: drop them"
            )
        unread = [] if self.is_sft else unread_rl_settings(self.phases, self.rl)
        if unread:
            chosen = ",".join(m for m, _ in self.phases)
            raise ValueError(
                f"phases {chosen} do not read {', '.join(unread)}: drop it or add a phase that "
                "reads it"
            )
        if not self.is_sft and changed(self, ["split"]):
            raise ValueError(
                "--split picks the sft queries; RL phases train on every row of --data: drop it"
            )


@dataclass(frozen=True)
class TrainSchedule:
    """``ddai pointer train``'s phases and optimiser as given: ``--mode`` (with ``--epochs``) or
    ``--phases`` (``plan``), and the optimiser settings that replace the first phase's
    defaults, ``SFT_OPTIM`` or ``RL_OPTIM`` (``optim``)."""

    mode: str | None = None
    """One phase: sft, rce, clipped-group or reinforcepp (with --epochs)."""
    epochs: int | None = None
    """Epochs of --mode (default: sft 20, rce 2, other RL 30)."""
    phases: str | None = None
    """RL phases in order, e.g. rce:2,clipped-group:30 (instead of --mode)."""
    lr: float | None = None
    """Adam learning rate (seed 002: RL 3-10x below SFT). Default: sft 0.003, RL 0.001."""
    batch_queries: int | None = None
    """Query groups per step. Default: sft 32, RL 8."""
    weight_decay: float | None = None
    """L2 weight decay. Default: sft 0, RL 0.01."""
    seed: int = OptimConfig.seed
    """Seed of initialization and batch order."""

    def plan(self) -> tuple[tuple[str, int], ...]:
        """The run's phases: ``--phases``, or ``--mode`` for ``--epochs`` (default ``SFT_EPOCHS``,
        ``RCE_EPOCHS`` or ``RL_EPOCHS``); ``ValueError`` unless exactly one of mode and phases is
        given."""
        if (self.mode is None) == (self.phases is None):
            raise ValueError(
                "give exactly one of --mode (with --epochs) or --phases, e.g. --phases "
                "rce:2,clipped-group:30"
            )
        if self.phases is not None:
            return tuple(parse_phases(self.phases))
        mode = mode_name(self.mode)
        default = {"sft": SFT_EPOCHS, "rce": RCE_EPOCHS}.get(mode, RL_EPOCHS)
        return tuple(parse_phases(f"{mode}:{self.epochs or default}"))

    def optim(self, phases: tuple[tuple[str, int], ...]) -> OptimConfig:
        """The optimiser of a run of ``phases``: ``SFT_OPTIM`` or ``RL_OPTIM`` by its first
        phase, with the settings given here (not None) replacing their defaults."""
        base = SFT_OPTIM if phases[0][0] == "sft" else RL_OPTIM
        given = {
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "batch_queries": self.batch_queries,
        }
        return replace(base, seed=self.seed, **{k: v for k, v in given.items() if v is not None})


# ---------------------------------------------------------------- ddai pointer eval


@dataclass(frozen=True)
class EvalConfig(VqaStep):
    models: tuple[tuple[str, Path], ...]
    """NAME=CHECKPOINT, repeatable; the first is the reference (usually sft=...)."""
    split: str = "test"
    """Held-out split to evaluate."""
    num_beams: int = 5
    """Beam width of the reference's beam-top-1 selector."""
    seed: int = 0
    """Seed of the random-pair baseline."""
    out: Path | None = None
    """Folder for selections.parquet and summary.parquet."""


def parse_models(specs: list[str]) -> tuple[tuple[str, Path], ...]:
    """``NAME=CHECKPOINT`` specs (``--model sft=runs/sft``) as ``(name, path)`` pairs."""
    models = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--model {spec!r}: write NAME=CHECKPOINT, e.g. --model sft=runs/sft")
        models.append((name, Path(path)))
    return tuple(models)
