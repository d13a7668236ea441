"""Backend names and configuration: precedence, built-in names, errors that say the fix."""

from __future__ import annotations

import pytest

from ddai.pipelines.backends import ConfigError, get_backend, resolve
from ddai.pipelines.backends.config import backend_name, spec_from_table

CONFIG = {
    "backends": {
        "flash": {
            "kind": "gemini",
            "model": "gemini-x",
            "concurrency": 16,
            "price_in_per_mtok": 0.3,
        },
        "strict": {"kind": "local-judge", "metric": "f1", "threshold": 0.5},
    },
    "roles": {"judge": "flash"},
}


def test_precedence_flag_then_env_then_config_then_local(monkeypatch):
    monkeypatch.delenv("DDAI_JUDGE", raising=False)
    assert backend_name("judge", None, CONFIG) == "flash"
    assert backend_name("generator", None, CONFIG) == "local"
    monkeypatch.setenv("DDAI_JUDGE", "strict")
    assert backend_name("judge", None, CONFIG) == "strict"
    assert backend_name("judge", "local", CONFIG) == "local"


def test_spec_fields_and_kind_options():
    spec = resolve("judge", "flash", CONFIG)
    assert (spec.kind, spec.model, spec.concurrency, spec.price_in_per_mtok) == (
        "gemini",
        "gemini-x",
        16,
        0.3,
    )
    strict = resolve("judge", "strict", CONFIG)
    assert strict.options == {"metric": "f1", "threshold": 0.5}


def test_local_names_need_no_config():
    assert resolve("judge", "local", {}).kind == "local-judge"
    assert resolve("embedder", "hash", {}).kind == "hash"
    assert resolve("search", None, {}).kind == "bm25"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(
        ConfigError, match=r"no backend named 'nope' for --judge; known: .*flash.*local"
    ):
        resolve("judge", "nope", CONFIG)


def test_a_kind_cannot_serve_another_role():
    with pytest.raises(ConfigError, match="cannot serve --search"):
        resolve("search", "flash", CONFIG)


def test_keys_are_never_read_from_the_file():
    with pytest.raises(ConfigError, match="api_key_env"):
        spec_from_table("x", {"kind": "openai", "model": "m", "api_key": "sk-123"})


def test_remote_kind_needs_a_model_and_sane_limits():
    with pytest.raises(ConfigError, match="needs a `model`"):
        spec_from_table("x", {"kind": "openai"})
    with pytest.raises(ConfigError, match="concurrency must be >= 1"):
        spec_from_table("x", {"kind": "openai", "model": "m", "concurrency": 0})


def test_describe_names_the_key_variable_but_never_the_key(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret-value")
    spec = spec_from_table("x", {"kind": "openai", "model": "m", "api_key_env": "MY_KEY"})
    shown = spec.describe()
    assert shown["api_key_env"] == "MY_KEY" and shown["api_key_set"] is True
    assert "sk-secret-value" not in repr(shown)
    assert spec.api_key() == "sk-secret-value"


def test_get_backend_rejects_unknown_context():
    with pytest.raises(TypeError, match="unknown backend context"):
        get_backend("judge", "local", config={}, corpus_path="x")
