"""The configs of ``ddai backends check`` and ``ddai judge`` (their fields are the commands' flags): a
light module, so that their ``--help`` builds the flags without importing the backends' engine,
cache or the log store's writers. ``check`` and ``rejudge`` re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckConfig:
    """``ddai backends check``'s settings (``check_backends``); ``ddai judge`` reads the same
    call cache flag."""

    ping: bool = True
    """Ping every remote backend with a real call: models one small uncached completion per judge
    or generator role using them (else a metadata call, no tokens); search services their /health
    route when they have one, then one query."""
    cache: Path | None = None
    """Call cache file (SQLite). Default: <workspace>/cache/calls.sqlite, the workspace being
    $DDAI_HOME or ./ddai-work."""


class RejudgeError(ValueError):
    """Bad input for ``rejudge`` (a missing run, a bad output name); the message says the fix."""


@dataclass(frozen=True)
class RejudgeConfig:
    """``ddai judge``: rescore ``run``'s answers with a judge backend."""

    logs: Path
    run: str
    """The run whose answers to (re)score."""
    judge: str | None = None
    """Judge backend name from ddai.toml [backends] (or `local`). Default: $DDAI_JUDGE, then
    ddai.toml [roles] judge, then local."""
    out_run: str | None = None
    """Run id to write the rescored run to. Default: <run>@<judge>."""
    in_place: bool = False
    """Write the new scores into --run itself (old ones kept in extra)."""
    dry_run: bool = False
    """Count the calls and their estimated cost; call and write nothing."""
    max_cost: float | None = None
    """Stop before spending more than this many USD (rerun to resume)."""
    cache: Path | bool | None = None  # None: the workspace's call cache; False: none
    progress: bool | None = None
    retry_failed: bool = False  # call again what failed before (else: the cached failure)

    def __post_init__(self) -> None:
        if self.in_place and self.out_run:
            raise ValueError("--in-place and --out-run exclude each other; pick one")
