"""Whole processes timed as a user runs them: paired A/B runs against a floor, interleaved.

``measure(pairs, rounds)`` runs each command and its floor ``rounds`` times, one pair after the
other and alternating which of the two goes first (ABBA: a load spike or a warming cache falls on
both alike), every run a fresh process under ``/usr/bin/time`` (wall clock from here, CPU seconds
and peak RSS from the kernel's accounting of that process alone). Each pair gives one ratio; the
median ratio and its spread (min-max over the pairs) are what a table shows, with the machine's
load average before and after (a loaded machine slows the floor's short run more than a long
one, so ratios measured under load look better than they are).

Used by ``bench_commands.py``; nothing here imports ddai.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

TIME = shutil.which("time") or "/usr/bin/time"


@dataclass
class Run:
    """One fresh process: wall seconds (measured here), CPU seconds and peak RSS (MiB)."""

    wall: float
    cpu: float
    peak_mib: float


@dataclass
class Pair:
    """A command against its floor. ``before`` runs, untimed, before each run of either (removes
    the outputs of the last one); ``target`` is the largest ratio (or, with ``limit_s``, the most
    seconds) the command may take (0.1 against DDAI's scripts: ddai at least 10x faster)."""

    name: str
    argv: list[str]
    floor_name: str
    floor_argv: list[str]
    target: float | None = None
    limit_s: float | None = None
    before: Callable[[], None] | None = None
    runs: list[Run] = field(default_factory=list)
    floor_runs: list[Run] = field(default_factory=list)


def run_once(
    argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> Run:
    """``argv`` in a fresh process under ``/usr/bin/time``; raises with its stderr if it fails."""
    with (
        tempfile.NamedTemporaryFile("r", suffix=".time") as tf,
        tempfile.TemporaryFile("w+") as err,
    ):
        t0 = time.perf_counter()
        p = subprocess.run(
            [TIME, "-f", "%U %S %M", "-o", tf.name, *argv],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=cwd,
        )
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            err.seek(0)
            raise RuntimeError(
                f"{' '.join(argv)[:200]} failed ({p.returncode}):\n{err.read()[-2000:]}"
            )
        user, sys_, rss_kib = tf.read().split()[-3:]
    return Run(wall, float(user) + float(sys_), int(rss_kib) / 1024)


def measure(
    pairs: Sequence[Pair],
    rounds: int,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    warmup: bool = True,
) -> tuple[float, float]:
    """Fill each pair's ``runs`` and ``floor_runs`` (``rounds`` each, interleaved, ABBA); one
    untimed warm-up run of each first (bytecode and page caches). Returns the 1-minute load
    average before and after."""
    load_before = os.getloadavg()[0]
    for r in range(-1 if warmup else 0, rounds):
        for pair in pairs:
            order = [(pair.argv, pair.runs), (pair.floor_argv, pair.floor_runs)]
            for argv, into in order if r % 2 == 0 else order[::-1]:
                if pair.before is not None:
                    pair.before()
                run = run_once(argv, env, cwd)
                if r >= 0:
                    into.append(run)
    return load_before, os.getloadavg()[0]


def verdict(pair: Pair) -> str:
    """``ok`` or ``MISS`` against the pair's target (empty when it has none)."""
    if pair.limit_s is not None:
        return "ok" if statistics.median(r.wall for r in pair.runs) <= pair.limit_s else "MISS"
    if pair.target is None:
        return ""
    return "ok" if statistics.median(ratios(pair)) <= pair.target else "MISS"


def ratios(pair: Pair) -> list[float]:
    """One ratio per pair of runs (command wall / floor wall)."""
    return [a.wall / b.wall for a, b in zip(pair.runs, pair.floor_runs, strict=True)]


def table(pairs: Sequence[Pair], load: tuple[float, float]) -> str:
    """The pairs as one table: medians, the paired ratio and its spread, CPU, peak RSS, target."""
    head = (
        f"{'command':<34}{'median s':>9}{'floor':>26}{'floor s':>9}{'ratio':>7}"
        f"{'spread':>13}{'CPU s':>7}{'CPU x':>7}{'MiB':>7}{'target':>14}"
    )
    lines = [head, "-" * len(head)]
    for p in pairs:
        rs = ratios(p)
        med = statistics.median(r.wall for r in p.runs)
        cpu_x = statistics.median(r.cpu for r in p.runs) / max(
            statistics.median(r.cpu for r in p.floor_runs), 1e-3
        )
        target = (
            f"< {p.limit_s:g} s"
            if p.limit_s is not None
            else (f"<= {p.target:g}x" if p.target is not None else "")
        )
        lines.append(
            f"{p.name[:33]:<34}{med:>9.3f}{p.floor_name[:25]:>26}"
            f"{statistics.median(r.wall for r in p.floor_runs):>9.3f}"
            f"{statistics.median(rs):>7.2f}{f'{min(rs):.2f}-{max(rs):.2f}':>13}"
            f"{statistics.median(r.cpu for r in p.runs):>7.2f}{cpu_x:>7.2f}"
            f"{max(r.peak_mib for r in p.runs):>7.0f}{target:>10} {verdict(p):<4}"
        )
    n = len(pairs[0].runs) if pairs else 0
    lines.append(
        f"({n} interleaved pairs each, ABBA; ratio: median of the per-pair wall-clock ratios, "
        f"spread: their min-max; CPU x: median CPU seconds over the floor's; load average {load[0]:.2f} before, {load[1]:.2f} after, on "
        f"{os.cpu_count()} CPUs)"
    )
    return "\n".join(lines)
