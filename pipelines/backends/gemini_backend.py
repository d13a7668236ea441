"""The Gemini backend, through the official ``google-genai`` SDK.

Structured roles ask for JSON with the role's pydantic model as ``response_schema`` (the judge:
``{"score": number}``). Two SDK traits are handled here: ``response.parsed`` is silently ``None``
when the answer is not valid JSON for the schema (recorded as ``malformed-json`` with the text's
start, never as a score), and the SDK retries nothing unless told (the engine does the retrying).
Options: ``api_version`` (e.g. ``v1beta``; default: the SDK's), ``params`` (extra
``GenerateContentConfig`` fields such as ``thinking_config``).
"""

from __future__ import annotations

import json
from typing import Any

from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from pydantic import BaseModel

from ddai.pipelines.backends import media
from ddai.pipelines.backends.prompts import Rendered
from ddai.pipelines.backends.remote import RemoteBackend
from ddai.pipelines.backends.retry import CallError, Failure, http_failure
from ddai.pipelines.backends.tasks import parse_structured
from ddai.pipelines.backends.usage import TokenUsage


class GeminiBackend(RemoteBackend):
    kind = "gemini"

    def _new_client(self, key: str) -> genai.Client:
        http = types.HttpOptions(
            base_url=self.spec.base_url,
            api_version=self.spec.options.get("api_version"),
            timeout=int(self.spec.timeout_s * 1000),
        )
        return genai.Client(api_key=key, http_options=http)

    async def _close_client(self, client: genai.Client) -> None:
        await client.aio.aclose()

    def _sdk_params(self) -> dict[str, Any]:
        return {"api_version": self.spec.options.get("api_version")}

    async def _complete(
        self, rendered: Rendered, images: list[str], schema: type[BaseModel] | None
    ) -> tuple[dict[str, Any], TokenUsage]:
        parts = []
        for kind, v in media.interleave(rendered.user, images):  # the prompt's order
            if kind == "text":
                parts.append(types.Part.from_text(text=v))
            else:
                img = media.load(v)
                parts.append(types.Part.from_bytes(data=img.data, mime_type=img.mime))
        config = types.GenerateContentConfig(
            system_instruction=rendered.system or None,
            temperature=self.spec.temperature,
            max_output_tokens=self.spec.max_tokens,
            response_mime_type="application/json" if schema is not None else None,
            response_schema=schema,
            **(self.spec.options.get("params") or {}),
        )
        resp = await self.client().aio.models.generate_content(
            model=self.spec.model, contents=[types.Content(role="user", parts=parts)], config=config
        )
        usage = _usage(resp)
        text = resp.text
        if schema is None:
            return {"text": text or ""}, usage
        if isinstance(resp.parsed, BaseModel):
            return resp.parsed.model_dump(), usage
        # ``parsed`` is None on invalid JSON: re-validate the raw text to say what was wrong.
        try:
            return parse_structured(text, schema), usage
        except CallError as e:
            raise CallError(e.failure, usage) from None

    def _classify(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, genai_errors.APIError):
            headers = getattr(exc.response, "headers", None) or {}
            return http_failure(
                int(exc.code or 0), str(exc.message or exc.status or "")[:200], dict(headers)
            )
        if isinstance(exc, json.JSONDecodeError):
            return Failure(
                "malformed-response", f"the server's response is not valid JSON ({exc.msg})"
            )
        name = type(exc).__name__
        module = type(exc).__module__
        if module.startswith(("aiohttp", "httpx")) or isinstance(exc, ConnectionError):
            timeout = "Timeout" in name
            return Failure(
                "timeout" if timeout else "connection", f"{name}: {exc}"[:200], retryable=True
            )
        return None

    async def _ping(self) -> str:
        model = await self.client().aio.models.get(model=self.spec.model)
        return f"model {model.name} found"


def _usage(resp: types.GenerateContentResponse) -> TokenUsage:
    u = resp.usage_metadata
    if u is None:
        return TokenUsage()
    # Thinking tokens are billed as output.
    return TokenUsage(
        u.prompt_token_count or 0, (u.candidates_token_count or 0) + (u.thoughts_token_count or 0)
    )
