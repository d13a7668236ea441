"""Backend configuration: named backends in ``ddai.toml`` and which one each role uses.

```toml
[backends.flash]
kind = "gemini"                # see KINDS
model = "gemini-2.5-flash"
api_key_env = "GEMINI_API_KEY" # the key is read from this variable, never stored
concurrency = 32
timeout_s = 30
price_in_per_mtok = 0.30
price_out_per_mtok = 2.50

[roles]
judge = "flash"
```

A role's backend is chosen by precedence: the role's flag (``--judge NAME``) > ``$DDAI_JUDGE`` >
``[roles] judge`` > ``local``. ``local`` (and each local kind's own name, e.g. ``bm25``, ``hash``)
needs no configuration.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ddai.pipelines.backends.base import ROLES
from ddai.pipelines.backends.usage import Price
from ddai.pipelines.store import workspace

# kind -> the roles it can serve.
REMOTE_KINDS: dict[str, tuple[str, ...]] = {
    "openai": ("judge", "generator", "rewriter", "verifier", "vqa", "embedder", "vetter"),
    "gemini": ("judge", "generator", "rewriter", "verifier", "vqa", "vetter"),
}
# Services that are not models: no `model`, no key by default, no token cost.
SERVICE_KINDS: dict[str, tuple[str, ...]] = {
    "search-http": ("search",),
}
LOCAL_KINDS: dict[str, tuple[str, ...]] = {
    "local-judge": ("judge",),
    "extractive": ("generator",),
    "identity": ("rewriter",),
    "local-verifier": ("verifier",),
    "simulator": ("vqa",),
    "bm25": ("search",),
    "minilm": ("embedder",),
    "hash": ("embedder",),
    "local-vetter": ("vetter",),
}
KINDS: dict[str, tuple[str, ...]] = {**REMOTE_KINDS, **SERVICE_KINDS, **LOCAL_KINDS}
# Kinds whose answers are not cached unless the table says `cache = true` (a search index may
# change under a run; a model at temperature 0 does not).
UNCACHED_BY_DEFAULT = frozenset({"search-http"})

# What the built-in name ``local`` means for each role.
LOCAL_DEFAULT: dict[str, str] = {
    "judge": "local-judge",
    "generator": "extractive",
    "rewriter": "identity",
    "verifier": "local-verifier",
    "vqa": "simulator",
    "search": "bm25",
    "embedder": "minilm",
    "vetter": "local-vetter",
}

_DEFAULT_API_KEY_ENV = {"openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY"}


class ConfigError(ValueError):
    """A backend name or table that cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class BackendSpec:
    """One named backend (a ``[backends.NAME]`` table).

    Fields a kind does not use are ignored. ``options`` holds the kind-specific rest of the table
    (e.g. a local judge's ``metric``, an OpenAI backend's ``api = "responses"``).
    """

    name: str
    kind: str
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 4
    rpm: float | None = None
    tpm: float | None = None
    price_in_per_mtok: float | None = None  # USD per million tokens; None: not set
    price_out_per_mtok: float | None = None
    prompt: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    cache: bool = True
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def remote(self) -> bool:
        return self.kind in REMOTE_KINDS

    @property
    def service(self) -> bool:
        """A non-model service over the network (e.g. ``search-http``): pinged, never priced."""
        return self.kind in SERVICE_KINDS

    def price(self) -> Price | None:
        """What its tokens cost: local kinds are free; a remote model backend that sets neither
        price field is not priced (None: its cost is unknown, which a 0 would hide)."""
        if not self.remote:
            return Price()
        if self.price_in_per_mtok is None and self.price_out_per_mtok is None:
            return None
        return Price(self.price_in_per_mtok or 0.0, self.price_out_per_mtok or 0.0)

    def price_note(self) -> str:
        """Why a cost estimate is missing and how to give one (for an unpriced backend)."""
        return (
            f"not priced: backend {self.name!r} sets no price; add price_in_per_mtok and "
            f"price_out_per_mtok (USD per million tokens, 0 for a free server) to its "
            f"[backends.{self.name}] table in ddai.toml"
        )

    def key_env(self) -> str | None:
        """The variable the key is read from: ``api_key_env``, else the kind's usual one."""
        return self.api_key_env or _DEFAULT_API_KEY_ENV.get(self.kind)

    def api_key(self) -> str | None:
        """The key from the environment variable this backend names (None when unset)."""
        var = self.key_env()
        return os.environ.get(var) if var else None

    def describe(self) -> dict[str, Any]:
        """A printable view: every setting but never a key (only the variable's name)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, {}, "")}
        if self.remote:
            out["api_key_env"] = self.key_env()
            out["api_key_set"] = self.api_key() is not None
        return out

    def endpoint(self) -> dict[str, Any]:
        """Where a call goes, for the cache key: backend kind, base URL (None: the SDK's default)
        and model. The generation settings (temperature, max tokens, extra request fields, the
        API style) are keyed beside it as they are resolved (``RemoteBackend._params``), so a
        setting written out at its default does not miss."""
        base = self.base_url.rstrip("/") if self.base_url else None
        return {"kind": self.kind, "base_url": base, "model": self.model}

    def endpoint_label(self) -> str:
        """``endpoint`` for people (the cache's ``endpoint`` column): kind, URL, model."""
        base = self.base_url.rstrip("/") if self.base_url else "default URL"
        return f"{self.kind} {base} {self.model or '-'}"


_FIELDS = {f.name for f in dataclasses.fields(BackendSpec)} - {"name", "options"}


def spec_from_table(name: str, table: dict[str, Any]) -> BackendSpec:
    """Build a spec from a ``[backends.NAME]`` table; unknown keys go to ``options``."""
    if "kind" not in table:
        raise ConfigError(f"[backends.{name}] has no `kind`; set one of: {', '.join(KINDS)}")
    kind = str(table["kind"])
    if kind not in KINDS:
        raise ConfigError(
            f"[backends.{name}] kind {kind!r} is unknown; use one of: {', '.join(KINDS)}"
        )
    if "api_key" in table:
        raise ConfigError(
            f"[backends.{name}] holds `api_key`; keys are never read from files: put the key in an "
            "environment variable and name it with `api_key_env`"
        )
    known = {k: v for k, v in table.items() if k in _FIELDS}
    if kind in UNCACHED_BY_DEFAULT:
        known.setdefault("cache", False)
    options = {k: v for k, v in table.items() if k not in _FIELDS}
    spec = BackendSpec(name=name, options=options, **known)
    if spec.remote and not spec.model:
        raise ConfigError(f"[backends.{name}] (kind {kind!r}) needs a `model`")
    if spec.concurrency < 1:
        raise ConfigError(f"[backends.{name}] concurrency must be >= 1, got {spec.concurrency}")
    if spec.timeout_s <= 0:
        raise ConfigError(f"[backends.{name}] timeout_s must be > 0, got {spec.timeout_s}")
    return spec


def configured(config: dict[str, Any] | None = None) -> dict[str, BackendSpec]:
    """Every ``[backends.NAME]`` table of the config, parsed."""
    cfg = workspace.load_config() if config is None else config
    tables = cfg.get("backends", {}) or {}
    if not isinstance(tables, dict):
        raise ConfigError("`backends` in ddai.toml must be a table of [backends.NAME] tables")
    return {name: spec_from_table(name, dict(t)) for name, t in tables.items()}


def role_env(role: str) -> str:
    return f"DDAI_{role.upper()}"


def backend_name(role: str, name: str | None = None, config: dict[str, Any] | None = None) -> str:
    """The backend name a role uses: flag > ``$DDAI_<ROLE>`` > ``[roles]`` > ``local``."""
    _check_role(role)
    if name:
        return name
    if os.environ.get(role_env(role)):
        return os.environ[role_env(role)]
    cfg = workspace.load_config() if config is None else config
    roles = cfg.get("roles", {}) or {}
    return str(roles.get(role) or "local")


def resolve(
    role: str, name: str | None = None, config: dict[str, Any] | None = None
) -> BackendSpec:
    """The spec of the backend ``role`` uses (see ``backend_name``), checked against the role."""
    chosen = backend_name(role, name, config)
    specs = configured(config)
    if chosen in specs:
        spec = specs[chosen]
    elif chosen == "local":
        spec = BackendSpec(name="local", kind=LOCAL_DEFAULT[role], concurrency=1)
    elif chosen in LOCAL_KINDS:
        spec = BackendSpec(name=chosen, kind=chosen, concurrency=1)
    else:
        known = sorted({*specs, "local", *(k for k, r in LOCAL_KINDS.items() if role in r)})
        raise ConfigError(
            f"no backend named {chosen!r} for --{role}; known: {', '.join(known)} "
            "(add a [backends.NAME] table to ddai.toml)"
        )
    if role not in KINDS[spec.kind]:
        raise ConfigError(
            f"backend {chosen!r} is of kind {spec.kind!r}, which cannot serve --{role} "
            f"(it serves: {', '.join(KINDS[spec.kind])})"
        )
    return spec


def require_key(spec: BackendSpec, role: str, flag: str) -> None:
    """Refuse a remote backend whose key variable is unset (and that names no ``base_url``, a
    server that may need none) before any work: every call of it would fail with ``no-key``.
    ``flag``: the option that chooses the role's backend (``--vqa``), to name the local default."""
    if spec.remote and not spec.base_url and spec.api_key() is None:
        raise ConfigError(
            f"backend {spec.name!r} ({role}) reads its key from ${spec.key_env()}, which is not "
            f"set: set it, or use the local default, {flag} local ({LOCAL_DEFAULT[role]}: no "
            "key, no network)"
        )


def require_price(spec: BackendSpec, max_cost: float | None) -> None:
    """Refuse a spending cap on a backend whose calls have no price (``spec.price()`` None)
    before any work: every call would count $0 against it, so the cap would never stop one."""
    if max_cost is not None and spec.price() is None:
        raise ConfigError(
            f"--max-cost {max_cost:g} USD cannot cap backend {spec.name!r}: {spec.price_note()}; "
            "or run without --max-cost"
        )


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; roles are: {', '.join(ROLES)}")
