"""``ddai pointer embed``: a world's queries and demonstrations → an embedding store.

The ``world`` embedder reads the world's own latent embeddings (``embeddings.safetensors``);
any other name is an ``Embedder`` backend (``--embedder``), applied to the query's question and
to each demonstration's question and answer. When the rows carry images (a user's VQA set from
``pointer world --from``) and the backend embeds images too (``embed_items``: the local default
and ``kind = "openai"`` servers do), each row is embedded as its image with that text, as seed
002's query embedding ("image + question") asks; a text-only backend embeds the text and the
summary says the images were left out.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ddai.pipelines.pointer import world as world_mod
from ddai.pipelines.pointer.configs import WORLD_EMBEDDER, EmbedConfig
from ddai.pipelines.pointer.store import build_store, save_store
from ddai.pipelines.records.deps import np
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.records.progress import bar

# the store's commit machinery and the backends load when embeddings are made, not for --help
manifest = lazy_module("ddai.pipelines.store.manifest")
backends_base = lazy_module("ddai.pipelines.backends.base")

if TYPE_CHECKING:
    from ddai.pipelines.backends.base import EmbedItem


def _batched(
    fn: Any, xs: list[str] | list[EmbedItem], batch_size: int, progress: bool
) -> np.ndarray:
    """``[len(xs), dim]`` float32 from ``fn`` (an ``Embedder``'s ``embed`` of texts or a
    ``MultimodalEmbedder``'s ``embed_items``), called ``batch_size`` rows at a time."""
    out = []
    with bar("embedding", len(xs), enabled=progress) as advance:
        for i in range(0, len(xs), batch_size):
            chunk = xs[i : i + batch_size]
            out.append(np.asarray(fn(chunk), dtype=np.float32))
            advance(len(chunk))
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def row_images(row: dict[str, Any]) -> list[str]:
    """A query's or demonstration's image paths (``images``, else ``image``)."""
    if row.get("images"):
        return [str(i) for i in row["images"]]
    return [str(row["image"])] if row.get("image") else []


def run_embed(cfg: EmbedConfig, *, embedder: Any = None) -> dict[str, Any]:
    """Build and write the store; ``embedder`` overrides the backend lookup (tests)."""
    world_mod.require_world(cfg.world)
    inputs = [cfg.world / world_mod.QUERIES_FILE, cfg.world / world_mod.DEMOS_FILE]
    if cfg.embedder == WORLD_EMBEDDER:
        inputs.append(cfg.world / world_mod.EMBEDDINGS_FILE)
        if not inputs[-1].is_file():
            raise ValueError(
                f"{cfg.world} has no {world_mod.EMBEDDINGS_FILE}; pass --embedder NAME "
                "(e.g. local) to embed the texts with an Embedder backend"
            )
    skip = ("force", "progress", "out", "dry_run", "max_cost")  # none changes the vectors
    params = {k: str(v) for k, v in asdict(cfg).items() if k not in skip}
    if (
        not cfg.dry_run
        and not cfg.force
        and manifest.is_fresh(cfg.out, "pointer.embed", params, inputs)
    ):
        return {
            "store": str(cfg.out),
            "skipped": "inputs and parameters unchanged (--force reruns)",
        }
    w = world_mod.load_world(cfg.world, embeddings=cfg.embedder == WORLD_EMBEDDER)
    n_images = embedded_images = 0
    if cfg.embedder == WORLD_EMBEDDER:
        if cfg.dry_run:
            return {"world": str(cfg.world), "embedder": cfg.embedder, "to_call": 0}
        q_emb, d_emb = w.query_emb, w.demo_emb
    else:
        if embedder is None:
            from ddai.pipelines.backends import build, resolve
            from ddai.pipelines.backends.config import require_key

            spec = resolve("embedder", cfg.embedder)
            if not cfg.dry_run:  # a remote embedder without its key: refused, not 90 × no-key
                require_key(spec, "embedder", "--embedder")
            embedder = build(
                spec,
                "embedder",
                call_site="pointer.embed",
                max_cost=cfg.max_cost,
                progress=None if cfg.progress else False,  # None: the backend's own default
            )
        # a query is embedded as its question, a demonstration as its question and answer
        texts = [str(q.get("question", "")) for q in w.queries] + [
            f"{d.get('question', '')} {d.get('answer', '')}".strip() for d in w.demos
        ]
        images = [row_images(r) for r in (*w.queries, *w.demos)]
        n_images = sum(map(len, images))
        with_images = bool(n_images and hasattr(embedder, "embed_items"))
        items = [
            backends_base.EmbedItem(t, tuple(i) if with_images else ())
            for t, i in zip(texts, images, strict=True)
        ]
        if cfg.dry_run:
            plan = embedder.plan(items) if hasattr(embedder, "plan") else {"to_call": len(items)}
            return {"world": str(cfg.world), "embedder": cfg.embedder, **plan}
        fn, xs = (embedder.embed_items, items) if with_images else (embedder.embed, texts)
        vecs = _batched(fn, xs, cfg.batch_size, cfg.progress)
        embedded_images = n_images if with_images else 0
        q_emb, d_emb = vecs[: len(w.queries)], vecs[len(w.queries) :]
    record = manifest.start("pointer.embed", params, inputs)
    store = build_store(
        [q["query_id"] for q in w.queries],
        q_emb,
        [d["demo_id"] for d in w.demos],
        d_emb,
        min(cfg.k, len(w.demos)),
        meta={"embedder": cfg.embedder, "world": str(cfg.world)},
    )
    save_store(store, cfg.out)
    record.rows_in = len(w.queries) + len(w.demos)
    record.rows_out = len(store)
    manifest.write(cfg.out, record)
    return (
        {
            "store": str(cfg.out),
            "queries": len(store),
            "k": store.k,
            "dim": store.dim,
            "embedder": cfg.embedder,
            "mean cosine of pool": round(float(store.cand_sim.mean()), 4),
        }
        | (
            {
                "note": f"--k {cfg.k} is more than the world's {len(w.demos)} demonstrations: k {store.k}"
            }
            if cfg.k > len(w.demos)
            else {}
        )
        | (
            {"images embedded": embedded_images}
            if embedded_images
            else {"images left out": f"{n_images} (embedder {cfg.embedder!r} embeds text only)"}
            if n_images
            else {}
        )
    )
