"""``ddai pointer world --from FILE``: a user's VQA set as a pointer world.

The file is Parquet or JSONL with one row per question: ``image`` (a path, relative to the file's
folder or absolute; also read from ``image_path`` or ``image_file``), ``question`` and ``answers``
(the human answers, VQAv2 has 10: a list of strings, or VQAv2's own list of ``{"answer": ...}``).
Optional: ``question_id`` (or ``id``; default: the row number) and ``split`` (``train``, ``test``,
or ``demo`` for the demonstration pool). Without ``split`` the rows are shuffled by ``seed``:
``n_demos`` of them (default half) become the pool, ``test_frac`` of the rest the held-out queries.

Every row is checked before anything is written; the error names the file, each bad row (up to a
few) and what to fix. A demonstration shows its majority human answer. The world has no
embeddings (``ddai pointer embed --embedder local`` embeds each image with its question) and no
SFT labels (``ddai pointer train --mode sft`` then learns each query's two nearest candidates).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.pointer.configs import PointerWorldConfig, WorldConfig
from ddai.pipelines.pointer.world import (
    CONFIG_FILE,
    DEMOS_FILE,
    EMBEDDINGS_FILE,
    LABELS_FILE,
    QUERIES_FILE,
    jsonl,
    run_world,
)
from ddai.pipelines.records.deps import np, pl
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.records.metrics import vqa_normalize

io = lazy_module(
    "ddai.pipelines.store.io"
)  # the writers load when a world is written, not for --help
manifest = lazy_module("ddai.pipelines.store.manifest")

SOURCE_FILE = "source.json"
IMAGE_COLUMNS = ("image", "image_path", "image_file")
ID_COLUMNS = ("question_id", "id")
SPLITS = ("train", "test", "demo")
_SHOWN = 5  # bad rows named in an error


@dataclass(frozen=True)
class UserSetConfig:
    path: Path  # the user's .parquet or .jsonl
    out: Path  # the world folder to write
    seed: int = 0  # shuffles rows into pool / train / test when the file has no split
    n_demos: int | None = None  # pool size without a split column (default: half the rows)
    test_frac: float = 0.3  # share of the non-pool rows held out as test


class UserSetError(ValueError):
    """The file cannot become a world; the message names the file, the rows and the fix."""


def _read(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise FileNotFoundError(f"--from {path}: no such file; give a .parquet or .jsonl VQA set")
    try:
        if path.suffix == ".parquet":
            return pl.read_parquet(path)
        if path.suffix in (".jsonl", ".ndjson"):
            return pl.read_ndjson(path, infer_schema_length=None)
    except Exception as e:  # polars' own message says where the file is broken
        raise UserSetError(f"--from {path}: cannot read it ({type(e).__name__}: {e})") from e
    raise UserSetError(f"--from {path}: use a .parquet or .jsonl file, not {path.suffix or 'none'}")


def _column(df: pl.DataFrame, names: Sequence[str], path: Path, *, required: bool) -> str | None:
    for name in names:
        if name in df.columns:
            return name
    if required:
        raise UserSetError(
            f"--from {path}: no column {' / '.join(names)}; the file has "
            f"{', '.join(df.columns) or 'no columns'} (rename one to {names[0]!r})"
        )
    return None


def _answers(value: Any) -> list[str] | None:
    """A row's human answers as strings, or None when they are not a non-empty list."""
    if not isinstance(value, list) or not value:
        return None
    out = []
    for a in value:
        if isinstance(a, dict):
            a = a.get("answer")
        if not isinstance(a, str | int | float) or isinstance(a, bool) or not str(a).strip():
            return None
        out.append(str(a))
    return out


def majority(answers: list[str]) -> str:
    """The most common answer after VQAv2 normalization, written as its first annotator did."""
    norm = [vqa_normalize(a) for a in answers]
    top = Counter(norm).most_common(1)[0][0]
    return answers[norm.index(top)]


def check_rows(df: pl.DataFrame, path: Path) -> list[dict[str, Any]]:
    """Rows as ``{id, image, question, answers, split}``, or ``UserSetError`` naming bad ones."""
    img_col = _column(df, IMAGE_COLUMNS, path, required=True)
    _column(df, ("question",), path, required=True)
    _column(df, ("answers",), path, required=True)
    id_col = _column(df, ID_COLUMNS, path, required=False)
    has_split = "split" in df.columns
    root = path.parent
    rows, bad, seen = [], [], {}
    for i, r in enumerate(df.iter_rows(named=True)):
        where = f"row {i + 1}"
        rid = str(r[id_col]) if id_col and r[id_col] is not None else str(i)
        problems = []
        if id_col and r[id_col] is None:
            problems.append(f"{id_col} is empty")
        elif rid in seen:
            problems.append(f"{id_col or 'id'} {rid!r} repeats row {seen[rid] + 1}")
        seen.setdefault(rid, i)
        q = r["question"]
        if not isinstance(q, str) or not q.strip():
            problems.append("question is empty")
        answers = _answers(r["answers"])
        if answers is None:
            problems.append("answers is not a non-empty list of answer strings")
        img = r[img_col]
        image = None
        if not isinstance(img, str) or not img.strip():
            problems.append(f"{img_col} is empty")
        else:
            p = Path(img) if Path(img).is_absolute() else root / img
            if not p.is_file():
                problems.append(f"{img_col} {img!r} is not a file (relative paths start at {root})")
            image = str(p.resolve())
        split = r.get("split") if has_split else None
        if has_split and split not in SPLITS:
            problems.append(f"split {split!r} is not one of {', '.join(SPLITS)}")
        if problems:
            bad.append(f"{where}: {'; '.join(problems)}")
            continue
        rows.append({"id": rid, "image": image, "question": q, "answers": answers, "split": split})
    if bad:
        more = f" (and {len(bad) - _SHOWN} more)" if len(bad) > _SHOWN else ""
        raise UserSetError(
            f"--from {path}: {len(bad)} of {df.height} rows are unusable; fix them and rerun:\n  "
            + "\n  ".join(bad[:_SHOWN])
            + more
        )
    return rows


