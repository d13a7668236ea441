"""A synthetic VQA world where the right in-context demonstrations measurably help.

Every query and demonstration has a scene ``topic`` and an ``answer_type`` (count, color, yes/no,
object); every demonstration is also ``clean`` (its answer is right) or noisy (its answer belongs
to another question type). The simulator (``ddai.pipelines.backends.vqa_simulator``) answers a
query correctly more often when its two demonstrations share the query's answer type and are
clean.

The world's own embeddings make that visible: a unit vector per item is
``w_topic·topic + w_type·answer_type (+ w_quality·±quality for demos) + noise``, so a pointer
network can learn "same answer type, clean label" from them. The supervised labels are
deliberately suboptimal: the annotator picks the two demonstrations most similar to the query
(cosine of these embeddings), which favours the same scene and type but is blind to label quality,
the direction a query has no component along. RL therefore has headroom over SFT.

Everything is deterministic in ``WorldConfig.seed``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.pointer.configs import TOPICS, WorldConfig
from ddai.pipelines.records.deps import np
from ddai.pipelines.records.lazy import lazy_module

# the writers (the store's commit machinery, ~60 modules) load when a world is written
io = lazy_module("ddai.pipelines.store.io")
manifest = lazy_module("ddai.pipelines.store.manifest")

safetensors_np = lazy_module("safetensors.numpy")

ANSWER_TYPES = ("count", "color", "yesno", "object")
COLORS = ("red", "blue", "green", "white", "black", "yellow", "brown", "gray")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

QUERIES_FILE = "queries.jsonl"
DEMOS_FILE = "demos.jsonl"
LABELS_FILE = "sft_labels.jsonl"
EMBEDDINGS_FILE = "embeddings.safetensors"
CONFIG_FILE = "world.json"


@dataclass
class World:
    """A world in memory: rows as written to JSONL, embeddings ``[N, dim]`` in row order."""

    config: WorldConfig
    queries: list[dict[str, Any]]
    demos: list[dict[str, Any]]
    query_emb: np.ndarray  # [n_queries, dim] float32, unit rows
    demo_emb: np.ndarray  # [n_demos, dim] float32, unit rows
    labels: dict[str, list[str]] = field(default_factory=dict)  # query_id -> 2 demo ids


# ---------------------------------------------------------------- questions and answers


def _pick(rng: np.random.Generator, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(len(seq)))]


def _question(rng: np.random.Generator, topic: str, answer_type: str) -> tuple[str, str, list[str]]:
    """(question, canonical answer, alternative answers a minority of annotators give)."""
    obj = _pick(rng, TOPICS[topic])
    if answer_type == "count":
        n = int(rng.integers(1, 7))
        return f"How many {obj}s are in the {topic}?", str(n), [str(n + 1), str(n - 1)]
    if answer_type == "color":
        c, alt, alt2 = rng.choice(len(COLORS), size=3, replace=False)
        return f"What color is the {obj}?", COLORS[c], [COLORS[alt], COLORS[alt2]]
    if answer_type == "yesno":
        yes = bool(rng.integers(2))
        ans, other = ("yes", "no") if yes else ("no", "yes")
        return f"Is there a {obj} in the {topic}?", ans, [other]
    others = [o for o in TOPICS[topic] if o != obj]
    a, b = rng.choice(len(others), size=2, replace=False)
    return f"What is next to the {obj}?", others[a], [others[b]]


def _surface(rng: np.random.Generator, answer: str) -> str:
    """How one annotator writes an answer: digits or words, an article, a capital."""
    if answer.isdigit() and int(answer) < len(NUMBER_WORDS) and rng.random() < 0.3:
        return NUMBER_WORDS[int(answer)]
    if answer not in ("yes", "no") and not answer.isdigit() and rng.random() < 0.2:
        return f"a {answer}"
    if rng.random() < 0.1:
        return answer.capitalize()
    return answer


def human_answers(rng: np.random.Generator, answer: str, alternatives: list[str]) -> list[str]:
    """Ten annotator answers: at most 2 give each alternative, at least 6 give ``answer``."""
    rest = 10 - int(rng.integers(6, 10))
    minority: list[str] = []
    for alt in alternatives:
        minority += [alt] * min(2, rest - len(minority))
    answers = [answer] * (10 - len(minority)) + minority
    order = rng.permutation(10)
    return [_surface(rng, answers[i]) for i in order]


def _wrong_label(rng: np.random.Generator, topic: str, answer_type: str) -> str:
    """A noisy demonstration's answer: one of another question type (a mislabeled example)."""
    other = _pick(rng, [t for t in ANSWER_TYPES if t != answer_type])
    return _question(rng, topic, other)[1]


