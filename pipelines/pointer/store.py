"""The embedding store (seed 002, §2.3): per query its ``query_emb [d]`` and the embeddings of its
candidate pool ``cand_emb [K, d]``, keyed by ``query_id``.

On disk it is safetensors (stacked tensors, ids in the header metadata) or Parquet (one row per
query); never a pickle. The pool of each query is its ``k`` most cosine-similar demonstrations,
most similar first, so pool index 0 is the nearest neighbour.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines.pointer.configs import SUFFIXES
from ddai.pipelines.records.deps import np, pa, pq
from ddai.pipelines.records.lazy import lazy_module

io = lazy_module("ddai.pipelines.store.io")  # the writers: not for `pointer --help`

safetensors_np = lazy_module("safetensors.numpy")

STORE_FORMAT = "ddai.pointer.embedding_store"
STORE_VERSION = "1"


@dataclass
class EmbeddingStore:
    """Query and candidate-pool embeddings.

    ``query_emb [N, d]``, ``cand_emb [N, K, d]``, ``cand_sim [N, K]`` (cosine to the query),
    ``cand_ids`` N lists of K demonstration ids; row ``i`` belongs to ``query_ids[i]``.
    """

    query_ids: list[str]
    query_emb: np.ndarray
    cand_emb: np.ndarray
    cand_ids: list[list[str]]
    cand_sim: np.ndarray
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.query_ids)
        if self.query_emb.shape[0] != n or self.cand_emb.shape[0] != n or len(self.cand_ids) != n:
            raise ValueError("embedding store: query ids, query_emb and cand_emb disagree on N")
        self._row = {q: i for i, q in enumerate(self.query_ids)}
        if len(self._row) != n:
            raise ValueError("embedding store: duplicate query ids")

    def __len__(self) -> int:
        return len(self.query_ids)

    def __contains__(self, query_id: object) -> bool:
        return query_id in self._row

    def __getitem__(self, query_id: str) -> tuple[np.ndarray, np.ndarray]:
        """``(query_emb [d], cand_emb [K, d])`` of one query."""
        i = self._row[query_id]
        return self.query_emb[i], self.cand_emb[i]

    def row(self, query_id: str) -> int:
        return self._row[query_id]

    @property
    def k(self) -> int:
        return int(self.cand_emb.shape[1])

    @property
    def dim(self) -> int:
        return int(self.query_emb.shape[1])

    def subset(self, query_ids: list[str]) -> EmbeddingStore:
        rows = [self._row[q] for q in query_ids]
        return EmbeddingStore(
            list(query_ids),
            self.query_emb[rows],
            self.cand_emb[rows],
            [self.cand_ids[r] for r in rows],
            self.cand_sim[rows],
            dict(self.meta),
        )


def top_k_pools(
    query_emb: np.ndarray, demo_emb: np.ndarray, k: int, exclude: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``k`` most cosine-similar demonstrations, most similar first.

    ``query_emb [N, d]``, ``demo_emb [M, d]``; ``exclude [N, M]`` bool marks pairs never to pool
    (e.g. a query that is itself a demonstration). Returns ``(rows [N, k] int64, sims [N, k])``;
    ties keep the lower demonstration row first.
    """
    if not 2 <= k <= demo_emb.shape[0]:
        raise ValueError(f"k must be in 2..{demo_emb.shape[0]} (the demonstrations), got {k}")
    q = query_emb / np.linalg.norm(query_emb, axis=1, keepdims=True).clip(min=1e-12)
    d = demo_emb / np.linalg.norm(demo_emb, axis=1, keepdims=True).clip(min=1e-12)
    sims = (q @ d.T).astype(np.float32)  # [N, M]
    if exclude is not None:
        sims = np.where(exclude, -np.inf, sims)
    rows = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(sims, rows, axis=1)
    if not np.isfinite(top).all():
        raise ValueError(f"fewer than k={k} demonstrations left for some query after exclusion")
    return rows.astype(np.int64), top


def build_store(
    query_ids: list[str],
    query_emb: np.ndarray,
    demo_ids: list[str],
    demo_emb: np.ndarray,
    k: int,
    *,
    meta: dict[str, str] | None = None,
) -> EmbeddingStore:
    """Pool each query's ``k`` nearest demonstrations (a demonstration never pools itself)."""
    exclude = np.asarray(query_ids, dtype=object)[:, None] == np.asarray(demo_ids, dtype=object)
    rows, sims = top_k_pools(query_emb, demo_emb, k, exclude if exclude.any() else None)
    q = query_emb.astype(np.float32)
    cand = demo_emb.astype(np.float32)[rows]  # [N, K, d]
    ids = [[demo_ids[int(r)] for r in row] for row in rows]
    return EmbeddingStore(list(query_ids), q, cand, ids, sims, {"k": str(k), **(meta or {})})


