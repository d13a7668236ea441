"""DDAI's own funnel scripts, re-expressed (not copied) in pandas the way they work, for benches.

The public DDAI repository runs its funnel with three scripts; each loads its whole log into
Python objects, then groups in Python or pandas:

- ``bucket``: like ``scripts/generate_curriculum_data.py``: the phase-1 log (per step, per
  request: the agents with ``scores.ndcg_value`` and the reference documents) loaded whole; per
  request, the uid recovered from the first reference document (``N_page`` → ``train_N``) and the
  mean NDCG of its agents; B/A/0 by ``> 0.7`` / ``0.1..0.7``; per bucket a ``pd.merge`` with the
  dataset, sorted by score, ``extra_info`` rebuilt row by row (``DataFrame.apply``), Parquet out.
- ``focus``: like ``scripts/prepare_focused_input.py``: the flash reward log read line by line
  with ``json.loads`` into a list, a DataFrame, ``groupby('uid').final_score.mean()``, uids at or
  under the threshold taken from bucket A (``isin``), bucket 0 appended, ``drop_duplicates``.
- ``distill``: like ``scripts/extract_trajectories.py`` (its selection: success rate per prompt,
  successes ranked by score then NDCG, top-k): every event of the unified log loaded into a list,
  grouped by uid, each rollout's reward event and its plan turns (sorted by ``turn_idx``) collected
  per sample, prompts filtered by success rate, top-k rollouts kept with their turns.
- ``distill_export``: the same script as DDAI runs it to make SFT data
  (``--export-train1-parquet``): that selection, then every event grouped by (uid, sample_idx)
  and ordered by time, each selected rollout's chat messages built and checked
  (``ddai_messages.py``), the rows written by pandas as a train1-shaped Parquet. The equal-work
  counterpart of ``ddai distill``, which also rebuilds and writes every selected rollout.

Inputs are written from a ddai log store in DDAI's shapes by ``write_inputs`` (DuckDB ``COPY``):
``phase1.jsonl`` (one line per step and request, its agents nested, the whole file loaded as the
script loads its one JSON object), ``flash_rm_detail.jsonl`` (one line per rollout) and
``unified_trajectory.jsonl`` (an ``rm.flash.detail`` event per rollout, a ``model.plan`` event per
turn); ``unified_events.jsonl`` is that log as the export reads it (each event's ``ts``, the run
on the reward event, a ``tool.search.response`` with its results after each search turn that
showed a page, a ``tool.bbox.result`` after each executed crop); ``sample=k`` keeps the prompts
whose uid hashes to 0 mod ``k`` (every rollout of about one prompt in ``k``), the inputs a memory
calibration runs on.

``python bench/ddai_pandas.py STEP ARGS…`` runs one step in this fresh interpreter and prints
``{"seconds", "result", "peak_mib"}`` as JSON (``run_step``), so each step's peak RSS is its own.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
from ddai_messages import events_by_rollout, train1_row

_DOC = re.compile(r"(\d+)_\d+")
# a turn's model.plan text rebuilt from the store's parsed turn (``t``)
_PLAN_TEXT = (
    "'<think>' || t.think || '</think>' || t.sep || '<' || t.action || '>' "
    "|| coalesce(t.arg, '') || '</' || t.action || '>'"
)


def write_inputs(
    files: list[str], out: Path, *, what: tuple[str, ...], sample: int = 1
) -> dict[str, Path]:
    """DDAI-shaped logs of the rollouts in ``files`` (ddai store Parquet) under ``out``; with
    ``sample`` > 1 only the prompts whose uid hashes to 0 mod ``sample``. A file already there
    is kept (each is written to a temp name and renamed, so one that exists is whole)."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    # bounded: the unified log's UNION of 10M rollouts and their turns ran past 10 GB uncapped
    con.execute("SET memory_limit = '3GB'")
    con.execute("SET preserve_insertion_order = false")
    where = f"WHERE hash(uid) % {int(sample)} = 0" if sample > 1 else ""
    src = f"(SELECT * FROM read_parquet($files) {where})"
    turns = (
        "(SELECT uid, coalesce(sample_idx, rollout_idx) AS sample_idx, unnest(turns) AS t "
        f"FROM {src})"
    )
    tag = f".sample{sample}" if sample > 1 else ""
    paths = {w: out / f"{w}{tag}.jsonl" for w in what}
    jobs: dict[str, str | tuple[str, ...]] = {
        "phase1": f"""
            SELECT coalesce(step, 0) AS step, 'req-' || uid AS uuid,
                   list({{'agent_id': rollout_idx + 1,
                          'scores': {{'ndcg_value': coalesce(ndcg, 0.0),
                                      'ndcg_details': {{'reference_documents': reference_pages}}}}}}
                        ORDER BY rollout_idx) AS agents
            FROM {src} GROUP BY ALL""",
        "flash_rm_detail": f"""
            SELECT uid, sample_idx, rollout_idx AS local_idx, coalesce(step, 0) AS step,
                   reward AS final_score, ndcg, judge_score
            FROM {src}""",
        "unified_trajectory": f"""
            SELECT * FROM (
                SELECT uid, coalesce(sample_idx, rollout_idx) AS sample_idx,
                       'rm.flash.detail' AS event_type, NULL::INT AS turn_idx, NULL AS text,
                       question AS query, reward AS final_score, ndcg, judge_score
                FROM {src}
                UNION ALL
                SELECT uid, coalesce(sample_idx, rollout_idx), 'model.plan', t.idx, {_PLAN_TEXT},
                       NULL, NULL, NULL, NULL
                FROM (SELECT uid, sample_idx, rollout_idx, unnest(turns) AS t FROM {src})
            )""",
        # what the train1 export reads besides: each event's time (a turn's plan at 2*idx, its
        # tool output at 2*idx + 1, the reward after the last turn: the log's order), the run on
        # the reward event, a search turn's results (the pages it showed, as DDAI's image paths;
        # the store keeps the shown page, not the engine's whole top-k), an executed crop's path
        # (the turn's observation, else a path of DDAI's crop-folder shape: the store's
        # generator keeps none). One query per event type, so a line has its type's keys only
        # (a UNION would give every line every key, null where not its own)
        "unified_events": (
            f"""SELECT uid, coalesce(sample_idx, rollout_idx) AS sample_idx,
                   'rm.flash.detail' AS event_type, 2.0 * coalesce(len(turns), 0) AS ts, run_id,
                   question AS query, reward AS final_score, ndcg, judge_score
            FROM {src}""",
            f"""SELECT uid, sample_idx, 'model.plan' AS event_type, 2.0 * t.idx AS ts,
                   t.idx AS turn_idx, {_PLAN_TEXT} AS text
            FROM {turns}""",
            f"""SELECT uid, sample_idx, 'tool.search.response' AS event_type, 2.0 * t.idx + 1 AS ts,
                   list_transform(t.retrieved, lambda p, i: {{'idx': i - 1,
                       'image_file': './search_engine/corpus/img/' || p || '.jpg'}}) AS results
            FROM {turns} WHERE t.action = 'search' AND len(t.retrieved) > 0""",
            f"""SELECT uid, sample_idx, 'tool.bbox.result' AS event_type, 2.0 * t.idx + 1 AS ts,
                   coalesce(t.observation, './agent_crops/' || uid || '_' || sample_idx || '_'
                            || t.idx || '.jpg') AS crop_path
            FROM {turns} WHERE t.action = 'bbox' AND t.error IS NULL""",
        ),
    }
    for w in what:
        if paths[w].is_file():
            continue
        tmp = paths[w].with_suffix(".jsonl.tmp")
        queries = jobs[w] if isinstance(jobs[w], tuple) else (jobs[w],)
        with open(tmp, "wb") as into:
            for q in queries:  # each part written by DuckDB, then appended to the one log
                part = tmp.with_suffix(".part")
                con.execute(f"COPY ({q}) TO '{part}' (FORMAT json)", {"files": files})
                with open(part, "rb") as fh:
                    shutil.copyfileobj(fh, into)
                part.unlink()
        tmp.replace(paths[w])
    con.close()
    return paths


