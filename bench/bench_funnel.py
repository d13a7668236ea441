"""Benchmark: the funnel (``curate bucket``, ``curate focus``, ``distill``'s selection) over a
1M-rollout log, each step against one bare DuckDB query computing the same groups.

Builds, in a temp folder, a log store with one run of ``--rollouts`` rollouts (``--n-agent`` per
prompt, 1–6 parsed turns each, seeded NDCG / judge / reward / format values: ``bench_report``'s
generator) and a verl-shaped dataset of its prompts. Then times, best of ``--repeat``, each step
and its floor in the same command:

- ``bucket``: mean NDCG per prompt (format failures count 0) from the log, joined to the dataset,
  three bucket files and their manifests (input hashing included); floor: the same in DuckDB
  alone (the per-prompt mean as one group-by, its join to the dataset, the score added to
  ``extra_info``, the three files written by ``COPY``);
- ``focus`` round 1: mean reward per prompt, hard A in bucket-A order + bucket 0, one file and its
  manifest; floor: the same group-by, join and order in DuckDB, written by ``COPY``;
- ``distill selection``: the rare-success selection (success rate per prompt, the ranked top-k)
  on its few columns, then the selected rollouts' rows (the columns the SFT rebuild reads) as
  bounded Arrow batches; floor: one DuckDB query computing the same selection and streaming the
  same rows as Arrow. ``+ rows as Python`` also turns each batch into Python dicts (what distill
  rebuilds its SFT samples from) and drops it. Peak RSS of each is measured in its own fresh
  process, next to the old path (the whole run read, then selected) for comparison.

The floors compute what the step must produce (the outputs included), so each ratio is the
step's overhead over DuckDB doing the same work; a bucket or focus floor of the group-by alone
leaves out the dataset read, the join and the writes.

Printed: seconds and rollouts/s of each, and each step's time as a ratio to its floor.

    python bench/bench_funnel.py                      # 1,000,000 rollouts
    python bench/bench_funnel.py --rollouts 100000    # a quick look
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import make_logs

from ddai.pipelines import store
from ddai.pipelines.distill import fetch
from ddai.pipelines.distill.select import SelectConfig, select
from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket
from ddai.pipelines.funnel.focus import FocusConfig, run_focus

RUN = "run0"
# The floors compute what each step must produce, in DuckDB alone: the per-prompt score, its join
# to the dataset and the step's output files (the dataset's rows with the score added, in the
# step's order, zstd Parquet). A floor of the group-by alone (as first measured) left out the
# dataset read, the join and the writes every step has to do.
SCORES_BUCKET = """
SELECT uid, avg(CASE WHEN format_ok IS NOT DISTINCT FROM false THEN 0.0
                     ELSE coalesce(ndcg, 0.0) END) AS score
FROM read_parquet($files) GROUP BY uid
"""
FLOOR_BUCKET = f"""
CREATE OR REPLACE TEMP TABLE scored AS
SELECT d.* EXCLUDE (file_row_number)
           REPLACE (struct_insert(d.extra_info, ndcg_mean := s.score) AS extra_info),
       round(s.score, 9) AS _score, d.file_row_number AS _pos
