"""The pointer steps' configs that ``ddai pointer … --help`` reads (world, embed), and the
constants their checks use: a light module, so that the help builds its flags without importing
the world's generator, the embedding store and the user-set reader (their modules re-export these
names, so the old import paths keep working).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddai.pipelines.pointer import Rerun

TOPICS: dict[str, tuple[str, ...]] = {
    "kitchen": ("cup", "plate", "knife", "bowl"),
    "street": ("car", "bus", "sign", "bike"),
    "beach": ("umbrella", "surfboard", "towel", "kite"),
    "office": ("laptop", "chair", "phone", "book"),
    "park": ("dog", "bench", "frisbee", "tree"),
    "farm": ("cow", "horse", "tractor", "sheep"),
    "airport": ("plane", "suitcase", "truck", "flag"),
    "stadium": ("ball", "player", "bat", "helmet"),
}


@dataclass(frozen=True)
class WorldConfig:
    """Size and geometry of a synthetic world (all defaults are the fixtures')."""

    seed: int = 0
    n_queries: int = 400  # queries to answer; split into train/test by test_frac
    n_demos: int = 600  # the demonstration pool every candidate set is drawn from
    dim: int = 32  # embedding width
    n_topics: int = 8  # scene topics used (at most len(TOPICS))
    test_frac: float = 0.3  # share of queries held out for evaluation
    clean_rate: float = 0.4  # share of demonstrations whose answer is right
    topic_weight: float = 1.0  # embedding weight of the topic direction
    type_weight: float = 0.3  # ... of the answer-type direction
    quality_weight: float = 0.5  # ... of the ±quality direction (demonstrations only)
    noise: float = 0.6  # norm of the isotropic noise added to every embedding

    def __post_init__(self) -> None:
        if not 1 <= self.n_topics <= len(TOPICS):
            raise ValueError(f"n_topics must be in 1..{len(TOPICS)}, got {self.n_topics}")
        if self.n_queries < 2 or self.n_demos < 2:
            raise ValueError("a world needs at least 2 queries and 2 demonstrations")
        if not 0.0 <= self.test_frac < 1.0:
            raise ValueError(f"test_frac must be in [0, 1), got {self.test_frac}")
        if not 0.0 <= self.clean_rate <= 1.0:
            raise ValueError(f"clean_rate must be in [0, 1], got {self.clean_rate}")
        if self.dim < 2:
            raise ValueError(f"dim must be >= 2, got {self.dim}")


SUFFIXES = (".safetensors", ".parquet")
"""An embedding store's file types."""


WORLD_EMBEDDER = "world"


@dataclass(frozen=True)
class EmbedConfig(Rerun):
    world: Path
    """World folder (queries.jsonl, demos.jsonl)."""
    out: Path
    """Store to write: .safetensors or .parquet."""
    k: int = 16
    """Candidate pool size: each query's K most similar demos."""
    embedder: str = WORLD_EMBEDDER
    """'world' (the world's own embeddings) or an Embedder backend name: local (no key), hash, or a
    [backends.NAME] table (kind openai: an OpenAI-compatible embedding server). Rows with images
    are embedded as image + question when the backend can."""
    batch_size: int = 256  # texts per embedder call
    progress: bool = True
    dry_run: bool = False
    """Count the embedder's calls and their cost; call nothing."""
    max_cost: float | None = None
    """USD cap on a paid embedder's calls; past it calls fail with reason max-cost and nothing is
    written (rerun to resume: embedded rows are cached)."""

    def __post_init__(self) -> None:
        if Path(self.out).suffix not in SUFFIXES:
            raise ValueError(f"--out {self.out}: the store must end in {' or '.join(SUFFIXES)}")
        if self.k < 2:
            raise ValueError(f"--k must be >= 2 (a pointer picks two candidates), got {self.k}")
        if self.embedder == WORLD_EMBEDDER and self.max_cost is not None:
            raise ValueError(
                "--max-cost caps a paid embedder's calls; --embedder world calls no embedder (the "
                "world's own embeddings): drop --max-cost or name an embedder"
            )


@dataclass(frozen=True)
class PointerWorldConfig:
    """``ddai pointer world``: a synthetic world (``WorldConfig``) or, with ``from_file``, a world
    from the user's VQA set (``UserSetConfig``), written into ``out`` (``user_set.run_pointer_world``)."""

    out: Path
    """Folder to write the world into."""
    seed: int = WorldConfig.seed
    """Random seed; the world is a pure function of its settings."""
    from_file: Path | None = None
    """Build the world from your VQA set instead: .parquet or .jsonl with image (a path, relative
    to the file), question, answers (the 10 human answers), optional question_id and split (train,
    test, demo = the demonstration pool)."""
    n_queries: int = WorldConfig.n_queries
    """Number of queries (synthetic world)."""
    n_demos: int | None = None
    """Demonstration pool size (default 600; with --from and no split column: half the rows)."""
    dim: int = WorldConfig.dim
    """Embedding width (synthetic world)."""
    n_topics: int = WorldConfig.n_topics
    """Scene topics, 1-8 (synthetic world)."""
    test_frac: float = WorldConfig.test_frac
    """Share of queries held out (split 'test')."""
    clean_rate: float = WorldConfig.clean_rate
    """Share of demonstrations with a right answer (synthetic world)."""
