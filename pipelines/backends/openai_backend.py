"""The OpenAI backend: chat completions or the Responses API, through the official ``openai`` SDK.

Works with any OpenAI-compatible server (vLLM, SGLang, a gateway): set ``base_url``. Options in the
``[backends.NAME]`` table: ``api = "chat" | "responses"`` (default chat); ``structured``:
``"json_schema"`` (default: strict structured output from the role's pydantic model),
``"json_object"`` (JSON mode) or ``"none"`` (plain text), for servers with less support; ``params``
(a table sent as extra request fields, e.g. ``reasoning_effort``). The SDK's own retries are off:
the engine retries, so every attempt is counted and ``retry-after`` honoured in one place.

Structured answers are requested with ``create`` and a response-format dict built once per
schema, then validated with the pydantic model; the SDK's ``parse`` helper rebuilds and walks the
strict schema on every call, which doubles the client's CPU per request at high concurrency.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import httpx2
import openai
from pydantic import BaseModel

from ddai.pipelines.backends import media
from ddai.pipelines.backends.config import BackendSpec, ConfigError
from ddai.pipelines.backends.prompts import Rendered
from ddai.pipelines.backends.remote import RemoteBackend
from ddai.pipelines.backends.retry import CallError, Failure, http_failure
from ddai.pipelines.backends.tasks import parse_structured
from ddai.pipelines.backends.usage import TokenUsage

STRUCTURED_MODES = ("json_schema", "json_object", "none")


@lru_cache(maxsize=32)
def strict_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in OpenAI's strict form: every property required, no extras.

    Enough for the flat output models in ``tasks`` (no nested objects or optional fields).
    """
    out = schema.model_json_schema()
    out["additionalProperties"] = False
    out["required"] = list(out.get("properties", {}))
    for prop in out.get("properties", {}).values():
        prop.pop("default", None)
    return out


def chat_response_format(schema: type[BaseModel] | None, mode: str) -> dict[str, Any] | None:
    """The chat-completions ``response_format`` for a role's output model."""
    if schema is None or mode == "none":
        return None
    if mode == "json_object":
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.__name__, "schema": strict_schema(schema), "strict": True},
    }


def responses_text_format(schema: type[BaseModel] | None, mode: str) -> dict[str, Any] | None:
    """The Responses API ``text`` parameter for a role's output model: the chat format, flat."""
    fmt = chat_response_format(schema, mode)
    return None if fmt is None else {"format": {"type": fmt["type"], **fmt.get("json_schema", {})}}


class OpenAIClient:
    """The ``openai`` SDK's client, error mapping and metadata call, for a ``ModelBackend``."""

    spec: BackendSpec
    client: Callable[[], openai.AsyncOpenAI]

    def _new_client(self, key: str) -> openai.AsyncOpenAI:
        conc = self.spec.concurrency
        return openai.AsyncOpenAI(
            api_key=key,
            base_url=self.spec.base_url,
            timeout=self.spec.timeout_s,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(
                limits=httpx2.Limits(
                    max_connections=max(1000, conc), max_keepalive_connections=max(100, conc)
                )
            ),
        )

    async def _close_client(self, client: openai.AsyncOpenAI) -> None:
        await client.close()

    def _classify(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, openai.APITimeoutError):
            return Failure("timeout", "the request timed out", retryable=True)
        if isinstance(exc, openai.APIConnectionError):
            return Failure("connection", str(exc), retryable=True)
        if isinstance(exc, openai.APIStatusError):
            return http_failure(exc.status_code, _error_message(exc), exc.response.headers)
        if isinstance(exc, json.JSONDecodeError):
            return Failure(
                "malformed-response", f"the server's response is not valid JSON ({exc.msg})"
            )
        return None

    async def _ping(self) -> str:
        models = await self.client().models.list()
        ids = [m.id for m in models.data]
        listed = "listed" if self.spec.model in ids else "not listed"
        return f"{len(ids)} models; {self.spec.model} {listed}"


