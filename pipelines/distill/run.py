"""``ddai distill`` as a function: a run's rare successes into an SFT file.

``run_distill``: read the run(s) from the log store → select rare successes → rebuild their
messages → think-only rewrite (optional) → safety post-pass → write the SFT file, its
``<out>.report.jsonl`` and ``<out>.manifest.json`` as one commit (visible together). A run whose inputs and
parameters are unchanged is skipped (``force`` reruns it).

``DistillConfig`` (its fields are ``ddai distill``'s flags) lives in ``configs``, re-exported here.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from rich.progress import Progress, track

from ddai.pipelines import store
from ddai.pipelines.backends.usage import FAILED_CALLS, failed_calls
from ddai.pipelines.distill import fetch, rewrite, sqlrows, stream
from ddai.pipelines.distill.configs import DistillConfig, DistillError, report_path
from ddai.pipelines.distill.rebuild import load_system_prompt
from ddai.pipelines.distill.safety import PostPass, PostPassResult, report_lines
from ddai.pipelines.store import capabilities, fileset, io, manifest, objstore, stage

STEP = "distill"


T = TypeVar("T")


def progress_iter(items: Sequence[T], on: bool, what: str) -> Iterable[T]:
    """``items``, under a rich progress bar when ``on``."""
    return track(items, description=what, transient=True) if on else items


def build_rewriter(cfg: DistillConfig):
    """The rewriter backend ``cfg`` names, built with this step's call site and cost cap."""
    from ddai.pipelines.backends import step_backend

    return step_backend("rewriter", cfg.rewriter, cfg, "distill")


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
    if _val_in_place(cfg) and (skipped := unchanged(cfg, STEP, params, inputs, "inputs")):
        return skipped

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
                # rows DuckDB can build exactly skip Python (only with nothing to rewrite or plan)
                sql_rows=sqlrows.Build(
                    system_prompt,
                    cfg.drops.repeated_queries,
                    cfg.drops.forced,
                    thinks=rewriting is not None,  # the identity rewriter's request count
                )
                if sqlrows.enabled(rewriting is not None and not rewriting.identity, cfg.dry_run)
                else None,
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
        record_calls(record, backend, summary)  # failed rewrites keep their original thinks
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
        stale = _previous_val(cfg)
        # the SFT file(s), the report and the manifests, visible together
        manifest.commit_set(members)
        if stale is not None:
            _remove_output(stale)
            summary["removed"] = (
                f"{objstore.display(stale)}: the validation file of this output's previous "
                "split (its rows are in the new SFT file)"
            )
    return summary


def _val_in_place(cfg: DistillConfig) -> bool:
    """Whether the validation file this write asks for is the one the previous write left
    (``--val-out`` is not among the parameters: a new name, or a removed file, reruns)."""
    if cfg.val_out is None:
        return True
    old = ((manifest.read(cfg.out) or {}).get("notes") or {}).get("split") or {}
    want = objstore.display(cfg.val_out)
    return old.get("val output") == want and objstore.any_isfile(want)


def _previous_val(cfg: DistillConfig) -> str | None:
    """The validation file the previous write of ``cfg.out`` split off, when this write does
    not write it again (no split, or another ``--val-out``): left beside the new SFT file, which
    now holds its rows, it would turn validation into training data."""
    old = ((manifest.read(cfg.out) or {}).get("notes") or {}).get("split") or {}
    path = old.get("val output")
    if not path or (cfg.val_out is not None and objstore.display(cfg.val_out) == path):
        return None
    was = manifest.read(path) or {}
    # only a file this step wrote as the set of cfg.out (a file of the user's is left alone)
    if was.get("step") != STEP or fileset.folder_of(path) != fileset.folder_of(cfg.out):
        return None
    return path


def _remove_output(path: str) -> None:
    """Remove an output and its manifest (local or object storage); its manifest goes last, so
    an interrupted removal leaves a file ``ddai lineage`` still explains."""
    for p in (path, manifest.manifest_path(path)):
        if (url := objstore.url_of(p)) is not None:
            objstore.remove(url)
        else:
            Path(p).unlink(missing_ok=True)


def unchanged(
    cfg: Any, step: str, params: dict[str, Any], inputs: list[Any], what: str
) -> dict[str, Any] | None:
    """The summary of a step (``distill``, ``distill vet``) whose ``cfg.out`` is fresh, None
    when it runs (``--dry-run``, ``--force``, ``--retry-failed``: the output was written without
    the calls that failed, or a change); a killed write of ``cfg.out`` is first finished, or its
    staged files removed. ``what``: how the summary names the inputs."""
    if not cfg.dry_run:
        fileset.settle_for(cfg.out, clean=True)
    rerun = cfg.dry_run or cfg.force or cfg.retry_failed
    if rerun or not manifest.is_fresh(cfg.out, step, params, inputs):
        return None
    notes = (manifest.read(cfg.out) or {}).get("notes") or {}
    return {
        "output": objstore.display(cfg.out),
        "skipped": f"{what} and parameters unchanged (--force reruns)",
        **({FAILED_CALLS: notes[FAILED_CALLS]} if notes.get(FAILED_CALLS) else {}),
    }


def record_calls(record: manifest.StepRecord, backend: Any, summary: dict[str, Any]) -> None:
    """The backend's call counts into ``record``, its failed calls into ``summary``."""
    if hasattr(backend, "usage"):
        record.backend_calls = backend.usage()
        if failed := failed_calls(record.backend_calls):
            summary[FAILED_CALLS] = failed


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
    with io.atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
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
