"""What a manifest records of the code that wrote it: the git revision and package versions.

Both are looked up once per process, without forking: ``git rev-parse HEAD`` (the old way, ~7 ms
CPU of a fork and exec, counted in a funnel command's own CPU) is replaced by reading the
repository's files as git does (``.git`` found upwards from this package, a worktree's or
submodule's ``.git`` file followed through its ``gitdir:``, ``HEAD`` to a loose ref, else to the
common folder's ``packed-refs``); anything unusual (git's discovery variables set, a repository
another user owns, the reftable format, a ref that is neither loose nor packed, a symbolic ref
chain) falls back to running ``git``, so the value is ``git rev-parse HEAD``'s either way. A
package's version is its distribution's ``Version`` field, read from the head of its metadata
file (``importlib.metadata`` parses the whole file, long description included: ~0.6 ms a
package); a distribution without one falls back to ``importlib.metadata.version``.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "polars",
    "duckdb",
    "pyarrow",
    "torch",
    "transformers",
    "trl",
    "openai",
    "google-genai",
)
# variables that change where (or whether) git finds a repository: then git itself decides
_GIT_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
)
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def git_revision() -> str | None:
    """``git rev-parse HEAD`` of the repository holding this package (None outside one)."""
    try:
        found = head_from_files(_HERE)
    except (OSError, UnicodeDecodeError, ValueError):
        found = _UNUSUAL
    return git_rev_parse(_HERE) if found is _UNUSUAL else found


def git_rev_parse(cwd: Path) -> str | None:
    """The revision as ``git`` itself tells it (None when git fails or is missing)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=cwd
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


class _Unusual:
    """A repository these reads do not cover: ask git."""


_UNUSUAL = _Unusual()


def head_from_files(start: Path) -> str | _Unusual | None:
    """HEAD's commit read from the files of the repository found upwards from ``start``, None
    when there is none (as ``git`` finds it: stopping at a file-system boundary), ``_UNUSUAL``
    when git's answer could differ from a plain read."""
    if any(v in os.environ for v in _GIT_ENV):
        return _UNUSUAL
    git_dir = _find_git_dir(start)
    if git_dir is None or isinstance(git_dir, _Unusual):
        return git_dir
    common = git_dir
    if (git_dir / "commondir").is_file():  # a linked worktree: its refs live in the main one
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    if (common / "reftable").exists() or not (common / "refs").is_dir():
        return _UNUSUAL
    head = (git_dir / "HEAD").read_text().strip()
    if _SHA.fullmatch(head):  # detached
        return head
    if not head.startswith("ref: "):
        return _UNUSUAL
    ref = head[len("ref: ") :].strip()
    if not ref.startswith("refs/") or ".." in ref.split("/"):
        return _UNUSUAL
    # per-worktree refs (``refs/bisect``, ``refs/worktree``) stay in the worktree's own folder
    own = (
        git_dir if ref.startswith(("refs/bisect/", "refs/worktree/", "refs/rewritten/")) else common
    )
    loose = own / ref
    if loose.is_file():
        value = loose.read_text().strip()
        return value if _SHA.fullmatch(value) else _UNUSUAL  # a symbolic ref: git follows it
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and _SHA.fullmatch(sha):
                return sha
    return _UNUSUAL  # an unborn branch (git fails) or a layout not read here


def _find_git_dir(start: Path) -> Path | _Unusual | None:
    """The git folder of the repository around ``start``: a ``.git`` folder, or the one a
    ``.git`` file's ``gitdir:`` names; None when there is none up to the file system's edge."""
    here = start
    dev = here.stat().st_dev
    while True:
        dot = here / ".git"
        if dot.is_dir():
            return _owned(dot, here)
        if dot.is_file():
            text = dot.read_text().strip()
            if not text.startswith("gitdir: "):
                return _UNUSUAL
            target = Path(text[len("gitdir: ") :].strip())
            return _owned((here / target).resolve(), here)
        if dot.exists():
            return _UNUSUAL
        parent = here.parent
        if parent == here:
            return None
        if parent.stat().st_dev != dev:  # git stops at a file-system boundary
            return None
        here = parent


def _owned(git_dir: Path, top: Path) -> Path | _Unusual:
    """``git_dir`` when it and its working tree ``top`` are this user's (else git's
    safe.directory rules decide, which only git reads)."""
    if not (git_dir / "HEAD").is_file():
        return _UNUSUAL
    me = os.geteuid() if hasattr(os, "geteuid") else None
    if me is None or git_dir.stat().st_uid != me or top.stat().st_uid != me:
        return _UNUSUAL
    return git_dir


@lru_cache(maxsize=1)
def ddai_version() -> str:
    """ddai's own version (``0+unknown`` when it is not installed)."""
    try:
        return _version(metadata.distribution("ddai"))
    except metadata.PackageNotFoundError:
        return "0+unknown"


@lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    """Python's version and each installed package of ``PACKAGES``'s, as
    ``importlib.metadata.version`` gives them."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        out[name] = _version(dist)
    return out


def _version(dist: metadata.Distribution) -> str:
    """The ``Version`` header of the distribution's metadata (the headers end at the first
    blank line), else ``dist.version``."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if text:
        for line in text.splitlines():
            if not line.strip():
                break
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() == "version":
                if value.strip():
                    return value.strip()
                break
    return dist.version
