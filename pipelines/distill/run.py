"""``ddai distill`` as a function: a run's rare successes into an SFT file.

``run_distill``: read the run(s) from the log store → select rare successes → rebuild their
messages → think-only rewrite (optional) → safety post-pass → write the SFT file, its
``<out>.report.jsonl`` and ``<out>.manifest.json`` as one commit (visible together). A run whose inputs and
parameters are unchanged is skipped (``force`` reruns it).

Longer than 400 lines because ``DistillConfig`` documents each of its flag fields, whose docstrings
are ``ddai distill``'s help.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from rich.progress import Progress, track

from ddai.pipelines import store
from ddai.pipelines.backends.usage import FAILED_CALLS, failed_calls
from ddai.pipelines.distill import fetch, formats, rewrite, stream
from ddai.pipelines.distill.rebuild import load_system_prompt
from ddai.pipelines.distill.rules import ClaimRules
from ddai.pipelines.distill.safety import Drops, PostPass, PostPassResult, report_lines
from ddai.pipelines.distill.select import Rank, SelectConfig
from ddai.pipelines.records.lazy import lazy_module
from ddai.pipelines.records.schema import SUCCESS_THRESHOLD
from ddai.pipelines.store import capabilities, fileset, io, manifest, objstore, stage

pa = lazy_module("pyarrow")

STEP = "distill"


class RewriteMode(StrEnum):
    """What goes through the rewriter (a flag's choices)."""

    THINK_ONLY = "think-only"
    NONE = "none"


REWRITE_MODES: tuple[str, ...] = tuple(m.value for m in RewriteMode)
REPORT_SUFFIX = ".report.jsonl"

T = TypeVar("T")


class DistillError(RuntimeError):
    """The step ran but could not finish (e.g. stopped by ``--max-cost``); exit code 1."""


def report_path(output: str | os.PathLike[str]) -> Path:
    return Path(f"{output}{REPORT_SUFFIX}")


@dataclass
class DistillConfig:
    """One ``ddai distill`` run; each field is a flag (its docstring the flag's help; the
    post-pass drops are also ``ddai distill check``'s flags)."""

    logs: Path
    """The log store."""
    runs: list[str]
    """Run id to distill (required; repeat to pool several runs). Each run needs parsed turns."""
    out: Path
    """The SFT Parquet file to write (required)."""
    success_rate_max: float = 0.5
    """Keep prompts whose success rate is > 0 and <= this."""
    top_k: int = 4
    """Successful rollouts kept per prompt, best first (see --rank)."""
    rank: Rank = Rank.DDAI
    """ddai: DDAI's finalize order (NDCG desc, fewer searches, fewer bboxes, shorter assistant
    text, then log order); reward: reward desc, NDCG desc, fewer actions, rollout_idx."""
    success_threshold: float = SUCCESS_THRESHOLD
    """The success rule's threshold on judge_score (the flag: the commands' shared
    ``--success-threshold``)."""
    rewrite: RewriteMode = RewriteMode.THINK_ONLY
    """think-only: rewrite thinks only; none: no rewriter."""
    rewriter: str | None = None
    """Rewriter backend name (ddai.toml [backends.NAME]). Default: $DDAI_REWRITER, ddai.toml
    [roles] rewriter, else identity (no model)."""
    fmt: formats.Format = formats.Format.TRAIN1
    """train1: DDAI's (uid, format_version, messages JSON); messages: TRL's conversational shape
    for `ddai train sft`."""
    system_prompt: Path | None = None
    """System prompt file (used as written) for logs without extra.system_prompt. Default: the
    bundled DDAI Searcher prompt."""
    drop_forced: bool = False
    """Drop samples holding a forced max-turn completion (DDAI's injected 'Maximum turn limit
    reached' turn or a paraphrase of it)."""
    drop_system_errors: bool = False
    """Drop samples with a '[System Error: …]' observation."""
    drop_repeated_queries: bool = False
    """Drop samples that send the same search query twice (whitespace and case ignored)."""
    max_system_errors: int | None = None
    """Drop samples with more than N '[System Error:' observations (DDAI's train1 build: 1).
    Default: no cap."""
    val_ratio: float = 0.0
    """Share of the samples written to --val-out instead (DDAI's split: round(n·ratio), at least
    1 of 2 or more, drawn with --seed; DDAI used 0.1). 0: no split."""
    seed: int = 42
    """The train/val split's random seed (DDAI's: 42)."""
    val_out: Path | None = None
    """The validation Parquet file, beside --out (default: <out>.val.parquet; DDAI's names: --out
    DIR/train1.parquet --val-out DIR/val1.parquet)."""
    claim_patterns: list[str] | None = None
    """Observation-claim regex a rewritten think may not add (repeatable; replaces the built-in
    list; default: ddai.toml [distill] claim_patterns, else the built-in list)."""
    max_thinks_per_call: int = 8
    """Split a trajectory's thinks into requests of at most this many."""
    max_chars_per_call: int = 12_000
    dry_run: bool = False
    """Count rewrite calls and their estimated cost; write nothing, call nothing."""
    max_cost: float | None = None
    """Stop before the rewriter spends more than this many USD (finished calls are cached: rerun
    to resume)."""
    retry_failed: bool = False
    """Call again the rewrites that failed before (else their cached failures are reported)."""
    force: bool = False  # rerun when nothing changed (its flag: ``funnel.configs.ForceFlag``)
    progress: bool = True
    select_cfg: SelectConfig = field(init=False, repr=False)
    claims: ClaimRules = field(init=False, repr=False)
    chunking: rewrite.Chunking = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("name the run(s) to distill with --run (see `ddai runs`)")
        if self.rewrite not in REWRITE_MODES:
            raise ValueError(f"--rewrite {self.rewrite!r}: use one of {', '.join(REWRITE_MODES)}")
        if self.fmt not in formats.FORMATS:
            raise ValueError(f"--format {self.fmt!r}: use one of {', '.join(formats.FORMATS)}")
        if Path(self.out).suffix != ".parquet":
            raise ValueError(f"--out {self.out}: the SFT file is Parquet; name it *.parquet")
        if self.max_cost is not None and self.max_cost < 0:
            raise ValueError(f"--max-cost must be >= 0 USD, got {self.max_cost}")
        if self.max_system_errors is not None and self.max_system_errors < 0:
            raise ValueError(f"--max-system-errors must be >= 0, got {self.max_system_errors}")
        if not 0.0 <= self.val_ratio < 1.0:
            raise ValueError(f"--val-ratio must be in [0, 1), got {self.val_ratio}")
        if self.val_ratio > 0:
            if self.val_out is None:
                self.val_out = Path(self.out).with_suffix(".val.parquet")
            v, o = Path(self.val_out), Path(self.out)
            if v.suffix != ".parquet" or v == o or v.parent != o.parent:
                raise ValueError(
                    f"--val-out {v}: name a Parquet file other than --out, in its folder "
                    f"({o.parent}; the files are committed together)"
                )
        elif self.val_out is not None:
            raise ValueError("--val-out needs --val-ratio > 0 (the share of samples it gets)")
        self.select_cfg = SelectConfig(
            self.success_threshold, self.success_rate_max, self.top_k, self.rank
        )
        self.claims = ClaimRules.of(self.claim_patterns)
        self.chunking = rewrite.Chunking(self.max_thinks_per_call, self.max_chars_per_call)

    @property
    def drops(self) -> Drops:
        return Drops(
            self.drop_forced,
            self.drop_system_errors,
            self.drop_repeated_queries,
            self.max_system_errors,
        )

    def params(self, rewriter_name: str | None) -> dict[str, Any]:
        """What decides the output (the manifest's parameters; a change reruns the step)."""
        # Not part of the result: where things are, how the run is watched, the spending cap.
        skip = {"logs", "out", "dry_run", "force", "progress", "max_cost", "retry_failed"}
        skip |= {"select_cfg", "claims", "chunking", "val_out"}
        # fields added later enter the parameters only when set, so an earlier run's
        # manifest stays fresh
        new = {"max_system_errors": None, "val_ratio": 0.0}
        p = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in skip and not (f.name in new and getattr(self, f.name) == new[f.name])
        }
        if self.val_ratio == 0.0:  # the seed decides nothing without a split
            p.pop("seed")
        p["rewriter"] = rewriter_name
        p["claim_patterns"] = list(self.claims.patterns)
        return p