def _assign(rows: list[dict[str, Any]], cfg: UserSetConfig) -> None:
    """Fill each row's split: the file's, else a seeded shuffle into demo / train / test."""
    if rows and rows[0]["split"] is not None:
        return
    n = len(rows)
    n_demos = n // 2 if cfg.n_demos is None else cfg.n_demos
    if not 2 <= n_demos <= n - 1:
        raise UserSetError(
            f"--from {cfg.path}: --demos must leave at least 2 demonstrations and 1 query out of "
            f"{n} rows, got {n_demos}"
        )
    order = np.random.default_rng(cfg.seed).permutation(n)
    n_test = round((n - n_demos) * cfg.test_frac)
    for rank, i in enumerate(order.tolist()):
        rows[i]["split"] = (
            "demo" if rank < n_demos else "test" if rank < n_demos + n_test else "train"
        )


def build_world(cfg: UserSetConfig) -> dict[str, Any]:
    """Check the file, then write ``queries.jsonl``, ``demos.jsonl`` and ``source.json`` into
    ``cfg.out`` atomically, each with its manifest; returns the summary."""
    if not 0.0 <= cfg.test_frac < 1.0:
        raise UserSetError(f"--test-frac must be in [0, 1), got {cfg.test_frac}")
    # A synthetic world's labels and embeddings would outlive our rows and be read with them.
    stale = [n for n in (LABELS_FILE, EMBEDDINGS_FILE, CONFIG_FILE) if (Path(cfg.out) / n).exists()]
    if stale:
        raise UserSetError(
            f"{cfg.out} holds a synthetic world ({', '.join(stale)}); write your VQA set into "
            "an empty folder"
        )
    rows = check_rows(_read(cfg.path), cfg.path)
    _assign(rows, cfg)
    queries, demos = [], []
    for r in rows:
        seen = {"image_id": r["id"], "image": r["image"], "question": r["question"]}
        answer, answers = majority(r["answers"]), r["answers"]
        if r["split"] == "demo":
            demos.append({"demo_id": f"d-{r['id']}", **seen, "answer": answer, "answers": answers})
        else:
            queries.append(
                {
                    "query_id": f"q-{r['id']}",
                    **seen,
                    "answers": answers,
                    "answer": answer,
                    "split": r["split"],
                }
            )
    if len(demos) < 2 or not queries:
        raise UserSetError(
            f"--from {cfg.path}: need at least 2 demonstration rows and 1 query row, got "
            f"{len(demos)} and {len(queries)} (split 'demo' marks the pool)"
        )
    params = {"seed": cfg.seed, "n_demos": cfg.n_demos, "test_frac": cfg.test_frac}
    record = manifest.start("pointer.world", params, [cfg.path], seed=cfg.seed)
    record.rows_in = len(rows)
    out = Path(cfg.out)
    n_test = sum(q["split"] == "test" for q in queries)
    source = {"from": str(cfg.path.resolve()), **params, "rows": len(rows)}
    for name, text, n in (
        (QUERIES_FILE, jsonl(queries), len(queries)),
        (DEMOS_FILE, jsonl(demos), len(demos)),
        (SOURCE_FILE, json.dumps(source, indent=2) + "\n", 1),
    ):
        io.write_text(out / name, text)
        record.rows_out = n
        manifest.write(out / name, record)
    not_ten = sum(len(r["answers"]) != 10 for r in rows)
    return {
        "out": str(out),
        "from": str(cfg.path),
        "queries": len(queries),
        "train queries": len(queries) - n_test,
        "test queries": n_test,
        "demos": len(demos),
        "rows without 10 answers": not_ten,
        "files": [QUERIES_FILE, DEMOS_FILE, SOURCE_FILE],
        "next": f"ddai pointer embed {out} --embedder local --out STORE",
    }


def run_pointer_world(cfg: PointerWorldConfig) -> dict[str, Any]:
    """``ddai pointer world``: make and write the world (synthetic, or the user's set); its summary."""
    if cfg.from_file is not None:
        return build_world(
            UserSetConfig(
                path=cfg.from_file,
                out=cfg.out,
                seed=cfg.seed,
                n_demos=cfg.n_demos,
                test_frac=cfg.test_frac,
            )
        )
    same = ("seed", "n_queries", "dim", "n_topics", "test_frac", "clean_rate")
    n_demos = WorldConfig.n_demos if cfg.n_demos is None else cfg.n_demos
    world = WorldConfig(n_demos=n_demos, **{name: getattr(cfg, name) for name in same})
    return run_world(world, cfg.out)