def sampled_rollouts(files: list[str], sample: int) -> int:
    """Rollouts in ``write_inputs(…, sample=sample)``'s logs: the store's, counted by DuckDB."""
    where = f"WHERE hash(uid) % {int(sample)} = 0" if sample > 1 else ""
    q = f"SELECT count(*) FROM read_parquet($files) {where}"
    con = duckdb.connect()
    try:
        return con.execute(q, {"files": files}).fetchone()[0]
    finally:
        con.close()


def _load_lines(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _uid_of(ref_docs: list[str] | None) -> str | None:
    if not ref_docs:
        return None
    m = _DOC.match(ref_docs[0])
    return f"train_{m.group(1)}" if m else None


def bucket(phase1: Path, dataset: Path, out: Path) -> dict[str, int]:
    """``generate_curriculum_data``: bucket files from the phase-1 log; returns rows per bucket."""
    log: dict[Any, dict[str, Any]] = defaultdict(dict)
    for rec in _load_lines(phase1):  # the script's json.load of one {step: {uuid: …}} object
        log[rec["step"]][rec["uuid"]] = {"agents": rec["agents"]}
    train = pd.read_parquet(dataset)
    scores: dict[str, float] = {}
    for step_data in log.values():
        for query_data in step_data.values():
            agents = query_data.get("agents") or []
            if not agents:
                continue
            details = agents[0].get("scores", {}).get("ndcg_details", {})
            uid = _uid_of(details.get("reference_documents"))
            if not uid:
                continue
            vals = [a.get("scores", {}).get("ndcg_value", 0.0) for a in agents]
            scores[uid] = sum(vals) / len(vals)
    groups: dict[str, list[tuple[str, float]]] = {"A": [], "B": [], "0": []}
    for uid, s in scores.items():
        groups["B" if s > 0.7 else "A" if s >= 0.1 else "0"].append((uid, s))

    def with_score(row: pd.Series) -> dict[str, Any]:
        extra = row["extra_info"]
        new = dict(extra) if isinstance(extra, dict) else {}
        new["phase1_ndcg"] = float(row["ndcg_score"])
        return new

    sizes = {}
    for name, pairs in groups.items():
        if not pairs:
            continue
        merged = pd.merge(train, pd.DataFrame(pairs, columns=["id", "ndcg_score"]), on="id")
        merged = merged.sort_values(by="ndcg_score", ascending=False)
        merged["extra_info"] = merged.apply(with_score, axis=1)
        merged.drop(columns=["ndcg_score"]).to_parquet(out / f"ddai_bucket_{name}.parquet")
        sizes[name] = len(merged)
    return sizes


def focus(flash: Path, bucket_a: Path, bucket_0: Path, out: Path, threshold: float) -> int:
    """``prepare_focused_input``: round 1 from the flash reward log; returns its rows."""
    rows = []
    with open(flash, encoding="utf-8") as fh:
        for line in fh:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    log = pd.DataFrame(rows)
    means = log.groupby("uid")["final_score"].mean().reset_index()
    hard = set(means[means["final_score"] <= threshold]["uid"].tolist())
    a = pd.read_parquet(bucket_a)
    hard_a = a[a["id"].isin(hard)].copy()
    merged = pd.concat([hard_a, pd.read_parquet(bucket_0)], ignore_index=True)
    merged = merged.drop_duplicates(subset=["id"])
    merged.to_parquet(out)
    return len(merged)


def _select(
    lines: list[dict[str, Any]], min_score: float, max_rate: float, top_k: int
) -> list[tuple[str, int]]:
    """``extract_trajectories``' selection over the log's events: rare-success prompts' top-k
    rollouts (with their turns, which the script collects per rollout); (uid, sample_idx) of each
    selected, by prompt in log order, then by rank."""
    by_uid: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in lines:
        if e.get("uid"):
            by_uid[e["uid"]].append(e)
    picked: list[tuple[str, int]] = []
    for uid, events in by_uid.items():
        per_sample: dict[int, dict[str, Any]] = defaultdict(lambda: {"rm": None, "plans": []})
        for e in events:
            slot = per_sample[e["sample_idx"]]
            if e["event_type"] == "rm.flash.detail":
                slot["rm"] = e
            elif e["event_type"] == "model.plan":
                slot["plans"].append(e)
        rollouts = []
        for sample_idx in sorted(per_sample):
            slot = per_sample[sample_idx]
            if slot["rm"] is None:
                continue
            rm = slot["rm"]
            rollouts.append(
                {
                    "sample_idx": sample_idx,
                    "score": rm.get("final_score") or 0,
                    "ndcg": rm.get("ndcg") or 0,
                    "judge": rm.get("judge_score") or 0,
                    "trajectory": sorted(slot["plans"], key=lambda p: p.get("turn_idx") or 0),
                }
            )
        if not rollouts:
            continue
        wins = [r for r in rollouts if r["judge"] >= min_score]
        rate = len(wins) / len(rollouts)
        if not wins or rate > max_rate:
            continue
        ranked = sorted(wins, key=lambda r: (r["score"], r["ndcg"]), reverse=True)[:top_k]
        picked += [(uid, r["sample_idx"]) for r in ranked]
    return picked


def distill(unified: Path, *, min_score: float = 1.0, max_rate: float = 0.5, top_k: int = 4) -> int:
    """``extract_trajectories``' selection alone: returns the rollouts selected, writes nothing."""
    return len(_select(_load_lines(unified), min_score, max_rate, top_k))


def distill_export(
    unified: Path, out: Path, *, min_score: float = 1.0, max_rate: float = 0.5, top_k: int = 4
) -> dict[str, int]:
    """``extract_trajectories --export-train1-parquet``: the selection, then every selected
    rollout's messages built from its events (``ddai_messages``), written to ``out`` as a
    train1-shaped Parquet (uid, format_version, messages as JSON text) by pandas. Returns the
    rollouts selected and the rows written (the rest dropped by the message checks); raises, as
    the script exits, when no row is left."""
    lines = _load_lines(unified)
    picked = _select(lines, min_score, max_rate, top_k)
    events = events_by_rollout(lines)
    rows = []
    for uid, sample_idx in picked:
        if (group := events.get((uid, sample_idx))) and (row := train1_row(uid, sample_idx, group)):
            rows.append(row)
    if not rows:
        raise SystemExit(f"{unified}: none of the {len(picked):,} selected rollouts has messages")
    frame = pd.DataFrame(rows, columns=["uid", "format_version", "messages"])
    frame.to_parquet(out, engine="pyarrow", index=False)
    return {"selected": len(picked), "written": len(rows)}


STEPS = {"bucket": bucket, "focus": focus, "distill": distill, "distill_export": distill_export}


def _child(step: str, args: list[str]) -> None:
    """One step in this interpreter; its result, seconds and peak RSS as one JSON line."""
    paths = [Path(a) for a in args]
    t = time.perf_counter()
    if step == "focus":
        result: Any = focus(*paths[:4], float(args[4]))
    else:
        result = STEPS[step](*paths)
    seconds = time.perf_counter() - t
    print(json.dumps({"seconds": seconds, "result": result, "peak_mib": peak_mib()}))


def peak_mib() -> float:
    """This process's peak RSS since its exec (``VmHWM``): ``ru_maxrss`` would carry over the
    forking parent's peak, which is the whole bench's."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status: the peak RSS needs Linux")


def mem_available_mib() -> float:
    """The kernel's estimate of memory available without swapping (``/proc/meminfo``), MiB."""
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo: the DDAI steps' memory guard needs Linux")


def run_step(step: str, *args: object, guard_mib: float = 1024.0) -> dict[str, Any]:
    """Run ``step`` (bucket, focus, distill) with ``args`` in a fresh interpreter: its peak RSS
    is the step's own (imports included). Returns ``{"seconds", "result", "peak_mib"}`` or
    ``{"error"}``. The step is killed (and reported so) if the machine's available memory falls
    under ``guard_mib`` while it runs: a projection that was wrong must not push the machine,
    which others share, into the OOM killer."""
    cmd = [sys.executable, __file__, step, *map(str, args)]
    # output to files, not pipes: a pipe nobody reads while we poll could fill and block the child
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        with subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True) as proc:
            killed = None
            while proc.poll() is None:
                try:
                    proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    avail = mem_available_mib()
                    if avail < guard_mib:
                        killed = avail
                        proc.kill()
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if killed is not None:
        return {"error": f"killed: available memory fell to {killed:,.0f} MiB"}
    if proc.returncode != 0:
        tail = (err.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"error": tail[:160]}
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2:])
