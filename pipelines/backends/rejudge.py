"""``ddai judge``: (re)score a run's answers with a judge backend and write them back.

The run is read from the log store; every rollout with an answer and a reference becomes one
``JudgeRequest`` (identical triples are sent once: the engine and its cache dedupe them). The new
scores go into ``judge_score`` of a new run (default ``<run>@<judge>``) or, with ``in_place``, of
the run itself; the previous score, the judge's reason and any failure are kept in ``extra``
(``prev_judge_score``, ``judge_reason``, ``judge_error``, ``judge_backend``). A row this judge
did not score (a failed call, or no answer or reference) never carries another judge's score:
in a new run its ``judge_score`` is null with the reason (``extra.judge_error`` /
``judge_skipped``, never 0); in place the row keeps the score it had, marked
``extra.judge_kept_previous``, and the summary and manifest (``judge_rows``) count such rows,
since the run's scores then mix judges. When no call succeeded nothing is written; a run with nothing to judge (no answer with a reference, or only blank
answers) is refused before any call. Failures are counted by reason and make the result ``complete = False``
(the CLI exits 1); failed calls are cached with their reason and sent again only with
``retry_failed``. ``reward`` is not touched: it is what the run trained on.

``dry_run`` counts the calls (cache hits are free) and their estimated cost and writes nothing;
``max_cost`` stops before the cap is exceeded and writes nothing either, so a rerun resumes from
the cache and pays only for the rest.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.backends import JudgeRequest, run_sync, step_backend
from ddai.pipelines.backends.context import cache_note
from ddai.pipelines.backends.step_configs import RejudgeConfig, RejudgeError
from ddai.pipelines.records.deps import pa
from ddai.pipelines.store import run_stats


@dataclass
class RejudgeResult:
    summary: dict[str, Any]
    complete: bool  # False when calls failed or the cost cap stopped the run


# Markers of an earlier judging that describe the row's score; a new outcome replaces them (a
# rescore that succeeds is no longer a failure nor a kept score).
OUTCOME_KEYS = ("judge_reason", "judge_error", "judge_skipped", "judge_kept_previous")


def _extra(raw: str | None, drop: tuple[str, ...] = (), **updates: Any) -> str:
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        data = {"_unparsed_extra": raw}
    if not isinstance(data, dict):
        data = {"_extra": data}
    for key in drop:
        data.pop(key, None)
    data.update({k: v for k, v in updates.items() if v is not None})
    return json.dumps(data, ensure_ascii=False, sort_keys=True)


def rejudge(cfg: RejudgeConfig, *, config: dict[str, Any] | None = None) -> RejudgeResult:
    """Score the run, write the result (unless dry or stopped), and say what happened."""
    t0 = time.time()
    try:
        # the version read: an in-place write commits only over it (a run appended to or
        # replaced meanwhile is left as it is, see store.StoreConflict)
        table, version = store.read_version(cfg.logs, cfg.run)
    except FileNotFoundError as e:
        raise RejudgeError(str(e)) from e
    judge = step_backend("judge", cfg.judge, cfg, "ddai judge", config=config, cache=cfg.cache)
    out_run = cfg.run if cfg.in_place else (cfg.out_run or f"{cfg.run}@{judge.name}")
    try:
        store.check_run_id(out_run)
    except ValueError as e:
        raise RejudgeError(f"{e} (set --out-run)") from e
    if not cfg.in_place:
        _check_out_run(cfg.logs, cfg.run, out_run)

    rows = table.to_pylist()
    todo = [
        i
        for i, r in enumerate(rows)
        if r.get("answer") is not None and r.get("reference_answer") is not None
    ]
    _check_answers(cfg.run, rows, todo)
    reqs = [
        JudgeRequest(rows[i]["question"] or "", rows[i]["reference_answer"], rows[i]["answer"])
        for i in todo
    ]
    base = {
        "run": cfg.run,
        "judge": judge.name,
        "rollouts": len(rows),
        "to_score": len(reqs),
        "skipped (no answer or reference)": len(rows) - len(reqs),
        **cache_note(judge, cfg.cache),
    }
    if cfg.dry_run:
        return RejudgeResult({**base, "dry run": True, **judge.plan(reqs)}, complete=True)

    results = run_sync(judge.judge(reqs))
    errors = Counter((r.error or "").split(":", 1)[0] for r in results if r.error is not None)
    usage = judge.usage()
    if errors.get("max-cost"):
        done = len(results) - errors["max-cost"]
        summary = {
            **base,
            "status": f"stopped: --max-cost {cfg.max_cost:g} USD reached; nothing written, rerun to resume",
            "scored": done,
            "left": errors["max-cost"],
            "usage": usage,
        }
        return RejudgeResult(summary, complete=False)

    ok = [r.score for r in results if r.ok]
    n_failed = len(results) - len(ok)
    failed = {
        "failed": n_failed,
        "failed by reason": dict(sorted(errors.items())),
        **_cached_failures(usage),
    }
    if n_failed and not ok:
        summary = {
            **base,
            "status": "failed: every call failed; nothing written",
            "scored": 0,
            **failed,
            "usage": usage,
        }
        return RejudgeResult(summary, complete=False)

    scores, extras, mixed = _new_scores(rows, todo, results, judge.name, in_place=cfg.in_place)
    out = table.set_column(
        table.schema.get_field_index("judge_score"), "judge_score", pa.array(scores, pa.float64())
    ).set_column(table.schema.get_field_index("extra"), "extra", pa.array(extras, pa.string()))
    manifest = {
        "step": "judge",
        "params": {"judge": judge.name, "source_run": cfg.run, "in_place": cfg.in_place},
        "prompt_sha256": getattr(getattr(judge, "prompt", None), "sha256", None),
        "backend_calls": usage,
        "judge_rows": mixed,
    }
    store.write_run(
        cfg.logs,
        out_run,
        out,
        sources=[{"run": cfg.run}],
        manifest=manifest,
        if_unchanged=version if cfg.in_place else None,
    )
    run_stats.refresh(cfg.logs, [out_run])  # ``ddai runs``'s row of the new version (never fails)
    summary = {
        **base,
        **({"status": f"failed: {n_failed} call(s) failed"} if n_failed else {}),
        "written run": out_run,
        "scored": len(ok),
        **failed,
        **_mixed_summary(mixed, judge.name),
        "mean judge_score": round(sum(ok) / len(ok), 4) if ok else None,
        "usage": usage,
        "wall_s": round(time.time() - t0, 2),
    }
    return RejudgeResult(summary, complete=not n_failed)


def _new_scores(
    rows: list[dict[str, Any]],
    todo: list[int],
    results: list[Any],
    judge_name: str,
    *,
    in_place: bool,
) -> tuple[list[float | None], list[str], dict[str, int]]:
    """Each row's ``judge_score`` and ``extra`` after this judge, and the counts of rows it did not
    score (``skipped``: no answer or reference; ``failed``: its call failed) and of those that keep
    another judge's score (``kept_previous``, in place only).

    A new run holds this judge's scores only: a row it did not score is null with the reason
    (``extra.judge_skipped`` or ``extra.judge_error``) and the old score in ``prev_judge_score``;
    copying the old score would mix two judges under ``<run>@<judge>``. In place nothing is lost:
    such a row keeps its score, marked ``extra.judge_kept_previous``, and the counts say how many.
    """
    scores: list[float | None] = [r["judge_score"] for r in rows]
    extras: list[str] = [r["extra"] for r in rows]
    counts = {"scored": 0, "skipped": 0, "failed": 0, "kept_previous": 0}
    why: dict[int, dict[str, Any]] = {
        i: {"judge_skipped": "no answer" if r.get("answer") is None else "no reference answer"}
        for i, r in enumerate(rows)
    }
    for i, res in zip(todo, results, strict=True):
        if res.ok:
            counts["scored"] += 1
            scores[i] = res.score
            extras[i] = _extra(
                rows[i]["extra"],
                OUTCOME_KEYS,
                prev_judge_score=rows[i]["judge_score"],
                judge_reason=res.reason or None,
                judge_backend=judge_name,
            )
            del why[i]
        else:
            why[i] = {"judge_error": res.error}
    for i, reason in why.items():
        counts["failed" if "judge_error" in reason else "skipped"] += 1
        old = rows[i]["judge_score"]
        if in_place:
            # the old score stays (in place loses nothing), marked as not this judge's; its
            # judge_backend and judge_reason still name the judge that gave it
            counts["kept_previous"] += old is not None
            extras[i] = _extra(
                rows[i]["extra"],
                ("judge_error", "judge_skipped", "judge_kept_previous"),
                **reason,
                judge_kept_previous=True if old is not None else None,
            )
        else:
            scores[i] = None
            extras[i] = _extra(
                rows[i]["extra"],
                OUTCOME_KEYS,
                prev_judge_score=old,
                **reason,
                judge_backend=judge_name,
            )
    return scores, extras, counts


def _mixed_summary(counts: dict[str, int], judge_name: str) -> dict[str, Any]:
    """The summary lines for rows this judge did not score (only in place do rows keep scores)."""
    unscored = counts["skipped"] + counts["failed"]
    if not unscored:
        return {}
    kept = counts["kept_previous"]
    if not kept:
        return {"not scored by this judge (null)": unscored}
    return {
        "kept previous judge score": kept,
        "note": f"{kept:,} row(s) keep a score {judge_name!r} did not give (no answer, no "
        "reference, or a failed call; marked extra.judge_kept_previous): the run's judge_score "
        "mixes two judges; write a new run (drop --in-place) for this judge's scores alone",
    }


def _check_out_run(logs: Path, run: str, out_run: str) -> None:
    """Refuse an ``out_run`` that exists and is not this judge's earlier output of ``run``: the
    write replaces a run, so a mistyped --out-run would silently swap another run's rollouts
    for these (a rerun of the same judge into its own output stays allowed)."""
    old = store.run_manifest(logs, out_run)
    if old is None:
        return
    if old.get("step") == "judge" and (old.get("params") or {}).get("source_run") == run:
        return
    n = old.get("rollouts_total", old.get("rollouts_out"))
    fix = (
        "use --in-place to rescore the run itself"
        if out_run == run
        else "pick another --out-run (or leave it out for <run>@<judge>)"
    )
    raise RejudgeError(
        f"--out-run {out_run!r} is an existing run ({n:,} rollouts) that `ddai judge --run {run}` "
        f"did not write; writing would replace it with run {run!r}'s rollouts, so nothing was "
        f"written: {fix}"
    )


def _check_answers(run: str, rows: list[dict[str, Any]], todo: list[int]) -> None:
    """Refuse a run with nothing to judge: no rollout has both an answer and a reference, or
    every answer is blank. Judging it would write a copy of the run (or a run of zeros) with
    exit 0, and a paid judge would be paid for scoring empty strings."""
    if todo and any(str(rows[i]["answer"]).strip() for i in todo):
        return
    no_answer = sum(r.get("answer") is None for r in rows)
    no_ref = sum(r.get("reference_answer") is None for r in rows)
    blank = sum(r.get("answer") is not None and not str(r["answer"]).strip() for r in rows)
    raise RejudgeError(
        f"run {run!r} has no answer to judge: of its {len(rows):,} rollouts {no_answer:,} have no "
        f"answer, {blank:,} an empty one and {no_ref:,} no reference answer; nothing was written. "
        "The judge scores the frozen generator's answer: ingest a log that carries it (an "
        "`answer` column, DDAI's `generated_answer`) and the reference answer, or pick another "
        "--run"
    )


def _cached_failures(usage: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """How many failures came from the cache (earlier runs), with the way to retry them."""
    n = sum(site.get("cached_failures", 0) for site in usage.values())
    if not n:
        return {}
    return {"failed earlier (cached, not called again)": n, "retry": "rerun with --retry-failed"}