def _distractor(rng: np.random.Generator, answer: str, answer_type: str, alts: list[str]) -> str:
    """A wrong answer of the right type that no annotator gave (yes/no: the other one)."""
    if answer_type == "yesno":
        return alts[0]
    if answer_type == "count":
        return str(int(answer) + 3)
    if answer_type == "color":
        pool = [c for c in COLORS if c != answer and c not in alts]
    else:
        pool = [o for objs in TOPICS.values() for o in objs if o != answer and o not in alts]
    return _pick(rng, pool)


# ---------------------------------------------------------------- geometry


def _directions(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``n`` unit directions ``[n, dim]``, orthonormal when ``n <= dim``."""
    m = rng.standard_normal((dim, n))
    if n <= dim:
        q, _ = np.linalg.qr(m)
        return q.T[:n]
    return (m / np.linalg.norm(m, axis=0, keepdims=True)).T


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def similarity_top2(query_emb: np.ndarray, demo_emb: np.ndarray) -> np.ndarray:
    """Rows of the two demonstrations most cosine-similar to each query ``[N, 2]``."""
    sims = query_emb @ demo_emb.T  # [N, M], unit rows
    top = np.argpartition(-sims, 1, axis=1)[:, :2]
    order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


# ---------------------------------------------------------------- the world


def make_world(cfg: WorldConfig) -> World:
    """Build a world: queries with 10 human answers, demonstrations, embeddings and labels."""
    rng = np.random.default_rng(cfg.seed)
    topics = list(TOPICS)[: cfg.n_topics]
    dirs = _directions(rng, cfg.n_topics + len(ANSWER_TYPES) + 1, cfg.dim)
    topic_dir, type_dir, quality_dir = (
        dirs[: cfg.n_topics],
        dirs[cfg.n_topics : cfg.n_topics + len(ANSWER_TYPES)],
        dirs[-1],
    )

    def embed(t: int, a: int, quality: float) -> np.ndarray:
        noise = rng.standard_normal(cfg.dim) * cfg.noise / np.sqrt(cfg.dim)
        v = cfg.topic_weight * topic_dir[t] + cfg.type_weight * type_dir[a] + noise
        return v + cfg.quality_weight * quality * quality_dir

    n_test = round(cfg.n_queries * cfg.test_frac)
    test = set(rng.permutation(cfg.n_queries)[:n_test].tolist())
    queries, q_vecs = [], []
    for i in range(cfg.n_queries):
        t, a = int(rng.integers(cfg.n_topics)), int(rng.integers(len(ANSWER_TYPES)))
        question, answer, alts = _question(rng, topics[t], ANSWER_TYPES[a])
        queries.append(
            {
                "query_id": f"q{i:05d}",
                "image_id": f"w{cfg.seed}-img-q{i:05d}",
                "question": question,
                "answers": human_answers(rng, answer, alts),
                "answer": answer,
                "distractor": _distractor(rng, answer, ANSWER_TYPES[a], alts),
                "split": "test" if i in test else "train",
                "topic": topics[t],
                "answer_type": ANSWER_TYPES[a],
                "world_seed": cfg.seed,
            }
        )
        q_vecs.append(embed(t, a, 0.0))

    demos, d_vecs = [], []
    for j in range(cfg.n_demos):
        t, a = int(rng.integers(cfg.n_topics)), int(rng.integers(len(ANSWER_TYPES)))
        clean = bool(rng.random() < cfg.clean_rate)
        question, answer, _ = _question(rng, topics[t], ANSWER_TYPES[a])
        demos.append(
            {
                "demo_id": f"d{j:05d}",
                "image_id": f"w{cfg.seed}-img-d{j:05d}",
                "question": question,
                "answer": answer if clean else _wrong_label(rng, topics[t], ANSWER_TYPES[a]),
                "topic": topics[t],
                "answer_type": ANSWER_TYPES[a],
                "clean": clean,
            }
        )
        d_vecs.append(embed(t, a, 1.0 if clean else -1.0))

    query_emb, demo_emb = _unit(np.stack(q_vecs)), _unit(np.stack(d_vecs))
    top2 = similarity_top2(query_emb, demo_emb)
    labels = {
        q["query_id"]: [demos[int(r)]["demo_id"] for r in row]
        for q, row in zip(queries, top2, strict=True)
    }
    return World(cfg, queries, demos, query_emb, demo_emb, labels)


# ---------------------------------------------------------------- files


def jsonl(rows: list[dict[str, Any]]) -> str:
    """``rows`` as JSON Lines, non-ASCII kept as is (read back with ``read_jsonl``)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_world(world: World, out: str | Path) -> dict[str, Path]:
    """Write the world's files into ``out`` atomically, each with its manifest."""
    out = Path(out)
    record = manifest.start("pointer.world", asdict(world.config), [], seed=world.config.seed)
    io.write_text(out / QUERIES_FILE, jsonl(world.queries))
    io.write_text(out / DEMOS_FILE, jsonl(world.demos))
    labels = [{"query_id": k, "demo_ids": v} for k, v in world.labels.items()]
    io.write_text(out / LABELS_FILE, jsonl(labels))
    meta = {
        "query_ids": json.dumps([q["query_id"] for q in world.queries]),
        "demo_ids": json.dumps([d["demo_id"] for d in world.demos]),
    }
    with io.atomic_path(out / EMBEDDINGS_FILE) as tmp:
        safetensors_np.save_file(
            {"query_emb": world.query_emb, "demo_emb": world.demo_emb}, str(tmp), metadata=meta
        )
    io.write_json(out / CONFIG_FILE, asdict(world.config))
    paths = {}
    for key, name, rows in (
        ("queries", QUERIES_FILE, len(world.queries)),
        ("demos", DEMOS_FILE, len(world.demos)),
        ("labels", LABELS_FILE, len(world.labels)),
        ("embeddings", EMBEDDINGS_FILE, len(world.queries) + len(world.demos)),
        ("config", CONFIG_FILE, 1),
    ):
        record.rows_out = rows
        manifest.write(out / name, record)
        paths[key] = out / name
    return paths


def run_world(cfg: WorldConfig, out: str | Path) -> dict[str, Any]:
    """``ddai pointer world``: make and write a synthetic world; its summary (sizes, files)."""
    w = make_world(cfg)
    paths = write_world(w, out)
    n_test = sum(q["split"] == "test" for q in w.queries)
    return {
        "out": str(out),
        "queries": len(w.queries),
        "train queries": len(w.queries) - n_test,
        "test queries": n_test,
        "demos": len(w.demos),
        "clean demos": sum(d["clean"] for d in w.demos),
        "dim": cfg.dim,
        "files": [p.name for p in paths.values()],
    }


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a JSONL file; a line that is not a JSON object is a ``ValueError`` naming
    the file and line."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON line ({e.msg}); {_REBUILD}") from e
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: not a JSON object; {_REBUILD}")
            rows.append(row)
    return rows


