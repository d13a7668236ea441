"""The ``--embedder`` role on an OpenAI-compatible server, through the official ``openai`` SDK.

A ``[backends.NAME]`` table of kind ``openai`` serves ``--embedder`` with this class. A text alone
goes to the standard embeddings endpoint (``embeddings.create``); a text with images goes to the
same endpoint in its chat form (``POST /embeddings`` with ``messages``: the images, then the text),
the shape vLLM serves for multimodal embedding models (VLM2Vec, DSE, CLIP-like pooling models),
sent with the SDK's own ``post``. One request per item, so every vector is cached on its own
(key: model, text, the images' bytes) and a rerun pays for nothing twice. Options: ``dim``
(expected width; a server answering another width is a failure, not a silent mix), ``params``
(extra request fields, e.g. vLLM's ``add_special_tokens``).

Retries, concurrency, rate limits, the spending cap and accounting are the engine's, as for every
remote role; the SDK client and error mapping are the OpenAI backend's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from openai.types import CreateEmbeddingResponse

from ddai.pipelines.backends import context as ctx_mod
from ddai.pipelines.backends import media
from ddai.pipelines.backends.base import EmbedError, EmbedItem, run_sync
from ddai.pipelines.backends.cache import cache_key
from ddai.pipelines.backends.config import BackendSpec
from ddai.pipelines.backends.engine import Job, Outcome
from ddai.pipelines.backends.openai_backend import OpenAIClient
from ddai.pipelines.backends.remote import CHARS_PER_TOKEN, TOKENS_PER_IMAGE, ModelBackend
from ddai.pipelines.backends.retry import CallError, Failure
from ddai.pipelines.backends.usage import TokenUsage
from ddai.pipelines.records.deps import np


class OpenAIEmbedder(OpenAIClient, ModelBackend):
    """Texts, or texts with images, → unit vectors ``float32 [N, dim]`` from a remote model."""

    kind = "openai"

    def __init__(self, spec: BackendSpec, role: str, context: ctx_mod.Context) -> None:
        super().__init__(spec, role, context)
        self.dim = int(spec.options.get("dim", 0))  # 0: learned from the first answer

    # ------------------------------------------------------------------ the role
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_items([EmbedItem(t) for t in texts])

    def embed_items(self, items: Sequence[EmbedItem]) -> np.ndarray:
        """One unit vector per item, in order; ``EmbedError`` when any call failed for good."""
        outs = run_sync(self._run(list(items)))
        failed = Counter(o.reason for o in outs if isinstance(o, Failure))
        if failed:
            first = next(o for o in outs if isinstance(o, Failure))
            raise EmbedError(self.name, dict(failed), first.message())
        vecs = np.asarray([o.value["embedding"] for o in outs], dtype=np.float32)  # type: ignore[union-attr]
        vecs = vecs.reshape(len(items), -1)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        np.divide(vecs, norms, out=vecs, where=norms > 0)
        return vecs

    # ------------------------------------------------------------------ internals
    async def _run(self, items: list[EmbedItem]) -> list[Outcome | Failure]:
        jobs = [self._job_or_failure(it) for it in items]
        try:
            return await self.engine.run(jobs, call_site=self.context.call_site)
        finally:
            await self.aclose()

    def _requests(self, items: Sequence[EmbedItem | str]) -> list[EmbedItem]:
        """``plan`` takes texts too; an embedding has no output tokens."""
        return [EmbedItem(i) if isinstance(i, str) else i for i in items]

    def _job(self, item: EmbedItem) -> Job:
        images = list(item.images)
        extra = dict(self.spec.options.get("params") or {})
        key = cache_key(
            kind=self.spec.kind,
            model=self.spec.model,
            endpoint=self.spec.endpoint(),
            role=self.role,
            text=item.text,
            images=[media.fingerprint(i) for i in images],
            params=extra,
        )
        est = TokenUsage(len(item.text) // CHARS_PER_TOKEN + TOKENS_PER_IMAGE * len(images), 0)

        async def call() -> Outcome:
            client = self.client()
            if images:  # the chat form of the endpoint: images first, then the text
                content = [
                    {"type": "image_url", "image_url": {"url": media.load(i).data_url()}}
                    for i in images
                ] + [{"type": "text", "text": item.text}]
                resp = await client.post(
                    "/embeddings",
                    cast_to=CreateEmbeddingResponse,
                    body={
                        "model": self.spec.model,
                        "messages": [{"role": "user", "content": content}],
                        "encoding_format": "float",
                        **extra,
                    },
                )
            else:
                resp = await client.embeddings.create(
                    model=str(self.spec.model),
                    input=[item.text],
                    encoding_format="float",
                    extra_body=extra or None,
                )
            u = resp.usage
            usage = TokenUsage(u.prompt_tokens or 0, 0) if u else TokenUsage()
            if not resp.data:
                raise CallError(Failure("empty-answer", "the server returned no embedding"), usage)
            vec = [float(x) for x in resp.data[0].embedding]
            if self.dim and len(vec) != self.dim:
                raise CallError(
                    Failure("wrong-dim", f"got {len(vec)} numbers, expected dim = {self.dim}"),
                    usage,
                )
            return Outcome({"embedding": vec}, usage)

        return Job(key=key, call=call, estimate=est)
