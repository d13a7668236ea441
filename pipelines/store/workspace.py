"""The workspace and configuration precedence: flag > environment > ``ddai.toml`` > default."""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

DEFAULT_HOME = "ddai-work"
CONFIG_FILE = "ddai.toml"


def home() -> Path:
    """``$DDAI_HOME`` if set, else ``ddai.toml``'s ``home``, else ``./ddai-work``."""
    env = os.environ.get("DDAI_HOME")
    if env:
        return Path(env)
    cfg = load_config()
    return Path(cfg.get("home", DEFAULT_HOME))


def demo_logs() -> Path:
    """The log store ``ddai demo`` writes: ``<home>/demo/logs``."""
    return home() / "demo" / "logs"


_TOLD: set[Path] = set()


def logs_dir(
    flag: str | os.PathLike[str] | None = None, *, demo_fallback: bool = False, note: bool = True
) -> Path:
    """The log store: ``--logs`` > ``$DDAI_LOGS`` > ``ddai.toml`` ``logs`` > ``<home>/logs``.

    ``demo_fallback`` (commands that only read the store): when ``<home>/logs`` does not exist
    but the demo's store does, the demo's, with one line on stderr saying so (``note``), so the
    commands after ``ddai demo`` work without flags. Writers keep ``<home>/logs``: an ingest
    never lands in the demo's store by default."""
    if flag:
        return Path(flag)
    env = os.environ.get("DDAI_LOGS")
    if env:
        return Path(env)
    cfg = load_config()
    if "logs" in cfg:
        return Path(cfg["logs"])
    default = home() / "logs"
    if demo_fallback and not default.exists() and demo_logs().is_dir():
        if note and default not in _TOLD:
            _TOLD.add(default)
            print(
                f"note: no log store at {default}; reading the demo's {demo_logs()} "
                "(pass --logs for another store)",
                file=sys.stderr,
            )
        return demo_logs()
    return default


def cache_path() -> Path:
    return home() / "cache" / "calls.sqlite"


@lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> dict[str, Any]:
    import tomllib  # ~5 ms: only where a ddai.toml exists

    with open(path, "rb") as fh:
        return tomllib.load(fh)


def load_config(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Parse ``ddai.toml`` (``$DDAI_CONFIG`` or the working directory); empty when absent."""
    p = Path(path or os.environ.get("DDAI_CONFIG") or CONFIG_FILE)
    if not p.is_file():
        return {}
    try:
        return _load(str(p.resolve()), p.stat().st_mtime)
    except ValueError as e:  # tomllib.TOMLDecodeError
        raise ValueError(f"{p}: invalid TOML ({e}); fix or remove the file") from e


def setting(section: str, key: str, flag: Any = None, env: str | None = None, default: Any = None):
    """Resolve one setting by the precedence flag > env var > ddai.toml [section].key > default."""
    if flag is not None:
        return flag
    if env and os.environ.get(env) is not None:
        return os.environ[env]
    sec = load_config().get(section, {})
    if isinstance(sec, dict) and key in sec:
        return sec[key]
    return default