class OpenAIBackend(OpenAIClient, RemoteBackend):
    kind = "openai"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api = str(self.spec.options.get("api", "chat"))
        if self.api not in ("chat", "responses"):
            raise ConfigError(
                f"[backends.{self.name}] api must be 'chat' or 'responses', got {self.api!r}"
            )
        self.structured = str(self.spec.options.get("structured", "json_schema"))
        if self.structured not in STRUCTURED_MODES:
            raise ConfigError(
                f"[backends.{self.name}] structured must be one of {', '.join(STRUCTURED_MODES)}, "
                f"got {self.structured!r}"
            )

    def _sdk_params(self) -> dict[str, Any]:
        return {"api": self.api, "structured": self.structured}

    # ------------------------------------------------------------------ one attempt
    async def _complete(
        self, rendered: Rendered, images: list[str], schema: type[BaseModel] | None
    ) -> tuple[dict[str, Any], TokenUsage]:
        if self.api == "responses":
            return await self._responses(rendered, images, schema)
        return await self._chat(rendered, images, schema)

    async def _chat(
        self, rendered: Rendered, images: list[str], schema: type[BaseModel] | None
    ) -> tuple[dict[str, Any], TokenUsage]:
        user: str | list[dict[str, Any]] = rendered.user
        if images:  # text and images in the prompt's order (``media.IMAGE_SLOT``)
            user = [
                {"type": "text", "text": v}
                if kind == "text"
                else {"type": "image_url", "image_url": {"url": media.load(v).data_url()}}
                for kind, v in media.interleave(rendered.user, images)
            ]
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": rendered.system}] if rendered.system else []
        )
        messages.append({"role": "user", "content": user})
        kwargs = self._common_kwargs(max_key="max_completion_tokens")
        fmt = chat_response_format(schema, self.structured)
        if fmt is not None:
            kwargs["response_format"] = fmt
        resp = await self.client().chat.completions.create(messages=messages, **kwargs)
        usage = _chat_usage(resp)
        if not resp.choices:  # some servers answer a filtered or failed call so
            raise CallError(
                Failure(
                    "no-choices",
                    f"the server answered with an empty `choices` list (no answer from model "
                    f"{self.spec.model!r})",
                ),
                usage,
            )
        msg = resp.choices[0].message
        if getattr(msg, "refusal", None):
            raise CallError(Failure("refusal", str(msg.refusal)[:200]), usage)
        if resp.choices[0].finish_reason == "length":
            raise CallError(
                Failure("truncated", "the answer hit max_tokens before it was complete"), usage
            )
        return _value(msg.content, schema, usage), usage

    async def _responses(
        self, rendered: Rendered, images: list[str], schema: type[BaseModel] | None
    ) -> tuple[dict[str, Any], TokenUsage]:
        content: list[dict[str, Any]] = [
            {"type": "input_text", "text": v}
            if kind == "text"
            else {"type": "input_image", "image_url": media.load(v).data_url()}
            for kind, v in media.interleave(rendered.user, images)
        ]
        kwargs = self._common_kwargs(max_key="max_output_tokens")
        if rendered.system:
            kwargs["instructions"] = rendered.system
        fmt = responses_text_format(schema, self.structured)
        if fmt is not None:
            kwargs["text"] = fmt
        resp = await self.client().responses.create(
            input=[{"role": "user", "content": content}], **kwargs
        )
        usage = _responses_usage(resp)
        return _value(resp.output_text, schema, usage), usage

    def _common_kwargs(self, *, max_key: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.spec.model, "temperature": self.spec.temperature}
        if self.spec.max_tokens:
            kwargs[max_key] = self.spec.max_tokens
        extra = self.spec.options.get("params")
        if extra:
            kwargs["extra_body"] = dict(extra)
        return kwargs


def _chat_usage(resp: Any) -> TokenUsage:
    u = resp.usage
    return TokenUsage(u.prompt_tokens or 0, u.completion_tokens or 0) if u else TokenUsage()


def _responses_usage(resp: Any) -> TokenUsage:
    u = resp.usage
    return TokenUsage(u.input_tokens or 0, u.output_tokens or 0) if u else TokenUsage()


def _value(text: str | None, schema: type[BaseModel] | None, usage: TokenUsage) -> dict[str, Any]:
    if schema is None:
        return {"text": text or ""}
    try:
        return parse_structured(text, schema)
    except CallError as e:
        raise CallError(e.failure, usage) from None


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:200]
    return exc.message[:200]