def progress_iter(items: Sequence[T], on: bool, what: str) -> Iterable[T]:
    """``items``, under a rich progress bar when ``on``."""
    return track(items, description=what, transient=True) if on else items


def build_rewriter(cfg: DistillConfig):
    """The rewriter backend ``cfg`` names, built with this step's call site and cost cap."""
    from ddai.pipelines.backends import get_backend

    return get_backend(
        "rewriter",
        cfg.rewriter,
        call_site="distill",
        max_cost=cfg.max_cost,
        progress=cfg.progress,
        retry_failed=cfg.retry_failed,
    )


@contextmanager
def _progress(on: bool, total: int, what: str) -> Iterator[Callable[[int], None]]:
    """A function advancing a rich progress bar of ``total`` items (a no-op when not ``on``)."""
    if not on:
        yield lambda k: None
        return
    with Progress(transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda k: bar.advance(task, k)


def run_distill(cfg: DistillConfig, *, rewriter: Any = None) -> dict[str, Any]:
    """Distill ``cfg.runs`` into ``cfg.out``; returns the summary (also the manifest's notes).

    ``rewriter``: a ``ThinkRewriter`` to use instead of the backend ``cfg.rewriter`` names.
    Raises ``ValueError``/``FileNotFoundError`` for bad input, ``DistillError`` when the
    rewriter's cost cap stopped the run (completed calls are cached: rerun to resume).
    """
    inputs: list[str | os.PathLike[str]] = [store.partition_dir(cfg.logs, r) for r in cfg.runs]
    store.parquet_files(cfg.logs, cfg.runs)  # fails early, naming the known runs
    capabilities.require_runs(
        cfg.logs, cfg.runs, "turns", needed_by="`ddai distill`", why="to rebuild SFT messages"
    )
    capabilities.require_runs(
        cfg.logs,
        cfg.runs,
        "judge",
        needed_by="`ddai distill`",
        why="to select successes (judge_score >= --success-threshold)",
    )
    if cfg.system_prompt is not None:
        load_system_prompt(cfg.system_prompt)
        inputs.append(cfg.system_prompt)
    backend = None
    if cfg.rewrite == "think-only":
        backend = rewriter if rewriter is not None else build_rewriter(cfg)
    params = cfg.params(getattr(backend, "name", None))
    # --retry-failed reruns: the output was written without the calls that failed.
    rerun = cfg.dry_run or cfg.force or cfg.retry_failed
    if not cfg.dry_run:  # a killed write of this output: finished, or its staged files removed
        fileset.settle_for(cfg.out, clean=True)
    if not rerun and manifest.is_fresh(cfg.out, STEP, params, inputs):
        notes = (manifest.read(cfg.out) or {}).get("notes") or {}
        return {
            "output": objstore.display(cfg.out),
            "skipped": "inputs and parameters unchanged (--force reruns)",
            **({FAILED_CALLS: notes[FAILED_CALLS]} if notes.get(FAILED_CALLS) else {}),
        }

    record = manifest.start(STEP, params, inputs)
    system_prompt = load_system_prompt(cfg.system_prompt)
    post = PostPass(cfg.claims, cfg.drops)
    rewriting = stream.Rewriting(backend, cfg.chunking) if backend is not None else None
    with stage.stage_dir() as tmp_dir:
        # Select in DuckDB over the selection columns; stream the selected rollouts' rebuild
        # columns in batches into the spill, both from one snapshot of the runs (a concurrent
        # re-ingest cannot remove the files between).
        with store.snapshot(cfg.logs, cfg.runs) as snap:
            files = snap.all_files()
            sel, wanted, n_read = fetch.scan_select(files, cfg.select_cfg)
            n_selected = len(sel.rows)
            if not sel.rows and not cfg.dry_run:
                raise ValueError(_nothing_selected(cfg, n_read, sel))
            batches = fetch.fetch_batches(
                files,
                wanted,
                columns=fetch.REBUILD_COLUMNS,
                turn_fields=fetch.REBUILD_TURN_FIELDS,
                batch_rows=stream.FETCH_ROWS,
            )
            spill = stream.Spill(Path(tmp_dir), n_selected)
            with _progress(cfg.progress, n_selected, "distilling") as advance:
                built = stream.build(
                    batches,
                    spill,
                    system_prompt=system_prompt,
                    post=post,
                    rewriting=rewriting,
                    advance=advance,
                    plan_only=cfg.dry_run,
                )
        if cfg.dry_run:
            return {
                "dry run": True,
                "rollouts read": n_read,
                "prompts": sel.prompts,
                "selected rollouts": n_selected,
                **_plan(backend, built),
            }
        applied = built.applied
        if applied is not None and applied.over_budget:
            raise DistillError(
                f"--max-cost {cfg.max_cost:g} USD stopped the rewrite of {applied.over_budget} "
                "trajectories; nothing was written. Finished calls are cached: rerun with a "
                "higher --max-cost to resume without paying for them again"
            )
        split = stream.Split(cfg.val_ratio, cfg.seed) if cfg.val_ratio > 0 else None
        n_val = sum(split.val_mask(built.kept)) if split is not None else 0
        record.rows_in = n_read
        record.rows_out = built.kept - n_val
        if n_val:
            record.drop("val_split", n_val)  # written to the validation file instead
        for reason, n in (*sel.dropped.items(), *built.failed.items(), *post.dropped.items()):
            record.drop(reason, n)
        summary = {
            "output": objstore.display(cfg.out),
            "format": cfg.fmt,
            "rollouts read": n_read,
            "prompts": sel.prompts,
            "selected rollouts": n_selected,
            "samples written": built.kept,
            "dropped": dict(record.dropped),
            "rewriter": getattr(backend, "name", None),
            "trajectories rewritten": applied.rewritten if applied else 0,
            **_unchanged(applied),
            "rewrites discarded": post.counts("discard"),
            "rollbacks": post.counts("rollback"),
            "grammar faults (rows)": dict(sorted(post.fault_rows.items())),
            "findings (rows)": dict(post.found),
            "observations unavailable": built.unavailable,
            "report": objstore.display(report_path(cfg.out)),
        }
        if split is not None:
            summary["split"] = {
                "train": built.kept - n_val,
                "val": n_val,
                "val output": objstore.display(cfg.val_out),
                "seed": cfg.seed,
            }
        if backend is not None and hasattr(backend, "usage"):
            record.backend_calls = backend.usage()
            if failed := failed_calls(record.backend_calls):
                summary[FAILED_CALLS] = failed  # those samples keep their original thinks
        record.notes = {k: v for k, v in summary.items() if k not in ("output", "dropped")}
        report_tmp = Path(tmp_dir) / "report.jsonl"

        val_tmp = Path(tmp_dir) / "val.parquet"

        def write_sft(path: Path) -> None:
            val = (val_tmp, split) if split is not None else None
            stream.write(
                spill,
                path,
                report_tmp,
                cfg.fmt,
                n_kept=built.kept,
                val=val,
                tmp_dir=Path(tmp_dir),
            )

        members = [
            manifest.Member(cfg.out, write_sft, record),
            manifest.Member(report_path(cfg.out), lambda tmp: shutil.move(report_tmp, tmp), None),
        ]
        if split is not None:
            val_record = manifest.start(STEP, params, inputs)
            val_record.rows_in, val_record.rows_out = built.kept, n_val
            val_record.drop("train_split", built.kept - n_val)
            val_record.notes = {"split": summary["split"]}
            members.append(
                manifest.Member(cfg.val_out, lambda tmp: shutil.move(val_tmp, tmp), val_record)
            )
        # the SFT file(s), the report and the manifests, visible together
        manifest.commit_set(members)
    return summary


def _unchanged(applied: rewrite.Applied | None) -> dict[str, Any]:
    """The trajectories the rewriter gave back as they were; when that is all of them, a note
    (the default local rewriter is the identity: the output keeps the rollouts' own thinks,
    which a 'rewritten' count would hide)."""
    if applied is None or not applied.unchanged:
        return {}
    out: dict[str, Any] = {"trajectories returned unchanged": applied.unchanged}
    if not applied.rewritten:
        out["note"] = (
            "the rewriter changed no think (the local rewriter returns them as they are): the "
            "samples keep the rollouts' own thinks; name a rewrite model with --rewriter NAME "
            "(ddai.toml [backends]), or pass --rewrite none to skip the pass"
        )
    return out


def _plan(backend: Any, built: stream.Built) -> dict[str, Any]:
    """What a rewrite would send (and, from the backend, cost); calls nothing."""
    if backend is None:
        return {"samples to rewrite": 0, "rewrite requests": 0, "rewriter plan": None}
    return {
        "samples to rewrite": built.to_rewrite,
        "rewrite requests": len(built.requests),
        "rewriter plan": backend.plan(built.requests) if hasattr(backend, "plan") else None,
    }


def write_report(path: Path, result: PostPassResult) -> None:
    """The post-pass report (one JSON object per event), written atomically."""
    with io.atomic_path(path) as tmp:
        _report_into(tmp, result)


def _report_into(path: Path, result: PostPassResult) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(report_lines(result.events))


def _nothing_selected(cfg: DistillConfig, n_rollouts: int, sel: Any) -> str:
    """Why no rollout was selected, and which flags would select some (an empty SFT file that
    exits 0 would hide it)."""
    why = ", ".join(f"{k}: {v}" for k, v in sorted(sel.dropped.items())) or "none"
    return (
        f"no rollout of {', '.join(cfg.runs)} was selected ({n_rollouts} rollouts read; dropped by "
        f"reason: {why}); nothing was written. Loosen the selection (--success-rate-max, "
        "--success-threshold, --top-k) or distill a run with rarer successes."
    )