# ---------------------------------------------------------------- files


def save_store(store: EmbeddingStore, path: str | Path) -> None:
    """Write atomically as safetensors or Parquet, chosen by the suffix."""
    path = Path(path)
    meta = {**store.meta, "format": STORE_FORMAT, "version": STORE_VERSION}
    if path.suffix == ".safetensors":
        demo_ids = sorted({d for row in store.cand_ids for d in row})
        index = {d: i for i, d in enumerate(demo_ids)}
        cand_index = np.array([[index[d] for d in row] for row in store.cand_ids], np.int64)
        meta |= {"query_ids": json.dumps(store.query_ids), "demo_ids": json.dumps(demo_ids)}
        tensors = {
            "query_emb": np.ascontiguousarray(store.query_emb, np.float32),
            "cand_emb": np.ascontiguousarray(store.cand_emb, np.float32),
            "cand_sim": np.ascontiguousarray(store.cand_sim, np.float32),
            "cand_index": cand_index,
        }
        with io.atomic_path(path) as tmp:
            safetensors_np.save_file(tensors, str(tmp), metadata=meta)
            _sort_metadata(tmp)
    elif path.suffix == ".parquet":
        n, k, d = store.cand_emb.shape
        table = pa.table(
            {
                "query_id": pa.array(store.query_ids, pa.string()),
                "query_emb": _fixed(store.query_emb.reshape(n, d), d),
                "cand_emb": pa.FixedSizeListArray.from_arrays(
                    _fixed(store.cand_emb.reshape(n * k, d), d), k
                ),
                "candidate_ids": pa.array(store.cand_ids, pa.list_(pa.string())),
                "cand_sim": _fixed(store.cand_sim, k),
            }
        )
        io.write_parquet(path, table, metadata=meta)
    else:
        raise ValueError(f"{path}: an embedding store ends in {' or '.join(SUFFIXES)}")


def _sort_metadata(path: Path) -> None:
    """Rewrite a safetensors header with its ``__metadata__`` keys sorted, so that the same store
    is the same bytes (and sha256) on every save.

    safetensors (0.8 included) writes the metadata keys in a hash map's random order, a new one
    each save (upstream issue #584). The format reads a header whose JSON keys come in any order
    and is padded with trailing spaces, and its data offsets count from the end of the header.
    Python's compact JSON is the shortest spelling of the header (only the escapes JSON
    requires), so the sorted header fits over the one safetensors wrote and is written in place.
    """
    with open(path, "r+b") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
        header["__metadata__"] = dict(sorted(header.get("__metadata__", {}).items()))
        text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
        if len(text) > size:  # never seen; a guard, as writing it would overrun the tensors
            raise RuntimeError(f"{path}: the sorted safetensors header outgrew the original")
        fh.seek(8)
        fh.write(text.ljust(size))


def _fixed(x: np.ndarray, width: int) -> pa.FixedSizeListArray:
    flat = pa.array(np.ascontiguousarray(x, np.float32).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, width)


def load_store(path: str | Path) -> EmbeddingStore:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no embedding store there; make one with `ddai pointer embed`"
        )
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as fh:
            meta: dict[str, Any] = dict(fh.metadata() or {})
        _check(meta, path)
        t = safetensors_np.load_file(str(path))
        demo_ids = json.loads(meta.pop("demo_ids"))
        query_ids = json.loads(meta.pop("query_ids"))
        ids = [[demo_ids[int(i)] for i in row] for row in t["cand_index"]]
        return EmbeddingStore(query_ids, t["query_emb"], t["cand_emb"], ids, t["cand_sim"], meta)
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        _check(meta, path)
        n = table.num_rows
        q = _numpy(table["query_emb"]).reshape(n, -1)
        sim = _numpy(table["cand_sim"]).reshape(n, -1)
        cand = _numpy(table["cand_emb"]).reshape(n, sim.shape[1], q.shape[1])
        return EmbeddingStore(
            table["query_id"].to_pylist(), q, cand, table["candidate_ids"].to_pylist(), sim, meta
        )
    raise ValueError(f"{path}: an embedding store ends in {' or '.join(SUFFIXES)}")


def _numpy(col: pa.ChunkedArray) -> np.ndarray:
    arr = col.combine_chunks()
    while pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type):
        arr = arr.flatten()
    return arr.to_numpy(zero_copy_only=False).astype(np.float32)


def _check(meta: dict[str, Any], path: Path) -> None:
    if meta.get("format") != STORE_FORMAT:
        raise ValueError(f"{path} is not a ddai pointer embedding store (no format tag)")
    meta.pop("format", None)
    meta.pop("version", None)