FROM read_parquet($dataset, file_row_number = true) AS d
JOIN ({SCORES_BUCKET}) AS s ON d.id = s.uid
"""
BUCKET_RULES = {"b": "_score > 0.7", "a": "_score BETWEEN 0.1 AND 0.7", "0": "_score < 0.1"}
FLOOR_FOCUS = """
WITH s AS (SELECT uid, avg(coalesce(reward, 0.0)) AS score FROM read_parquet($files) GROUP BY uid)
SELECT * EXCLUDE (_k, file_row_number) FROM (
    SELECT a.*, 0 AS _k FROM read_parquet($a, file_row_number = true) AS a
    JOIN s ON a.id = s.uid WHERE round(s.score, 9) <= 0.2
    UNION ALL
    SELECT z.*, 1 AS _k FROM read_parquet($z, file_row_number = true) AS z
)
ORDER BY _k, file_row_number
"""
# distill's selection (success rate in (0, 0.5], successes ranked, top 4 per prompt) and the
# selected rollouts' rows, the columns the SFT rebuild reads (``fetch.REBUILD_COLUMNS``), in one
# query
FLOOR_DISTILL = f"""
WITH r AS (
    SELECT run_id, uid, judge_score, format_ok, reward, ndcg, num_turns, rollout_idx,
           filename, file_row_number,
           coalesce(judge_score >= 1.0 AND format_ok IS DISTINCT FROM false, false) AS success
    FROM read_parquet($files, filename = true, file_row_number = true)
),
p AS (
    SELECT run_id, uid, sum(success::INT) / count(judge_score) AS rate
    FROM r GROUP BY run_id, uid
),
ranked AS (
    SELECT r.filename, r.file_row_number FROM r JOIN p USING (run_id, uid)
    WHERE success AND rate > 0 AND rate <= 0.5
    QUALIFY row_number() OVER (
        PARTITION BY r.run_id, r.uid
        ORDER BY reward DESC NULLS LAST, ndcg DESC NULLS LAST, num_turns, rollout_idx
    ) <= 4
)
SELECT {", ".join(f"s.{c}" for c in fetch.REBUILD_COLUMNS)}
FROM read_parquet($files, filename = true, file_row_number = true) AS s
SEMI JOIN ranked USING (filename, file_row_number)
"""
COPY_OPTIONS = "(FORMAT parquet, COMPRESSION zstd)"


def _duck(memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection without its progress bar (DuckDB draws it on stdout)."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    return con


def floor_bucket(
    con: duckdb.DuckDBPyConnection, files: list[str], dataset: Path, out: Path
) -> None:
    """``curate bucket`` in DuckDB: scores, the join to the dataset, the three bucket files."""
    out.mkdir(parents=True, exist_ok=True)
    con.execute(FLOOR_BUCKET, {"files": files, "dataset": str(dataset)})
    for name, rule in BUCKET_RULES.items():
        con.execute(
            f"COPY (SELECT * EXCLUDE (_score, _pos) FROM scored WHERE {rule} "
            f"ORDER BY _score DESC, _pos) TO '{out / f'floor_bucket_{name}.parquet'}' "
            f"{COPY_OPTIONS}"
        )


def floor_focus(
    con: duckdb.DuckDBPyConnection, files: list[str], bucket_a: Path, bucket_0: Path, out: Path
) -> None:
    """``curate focus`` round 1 in DuckDB: scores, hard A in bucket-A order, then bucket 0."""
    con.execute(
        f"COPY ({FLOOR_FOCUS}) TO '{out}' {COPY_OPTIONS}",
        {"files": files, "a": str(bucket_a), "z": str(bucket_0)},
    )


def make_dataset(path: Path, n_prompts: int) -> None:
    """A verl-shaped prompt set (the shape the funnel carries through)."""
    ids = [f"train_{i}" for i in range(n_prompts)]
    q = [f"What is the value on slide 2 of deck {i}?" for i in range(n_prompts)]
    prompt_t = pa.struct([("content", pa.string()), ("role", pa.string())])
    table = pa.table(
        {
            "id": ids,
            "file_name": [f"{i}.pdf" for i in range(n_prompts)],
            "reference_page": [[2]] * n_prompts,
            "data_source": ["bench"] * n_prompts,
            "prompt": pa.array(
                [
                    [
                        {"content": "You are a search agent.", "role": "system"},
                        {"content": f"Question: {x}", "role": "user"},
                    ]
                    for x in q
                ],
                pa.list_(prompt_t),
            ),
            "reward_model": pa.array(
                [{"ground_truth": f"answer {i}", "style": "rule"} for i in range(n_prompts)]
            ),
            "extra_info": pa.array(
                [{"answer": f"answer {i}", "index": i, "question": x} for i, x in enumerate(q)]
            ),
        }
    )
    pq.write_table(table, path)


def check_floor_bucket(summary: dict, floor_out: Path) -> None:
    """The floor's bucket files hold as many prompts as ``run_bucket``'s (it computes the same)."""
    for name in BUCKET_RULES:
        n = pq.read_metadata(floor_out / f"floor_bucket_{name}.parquet").num_rows
        assert n == summary[f"bucket {name.upper()}"], (name, n, summary)


def funnel_configs(root: Path, logs: Path, out: Path) -> tuple[BucketConfig, FocusConfig]:
    """``curate bucket`` of run ``RUN`` against ``root/dataset.parquet`` into ``out``, and round 1
    of ``curate focus`` on its buckets A and 0."""
    bucket = BucketConfig(
        dataset=root / "dataset.parquet", out=out, logs=logs, runs=(RUN,), force=True
    )
    focus = FocusConfig(
        out=out / "focused_round1.parquet",
        logs=logs,
        runs=(RUN,),
        bucket_a=out / "curriculum_bucket_a.parquet",
        bucket_0=out / "curriculum_bucket_0.parquet",
        force=True,
    )
    return bucket, focus


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def distill_selection(logs: Path) -> int:
    """What ``ddai distill`` reads: selection columns, the selection, then the selected rows'
    rebuild columns as bounded Arrow batches (``run_distill`` turns each into SFT rows)."""
    files = store.parquet_files(logs, [RUN])
    _, wanted, _ = fetch.scan_select(files, SelectConfig())
    batches = fetch.fetch_batches(files, wanted, columns=fetch.REBUILD_COLUMNS)
    return sum(b.num_rows for b in batches)


def distill_selection_rows(logs: Path) -> int:
    """``distill_selection`` with each batch also turned into Python rows (the rebuild's input)
    and dropped: the selection's Python rows are never all alive at once."""
    files = store.parquet_files(logs, [RUN])
    _, wanted, _ = fetch.scan_select(files, SelectConfig())
    n = 0
    batches = fetch.fetch_batches(
        files, wanted, columns=fetch.REBUILD_COLUMNS, turn_fields=fetch.REBUILD_TURN_FIELDS
    )
    for b in batches:
        n += len(b.to_pylist())
    return n


def distill_selection_whole_run(logs: Path) -> int:
    """The old path: the whole run in memory, then the selection (for comparison)."""
    table = store.read_rollouts(logs, [RUN])
    sel = select(table, SelectConfig())
    return len(table.take(sel.rows).to_pylist())


def floor_distill(logs: Path, memory_limit: str | None = None) -> int:
    files = [str(f) for f in store.parquet_files(logs, [RUN])]
    reader = _duck(memory_limit).sql(FLOOR_DISTILL, params={"files": files}).to_arrow_reader()
    return sum(b.num_rows for b in reader)


def peak_mib() -> float:
    """This process's peak RSS since its exec (``VmHWM``; ``ru_maxrss`` would carry the forking
    parent's peak over into a spawned child)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _child(name: str, logs: str, q: mp.Queue, memory_limit: str | None) -> None:
    fn = {
        "ddai": distill_selection,
        "ddai+rows": distill_selection_rows,
        "whole": distill_selection_whole_run,
        "floor": lambda p: floor_distill(p, memory_limit),
    }
    t0 = time.perf_counter()
    n = fn[name](Path(logs))
    dt = time.perf_counter() - t0
    q.put((n, dt, peak_mib()))


def in_fresh_process(
    name: str, logs: Path, memory_limit: str | None = None
) -> tuple[int, float, float]:
    """(rows, seconds, peak MiB) of one distill reader in a fresh interpreter (``memory_limit``:
    DuckDB's, for the floor)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(name, str(logs), q, memory_limit))
    proc.start()
    out = q.get()
    proc.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=1_000_000, help="rollouts in the log")
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats (best is kept)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n_prompts = max(1, args.rollouts // args.n_agent)

    with tempfile.TemporaryDirectory(prefix="ddai-bench-funnel-") as tmp:
        root = Path(tmp)
        logs, out = root / "logs", root / "out"
        t0 = time.perf_counter()
        n = make_logs(logs, args.rollouts, 1, args.n_agent, args.seed)
        make_dataset(root / "dataset.parquet", n_prompts)
        print(f"setup: {n:,} rollouts, {n_prompts:,} prompts ({time.perf_counter() - t0:.1f}s)")

        files = [str(f) for f in store.parquet_files(logs, [RUN])]
        con = _duck()
        floor_out = root / "floor"
        bucket_cfg, focus_cfg = funnel_configs(root, logs, out)
        rows = [
            ("curate bucket", best_of(args.repeat, lambda: run_bucket(bucket_cfg)),
             best_of(args.repeat, lambda: floor_bucket(con, files, bucket_cfg.dataset, floor_out)),
             None, None),
        ]  # fmt: skip
        sizes = run_bucket(bucket_cfg).summary
        check_floor_bucket(sizes, floor_out)
        floor_r1 = floor_out / "focused_round1.parquet"
        rows.append(
            ("curate focus (round 1)", best_of(args.repeat, lambda: run_focus(focus_cfg)),
             best_of(args.repeat, lambda: floor_focus(
                 con, files, focus_cfg.bucket_a, focus_cfg.bucket_0, floor_r1)),
             None, None)
        )  # fmt: skip
        r1 = run_focus(focus_cfg).summary
        assert pq.read_metadata(floor_r1).num_rows == r1["round 1"], "floor != focus"
        picked, t_d, rss_d = in_fresh_process("ddai", logs)
        picked_f, t_f, rss_f = in_fresh_process("floor", logs)
        picked_r, t_r, rss_r = in_fresh_process("ddai+rows", logs)
        picked_w, t_w, rss_w = in_fresh_process("whole", logs)
        assert picked == picked_f == picked_w == picked_r, (picked, picked_f, picked_w, picked_r)
        rows.append(("distill selection", t_d, t_f, rss_d, rss_f))
        rows.append(("  + rows as Python", t_r, t_f, rss_r, rss_f))
        rows.append(("  old: whole run read", t_w, t_f, rss_w, rss_f))

    print(
        f"buckets B/A/0: {sizes['bucket B']:,} / {sizes['bucket A']:,} / {sizes['bucket 0']:,};"
        f" round 1: {r1['round 1']:,}; distill selected {picked:,} rollouts"
    )
    print(f"{'step':24}{'ddai s':>9}{'floor s':>9}{'x floor':>9}{'ddai MiB':>10}{'floor MiB':>11}")
    for name, t, base, rss, rss_base in rows:
        mem = f"{rss:10.0f}{rss_base:11.0f}" if rss is not None else ""
        print(f"{name:24}{t:9.3f}{base:9.3f}{t / base:9.2f}{mem}")
    print(f"({n:,} rollouts; distill rows: one run each in a fresh process, peak RSS)")


if __name__ == "__main__":
    main()
