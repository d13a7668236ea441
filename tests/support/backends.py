"""Scripted generator and judge backends for training tests: a constant answer, and seeded random
scores that give every GRPO group reward variance (so every step has a gradient); and the backend
spec the SDK tests point at the fake model server, with a one-pixel PNG to show it."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# A 1x1 PNG.
PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def quick_spec(name: str, kind: str, model: str, base_url: str, **kw: Any) -> Any:
    """A ``BackendSpec`` for a fake server that fails fast: 2 s timeout, 2 retries, 4 requests at
    a time, 10 ms backoff (``kw`` overrides any of them, ``options`` as a whole)."""
    from ddai.pipelines.backends import BackendSpec

    base = {
        "timeout_s": 2.0,
        "max_retries": 2,
        "concurrency": 4,
        "options": {"backoff_base_s": 0.01},
    }
    return BackendSpec(name=name, kind=kind, model=model, base_url=base_url, **(base | kw))


def backend_toml(folder: Path, name: str, base_url: str, **fields: Any) -> Path:
    """``folder/ddai.toml`` declaring one OpenAI-compatible backend ``name`` at ``base_url``
    (``fields``: its other keys, e.g. ``model``, ``cache``; strings, numbers and booleans)."""
    lines = [f"[backends.{name}]", 'kind = "openai"', f"base_url = {json.dumps(base_url)}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
    path = folder / "ddai.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class ConstantGenerator:
    """Answers every request with ``answer``."""

    name = "constant"

    def __init__(self, answer: str = "2021") -> None:
        self.answer = answer

    async def generate(self, reqs):
        from ddai.pipelines.backends import GenerateResult

        return [GenerateResult(answer=self.answer) for _ in reqs]


class RandomJudge:
    """Seeded uniform scores; ``calls`` counts the requests judged."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.calls = 0

    async def judge(self, reqs):
        from ddai.pipelines.backends import JudgeResult

        self.calls += len(reqs)
        return [JudgeResult(score=self.rng.random()) for _ in reqs]


def judge_then_cancel(make_judge: Callable[[], Any], reqs: Sequence[Any], srv: Any, after: int):
    """Judge ``reqs`` with ``make_judge()`` (built inside the event loop) and cancel the call once
    the fake server ``srv`` has received ``after`` requests; the call must end cancelled, and its
    cache is closed after (its answers committed)."""
    import asyncio

    import pytest

    async def cancel_halfway() -> None:
        judge = make_judge()
        task = asyncio.create_task(judge.judge(reqs))
        while srv.requests < after:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # as a command ends: the cache's writer commits what it holds before anyone counts it
        if (cache := getattr(judge.context, "cache", None)) is not None:
            cache.close()

    asyncio.run(cancel_halfway())


def toy_backends(judge: Any = None) -> Any:
    """The trainers' backends on the toy corpus: local search (no cache), ``ConstantGenerator``
    and ``judge`` (default: ``RandomJudge`` seed 0)."""
    from ddai.pipelines.backends import get_backend
    from ddai.trainer import toy
    from ddai.trainer.episode.episodes import Backends

    search = get_backend("search", "local", corpus=toy.corpus(), cache=False)
    return Backends(search=search, generator=ConstantGenerator(), judge=judge or RandomJudge())


def keyless_backend(
    tmp_path: Path, monkeypatch: Any, name: str, kind: str, model: str, var: str
) -> None:
    """A ``ddai.toml`` in ``tmp_path`` with one remote backend ``name`` whose key variable
    ``var`` is unset, in effect (``DDAI_CONFIG``), with the workspace (call cache) under
    ``tmp_path/home``."""
    monkeypatch.delenv(var, raising=False)
    cfg = tmp_path / "ddai.toml"
    cfg.write_text(
        f'[backends.{name}]\nkind = "{kind}"\nmodel = "{model}"\napi_key_env = "{var}"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DDAI_CONFIG", str(cfg))
    monkeypatch.setenv("DDAI_HOME", str(tmp_path / "home"))