_REBUILD = "fix it, or make the world again with `ddai pointer world`"


def require_world(folder: str | Path) -> Path:
    """``folder`` if it holds a world's queries and demonstrations, else a clear error."""
    folder = Path(folder)
    for name in (QUERIES_FILE, DEMOS_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder / name} is missing; make a world with `ddai pointer world {folder}` "
                f"or give a folder holding {QUERIES_FILE} and {DEMOS_FILE}"
            )
    return folder


def load_world(folder: str | Path, *, embeddings: bool = True) -> World:
    """Read a world folder (any VQA data in this layout works; embeddings are optional)."""
    folder = require_world(folder)
    cfg_path = folder / CONFIG_FILE
    cfg = WorldConfig(**json.loads(cfg_path.read_text())) if cfg_path.is_file() else WorldConfig()
    queries, demos = read_jsonl(folder / QUERIES_FILE), read_jsonl(folder / DEMOS_FILE)
    labels = {}
    if (folder / LABELS_FILE).is_file():
        labels = {r["query_id"]: list(r["demo_ids"]) for r in read_jsonl(folder / LABELS_FILE)}
    q_emb = np.zeros((len(queries), 0), np.float32)
    d_emb = np.zeros((len(demos), 0), np.float32)
    if embeddings and (folder / EMBEDDINGS_FILE).is_file():
        q_emb, d_emb = _world_embeddings(folder / EMBEDDINGS_FILE)
    return World(cfg, queries, demos, q_emb, d_emb, labels)


def _world_embeddings(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(query_emb, demo_emb)`` of a world's embeddings file; one that safetensors cannot read
    or that lacks either tensor is a ``ValueError`` naming it."""
    try:
        tensors = safetensors_np.load_file(str(path))
    except Exception as e:  # safetensors' own error type is not an OSError or ValueError
        raise ValueError(f"{path}: not a readable safetensors file ({e}); {_REBUILD}") from e
    missing = [k for k in ("query_emb", "demo_emb") if k not in tensors]
    if missing:
        raise ValueError(f"{path}: no {' or '.join(missing)} tensor; {_REBUILD}")
    return tensors["query_emb"], tensors["demo_emb"]
