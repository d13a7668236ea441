"""Policy turns from any OpenAI-compatible completions server (``--generate-via NAME``): a vLLM
``vllm serve``, SGLang, TGI … named as a ``[backends.NAME]`` table of kind ``openai`` in
``ddai.toml`` (``base_url``, ``model``, ``api_key_env``, ``timeout_s``, ``max_retries``).

Off-policy collection and evaluation only: the server's weights are whatever it serves, so the
log-probs are informational. Each turn is one ``completions.create`` over every live context,
sent as token ids (no re-tokenisation drift). Token ids come back from the server when it returns
them (vLLM with ``return_token_ids``); otherwise the text is tokenised and a turn that stopped is
closed with the eos token, as the local sampler's turns are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddai.trainer.common import TrainConfigError
from ddai.trainer.episode.rollout import Sampler


class OpenAICompletionsSampler(Sampler):
    """One batched completions request per turn through the ``openai`` SDK."""

    def __init__(
        self,
        client: Any,
        model: str,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        stop_ids: Sequence[int] | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.tok = tokenizer
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.stop_ids = list(stop_ids or [tokenizer.eos_token_id])

    def sample(self, contexts, max_new_tokens, images=None):
        if images is not None and any(im is not None for im in images):
            raise NotImplementedError("image observations are sampled with HFSampler only")
        extra: dict[str, Any] = {"stop_token_ids": self.stop_ids, "return_token_ids": True}
        if self.top_k:
            extra["top_k"] = self.top_k
        resp = self.client.completions.create(
            model=self.model,
            prompt=[list(c) for c in contexts],
            max_tokens=max(max_new_tokens),
            temperature=self.temperature,
            top_p=self.top_p,
            logprobs=0,
            extra_body=extra,
        )
        choices = sorted(resp.choices, key=lambda c: c.index)
        if len(choices) != len(contexts):
            raise RuntimeError(
                f"the server answered {len(choices)} completions for {len(contexts)} prompts"
            )
        return [self._turn(c, cap) for c, cap in zip(choices, max_new_tokens, strict=True)]

    def _turn(self, choice: Any, cap: int) -> tuple[list[int], list[float]]:
        ids = getattr(choice, "token_ids", None)
        if ids is None:
            ids = self.tok.encode(choice.text or "", add_special_tokens=False)
            if choice.finish_reason == "stop":
                ids = [*ids, self.stop_ids[0]]
        ids = [int(i) for i in ids][:cap]
        lps = getattr(getattr(choice, "logprobs", None), "token_logprobs", None) or []
        lps = [float(x) if x is not None else 0.0 for x in lps][: len(ids)]
        return ids, lps + [0.0] * (len(ids) - len(lps))


def sampler_from_backend(
    name: str,
    tokenizer: Any,
    *,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    config: dict[str, Any] | None = None,
) -> OpenAICompletionsSampler:
    """The sampler for ``--generate-via NAME``: a configured backend of kind ``openai``."""
    import openai

    from ddai.pipelines.backends.config import ConfigError, configured

    try:
        specs = configured(config)
    except ConfigError as e:
        raise TrainConfigError(str(e)) from e
    spec = specs.get(name)
    if spec is None or spec.kind != "openai":
        known = sorted(n for n, s in specs.items() if s.kind == "openai")
        raise TrainConfigError(
            f"--generate-via {name!r}: no [backends.{name}] table of kind 'openai' in ddai.toml "
            f"(known: {', '.join(known) or 'none'}); add one with base_url and model"
        )
    client = openai.OpenAI(
        api_key=spec.api_key() or "EMPTY",
        base_url=spec.base_url,
        timeout=spec.timeout_s,
        max_retries=spec.max_retries,
    )
    return OpenAICompletionsSampler(
        client, str(spec.model), tokenizer, temperature=temperature, top_p=top_p, top_k=top_k
    )
